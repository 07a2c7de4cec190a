//! Replay of a recorded trace: each trace thread becomes a simulator thread that fires the
//! trace's ENTER and EXIT events at the trace's own times.
//!
//! With the virtual clock, each event sets the thread's clock to the event's time, so every
//! call's measured duration is exactly the trace's. With the real clock, idle gaps between
//! top-level calls are skipped and everything inside a call keeps its recorded spacing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mspti_abi::MSPTI_API_ENTER;

use crate::apis;
use crate::clock;
use crate::jobs::Job;

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
    for (i, events) in threads.into_iter().enumerate() {
        let j = job.clone();
        job.spawn(format!("sim-replay-{i}"), move || run_thread(&events, &j));
    }
    job
}

fn run_thread(events: &[Event], job: &Job) {
    let virtual_clock = clock::is_virtual();
    let mut depth: u64 = 0;
    // Real clock: trace time t happens at `origin + (t - t0)`, re-anchored at each top-level call.
    let mut origin = Instant::now();
    let mut t0: u64 = 0;
    for e in events {
        if job.cancelled() {
            break;
        }
        let top_level_enter = e.site == MSPTI_API_ENTER && depth == 0;
        if virtual_clock {
            clock::virtual_set(e.t_ns);
        } else if !top_level_enter {
            clock::wait_until(origin + Duration::from_nanos(e.t_ns.saturating_sub(t0)));
        }
        apis::fire_site(e.api, e.site);
        if top_level_enter && !virtual_clock {
            // The call's work starts once its ENTER callback has returned, as in a real library.
            origin = Instant::now();
            t0 = e.t_ns;
        }
        if e.site == MSPTI_API_ENTER {
            depth += 1;
            job.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            depth = depth.saturating_sub(1);
        }
        job.tick();
    }
}
