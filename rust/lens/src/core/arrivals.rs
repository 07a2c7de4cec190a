//! Each HCCL-domain call's arrival for the process: the callback's entry point (`keep`, on the
//! thread's ring), the sequence words every thread shares, and the take of every thread's ring
//! (the protocol and the ring itself: arrival_ring.rs; shard.rs holds each thread's ring).

pub use super::arrival_ring::{Arrival, Ring, Sequences, RING, SEQ_IDS};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub use process::{discard, keep, take, Taken};

/// Loom builds model the ring and the sequence words alone (loom_tests); their statics need
/// const atomics, which loom's are not, so the process-wide half is left out there.
#[cfg(loom)]
pub fn keep(_: &crate::core::shard::Shard, _: u32, _: usize, _: u64, _: u32) {}
#[cfg(loom)]
pub fn discard() {}

/// The process-wide half: the sequence words, the callback's entry point and the take.
#[cfg(not(loom))]
mod process {
    use super::*;
    use crate::core::clock;
    use crate::core::locks::lock;
    use crate::core::shard::{self, Shard};

    static SEQUENCES: Sequences = Sequences { words: [const { AtomicU64::new(0) }; SEQ_IDS] };
    /// Serialises the rings' readers (take, discard); never taken by the callback.
    static TAKE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    /// Arrivals not kept for want of a sequence word (a cbid >= SEQ_IDS) or a clock reading.
    static UNKEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// The callback's ENTER of an HCCL-domain call (recording, on the thread's shard `s`).
    #[inline(never)]
    pub fn keep(s: &Shard, cbid: u32, name: usize, start: u64, epoch: u32) {
        let ring = s.arrivals();
        let Some(sequence) = SEQUENCES.next(cbid, epoch).filter(|_| start != clock::FAILED) else {
            UNKEPT.fetch_add(1, Ordering::Relaxed);
            return;
        };
        ring.push(Arrival { cbid, name, epoch, sequence, start });
    }

    /// The arrivals taken from every thread, ENTER on the wall clock (CLOCK_REALTIME ns), by start.
    #[derive(Default, Debug)]
    pub struct Taken {
        /// (cbid, function name, sequence, start_ns)
        pub arrivals: Vec<(u32, String, u64, u64)>,
        /// Arrivals lost since the last take: full rings, or none kept (see UNKEPT).
        pub dropped: u64,
    }

    /// Every arrival of the current (or last) run not taken yet; an earlier run's, still in a ring
    /// no one took, are discarded.
    pub fn take() -> Taken {
        let _g = lock(&TAKE);
        let mut raw = Vec::new();
        let mut dropped = UNKEPT.swap(0, Ordering::Relaxed);
        for s in shard::all_shards() {
            if let Some(r) = s.arrivals_if_any() {
                dropped += r.drain(&mut raw);
            }
        }
        let run = crate::core::windows::started_epoch();
        let (raw_now, wall_now) = (clock::now(), clock::wall_ns());
        let mut names: std::collections::HashMap<usize, String> = Default::default();
        let mut arrivals: Vec<_> = raw
            .into_iter()
            .filter(|a| a.epoch == run)
            .map(|a| {
                let name = names.entry(a.name).or_insert_with(|| shard::name_of(a.name as *const _)).clone();
                (a.cbid, name, a.sequence, clock::to_wall_ns(a.start, raw_now, wall_now))
            })
            .collect();
        arrivals.sort_unstable_by(|a, b| a.3.cmp(&b.3).then(a.0.cmp(&b.0)).then(a.2.cmp(&b.2)));
        Taken { arrivals, dropped }
    }

    /// Forget what the rings hold (a new run begins: its takes see only its own arrivals).
    pub fn discard() {
        let _g = lock(&TAKE);
        let mut sink = Vec::new();
        for s in shard::all_shards() {
            if let Some(r) = s.arrivals_if_any() {
                r.drain(&mut sink);
                sink.clear();
            }
        }
        UNKEPT.store(0, Ordering::Relaxed);
    }
}
