//! Multi-process simulated jobs: every rank is its own process, and a collective completes only
//! when every rank of its group has entered it, as HCCL's do. The ranks meet in one shared-memory
//! region (a file each rank maps; the Python job driver creates it and passes its address here).
//!
//! One barrier per collective instance, keyed by (group, sequence number): HCCL numbers a
//! communicator's collectives in issue order on every rank, and so does this module (per group,
//! per process). Region layout, in u64 words: a header, then per group `DEPTH` slots of
//! `[arrived, latest_arrival_ns, released_tag, release_ns, latest_device_start_ns]`.
//!
//! Slot reuse: instance `s` uses slot `s % DEPTH`. The rank that arrives last at `s` clears the
//! slot of `s + 1` before it releases `s`; nobody can have touched that slot for `s + 1` yet (no
//! rank leaves `s` before the release), and every rank is done with its previous instance
//! (`s + 1 - DEPTH <= s - 1`: every rank has entered `s`, so it has left `s - 1`).
//!
//! Time: with the virtual clock a waiting rank's clock jumps to the last arrival's time, so a
//! collective's measured duration is exactly the wait plus its modelled transfer; with the real
//! clock the rank really waits (polling, with short sleeps).
//!
//! Device time: each rank also publishes when its collective task would start on its stream.
//! As in HCCL, a rank's device-side collective runs from its own start until the last rank's task
//! has started, then transfers: the late rank's collective is the SHORT one (msprof-analyze's
//! rule) and starts last (HTA's). `take_meeting` hands those times to the record emission.

#[cfg(not(loom))]
use std::cell::RefCell;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicPtr, AtomicU32};
use std::time::{Duration, Instant};

// The region's words: loom's atomics in `--cfg loom` builds, so the model tests check the protocol.
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
use crate::ground::clock;

/// "MLNSJOB1": the region was initialised by a compatible simulator.
const MAGIC: u64 = 0x4d4c_4e53_4a4f_4231;
const HEADER_WORDS: usize = 8;
const H_MAGIC: usize = 0;
const H_RANKS: usize = 1;
const H_GROUPS: usize = 2;
const H_ABORT: usize = 3;
// Slots per group; the protocol needs 2 (module comment). Loom models use 2 to reach slot reuse.
const DEPTH: usize = if cfg!(loom) { 2 } else { 4 };
const SLOT_WORDS: usize = 5;
const S_ARRIVED: usize = 0;
const S_LATEST: usize = 1;
const S_TAG: usize = 2;
const S_RELEASE: usize = 3;
const S_DEVICE: usize = 4;

/// HCCL_E_TIMEOUT: what an HCCL call returns when peers did not arrive in time.
pub const HCCL_E_TIMEOUT: i32 = 9;
/// What a collective returns when the job was aborted (a peer died): HCCL_E_INTERNAL.
pub const HCCL_E_INTERNAL: i32 = 4;

/// The bytes a region for `groups` communicator groups needs.
pub fn region_bytes(groups: u32) -> usize {
    (HEADER_WORDS + groups as usize * DEPTH * SLOT_WORDS) * 8
}

/// A view of the shared region. Words are only ever accessed as atomics.
#[derive(Clone, Copy)]
pub struct Region {
    base: *const AtomicU64,
    groups: u32,
}

// SAFETY: the region is only accessed through atomics; the pointer stays valid for the life of
// the process (the caller of `attach` keeps the mapping, documented on `msimMultirankAttach`).
unsafe impl Send for Region {}
// SAFETY: as above: shared access is atomic-only.
unsafe impl Sync for Region {}

impl Region {
    /// # Safety
    /// `base` must point to `len` bytes, 8-byte aligned, valid and shared for the life of the
    /// process, and accessed by every party only atomically.
    pub unsafe fn new(base: *mut u64, len: usize, ranks: u32, groups: u32) -> Result<Region, &'static str> {
        if base.is_null() || !(base as usize).is_multiple_of(8) {
            return Err("the region must be 8-byte aligned and not NULL");
        }
        if ranks == 0 || groups == 0 || len < region_bytes(groups) {
            return Err("the region is too small for its groups, or ranks/groups is 0");
        }
        let r = Region { base: base.cast(), groups };
        // First to attach initialises the header; the others check it.
        match r.word(H_MAGIC).compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                r.word(H_RANKS).store(u64::from(ranks), Ordering::Relaxed);
                r.word(H_GROUPS).store(u64::from(groups), Ordering::Release);
            }
            Err(m) if m == MAGIC => {}
            Err(_) => return Err("the region holds something else (wrong magic)"),
        }
        Ok(r)
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: every index used is below region_bytes(groups) / 8, checked in `new`.
        unsafe { &*self.base.add(i) }
    }

    fn slot(&self, group: u32, seq: u64, field: usize) -> &AtomicU64 {
        let s = (seq % DEPTH as u64) as usize;
        self.word(HEADER_WORDS + (group as usize * DEPTH + s) * SLOT_WORDS + field)
    }

    pub fn abort(&self) {
        self.word(H_ABORT).store(1, Ordering::Release);
    }

    pub fn aborted(&self) -> bool {
        self.word(H_ABORT).load(Ordering::Acquire) != 0
    }

    /// Arrive at instance `seq` of `group` (of `size` ranks) at time `t_ns`, its device task
    /// starting at `device_ns`; block until all have arrived. Returns the last arrival's time and
    /// the latest device start, or an HCCL error code on timeout or abort.
    pub fn arrive(
        &self,
        group: u32,
        size: u32,
        seq: u64,
        t_ns: u64,
        device_ns: u64,
        timeout: Duration,
    ) -> Result<(u64, u64), i32> {
        if group >= self.groups || size == 0 {
            return Err(HCCL_E_INTERNAL);
        }
        self.slot(group, seq, S_LATEST).fetch_max(t_ns, Ordering::AcqRel);
        self.slot(group, seq, S_DEVICE).fetch_max(device_ns, Ordering::AcqRel);
        let arrived = self.slot(group, seq, S_ARRIVED).fetch_add(1, Ordering::AcqRel) + 1;
        let tag = seq + 1;
        if arrived == u64::from(size) {
            // The acquire of the fetch_add above saw every earlier arrival's fetch_max.
            let latest = self.slot(group, seq, S_LATEST).load(Ordering::Acquire);
            let device = self.slot(group, seq, S_DEVICE).load(Ordering::Acquire);
            self.slot(group, seq + 1, S_ARRIVED).store(0, Ordering::Relaxed);
            self.slot(group, seq + 1, S_LATEST).store(0, Ordering::Relaxed);
            self.slot(group, seq + 1, S_DEVICE).store(0, Ordering::Relaxed);
            self.slot(group, seq, S_RELEASE).store(latest, Ordering::Relaxed);
            // The latest device start stays in its word until slot reuse clears it; waiters read
            // it after the tag's acquire, which orders this load-and-keep before their read.
            self.slot(group, seq, S_TAG).store(tag, Ordering::Release);
            return Ok((latest, device));
        }
        let start = Instant::now();
        let mut spins = 0u32;
        while self.slot(group, seq, S_TAG).load(Ordering::Acquire) != tag {
            if self.aborted() {
                return Err(HCCL_E_INTERNAL);
            }
            if start.elapsed() > timeout {
                return Err(HCCL_E_TIMEOUT);
            }
            spins += 1;
            pause(spins);
        }
        let latest = self.slot(group, seq, S_RELEASE).load(Ordering::Relaxed);
        Ok((latest, self.slot(group, seq, S_DEVICE).load(Ordering::Relaxed)))
    }
}

#[cfg(loom)]
fn pause(_spins: u32) {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
fn pause(spins: u32) {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::sleep(Duration::from_micros(20));
    }
}

// Everything below is the process's attachment (not in loom builds).

/// This process's attachment: region, rank, timeout. Set once by `attach`.
#[cfg(not(loom))]
static BASE: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
#[cfg(not(loom))]
static GROUPS: AtomicU32 = AtomicU32::new(0);
#[cfg(not(loom))]
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

#[cfg(not(loom))]
thread_local! {
    /// The calling thread's current group and its size (HCCL's communicator argument), and the
    /// next sequence number per group.
    static CURRENT: RefCell<(u32, u32, Vec<u64>)> = const { RefCell::new((0, 0, Vec::new())) };
    /// The device times of the thread's last collective instance, for its records.
    static MEETING: std::cell::Cell<Option<Meeting>> = const { std::cell::Cell::new(None) };
}

/// One rank's view of a collective instance on the device: its own task's start and the latest
/// start over the group's ranks (the task cannot finish before that rank's task has started).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meeting {
    pub own_start_ns: u64,
    pub latest_start_ns: u64,
}

/// The meeting of the calling thread's last collective, once (None outside a job).
#[cfg(not(loom))]
pub fn take_meeting() -> Option<Meeting> {
    MEETING.with(|m| m.take())
}

/// # Safety
/// As `Region::new`.
#[cfg(not(loom))]
pub unsafe fn attach(
    base: *mut u64,
    len: usize,
    ranks: u32,
    groups: u32,
    timeout_ms: u64,
) -> Result<(), &'static str> {
    // SAFETY: forwarded contract.
    unsafe { Region::new(base, len, ranks, groups) }?;
    GROUPS.store(groups, Ordering::Relaxed);
    TIMEOUT_MS.store(timeout_ms.max(1), Ordering::Relaxed);
    BASE.store(base, Ordering::Release);
    CURRENT.with(|c| c.borrow_mut().1 = ranks);
    Ok(())
}

#[cfg(not(loom))]
fn attached() -> Option<Region> {
    let base = BASE.load(Ordering::Acquire);
    (!base.is_null()).then(|| Region { base: base.cast(), groups: GROUPS.load(Ordering::Relaxed) })
}

/// Abort the job (every waiting rank returns an error at once). 1 if not attached.
#[cfg(not(loom))]
pub fn abort() -> u32 {
    attached().map_or(1, |r| {
        r.abort();
        0
    })
}

/// The group the calling thread's next collectives belong to.
#[cfg(not(loom))]
pub fn set_group(group: u32, size: u32) -> u32 {
    if attached().is_none_or(|r| group >= r.groups) || size == 0 {
        return 1;
    }
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.0 = group;
        c.1 = size;
    });
    0
}

/// The hook in the simulated HCCL path, between ENTER and the transfer: wait for the group's
/// other ranks, telling them where this rank's collective task would start on its stream
/// (`device_start`, asked only in a job). 0 (also when no job is attached), or an HCCL error code.
#[cfg(not(loom))]
pub fn wait_for_peers(device_start: impl FnOnce() -> u64) -> i32 {
    MEETING.with(|m| m.set(None));
    let Some(region) = attached() else { return 0 };
    let (group, size, seq) = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let g = c.0 as usize;
        if c.2.len() <= g {
            c.2.resize(g + 1, 0);
        }
        let seq = c.2[g];
        c.2[g] += 1;
        (c.0, c.1, seq)
    });
    let t = clock::timestamp_ns();
    let own = device_start();
    let timeout = Duration::from_millis(TIMEOUT_MS.load(Ordering::Relaxed));
    match region.arrive(group, size, seq, t, own, timeout) {
        Ok((latest, device)) => {
            if clock::is_virtual() && latest > t {
                clock::virtual_set(latest);
            }
            MEETING.with(|m| m.set(Some(Meeting { own_start_ns: own, latest_start_ns: device.max(own) })));
            0
        }
        Err(code) => code,
    }
}

/// Loom builds model the barrier alone: no process attachment, so the HCCL path never waits.
#[cfg(loom)]
pub fn wait_for_peers(_device_start: impl FnOnce() -> u64) -> i32 {
    0
}

#[cfg(loom)]
pub fn take_meeting() -> Option<Meeting> {
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn region(groups: u32, ranks: u32) -> (Arc<Vec<AtomicU64>>, Region) {
        let words = region_bytes(groups) / 8;
        let mem: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
        // SAFETY: the Vec outlives every use in the test (the Arc is held to the end) and is
        // only accessed atomically.
        let r = unsafe { Region::new(mem.as_ptr() as *mut u64, words * 8, ranks, groups) }.unwrap();
        (mem, r)
    }

    #[test]
    fn every_rank_leaves_each_instance_at_the_last_arrival() {
        let ranks = 4u32;
        let (_mem, r) = region(1, ranks);
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                std::thread::spawn(move || {
                    (0..200u64)
                        .map(|seq| {
                            let t = seq * 1000 + u64::from(rank) * 10;
                            // Device starts in the other order: the latest is rank 0's.
                            let d = seq * 1000 + u64::from(ranks - rank) * 7;
                            r.arrive(0, ranks, seq, t, d, Duration::from_secs(30)).unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let want: Vec<(u64, u64)> = (0..200u64)
            .map(|s| (s * 1000 + u64::from(ranks - 1) * 10, s * 1000 + u64::from(ranks) * 7))
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), want);
        }
    }

    #[test]
    fn a_missing_rank_times_out_and_abort_releases_waiters() {
        let (_mem, r) = region(1, 2);
        assert_eq!(r.arrive(0, 2, 0, 5, 5, Duration::from_millis(20)), Err(HCCL_E_TIMEOUT));
        let (_mem2, r2) = region(1, 2);
        r2.abort();
        assert_eq!(r2.arrive(0, 2, 0, 5, 5, Duration::from_secs(30)), Err(HCCL_E_INTERNAL));
    }

    #[test]
    fn a_region_of_another_kind_is_refused() {
        let words = region_bytes(1) / 8;
        let mem: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        mem[0].store(42, Ordering::Relaxed);
        // SAFETY: `mem` lives to the end of the test and is accessed atomically.
        let r = unsafe { Region::new(mem.as_ptr() as *mut u64, words * 8, 2, 1) };
        assert!(r.is_err());
        // SAFETY: as above; too short a length is refused before any access.
        assert!(unsafe { Region::new(mem.as_ptr() as *mut u64, 8, 2, 1) }.is_err());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Two ranks through three instances of one group (slot reuse included, DEPTH is 2 here):
    /// under every interleaving loom tries, each rank leaves each instance with the last
    /// arrival's time, and no rank leaves before the other has arrived.
    #[test]
    fn two_ranks_leave_every_instance_at_the_last_arrival_in_every_interleaving() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let words = region_bytes(1) / 8;
            let mem: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
            // SAFETY: `mem` outlives both ranks (each holds the Arc) and is accessed atomically.
            let r = unsafe { Region::new(mem.as_ptr() as *mut u64, words * 8, 2, 1) }.unwrap();
            let t = |rank: u64, seq: u64| 10 * seq + rank * (seq % 2) + (1 - rank) * (1 - seq % 2);
            let keep = mem.clone();
            let other = loom::thread::spawn(move || {
                let _keep = keep;
                (0..3)
                    .map(|s| r.arrive(0, 2, s, t(1, s), t(0, s), Duration::from_secs(600)).unwrap())
                    .collect::<Vec<_>>()
            });
            // Device starts swapped between the ranks: the latest of both is still each one's max.
            let mine: Vec<(u64, u64)> = (0..3)
                .map(|s| r.arrive(0, 2, s, t(0, s), t(1, s), Duration::from_secs(600)).unwrap())
                .collect();
            let want: Vec<(u64, u64)> =
                (0..3).map(|s| (t(0, s).max(t(1, s)), t(0, s).max(t(1, s)))).collect();
            assert_eq!(mine, want);
            assert_eq!(other.join().unwrap(), want);
        });
    }
}
