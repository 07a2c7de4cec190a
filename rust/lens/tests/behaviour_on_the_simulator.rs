//! mspti-lens's behaviour against the simulator library (the cdylib rust/lens/build.rs builds), with
//! the simulator's per-thread virtual clock read through `msptiGetTimestamp`, so every duration
//! is exact: pairing, nesting, toggles, backwards clocks, windows racing writers, forked children,
//! threads whose first call comes from a pthread-key destructor. Plain Rust, no Python, so it runs
//! under qemu-aarch64 too.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use _native::core::clock::ClockKind;
use _native::core::counters::Counter;
use _native::core::hist::{self, Histogram};
use _native::core::shard;
use _native::core::windows::{self, Totals};
use _native::ffi::discovery;
use _native::ffi::symbols::Origin;
use _native::session::Session;

/// The simulator's control functions.
struct Sim {
    call: extern "C" fn(u32, u64) -> i32,
    fire: extern "C" fn(u32, u32) -> i32,
    set_clock: extern "C" fn(u32),
    virtual_set: extern "C" fn(u64),
    api_count: extern "C" fn() -> u32,
    api_info: unsafe extern "C" fn(u32, *mut u32, *mut u32, *mut *const c_char, *mut *const c_char) -> u32,
    path: PathBuf,
    /// Kept (never unloaded) so the functions above stay valid.
    _lib: &'static libloading::Library,
}

fn sim() -> &'static Sim {
    static SIM: OnceLock<Sim> = OnceLock::new();
    SIM.get_or_init(|| {
        // The simulator cdylib this crate's build script built for the same target.
        let path = PathBuf::from(env!("MSPTI_SIM_LIBRARY"));
        assert!(path.exists(), "{} is missing: rust/lens/build.rs built it", path.display());
        // SAFETY: the simulator's initialisers only set up static state.
        let lib = unsafe { libloading::Library::new(&path) }.unwrap();
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        macro_rules! sym {
            ($n:literal) => {
                // SAFETY: the simulator exports these names with these C signatures (rust/sim/src/c_face/).
                *unsafe { lib.get($n) }.unwrap()
            };
        }
        Sim {
            call: sym!(b"msimCall"),
            fire: sym!(b"msimFire"),
            set_clock: sym!(b"msimSetClock"),
            virtual_set: sym!(b"msimVirtualSet"),
            api_count: sym!(b"msimApiCount"),
            api_info: sym!(b"msimApiInfo"),
            path,
            _lib: lib,
        }
    })
}

impl Sim {
    /// The simulator's index of an API and its (domain, cbid).
    fn api(&self, name: &str) -> (u32, u32, u32) {
        for i in 0..(self.api_count)() {
            let (mut d, mut c, mut n26, mut n8) = (0, 0, std::ptr::null(), std::ptr::null());
            // SAFETY: valid out pointers; the names are static strings or NULL.
            unsafe { (self.api_info)(i, &mut d, &mut c, &mut n26, &mut n8) };
            // SAFETY: non-NULL names are static NUL-terminated strings.
            if !n26.is_null() && unsafe { CStr::from_ptr(n26) }.to_str() == Ok(name) {
                return (i, d, c);
            }
        }
        panic!("the simulator has no API {name}");
    }
}

/// Under valgrind (scripts/memcheck.sh) everything runs ~50x slower: smaller loops, same checks.
fn scaled(n: u64) -> u64 {
    let under_valgrind = std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("vgpreload"));
    if under_valgrind {
        (n / 50).max(2)
    } else {
        n
    }
}

/// One session at a time in this process (MSPTI allows one subscriber).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    _native::core::locks::lock(&LOCK)
}

/// A recording session on the simulator with its virtual clock, everything enabled.
fn session() -> Session {
    let s = sim();
    (s.set_clock)(1);
    let lib = discovery::open(&s.path, Origin::Simulator).unwrap();
    let mut session = Session::new(lib).unwrap();
    session.set_domain(1, true).unwrap();
    session.set_domain(2, true).unwrap();
    assert_eq!(session.start(ClockKind::Mspti).unwrap(), ClockKind::Mspti);
    session
}

fn hist_of<'a>(t: &'a Totals, name: &str) -> &'a Histogram {
    t.keys.iter().find(|((_, _, n), _)| n == name).map(|(_, h)| h).unwrap_or_else(|| panic!("no {name}"))
}

/// A window's histogram is consistent: counts add up, min <= mean <= max, the extremes bound
/// every bucket it counts, and its sum lies within what its buckets allow.
/// The values a slot may hold: 0 for the zero bucket, else (lower, upper] of its bucket.
fn bounds_of(s: usize) -> (f64, f64) {
    hist::slot_index(s).map_or((0.0, 0.0), |i| (hist::bucket_lower(i), hist::bucket_upper(i)))
}

fn check_consistent(h: &Histogram) {
    assert_eq!(h.count(), h.nonzero().map(|(_, c)| c).sum::<u64>() + h.overflow());
    let (mut lo_sum, mut hi_sum) = (0.0, 0.0);
    for (s, c) in h.nonzero() {
        let (lo, hi) = bounds_of(s);
        lo_sum += lo * c as f64;
        hi_sum += hi * c as f64;
    }
    let sum = h.sum() as f64;
    assert!(lo_sum <= sum && sum <= hi_sum * (1.0 + 1e-12) + 1.0, "sum {sum} outside [{lo_sum}, {hi_sum}]");
    let (min, max) = (h.min().unwrap(), h.max().unwrap());
    assert!(min as f64 <= h.mean() && h.mean() <= max as f64, "min {min} mean {} max {max}", h.mean());
    let hi = h.nonzero().last().map(|(s, _)| s).unwrap();
    let lo = h.nonzero().next().map(|(s, _)| s).unwrap();
    assert!(
        max as f64 > hist::slot_index(hi).map_or(-1.0, hist::bucket_lower),
        "max {max} below its buckets"
    );
    assert!(
        min as f64 <= hist::slot_index(lo).map_or(0.0, hist::bucket_upper),
        "min {min} above its buckets"
    );
}

#[test]
fn calls_and_nested_calls_pair_exactly_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let _session = session();
    let (launch, ..) = s.api("aclrtLaunchKernel");
    let (sync, ..) = s.api("aclrtSynchronizeStream");
    (s.virtual_set)(0);
    for work in [100u64, 2_000, 30_000] {
        assert_eq!((s.call)(launch, work), 0);
    }
    // Nesting: sync opens at t=1000, a launch runs inside it from 1500 to 1800, sync closes at 5000.
    (s.virtual_set)(1_000);
    (s.fire)(sync, 0);
    (s.virtual_set)(1_500);
    (s.fire)(launch, 0);
    (s.virtual_set)(1_800);
    (s.fire)(launch, 1);
    (s.virtual_set)(5_000);
    (s.fire)(sync, 1);
    let t = windows::snapshot();
    let l = hist_of(&t, "aclrtLaunchKernel");
    assert_eq!((l.count(), l.sum(), l.min(), l.max()), (4, 32_400, Some(100), Some(30_000)));
    let y = hist_of(&t, "aclrtSynchronizeStream");
    assert_eq!((y.count(), y.sum()), (1, 4_000));
    assert_eq!(t.counters, Default::default());
    assert_eq!(t.in_flight, 0);
}

#[test]
fn a_pairing_across_a_toggle_is_discarded_and_counted_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let mut session = session();
    let (launch, domain, cbid) = s.api("aclrtLaunchKernel");
    (s.virtual_set)(0);
    (s.fire)(launch, 0); // a call opens ...
    session.set_callback(domain, cbid, false).unwrap(); // ... its id is disabled: EXIT lost
    (s.fire)(launch, 1);
    session.set_callback(domain, cbid, true).unwrap();
    (s.virtual_set)(1_000_219_240);
    (s.fire)(launch, 1); // a later call's EXIT, whose ENTER came while disabled
    let t = windows::snapshot();
    assert!(
        t.keys.is_empty(),
        "a sample was manufactured: {:?}",
        t.keys.values().map(|h| h.sum()).collect::<Vec<_>>()
    );
    assert_eq!(t.counters[Counter::Toggled], 1);
    // A whole domain toggled mid-call likewise.
    (s.fire)(launch, 0);
    session.set_domain(domain, false).unwrap();
    session.set_domain(domain, true).unwrap();
    (s.fire)(launch, 1);
    assert_eq!(windows::snapshot().counters[Counter::Toggled], 2);
    assert_eq!((s.call)(launch, 50), 0); // and pairing resumes
    assert_eq!(hist_of(&windows::snapshot(), "aclrtLaunchKernel").sum(), 50);
}

#[test]
fn a_backwards_clock_drops_the_pair_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let _session = session();
    let (launch, ..) = s.api("aclrtLaunchKernel");
    (s.virtual_set)(10_000);
    (s.fire)(launch, 0);
    (s.virtual_set)(9_000); // CLOCK_REALTIME stepped back mid-call
    (s.fire)(launch, 1);
    let t = windows::snapshot();
    assert!(t.keys.is_empty(), "recorded as {:?}", t.keys.values().map(|h| h.min()).collect::<Vec<_>>());
    assert_eq!(t.counters[Counter::Dropped], 1);
}

/// The work of call k on thread i: spread over 1 ns .. ~10 ms, some zero, a few far apart.
fn work(i: u64, k: u64) -> u64 {
    match (k * 7 + i) % 50 {
        0 => 0,
        1 => 10_000_000 + i * 1_000 + k,
        _ => 1 + (k * 7_919 + i * 104_729) % 100_000,
    }
}

#[test]
fn windows_sum_to_the_virtual_clock_truth_with_resets_racing_8_threads_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let _session = session();
    let (launch, ..) = s.api("aclrtLaunchKernel");
    const THREADS: u64 = 8;
    let calls = scaled(100_000);
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..THREADS)
        .map(|i| {
            std::thread::spawn(move || {
                let s = sim();
                (s.virtual_set)(0);
                for k in 0..calls {
                    assert_eq!((s.call)(launch, work(i, k)), 0);
                }
            })
        })
        .collect();
    let resetter = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut windows = Vec::new();
            while !done.load(Ordering::Acquire) {
                windows.push(windows::snapshot_and_reset());
                // A live snapshot between resets must be consistent too.
                if let Some(h) = windows::snapshot().keys.values().next() {
                    check_consistent(h);
                }
            }
            windows
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let mut windows = resetter.join().unwrap();
    windows.push(windows::snapshot_and_reset());
    let (mut count, mut total, mut max) = (0u64, 0u64, 0u64);
    let mut nonempty = 0;
    for w in &windows {
        assert_eq!(w.counters, Default::default());
        for h in w.keys.values() {
            check_consistent(h);
            count += h.count();
            total += h.sum();
            max = max.max(h.max().unwrap());
            nonempty += 1;
        }
    }
    let truth_total: u64 = (0..THREADS).flat_map(|i| (0..calls).map(move |k| work(i, k))).sum();
    let truth_max = (0..THREADS).flat_map(|i| (0..calls).map(move |k| work(i, k))).max().unwrap();
    assert_eq!((count, total, max), (THREADS * calls, truth_total, truth_max));
    assert!(nonempty >= 1);
}

extern "C" {
    fn fork() -> c_int;
    fn _exit(code: c_int) -> !;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn pthread_key_create(key: *mut c_uint, destructor: Option<unsafe extern "C" fn(*mut c_void)>) -> c_int;
    fn pthread_setspecific(key: c_uint, value: *const c_void) -> c_int;
}

#[test]
fn a_child_forked_during_snapshots_never_blocks_in_the_callback_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let _session = session();
    let (launch, ..) = s.api("aclrtLaunchKernel");
    for _ in 0..4 {
        (s.call)(launch, 10); // a few shards and keys for the snapshots to walk
    }
    let stop = Arc::new(AtomicBool::new(false));
    let snapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = windows::snapshot();
                for _ in 0..100 {
                    let _ = shard::all_shards(); // what every snapshot walks
                }
            }
        })
    };
    for _ in 0..scaled(20) {
        // A thread that has never called back forks, so the child's first callback has no shard.
        let pid = std::thread::spawn(move || {
            // SAFETY: the child only makes simulated calls (the callback: atomics, no lock) and
            // leaves with _exit, touching nothing else of the parent's state.
            let pid = unsafe { fork() };
            if pid == 0 {
                let s = sim();
                for _ in 0..100 {
                    (s.call)(launch, 10);
                }
                // SAFETY: ends the child at once, as a forked child of a threaded process must.
                unsafe { _exit(0) };
            }
            pid
        })
        .join()
        .unwrap();
        assert!(pid > 0);
        // A hang detector, not a timing assertion: a blocked child never exits.
        let mut status = 0;
        let mut waited = 0;
        // SAFETY: waitpid on our own child with a valid status pointer (WNOHANG = 1).
        while unsafe { waitpid(pid, &mut status, 1) } == 0 {
            waited += 1;
            if waited > 3_000 {
                // SAFETY: our own child (SIGKILL = 9).
                unsafe { kill(pid, 9) };
                panic!("forked child {pid} blocked in the callback");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(status, 0, "child exit status");
    }
    stop.store(true, Ordering::Relaxed);
    snapper.join().unwrap();
}

static DESTRUCTOR_API: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

unsafe extern "C" fn call_from_destructor(_: *mut c_void) {
    (sim().call)(DESTRUCTOR_API.load(Ordering::Relaxed), 5);
}

#[test]
fn threads_whose_first_call_is_in_a_key_destructor_give_their_shard_back_on_the_simulator() {
    let _g = serial();
    let s = sim();
    let _session = session();
    let (launch, ..) = s.api("aclrtLaunchKernel");
    DESTRUCTOR_API.store(launch, Ordering::Relaxed);
    let mut key: c_uint = 0;
    // SAFETY: a valid out pointer and a destructor with the C signature.
    assert_eq!(unsafe { pthread_key_create(&mut key, Some(call_from_destructor)) }, 0);
    windows::reset();
    let before = shard::all_shards().len();
    let threads = scaled(500);
    for _ in 0..threads {
        std::thread::spawn(move || {
            // SAFETY: our key; any non-NULL value makes glibc run the destructor at thread exit.
            unsafe { pthread_setspecific(key, std::ptr::dangling::<c_void>()) };
        })
        .join()
        .unwrap();
    }
    let after = shard::all_shards().len();
    assert!(after <= before + 1, "{} shards kept by {threads} sequential threads", after - before);
    let t = windows::snapshot();
    assert_eq!(hist_of(&t, "aclrtLaunchKernel").count(), threads);
}

/// `n` threads at once each make `f`'s calls and end together, so they hold `n` shards.
fn on_threads_at_once(n: usize, f: fn()) {
    let all_in = Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let all_in = all_in.clone();
            std::thread::spawn(move || {
                f();
                all_in.wait();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn calls_left_open_by_ended_threads_are_not_in_flight_in_a_later_session_on_the_simulator() {
    let _g = serial();
    {
        let _session = session();
        // ENTERs whose EXITs never come (as when a session closes mid-call), on threads that end.
        on_threads_at_once(3, || {
            let (launch, ..) = sim().api("aclrtLaunchKernel");
            (sim().fire)(launch, 0);
        });
    }
    let _session = session();
    assert_eq!(windows::snapshot().in_flight, 0, "an earlier run's open calls counted as in flight");
    // New threads take the three shards over: each stale call is abandoned, once. As many
    // threads as there are shards run at once, so every free shard is taken whatever order the
    // registry walk finds them in (an earlier test's thread may give its shard back meanwhile).
    let before = windows::snapshot().counters[Counter::Abandoned];
    let full_call = || {
        let (launch, ..) = sim().api("aclrtLaunchKernel");
        (sim().call)(launch, 10);
    };
    on_threads_at_once(shard::all_shards().len(), full_call);
    let t = windows::snapshot();
    assert_eq!((t.in_flight, t.counters[Counter::Abandoned] - before), (0, 3));
    on_threads_at_once(shard::all_shards().len(), full_call);
    assert_eq!(windows::snapshot().counters[Counter::Abandoned] - before, 3);
}

/// `workload::WorkloadConfig` of the simulator (rust/sim/src/model/workload.rs).
#[repr(C)]
struct WorkloadConfig {
    kind: u32,
    steps: u32,
    ranks: u32,
    threads: u32,
    seed: u64,
    time_scale: f64,
}

/// The simulator's workloads call its interposed wrappers, which forward to the runtime libraries
/// the build put beside it (`cann_tree/lib64`), which drive this very simulator. With every
/// modelled time 0, each call's announced host time (0) replaces the runtime's own constant, so
/// every call but the synchronize takes 0 ns; the synchronize waits for the kernels the wrapper
/// placed on the device, which its runtime function can see only if its device is this one.
#[test]
fn a_workload_runs_through_the_runtime_libraries_beside_the_simulator_on_one_device() {
    let _g = serial();
    let s = sim();
    let _session = session();
    // SAFETY: the simulator exports these names with these C signatures (rust/sim/src/c_face/).
    let (start, join, progress, release) = unsafe {
        (
            *s._lib.get::<unsafe extern "C" fn(*const WorkloadConfig) -> u64>(b"msimWorkloadStart").unwrap(),
            *s._lib.get::<extern "C" fn(u64) -> u32>(b"msimJobJoin").unwrap(),
            *s._lib
                .get::<unsafe extern "C" fn(u64, *mut u64, *mut u64, *mut u64) -> u32>(b"msimJobProgress")
                .unwrap(),
            *s._lib.get::<extern "C" fn(u64)>(b"msimJobRelease").unwrap(),
        )
    };
    // The graph workload: set-up, 3 x (copy in, launch, synchronize, copy out), tear-down.
    let cfg = WorkloadConfig { kind: 2, steps: 3, ranks: 1, threads: 1, seed: 1, time_scale: 0.0 };
    // SAFETY: a valid configuration.
    let h = unsafe { start(&cfg) };
    assert_ne!(h, 0);
    assert_eq!(join(h), 0, "a call of the workload failed (is cann_tree/lib64 beside the simulator?)");
    let (mut done, mut total, mut calls) = (0, 0, 0);
    // SAFETY: valid out pointers.
    assert_eq!(unsafe { progress(h, &mut done, &mut total, &mut calls) }, 0);
    release(h);
    assert_eq!((done, total, calls), (3, 3, 18));
    let t = windows::snapshot();
    for name in ["aclrtSetDevice", "aclrtCreateStream", "aclrtMalloc", "aclrtMemcpyAsync", "aclrtMemcpy"] {
        let h = hist_of(&t, name);
        assert_eq!(h.sum(), 0, "{name} spent the runtime's own host time, not the announced 0");
    }
    assert_eq!(hist_of(&t, "aclrtLaunchKernelV2").count(), 3);
    let sync = hist_of(&t, "aclrtSynchronizeStream");
    assert_eq!(sync.count(), 3);
    assert!(sync.min().unwrap() > 0, "the synchronize did not wait for the kernels on this device");
}
