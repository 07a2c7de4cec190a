//! A process-directed signal (`kill PID`, a multiprocessing pool's `terminate()`, a job
//! scheduler's SIGTERM) is taken by any thread that does not block it. CPython runs Python
//! signal handlers only on the main thread, when that thread is back in the interpreter: when the
//! kernel hands the signal to another thread (this crate's drain thread, a vendor library's
//! thread, polars' pool) while the main thread sleeps in a call that nothing else wakes (a
//! multiprocessing lock, a pipe read), the Python handler never runs and the process never ends.
//!
//! [`route_to_main_thread`] puts a C handler in front of the one Python installed: on the main
//! thread it calls Python's; on any other thread it sends the signal on to the main thread, whose
//! blocking call then returns EINTR, so the interpreter runs the Python handler there.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{c_int, siginfo_t};

/// Signal numbers this module can route (Linux's are 1..=64).
const SIGNALS: usize = 65;

/// The handler each routed signal had before (address; 0 = SIG_DFL, 1 = SIG_IGN) and whether it
/// takes siginfo. Written before the router is installed for that signal, read in the router.
static PREVIOUS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
static PREVIOUS_SIGINFO: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];

/// Route `signum` to the main thread, in front of the handler installed now (Python's, after
/// `signal.signal`). A later `signal.signal` for the same signal replaces the router, as it
/// replaces any handler. Installing twice keeps one router.
///
/// # Errors
/// A signal number outside 1..=64, or one the kernel refuses a handler for (SIGKILL, SIGSTOP).
pub fn route_to_main_thread(signum: i32) -> Result<(), String> {
    let Some(slot) = usize::try_from(signum).ok().filter(|s| (1..SIGNALS).contains(s)) else {
        return Err(format!("signal {signum} is not a signal number (1..={})", SIGNALS - 1));
    };
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
    // No SA_RESTART, as Python installs its handlers: the main thread's blocking call must fail
    // with EINTR for the interpreter to run the handler.
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

/// The router: async-signal-safe (getpid, gettid and tgkill are system calls; errno is kept).
extern "C" fn route(signum: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: getpid and the gettid/tgkill system calls have no memory arguments.
    let forwarded = unsafe {
        let pid = libc::getpid();
        let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        // The main thread's id is the process id. If it has ended, tgkill fails: handle it here.
        tid != pid && libc::syscall(libc::SYS_tgkill, pid, pid, signum) == 0
    };
    if !forwarded {
        call_previous(signum, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn call_previous(signum: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let slot = signum as usize; // in 1..SIGNALS: the router is installed for no other signal
    let handler = PREVIOUS[slot].load(Ordering::Relaxed);
    match handler {
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while SEEN_ON.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            SEEN_ON.load(Ordering::SeqCst),
            main,
            "the handler ran on another thread than the main one"
        );
    }

    #[test]
    fn numbers_that_are_not_signals_are_refused() {
        assert!(route_to_main_thread(0).unwrap_err().contains("not a signal number"));
        assert!(route_to_main_thread(65).is_err());
        assert!(route_to_main_thread(libc::SIGKILL).is_err());
    }
}
