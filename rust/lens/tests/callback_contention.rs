//! The extern "C" callback fed synthetic msptiCallbackData from many threads while another thread
//! snapshots and resets: every pair lands in exactly one window, none is lost or doubled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use _native::callback::subscriber;
use _native::core::clock::{self, ClockKind};
use _native::core::counters::Counter;
use _native::core::windows;
use mspti_abi::{MsptiCallbackData, MSPTI_API_ENTER, MSPTI_API_EXIT};

fn data(site: u32, name: &'static std::ffi::CStr) -> MsptiCallbackData {
    // Garbage everywhere but the two fields a real library fills: the callback must not read them.
    let bad = 0xdead_beef_dead_0000usize;
    MsptiCallbackData {
        callback_site: site,
        function_name: name.as_ptr(),
        function_params: bad as *const _,
        function_return_value: bad as *const _,
        symbol_name: bad as *const _,
        correlation_id: 0xfeed,
        reserved1: 1,
        reserved2: 2,
        correlation_data: bad as *mut u64,
    }
}

fn call(domain: u32, cbid: u32, name: &'static std::ffi::CStr, inner: impl FnOnce()) {
    let (enter, exit) = (data(MSPTI_API_ENTER, name), data(MSPTI_API_EXIT, name));
    // The callback a session subscribes, its fences chosen for this process as a session does.
    _native::core::seqlock::prepare_fences();
    let on_callback = subscriber();
    // SAFETY: valid callback data whose first two fields are set, as MSPTI passes them.
    unsafe { on_callback(std::ptr::null_mut(), domain, cbid, &enter) };
    inner();
    // SAFETY: as above.
    unsafe { on_callback(std::ptr::null_mut(), domain, cbid, &exit) };
}

#[test]
fn pairs_are_counted_exactly_once_across_threads_snapshots_and_resets() {
    clock::select(ClockKind::Tsc, None);
    windows::reset();
    windows::begin_run(true);

    const THREADS: usize = 6;
    const CALLS: u64 = 20_000;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // The reader: snapshots and resets while the writers run; sums the windows it closes.
    let reader = std::thread::spawn(move || {
        let mut closed = 0u64;
        let mut rounds = 0;
        while !stop2.load(Ordering::Relaxed) || rounds < 3 {
            let s = windows::snapshot();
            for ((_, _, name), h) in &s.keys {
                assert_eq!(h.count(), h.nonzero().map(|(_, c)| c).sum::<u64>(), "{name}");
            }
            if rounds % 3 == 2 {
                // What was recorded up to the reset belongs to the window being closed.
                closed += windows::snapshot_and_reset().keys.values().map(|h| h.count()).sum::<u64>();
            }
            rounds += 1;
        }
        closed
    });
    let writers: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..CALLS {
                    call(1, 10, c"aclrtLaunchKernel", || {
                        call(1, 22, c"aclrtMemcpy", || {});
                    });
                    call(2, 1, c"HcclAllReduce", || {});
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let closed = reader.join().unwrap();
    let last = windows::snapshot();
    let total: u64 = closed + last.keys.values().map(|h| h.count()).sum::<u64>();
    assert_eq!(total, THREADS as u64 * CALLS * 3);
    assert_eq!(last.counters[Counter::Unmatched], 0);
    assert_eq!(last.in_flight, 0);
    windows::end_run();
}
