//! Measurements for bench/activity.py (not used by the collector): the aggregation rate of the
//! drain on synthetic buffers, and the time the complete callback holds MSPTI's thread.

use std::ffi::CString;
use std::time::Instant;

use mspti_abi::activity::{MsptiActivityApi, MsptiActivityKernel, MsptiIdPair};

use super::aggregate::State;
use super::layout::{KIND_KERNEL, KIND_RUNTIME_API};
use super::{launch_hooks, pool};

fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: the record structs are packed plain data; viewing them as bytes is sound.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Aggregate `records` KERNEL records (over `names` distinct kernel names; with `api`, every
/// other record a RUNTIME_API record) in 8 MiB buffers on this thread; returns (ns, records).
pub fn aggregate_rate(records: usize, names: usize, api: bool) -> (u64, u64) {
    let names: Vec<&'static CString> = (0..names.max(1))
        .map(|i| &*Box::leak(Box::new(CString::new(format!("aclnnKernel_{i:04}")).unwrap())))
        .collect();
    let ty: &'static CString = Box::leak(Box::new(CString::new("KERNEL_AICORE").unwrap()));
    let api_name: &'static CString = Box::leak(Box::new(CString::new("LaunchKernelV2").unwrap()));
    let mut buf: Vec<u8> = Vec::with_capacity(8 << 20);
    let mut buffers: Vec<Vec<u8>> = Vec::new();
    for i in 0..records {
        let t = 1_000_000 + i as u64 * 1000;
        if api && i % 2 == 1 {
            let r = MsptiActivityApi {
                kind: KIND_RUNTIME_API,
                start: t,
                end: t + 300,
                pt: MsptiIdPair::pt(1, 7 + (i % 4) as u32),
                correlation_id: i as u64,
                name: api_name.as_ptr(),
                _pad: [0; 4],
            };
            buf.extend_from_slice(as_bytes(&r));
        } else {
            let r = MsptiActivityKernel {
                kind: KIND_KERNEL,
                start: t,
                end: t + 500 + (i % 977) as u64,
                ds: MsptiIdPair::ds(0, 3),
                correlation_id: i as u64,
                type_: ty.as_ptr(),
                name: names[i % names.len()].as_ptr(),
                _pad: [0; 4],
            };
            buf.extend_from_slice(as_bytes(&r));
        }
        if buf.len() + 64 > 8 << 20 {
            buffers.push(std::mem::take(&mut buf));
        }
    }
    buffers.push(buf);
    let mut st = State::default();
    let t0 = Instant::now();
    for b in &buffers {
        st.ingest_buffer(b);
    }
    (t0.elapsed().as_nanos() as u64, st.counters[super::counters::ActivityCounter::Records])
}

/// The drain with the launch join on, fed as a launch loop feeds it (bench/activity.py and
/// examples/drain_cost.rs): per launch a span in this thread's ring, a RUNTIME_API record inside
/// it and, eight launches later (the device's lag), its KERNEL record (16 kernel names), in
/// buffers of 16,384 launches, the spans read before each buffer as the drain reads them.
/// Returns (ns of this thread's CPU spent in the drain's code, records). Turns the span hooks on
/// for its duration: only for a process that runs no session.
pub fn join_rate(launches: usize) -> (u64, u64) {
    const CHUNK: usize = 16_384;
    const LAG: usize = 8;
    let names: Vec<&'static CString> = (0..16)
        .map(|i| &*Box::leak(Box::new(CString::new(format!("BenchOp{i:02}_high_performance")).unwrap())))
        .collect();
    let ty: &'static CString = Box::leak(Box::new(CString::new("KERNEL_AICORE").unwrap()));
    let launch: &'static CString = Box::leak(Box::new(CString::new("aclrtLaunchKernel").unwrap()));
    let tid = launch_hooks::os_tid();
    let t = |i: usize| 1_000_000 + i as u64 * 2000;
    let kernel = |i: usize| MsptiActivityKernel {
        kind: KIND_KERNEL,
        start: t(i) + 5000,
        end: t(i) + 5000 + 1000 + (i % 977) as u64,
        ds: MsptiIdPair::ds(0, 3),
        correlation_id: i as u64 + 1,
        type_: ty.as_ptr(),
        name: names[i % names.len()].as_ptr(),
        _pad: [0; 4],
    };
    launch_hooks::configure(launch_hooks::SPANS, None, None, None);
    let mut st = State::default();
    st.join_active = true;
    // A session that asked for KERNEL: its RUNTIME_API records are the join's alone.
    st.tabled_api_kinds = 1 << KIND_KERNEL;
    st.skip_old_spans();
    let mut ns = 0u64;
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK * 2 * 56);
    for c in (0..launches).step_by(CHUNK) {
        buf.clear();
        for i in c..(c + CHUNK).min(launches) {
            launch_hooks::log_span(launch.as_ptr() as usize, launch_hooks::LAUNCH_FIRST, t(i), t(i) + 1500);
            let r = MsptiActivityApi {
                kind: KIND_RUNTIME_API,
                start: t(i) + 100,
                end: t(i) + 1400,
                pt: MsptiIdPair::pt(1, tid),
                correlation_id: i as u64 + 1,
                name: launch.as_ptr(),
                _pad: [0; 4],
            };
            buf.extend_from_slice(as_bytes(&r));
            if i >= LAG {
                buf.extend_from_slice(as_bytes(&kernel(i - LAG)));
            }
        }
        if c + CHUNK >= launches {
            for i in launches.saturating_sub(LAG)..launches {
                buf.extend_from_slice(as_bytes(&kernel(i)));
            }
        }
        let t0 = thread_cpu_ns();
        st.ingest_spans();
        st.ingest_buffer(&buf);
        ns += thread_cpu_ns() - t0;
    }
    launch_hooks::configure(0, None, None, None);
    (ns, st.counters[super::counters::ActivityCounter::Records])
}

/// This thread's CPU time in ns (time descheduled does not count).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The complete callback's cost per buffer: `n` buffers of a dedicated pool are lent, then handed
/// back through `on_complete` (the extern "C" entry MSPTI calls) in a timed loop; returns ns per
/// call. `pressure`: most of the pool lent, so each completion also wakes the drain thread (a
/// parked helper thread here).
pub fn complete_cost(n: usize, pressure: bool) -> Result<f64, pool::PoolError> {
    let total = if pressure { n + n / 8 } else { n * 8 };
    // Capped at its start: the measured hand-backs never grow it.
    let p = pool::pool(1024, total, 1024 * total)?;
    let parked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let helper = {
        let done = parked.clone();
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::park();
            }
        })
    };
    p.set_waker(helper.thread().clone());
    let bufs: Vec<*mut u8> = (0..n).filter_map(|_| p.lend()).collect();
    let t0 = Instant::now();
    for &b in &bufs {
        // SAFETY: each pointer was lent by this pool and is handed back once.
        unsafe { pool::on_complete(b, 1024, 512) };
    }
    let ns = t0.elapsed().as_nanos() as f64 / bufs.len().max(1) as f64;
    for (slot, _) in p.take_ready() {
        p.release(slot);
    }
    parked.store(true, std::sync::atomic::Ordering::Release);
    helper.thread().unpark();
    let _ = helper.join();
    Ok(ns)
}
