//! The process the simulator runs in: its pid and the threads' tids as records carry them, the
//! background threads it starts once per process, and what a `fork()` does to all that.
//!
//! A `fork()` child gets every simulator lock free (`locks::hold_all` holds them across the fork,
//! so none is held mid-update by a thread the child does not have), its own pid, and starts its
//! own background threads (the activity manager, the device channel) when it next needs them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::ground::{locks, state};

/// `getpid()`, cached (a system call per record otherwise); the fork handlers renew it.
static PID: AtomicU32 = AtomicU32::new(0);

/// The process id records carry.
pub fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            install_fork_handlers();
            let p = std::process::id();
            PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// The kernel's `gettid()`: MSPTI's `GetTid` (`syscall(SYS_gettid)`).
pub fn gettid() -> u32 {
    extern "C" {
        fn gettid() -> i32;
    }
    thread_local! {
        static TID: Cell<u32> = const { Cell::new(0) };
    }
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: glibc's gettid takes nothing and cannot fail.
            t.set(unsafe { gettid() } as u32);
        }
        t.get()
    })
}

/// A background thread the simulator starts once per process: a `fork()` child, which has none
/// of its parent's threads, starts its own.
pub struct ProcessThread {
    /// The pid of the process that started it (0: none yet).
    started_in: AtomicU32,
}

impl ProcessThread {
    pub const fn new() -> ProcessThread {
        ProcessThread { started_in: AtomicU32::new(0) }
    }

    /// Start the thread named `name` running `f`, unless this process already has.
    #[inline]
    pub fn ensure(&self, name: &str, f: fn()) {
        let me = pid();
        // A plain load first: the swap, a locked write of a shared line, only until it has started.
        let was = self.started_in.load(Ordering::Acquire);
        if was != me && self.started_in.compare_exchange(was, me, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            let _ = std::thread::Builder::new().name(name.into()).spawn(f);
        }
    }
}

impl Default for ProcessThread {
    fn default() -> Self {
        ProcessThread::new()
    }
}

extern "C" fn fork_prepare() {
    locks::hold_all();
}

extern "C" fn fork_parent() {
    locks::release_all(false);
}

extern "C" fn fork_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    locks::release_all(true);
}

/// When the library is loaded: the fork handlers go in, before any thread can hold a simulator
/// lock, and a library loaded as the real one's name checks LD_PRELOAD as MSPTI 26.x does.
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = {
    extern "C" fn on_load() {
        install_fork_handlers();
        if state::preload_check_by_default() {
            state::set_preload_check(true);
        }
    }
    on_load
};

/// Install the fork handlers (once): at load, and before anything that a fork could catch
/// half done (the first pid, a background thread).
pub fn install_fork_handlers() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        extern "C" {
            fn pthread_atfork(
                prepare: Option<extern "C" fn()>,
                parent: Option<extern "C" fn()>,
                child: Option<extern "C" fn()>,
            ) -> i32;
        }
        // SAFETY: libc's pthread_atfork with three handlers of the `void (*)(void)` type.
        unsafe { pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    });
}
