//! Background work: workloads and trace replay as jobs (`model::jobs`), and the multi-process
//! jobs' meeting place (`model::multirank`).

use std::sync::atomic::Ordering;

#[cfg(not(loom))]
use crate::model::multirank;
use crate::model::{apis, jobs, replay, workload};

/// Start a workload (see `workload::WorkloadConfig`); returns a job handle, or 0 if the
/// configuration is invalid.
///
/// # Safety
/// `cfg` must point to a valid `WorkloadConfig`.
#[no_mangle]
pub unsafe extern "C" fn msimWorkloadStart(cfg: *const workload::WorkloadConfig) -> u64 {
    if cfg.is_null() {
        return 0;
    }
    // SAFETY: non-NULL, and the caller passes a valid config.
    let cfg = unsafe { *cfg };
    match workload::start(cfg) {
        Ok(job) => jobs::register(job),
        Err(_) => 0,
    }
}

/// Replay `n_threads` event sequences: thread i has `lens[i]` events, laid out one thread after
/// another in `api`, `site` and `t_ns`. Returns a job handle, or 0 if an event is invalid.
///
/// # Safety
/// `lens` must hold `n_threads` values and the three arrays their sum.
#[no_mangle]
pub unsafe extern "C" fn msimReplayStart(
    n_threads: u32,
    lens: *const u64,
    api: *const u32,
    site: *const u32,
    t_ns: *const u64,
) -> u64 {
    if n_threads == 0 || lens.is_null() {
        return 0;
    }
    // SAFETY: the caller passes `n_threads` lengths.
    let lens = unsafe { std::slice::from_raw_parts(lens, n_threads as usize) };
    let total: u64 = lens.iter().sum();
    if total > 0 && (api.is_null() || site.is_null() || t_ns.is_null()) {
        return 0;
    }
    let n = total as usize;
    // SAFETY: the caller passes arrays of `total` elements each.
    let (api, site, t_ns) = unsafe {
        (
            std::slice::from_raw_parts(api, n),
            std::slice::from_raw_parts(site, n),
            std::slice::from_raw_parts(t_ns, n),
        )
    };
    let count = apis::table().len() as u32;
    if api.iter().any(|&a| a >= count) || site.iter().any(|&s| s > 1) {
        return 0;
    }
    let mut threads = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &len in lens {
        let end = at + len as usize;
        threads
            .push((at..end).map(|i| replay::Event { api: api[i], site: site[i], t_ns: t_ns[i] }).collect());
        at = end;
    }
    jobs::register(replay::start(threads))
}

/// Progress of a job: steps (or events) done and the total. 1 if the handle is unknown.
///
/// # Safety
/// Out pointers must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn msimJobProgress(
    handle: u64,
    done: *mut u64,
    total: *mut u64,
    calls: *mut u64,
) -> u32 {
    let Some(j) = jobs::get(handle) else { return 1 };
    // SAFETY: the caller passes valid out pointers.
    unsafe {
        *done = j.done.load(Ordering::Relaxed);
        *total = j.total.load(Ordering::Relaxed);
        *calls = j.calls.load(Ordering::Relaxed);
    }
    0
}

/// 1 when every thread of the job has ended (or the handle is unknown), else 0.
#[no_mangle]
pub extern "C" fn msimJobFinished(handle: u64) -> u32 {
    jobs::get(handle).map_or(1, |j| u32::from(j.finished()))
}

/// Ask a job to stop early.
#[no_mangle]
pub extern "C" fn msimJobCancel(handle: u64) -> u32 {
    match jobs::get(handle) {
        Some(j) => {
            j.cancel.store(true, Ordering::Relaxed);
            0
        }
        None => 1,
    }
}

/// Wait for a job's threads: 0 when all finished cleanly, 1 unknown handle, 2 a thread failed.
/// The job's progress stays readable until `msimJobRelease`.
#[no_mangle]
pub extern "C" fn msimJobJoin(handle: u64) -> u32 {
    let Some(j) = jobs::get(handle) else { return 1 };
    if j.join() {
        0
    } else {
        2
    }
}

/// Forget a job (after joining it).
#[no_mangle]
pub extern "C" fn msimJobRelease(handle: u64) {
    jobs::release(handle);
}

/// Bytes of a shared region for `groups` communicator groups.
#[cfg(not(loom))]
#[no_mangle]
pub extern "C" fn msimMultirankBytes(groups: u32) -> u64 {
    multirank::region_bytes(groups) as u64
}

/// Join a multi-process job as one of `ranks` ranks through the shared region at `base`.
/// Collectives wait at most `timeout_ms` for their peers. 0, or 1 if the region is unusable.
///
/// # Safety
/// `base` must point to `len` bytes of memory shared with the other ranks (a mapping of one
/// file), 8-byte aligned, mapped for the rest of the process's life.
#[cfg(not(loom))]
#[no_mangle]
pub unsafe extern "C" fn msimMultirankAttach(
    base: *mut u64,
    len: u64,
    ranks: u32,
    groups: u32,
    timeout_ms: u64,
) -> u32 {
    // SAFETY: forwarded contract.
    match unsafe { multirank::attach(base, len as usize, ranks, groups, timeout_ms) } {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The calling thread's next collectives belong to `group`, of `size` ranks. 0, or 1 if invalid.
#[cfg(not(loom))]
#[no_mangle]
pub extern "C" fn msimMultirankGroup(group: u32, size: u32) -> u32 {
    multirank::set_group(group, size)
}

/// Abort the job: every rank waiting in a collective returns HCCL_E_INTERNAL. 1 if not attached.
#[cfg(not(loom))]
#[no_mangle]
pub extern "C" fn msimMultirankAbort() -> u32 {
    multirank::abort()
}
