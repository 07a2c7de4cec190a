//! The simulator's locks: taking a mutex whose last holder panicked, and every static mutex the
//! process holds across a `fork()` (`ForkLock`, listed once in `Rank`).
//!
//! Poisoning is ignored on purpose: every mutex of the simulator guards state that each update
//! leaves whole (queues, tables, handles and counters changed by single assignments, pushes or
//! drains), and a panic is already caught at the C boundary. Refusing the lock afterwards would
//! turn that one bug into a library whose later calls all fail, or into a second panic inside an
//! `extern "C"` function, where unwinding aborts the program being profiled.
//!
//! A `fork()` child has only the forking thread: a lock another thread held at the fork stays
//! held in the child for ever, and the child's next call that takes it hangs. So every static
//! mutex is a `ForkLock` of a `Rank`, and the fork handlers (`process`) hold all of them across
//! the fork (`hold_all`). A lock joins the set the first time it is taken; `hold_all` never waits
//! for one lock while holding another (it tries each, and on a busy one lets everything go and
//! waits for that one alone), so it cannot deadlock with a thread that takes two, in any order,
//! nor with one taking a lock for the first time.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// Lock `m`, also when a holder panicked.
#[inline]
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait(g)`, also when a holder panicked meanwhile.
pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait_timeout(g, d)`, also when a holder panicked meanwhile; the guard only (a caller
/// that needs to know whether it timed out checks its own deadline).
pub(crate) fn wait_timeout<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    cv.wait_timeout(g, d).unwrap_or_else(PoisonError::into_inner).0
}

/// Every static mutex of the simulator, in the order a path that holds two of them takes them
/// (the record lock, then the queue or the callbacks); the others are leaves: nothing takes
/// another lock while holding one of them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rank {
    /// The record lock and the current buffer (`buf_mtx_`, `cur_buf_`): `model::buffers`.
    Record,
    /// The queue of full buffers (`cv_mtx_`), handed a buffer under the record lock.
    Queue,
    /// The user's buffer callbacks, read under the record lock to request a buffer.
    Callbacks,
    /// The device's channel of pending records and its timelines: `model::device`.
    Channel,
    /// The queued data work of the device's streams.
    DataWork,
    /// The communicator name of the device's HCCL records.
    CommName,
    /// The external correlation stacks: `model::records`.
    External,
    /// The disabled marker domains.
    MarkerDomains,
    /// MSTX's domain handles: `model::mstx`.
    MstxDomains,
    /// MSTX's open ranges.
    MstxRanges,
    /// The bundled runtime's directory: `model::interpose`.
    RuntimeDir,
    /// Subscribe and unsubscribe: `model::callbacks`.
    Subscribe,
    /// The jobs' handles: `model::jobs`.
    Jobs,
}

/// A static mutex that the fork handlers hold across a `fork()` (see the module comment).
pub struct ForkLock<T> {
    rank: Rank,
    registered: AtomicBool,
    mutex: Mutex<T>,
    /// What a `fork()` child does to the guarded value, which the forking thread holds there
    /// (the queue forgets its completing threads, which the child does not have).
    in_child: Option<fn(&mut T)>,
}

impl<T: Send + 'static> ForkLock<T> {
    pub const fn new(rank: Rank, value: T) -> ForkLock<T> {
        ForkLock { rank, registered: AtomicBool::new(false), mutex: Mutex::new(value), in_child: None }
    }

    /// A lock whose value a `fork()` child changes with `in_child` before anyone else takes it.
    pub const fn with_child_hook(rank: Rank, value: T, in_child: fn(&mut T)) -> ForkLock<T> {
        ForkLock {
            rank,
            registered: AtomicBool::new(false),
            mutex: Mutex::new(value),
            in_child: Some(in_child),
        }
    }

    /// Take the lock (also when a holder panicked); the first time, it joins the set the fork
    /// handlers hold.
    #[inline]
    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        // Relaxed: `hold_all` reads the set under REGISTRY, whose lock orders it after `register`.
        if !self.registered.load(Ordering::Relaxed) {
            register(self);
        }
        lock(&self.mutex)
    }
}

/// A `ForkLock` of any value, as the fork handlers see it.
trait Held: Sync {
    fn try_hold(&'static self) -> Option<Box<dyn Any>>;
    /// Wait until the lock is free (taking it and letting it go at once).
    fn wait_free(&'static self);
    /// The child's change to the value under `guard` (one `try_hold` gave).
    fn in_child(&self, guard: &mut Box<dyn Any>);
}

impl<T: Send + 'static> Held for ForkLock<T> {
    fn try_hold(&'static self) -> Option<Box<dyn Any>> {
        match self.mutex.try_lock() {
            Ok(g) => Some(Box::new(g)),
            Err(TryLockError::Poisoned(p)) => Some(Box::new(p.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn wait_free(&'static self) {
        drop(lock(&self.mutex));
    }

    fn in_child(&self, guard: &mut Box<dyn Any>) {
        if let (Some(f), Some(g)) = (self.in_child, guard.downcast_mut::<MutexGuard<'static, T>>()) {
            f(g);
        }
    }
}

/// The locks taken so far in this process, in rank order.
static REGISTRY: Mutex<Vec<(Rank, &'static dyn Held)>> = Mutex::new(Vec::new());

fn register<T: Send + 'static>(l: &'static ForkLock<T>) {
    let mut r = lock(&REGISTRY);
    // Another thread may have registered it since this one looked.
    if !l.registered.load(Ordering::Relaxed) {
        let at = r.partition_point(|(rank, _)| *rank as usize <= l.rank as usize);
        r.insert(at, (l.rank, l));
        l.registered.store(true, Ordering::Relaxed);
    }
}

/// What the forking thread holds across a fork: the registry, then each lock with its own.
type HeldSet = (MutexGuard<'static, Vec<(Rank, &'static dyn Held)>>, Vec<(&'static dyn Held, Box<dyn Any>)>);

thread_local! {
    static HELD: RefCell<Option<HeldSet>> = const { RefCell::new(None) };
}

/// Hold every lock taken so far, and the registry (no lock joins before `release_all`), on the
/// calling thread: the fork handlers' prepare step. Never waits while holding one: a busy lock
/// makes it let go of everything and wait for that one alone, then try again.
pub(crate) fn hold_all() {
    loop {
        let busy: Option<&'static dyn Held> = match REGISTRY.try_lock() {
            Err(TryLockError::WouldBlock) => None,
            r => {
                let reg = r.unwrap_or_else(|e| match e {
                    TryLockError::Poisoned(p) => p.into_inner(),
                    TryLockError::WouldBlock => unreachable!("handled above"),
                });
                let locks: Vec<&'static dyn Held> = reg.iter().map(|(_, l)| *l).collect();
                let mut held = Vec::with_capacity(locks.len());
                let mut busy = None;
                for l in locks {
                    match l.try_hold() {
                        Some(g) => held.push((l, g)),
                        None => {
                            busy = Some(l);
                            break;
                        }
                    }
                }
                if busy.is_none() {
                    HELD.with(|h| *h.borrow_mut() = Some((reg, held)));
                    return;
                }
                busy
            }
        };
        match busy {
            Some(l) => l.wait_free(),
            // The registry is busy: a lock is joining (it takes no other lock meanwhile).
            None => drop(lock(&REGISTRY)),
        }
    }
}

/// Let go of what `hold_all` held: in the parent after the fork, or in the child, where each
/// value is first changed as its lock asks (`ForkLock::with_child_hook`).
pub(crate) fn release_all(in_child: bool) {
    let held = HELD.with(|h| h.borrow_mut().take());
    if let Some((reg, mut locks)) = held {
        if in_child {
            for (l, g) in &mut locks {
                l.in_child(g);
            }
        }
        drop(locks);
        drop(reg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static OUTER: ForkLock<u64> = ForkLock::new(Rank::Record, 0);
    static INNER: ForkLock<u64> = ForkLock::new(Rank::Queue, 0);

    /// Children forked while another thread takes two locks, one inside the other, in a tight
    /// loop must be able to take both: the fork handlers held them across the fork. With plain
    /// mutexes a child often inherits one held by a thread it does not have, and hangs.
    #[test]
    fn forked_children_can_take_the_locks_another_thread_held_at_the_fork() {
        let (hung, failed) = crate::ground::forktest::hung_children(
            60,
            |i| {
                let mut outer = OUTER.lock();
                *outer = outer.wrapping_add(i);
                *INNER.lock() += 1;
            },
            |_| {
                *OUTER.lock() += 1;
                *INNER.lock() += 1;
                true
            },
        );
        assert_eq!(
            (hung, failed),
            (0, 0),
            "of 60 forked children, {hung} hung taking a lock, {failed} failed"
        );
    }
}
