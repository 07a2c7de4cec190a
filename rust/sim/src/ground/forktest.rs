//! Test support: fork children while another thread runs a loop, and count the children that hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn _exit(code: i32) -> !;
}
const WNOHANG: i32 = 1;
const SIGKILL: i32 = 9;

/// Fork `n` children while another thread calls `spin(i)` for i = 0, 1, ...; each child runs
/// `child(c)` and exits with 0 if it returned true. Returns (children that hung, children that
/// failed): a child still running after one generous bound for all (20 s; each needs microseconds)
/// hung, and is killed.
pub fn hung_children(n: u32, spin: fn(u64), child: fn(u32) -> bool) -> (u32, u32) {
    let stop = Arc::new(AtomicBool::new(false));
    let spun = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (stop, spun) = (stop.clone(), spun.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                spin(i);
                i += 1;
                spun.store(i, Ordering::Relaxed);
            }
        })
    };
    while spun.load(Ordering::Relaxed) < 1000 {
        std::hint::spin_loop();
    }
    let mut children = Vec::new();
    for c in 0..n {
        // SAFETY: the child runs only `child` (the code under test) and _exits.
        let pid = unsafe { fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = child(c);
            // SAFETY: leaves the child at once, running no destructors or atexit handlers.
            unsafe { _exit(i32::from(!ok)) };
        }
        children.push(pid);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut hung, mut failed) = (0, 0);
    while !children.is_empty() {
        children.retain(|&pid| {
            let mut status = 0;
            // SAFETY: our own child; `status` is a valid out pointer.
            let r = unsafe { waitpid(pid, &mut status, WNOHANG) };
            if r == pid {
                failed += u32::from(status != 0);
                return false;
            }
            true
        });
        if Instant::now() > deadline {
            for &pid in &children {
                let mut status = 0;
                // SAFETY: our own child, reaped right after.
                unsafe {
                    kill(pid, SIGKILL);
                    waitpid(pid, &mut status, 0);
                }
                hung += 1;
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    (hung, failed)
}
