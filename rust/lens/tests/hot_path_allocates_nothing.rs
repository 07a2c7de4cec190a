//! Once a (thread, key) has been seen, the callback allocates nothing: checked with a counting
//! global allocator around 100,000 ENTER/EXIT pairs on the measuring thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use _native::callback::on_callback;
use _native::core::clock::{self, ClockKind};
use _native::core::windows;
use mspti_abi::{MsptiCallbackData, MSPTI_API_ENTER, MSPTI_API_EXIT};

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator; the bookkeeping touches only const thread-locals,
// which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` above with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn pair(name: &'static std::ffi::CStr, cbid: u32) {
    let mut d = MsptiCallbackData {
        callback_site: MSPTI_API_ENTER,
        function_name: name.as_ptr(),
        function_params: std::ptr::null(),
        function_return_value: std::ptr::null(),
        symbol_name: std::ptr::null(),
        correlation_id: 0,
        reserved1: 0,
        reserved2: 0,
        correlation_data: std::ptr::null_mut(),
    };
    // SAFETY: valid callback data with site and name set.
    unsafe { on_callback(std::ptr::null_mut(), 1, cbid, &d) };
    d.callback_site = MSPTI_API_EXIT;
    // SAFETY: as above.
    unsafe { on_callback(std::ptr::null_mut(), 1, cbid, &d) };
}

#[test]
fn no_allocation_after_a_key_is_seen() {
    for kind in [ClockKind::Tsc, ClockKind::Monotonic] {
        clock::select(kind, None);
        windows::reset();
        windows::begin_run(true);
        pair(c"aclrtLaunchKernel", 10); // first sight: the shard and the histogram are made here
        pair(c"aclrtMemcpy", 22);
        COUNTING.with(|c| c.set(true));
        for _ in 0..50_000 {
            pair(c"aclrtLaunchKernel", 10);
            pair(c"aclrtMemcpy", 22);
        }
        COUNTING.with(|c| c.set(false));
        windows::end_run();
        assert_eq!(ALLOCS.with(|a| a.get()), 0, "clock {kind:?}");
        let snap = windows::snapshot();
        let total: u64 = snap.keys.values().map(|h| h.count()).sum();
        assert_eq!(total, 100_002);
    }
}
