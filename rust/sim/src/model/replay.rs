//! Replay of a recorded trace: each trace thread becomes a simulator thread that fires the
//! trace's ENTER and EXIT events at the trace's own times.
//!
//! With the virtual clock, each event sets the thread's clock to the event's time moved into the
//! present (the whole trace shifted to start `clock::LEAD_NS` ahead of real time, and a thread's
//! shift grown as `clock::begin_call` would at a top-level call that would start behind real
//! time), so every call's measured duration is exactly the trace's. With the real clock, idle gaps between
//! top-level calls are skipped, everything inside a call keeps its recorded spacing, and every
//! call lasts at least its own duration (an EXIT waits for its own ENTER plus the duration when
//! the schedule has fallen behind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mspti_abi::MSPTI_API_ENTER;

use crate::ground::clock;
use crate::model::call;
use crate::model::jobs::Job;

/// One event of a replayed thread: an ENTER or EXIT of a simulated API at a time in ns.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub api: u32,
    pub site: u32,
    pub t_ns: u64,
}

pub fn start(threads: Vec<Vec<Event>>) -> Arc<Job> {
    let total: u64 = threads.iter().map(|t| t.len() as u64).sum();
    let job = Job::new(total);
    let first = threads.iter().filter_map(|t| t.first()).map(|e| e.t_ns).min().unwrap_or(0);
    let shift = clock::job_start_ns(0).saturating_sub(first);
    for (i, events) in threads.into_iter().enumerate() {
        let j = job.clone();
        job.spawn(format!("sim-replay-{i}"), move || run_thread(&events, shift, &j));
    }
    job
}

/// Replay one thread's events; `shift` moves trace times into the present on the virtual clock.
fn run_thread(events: &[Event], mut shift: u64, job: &Job) {
    let virtual_clock = clock::is_virtual();
    // Real clock: trace time t happens at `origin + (t - t0)`, re-anchored at each top-level call.
    let mut origin = Instant::now();
    let mut t0: u64 = 0;
    // The open calls: when each ENTER callback returned, and its trace time. An EXIT waits until
    // its call has lasted its own duration, even when the schedule fell behind (callbacks slower
    // than the trace's spacing), so a nested call is never cut short.
    let mut open: Vec<(Instant, u64)> = Vec::with_capacity(64);
    for e in events {
        if job.cancelled() {
            break;
        }
        let enter = e.site == MSPTI_API_ENTER;
        let top_level_enter = enter && open.is_empty();
        if virtual_clock {
            if top_level_enter {
                // A call starts at real time when its thread's clock lags it (see `clock`).
                let now = clock::realtime_ns();
                if e.t_ns.saturating_add(shift) < now {
                    shift = (now + clock::LEAD_NS).saturating_sub(e.t_ns);
                }
            }
            clock::virtual_set(e.t_ns.saturating_add(shift));
        } else if !top_level_enter {
            let scheduled = origin + Duration::from_nanos(e.t_ns.saturating_sub(t0));
            let target = match (enter, open.last()) {
                (false, Some(&(began, t_enter))) => {
                    scheduled.max(began + Duration::from_nanos(e.t_ns.saturating_sub(t_enter)))
                }
                _ => scheduled,
            };
            clock::wait_until(target);
        }
        call::fire_site(e.api, e.site);
        if enter {
            let now = Instant::now();
            if top_level_enter && !virtual_clock {
                // The call's work starts once its ENTER callback has returned, as in a real library.
                origin = now;
                t0 = e.t_ns;
            }
            open.push((now, e.t_ns));
            job.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            open.pop();
        }
        job.tick();
    }
}
