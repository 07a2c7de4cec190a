//! Background work on simulator threads: workloads and trace replay, each a `Job` whose progress
//! the caller polls and which it joins.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::ground::locks::{lock, ForkLock, Rank};

pub struct Job {
    pub done: AtomicU64,
    pub total: AtomicU64,
    pub calls: AtomicU64,
    pub cancel: AtomicBool,
    /// A thread's runtime call failed (the job's threads stop at their next step).
    failed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Job {
    pub fn new(total: u64) -> Arc<Job> {
        Arc::new(Job {
            done: AtomicU64::new(0),
            total: AtomicU64::new(total),
            calls: AtomicU64::new(0),
            cancel: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        })
    }

    pub fn spawn(self: &Arc<Job>, name: String, f: impl FnOnce() + Send + 'static) {
        let h = std::thread::Builder::new().name(name).spawn(f).expect("spawn a simulator thread");
        lock(&self.threads).push(h);
    }

    /// Wait for every thread; true when none panicked and no call failed.
    pub fn join(&self) -> bool {
        let hs: Vec<_> = std::mem::take(&mut *lock(&self.threads));
        let joined = hs.into_iter().map(|h| h.join().is_ok()).fold(true, |a, b| a & b);
        joined && !self.failed.load(Ordering::Relaxed)
    }

    /// A thread of the job failed: every thread stops at its next step, and `join` says so.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Whether every thread of the job has ended.
    pub fn finished(&self) -> bool {
        lock(&self.threads).iter().all(|h| h.is_finished())
    }

    pub fn tick(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

static JOBS: ForkLock<Vec<Option<Arc<Job>>>> = ForkLock::new(Rank::Jobs, Vec::new());

/// Register a job and return its handle (>= 1).
pub fn register(job: Arc<Job>) -> u64 {
    let mut jobs = JOBS.lock();
    jobs.push(Some(job));
    jobs.len() as u64
}

pub fn get(handle: u64) -> Option<Arc<Job>> {
    let jobs = JOBS.lock();
    jobs.get((handle as usize).wrapping_sub(1)).and_then(|j| j.clone())
}

/// Forget a finished job.
pub fn release(handle: u64) {
    let mut jobs = JOBS.lock();
    if let Some(slot) = jobs.get_mut((handle as usize).wrapping_sub(1)) {
        *slot = None;
    }
}
