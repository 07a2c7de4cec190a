//! A signal handler written in Python (`signal.signal`) runs only on the main thread, and only
//! when that thread is back in the interpreter. Two ways a SIGTERM then never reaches it, both seen
//! with a multiprocessing pool's `terminate()`, whose workers sleep in their task queue's lock:
//!
//! - the kernel may hand a signal sent to the process to any thread that does not block it (this
//!   crate's drain thread, a vendor library's thread, polars' pool): that thread runs CPython's C
//!   handler, which only sets flags, and the main thread sleeps on;
//! - on the main thread, a signal that lands after the interpreter's last check but before the
//!   thread enters its wait sets the flags, and the wait, begun after, is never interrupted.
//!
//! [`route_to_main_thread`] puts a C handler in front of the one Python installed. On another
//! thread it sends the signal on to the main thread. On the main thread it calls Python's and
//! marks the signal pending until the Python handler says it ran ([`handled`]); meanwhile a relay
//! thread sends the main thread a kick every few milliseconds, which does nothing but make a wait
//! return EINTR, so the interpreter runs the handler. A forked child inherits the router but not
//! the relay thread: the next [`route_to_main_thread`] in the child starts one of its own (a pool
//! worker told to terminate right as it begins to wait for its next task needs it as much).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use libc::{c_int, siginfo_t};

/// Signal numbers this module can route (Linux's are 1..=64).
const SIGNALS: usize = 65;
/// How long the relay waits for the Python handler before kicking the main thread again.
const KICK_EVERY: Duration = Duration::from_millis(20);

/// The handler each routed signal had before (address; 0 = SIG_DFL, 1 = SIG_IGN) and whether it
/// takes siginfo. Written before the router is installed for that signal, read in the router.
static PREVIOUS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
static PREVIOUS_SIGINFO: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// Delivered to Python's C handler, not yet run by the Python handler.
static PENDING: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// The relay sent the main thread this signal only to interrupt its wait.
static KICK: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// The write end of the pipe that wakes the relay (-1 before it starts).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The relay's process and the read end of its pipe; pid 0 before any relay started. A forked
/// child sees its parent's pid here: its relay is still to start, and the descriptors are copies
/// of the parent's pipe. Taken only by route_to_main_thread, which Python calls holding the GIL, so
/// no other thread holds it when Python forks.
static RELAY: Mutex<(libc::pid_t, c_int)> = Mutex::new((0, -1));

/// Route `signum` to the main thread, in front of the handler installed now (Python's, after
/// `signal.signal`). A later `signal.signal` for the same signal replaces the router, as it
/// replaces any handler. Installing twice keeps one router.
///
/// # Errors
/// A signal number outside 1..=64, one the kernel refuses a handler for (SIGKILL, SIGSTOP), or no
/// relay thread (no pipe, no thread).
pub fn route_to_main_thread(signum: i32) -> Result<(), String> {
    let slot = slot(signum)?;
    start_relay()?;
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags, empty mask), and the
    // kernel fills `old` in full.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reading the current action into a valid, writable sigaction.
    if unsafe { libc::sigaction(signum, std::ptr::null(), &mut old) } != 0 {
        return Err(format!("signal {signum}: {}", std::io::Error::last_os_error()));
    }
    let router = route as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
    if old.sa_sigaction == router {
        return Ok(());
    }
    PREVIOUS[slot].store(old.sa_sigaction, Ordering::Relaxed);
    PREVIOUS_SIGINFO[slot].store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Relaxed);
    // SAFETY: as above, all-zero is a valid sigaction; the fields are then set.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = router;
    // No SA_RESTART, as Python installs its handlers: the main thread's wait must fail with
    // EINTR for the interpreter to run the handler.
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: sigemptyset on a valid sigset_t; sigaction with valid pointers. The stores above
    // happen before the kernel can run the router for this signal (the syscall orders them).
    let rc = unsafe {
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(signum, &new, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(format!("signal {signum}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The Python handler of `signum` is running: stop kicking the main thread for it.
pub fn handled(signum: i32) {
    if let Ok(slot) = slot(signum) {
        PENDING[slot].store(false, Ordering::SeqCst);
    }
}

fn slot(signum: i32) -> Result<usize, String> {
    usize::try_from(signum)
        .ok()
        .filter(|s| (1..SIGNALS).contains(s))
        .ok_or_else(|| format!("signal {signum} is not a signal number (1..={})", SIGNALS - 1))
}

/// The router: async-signal-safe (getpid, gettid, tgkill and write are system calls; atomics;
/// errno is kept).
extern "C" fn route(signum: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    let slot = signum as usize; // in 1..SIGNALS: the router is installed for no other signal
                                // SAFETY: getpid and the gettid/tgkill system calls have no memory arguments.
    let (pid, tid) = unsafe { (libc::getpid(), libc::syscall(libc::SYS_gettid) as libc::pid_t) };
    if tid != pid {
        // The main thread's id is the process id. If it has ended, tgkill fails: handle it here.
        // SAFETY: as above.
        if unsafe { libc::syscall(libc::SYS_tgkill, pid, pid, signum) } != 0 {
            call_previous(signum, info, ctx);
        }
    } else if !KICK[slot].swap(false, Ordering::SeqCst) {
        PENDING[slot].store(true, Ordering::SeqCst);
        call_previous(signum, info, ctx);
        wake_relay();
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn call_previous(signum: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let slot = signum as usize;
    match PREVIOUS[slot].load(Ordering::Relaxed) {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // What the default would have done (end the process, for SIGTERM): restore it and
            // raise the signal again; it is delivered when this handler returns.
            // SAFETY: signal and raise are async-signal-safe.
            unsafe {
                libc::signal(signum, libc::SIG_DFL);
                libc::raise(signum);
            }
        }
        h if PREVIOUS_SIGINFO[slot].load(Ordering::Relaxed) => {
            // SAFETY: `h` is the address of the sa_sigaction handler the kernel would have called
            // with these arguments (SA_SIGINFO was set), read from the kernel before we replaced it.
            let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = unsafe { std::mem::transmute(h) };
            f(signum, info, ctx);
        }
        h => {
            // SAFETY: `h` is the address of the plain sa_handler the kernel would have called.
            let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
            f(signum);
        }
    }
}

fn wake_relay() {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write of one byte from a live buffer; the pipe is non-blocking, and a full pipe
        // (EAGAIN) already holds a wake-up.
        let _ = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
}

/// The relay thread, started once per process: it blocks every signal (the kernel never picks it
/// for one) and sleeps on its pipe until the router wakes it, then kicks the main thread until no
/// routed signal is pending.
fn start_relay() -> Result<(), String> {
    let mut relay = RELAY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: getpid has no arguments.
    let pid = unsafe { libc::getpid() };
    if relay.0 == pid {
        return Ok(());
    }
    if relay.0 != 0 {
        // Forked: the pipe is the parent's (a wake-up written to it would wake the parent's relay).
        // SAFETY: closing this process's copies of descriptors it owns and no one else uses: the
        // router reads WAKE_FD only to write, and a write to a closed descriptor fails harmlessly.
        unsafe {
            libc::close(WAKE_FD.swap(-1, Ordering::AcqRel));
            libc::close(relay.1);
        }
    }
    let read_fd = spawn_relay()?;
    *relay = (pid, read_fd);
    Ok(())
}

/// Start the relay thread; returns the read end of its pipe.
fn spawn_relay() -> Result<c_int, String> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("the signal relay's pipe: {}", std::io::Error::last_os_error()));
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // SAFETY: fcntl on the descriptor just created.
    unsafe { libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK) };
    // The thread inherits this thread's mask: block everything while it is made, then restore.
    // SAFETY: an all-zero sigset_t is a valid (empty) set.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pthread_sigmask fills it.
    let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigfillset and pthread_sigmask on valid, writable sigset_t values.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut before);
    }
    let spawned =
        std::thread::Builder::new().name("mspti-lens-sigrelay".into()).spawn(move || relay(read_fd));
    // SAFETY: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
    spawned.map_err(|e| format!("the signal relay thread: {e}"))?;
    WAKE_FD.store(write_fd, Ordering::Release);
    Ok(read_fd)
}

fn relay(read_fd: c_int) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: read into a live buffer of its length.
        let n = unsafe { libc::read(read_fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        loop {
            std::thread::sleep(KICK_EVERY);
            let mut any = false;
            for (slot, pending) in PENDING.iter().enumerate() {
                if pending.load(Ordering::SeqCst) {
                    any = true;
                    KICK[slot].store(true, Ordering::SeqCst);
                    // SAFETY: getpid and tgkill have no memory arguments.
                    unsafe {
                        let pid = libc::getpid();
                        libc::syscall(libc::SYS_tgkill, pid, pid, slot as c_int);
                    }
                }
            }
            if !any {
                break;
            }
        }
    }
}

/// Test hook: what the router does on the main thread when a signal lands just before a wait
/// (Python's C handler runs, the signal is pending), without interrupting any wait.
#[cfg(feature = "test-hooks")]
pub fn trip_without_waking(signum: i32) -> Result<(), String> {
    let slot = slot(signum)?;
    PENDING[slot].store(true, Ordering::SeqCst);
    call_previous(signum, std::ptr::null_mut(), std::ptr::null_mut());
    wake_relay();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    static SEEN_ON: AtomicU64 = AtomicU64::new(0);

    extern "C" fn note_thread(_: c_int) {
        // SAFETY: gettid has no arguments.
        SEEN_ON.store(unsafe { libc::syscall(libc::SYS_gettid) } as u64, Ordering::SeqCst);
    }

    #[test]
    fn a_signal_sent_to_another_thread_runs_the_previous_handler_on_the_main_thread() {
        // SIGUSR2: nothing else in the test process uses it. The test harness runs tests on
        // spawned threads, so this test's own thread is not the main thread either.
        // SAFETY: installing a plain handler for SIGUSR2.
        unsafe { libc::signal(libc::SIGUSR2, note_thread as extern "C" fn(c_int) as libc::sighandler_t) };
        route_to_main_thread(libc::SIGUSR2).unwrap();
        route_to_main_thread(libc::SIGUSR2).unwrap(); // twice keeps one router
                                                      // SAFETY: pthread_kill to this (live) thread.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
        // SAFETY: getpid has no arguments.
        let main = unsafe { libc::getpid() } as u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while SEEN_ON.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            SEEN_ON.load(Ordering::SeqCst),
            main,
            "the handler ran on another thread than the main one"
        );
        handled(libc::SIGUSR2); // no Python handler here to say so: stop the relay's kicks
    }

    #[test]
    fn numbers_that_are_not_signals_are_refused() {
        assert!(route_to_main_thread(0).unwrap_err().contains("not a signal number"));
        assert!(route_to_main_thread(65).is_err());
        assert!(route_to_main_thread(libc::SIGKILL).is_err());
    }
}
