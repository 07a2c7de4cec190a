//! When each HCCL-domain call entered, per thread: arrival skew with the Callback API alone, where
//! instance k of an op is each rank's k-th call of it.
//!
//! Each arrival is (cbid, function name, sequence, ENTER reading). The sequence is the call's
//! index among this process's calls of that cbid in the run: one word per cbid, shared by the
//! process's threads (a rank's k-th call, whichever thread makes it), advanced by a CAS; the word
//! carries its run's epoch, so a run's first call starts again at 0 with nobody resetting it, and
//! a call that read an older run than the word's is not kept.
//!
//! Arrivals go into their thread's ring (one per shard, made at the shard's first HCCL call and
//! kept for the process, like its histograms): one writer, the owner, and one reader at a time,
//! `take` (under a lock of its own, off the hot path). A single-producer single-consumer ring:
//! the writer publishes a slot with a Release store of `head`, the reader frees slots with a
//! Release store of `tail`, each loads the other's word with Acquire. At most `RING` arrivals of a
//! thread wait between two takes; past that, new ones are dropped and counted.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Arrivals a thread keeps between two takes (a recorded process takes once per window). The loom
/// model keeps 2: the protocol does not depend on the size.
pub const RING: usize = if cfg!(loom) { 2 } else { 8192 };
/// cbids with a sequence word: HCCL's are 0..13 (mspti-abi); a larger one is not kept (counted).
pub const SEQ_IDS: usize = 64;
/// A sequence word: the run's epoch above COUNT_BITS, the calls so far below.
const COUNT_BITS: u32 = 34;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Epochs are 30-bit (windows.rs) and wrap: a is newer than b when a - b is in the lower half.
const EPOCH_MASK: u64 = (1 << 30) - 1;
const EPOCH_HALF: u64 = 1 << 29;

/// One HCCL call's arrival, as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub cbid: u32,
    /// The function name's address (a static string of the library; shard.rs `RawKey`).
    pub name: usize,
    /// The run's epoch and this call's index among the process's calls of `cbid` in it.
    pub epoch: u32,
    pub sequence: u64,
    /// The clock reading at ENTER (the session's clock; `take` converts it to wall-clock ns).
    pub start: u64,
}

/// The process's calls so far per cbid, for the sequence numbers.
pub struct Sequences {
    pub(crate) words: [AtomicU64; SEQ_IDS],
}

impl Default for Sequences {
    fn default() -> Self {
        Sequences::new()
    }
}

impl Sequences {
    pub fn new() -> Sequences {
        Sequences { words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    /// The index of this call among the calls of `cbid` in run `epoch` (0 first); None for a cbid
    /// without a word or a call of an older run than the word's.
    #[inline]
    pub fn next(&self, cbid: u32, epoch: u32) -> Option<u64> {
        let w = self.words.get(cbid as usize)?;
        let epoch = u64::from(epoch) & EPOCH_MASK;
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            let theirs = cur >> COUNT_BITS;
            let (new, seq) = if theirs == epoch {
                let n = cur & COUNT_MASK;
                // 2^34 calls of one op in one run: the last index repeats rather than spill into the epoch.
                (if n == COUNT_MASK { cur } else { cur + 1 }, n)
            } else if cur != 0 && theirs.wrapping_sub(epoch) & EPOCH_MASK < EPOCH_HALF {
                return None; // the word is of a newer run: this call read the run word before it began
            } else {
                (epoch << COUNT_BITS | 1, 0)
            };
            // Relaxed: the word orders nothing but itself (each call gets a distinct index).
            match w.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(seq),
                Err(c) => cur = c,
            }
        }
    }
}

/// A word on a cache line of its own: the writer's and the reader's words never share one.
#[repr(align(128))]
struct Line(AtomicU64);

struct Slot {
    cbid: AtomicU64,
    name: AtomicU64,
    /// epoch << COUNT_BITS | sequence.
    sequence: AtomicU64,
    start: AtomicU64,
}

/// One thread's arrivals: a single-producer single-consumer ring (see the module's comment).
pub struct Ring {
    /// Arrivals ever written (owner only writes).
    head: Line,
    /// Arrivals ever taken (only the reader, under `take`'s lock, writes).
    tail: Line,
    /// Arrivals ever dropped for a full ring (owner only writes: a plain increment, no locked
    /// instruction on the callback's path, where a ring no one takes drops every arrival).
    dropped: Line,
    /// Of those, the ones a drain has counted (only the reader, under `take`'s lock, writes).
    dropped_counted: Line,
    slots: Box<[Slot]>,
}

impl Default for Ring {
    fn default() -> Self {
        Ring::new()
    }
}

impl Ring {
    pub fn new() -> Ring {
        let slots = (0..RING)
            .map(|_| Slot {
                cbid: AtomicU64::new(0),
                name: AtomicU64::new(0),
                sequence: AtomicU64::new(0),
                start: AtomicU64::new(0),
            })
            .collect();
        Ring {
            head: Line(AtomicU64::new(0)),
            tail: Line(AtomicU64::new(0)),
            dropped: Line(AtomicU64::new(0)),
            dropped_counted: Line(AtomicU64::new(0)),
            slots,
        }
    }

    /// Append one arrival (the owner only); false, counted, when the ring is full.
    #[inline]
    pub fn push(&self, a: Arrival) -> bool {
        let h = self.head.0.load(Ordering::Relaxed);
        // Acquire pairs with the reader's Release of tail: its reads of a slot happen before the
        // slot is written again.
        let t = self.tail.0.load(Ordering::Acquire);
        if h.wrapping_sub(t) >= RING as u64 {
            let d = self.dropped.0.load(Ordering::Relaxed);
            self.dropped.0.store(d.wrapping_add(1), Ordering::Relaxed);
            return false;
        }
        let s = &self.slots[(h % RING as u64) as usize];
        s.cbid.store(u64::from(a.cbid), Ordering::Relaxed);
        s.name.store(a.name as u64, Ordering::Relaxed);
        s.sequence.store(u64::from(a.epoch) << COUNT_BITS | (a.sequence & COUNT_MASK), Ordering::Relaxed);
        s.start.store(a.start, Ordering::Relaxed);
        // Release: a reader that sees the new head sees the whole slot.
        self.head.0.store(h.wrapping_add(1), Ordering::Release);
        true
    }

    /// Move every published arrival into `out` and free their slots; returns the arrivals dropped
    /// since the last drain. One reader at a time (the caller serialises drains).
    pub fn drain(&self, out: &mut Vec<Arrival>) -> u64 {
        let t = self.tail.0.load(Ordering::Relaxed);
        // Acquire pairs with push's Release of head: every slot below it is whole.
        let h = self.head.0.load(Ordering::Acquire);
        let mut i = t;
        while i != h {
            let s = &self.slots[(i % RING as u64) as usize];
            let word = s.sequence.load(Ordering::Relaxed);
            out.push(Arrival {
                cbid: s.cbid.load(Ordering::Relaxed) as u32,
                name: s.name.load(Ordering::Relaxed) as usize,
                epoch: (word >> COUNT_BITS) as u32,
                sequence: word & COUNT_MASK,
                start: s.start.load(Ordering::Relaxed),
            });
            i = i.wrapping_add(1);
        }
        // Release: the reads above happen before the writer reuses these slots.
        self.tail.0.store(h, Ordering::Release);
        // A drop after this read is counted by the next drain.
        let dropped = self.dropped.0.load(Ordering::Relaxed);
        let counted = self.dropped_counted.0.load(Ordering::Relaxed);
        self.dropped_counted.0.store(dropped, Ordering::Relaxed);
        dropped.wrapping_sub(counted)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn arrival(sequence: u64, start: u64) -> Arrival {
        Arrival { cbid: 1, name: 0x1000, epoch: 3, sequence, start }
    }

    #[test]
    fn sequences_count_per_cbid_and_restart_with_each_run() {
        let s = Sequences::new();
        assert_eq!((0..3).map(|_| s.next(1, 5)).collect::<Vec<_>>(), [Some(0), Some(1), Some(2)]);
        assert_eq!(s.next(3, 5), Some(0), "another op counts on its own");
        assert_eq!(s.next(1, 6), Some(0), "a new run starts at 0");
        assert_eq!(s.next(1, 5), None, "a call of the older run is not kept");
        assert_eq!(s.next(1, 6), Some(1));
        assert_eq!(s.next(SEQ_IDS as u32, 6), None);
        // The epoch wraps at 30 bits: the run after the last epoch is newer, not older.
        assert_eq!(s.next(2, EPOCH_MASK as u32), Some(0));
        assert_eq!(s.next(2, 0), Some(0));
    }

    #[test]
    fn a_ring_hands_over_every_arrival_once_in_order_and_counts_what_a_full_ring_drops() {
        let r = Ring::new();
        let mut out = Vec::new();
        for i in 0..(RING as u64 + 5) {
            let kept = r.push(arrival(i, 100 + i));
            assert_eq!(kept, i < RING as u64, "arrival {i}");
        }
        assert_eq!(r.drain(&mut out), 5);
        assert_eq!(out.len(), RING);
        assert!(out.iter().enumerate().all(|(i, a)| *a == arrival(i as u64, 100 + i as u64)));
        // Drained slots are free again; a drain takes only what came since.
        out.clear();
        assert!(r.push(arrival(7, 9)));
        assert_eq!((r.drain(&mut out), out.clone()), (0, vec![arrival(7, 9)]));
        out.clear();
        assert_eq!((r.drain(&mut out), out.len()), (0, 0));
    }

    #[test]
    fn a_reader_racing_the_writer_sees_each_arrival_whole_and_once() {
        let r = std::sync::Arc::new(Ring::new());
        let w = r.clone();
        const N: u64 = 200_000;
        let writer = std::thread::spawn(move || {
            let mut dropped = 0;
            for i in 0..N {
                while !w.push(arrival(i, i * 3 + 1)) {
                    dropped += 1;
                    std::hint::spin_loop();
                }
            }
            dropped
        });
        let (mut seen, mut dropped) = (Vec::new(), 0);
        while seen.len() < N as usize {
            dropped += r.drain(&mut seen);
        }
        let retries = writer.join().unwrap();
        let mut out = Vec::new();
        dropped += r.drain(&mut out);
        assert!(out.is_empty());
        assert_eq!(dropped, retries, "every refused push counted");
        for (i, a) in seen.iter().enumerate() {
            assert_eq!((a.sequence, a.start), (i as u64, i as u64 * 3 + 1));
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The ring and the sequence words in loom's model (`make test-loom`): a reader racing the
    //! writer takes each arrival once and whole, never one the writer is still filling, and a full
    //! ring refuses (and counts) rather than overwrite what the reader has not taken; two threads'
    //! calls of one op get distinct indices.
    use super::*;
    use loom::sync::Arc;

    fn arrival(sequence: u64) -> Arrival {
        Arrival { cbid: 1, name: 16, epoch: 2, sequence, start: sequence * 3 + 1 }
    }

    #[test]
    fn a_racing_reader_takes_each_arrival_once_and_whole() {
        loom::model(|| {
            let r = Arc::new(Ring::new());
            let w = r.clone();
            // Three pushes into two slots: the third finds the ring full unless the reader freed
            // a slot first; either way nothing is overwritten, lost uncounted or taken twice.
            let writer = loom::thread::spawn(move || (0..3).filter(|&i| w.push(arrival(i))).count() as u64);
            let mut seen = Vec::new();
            let mut dropped = r.drain(&mut seen);
            let kept = writer.join().unwrap();
            dropped += r.drain(&mut seen);
            assert_eq!(kept + dropped, 3);
            assert_eq!(seen.len() as u64, kept);
            for (i, a) in seen.iter().enumerate() {
                assert_eq!(a.start, a.sequence * 3 + 1, "torn {a:?}");
                if i > 0 {
                    assert!(a.sequence > seen[i - 1].sequence, "out of order or twice: {seen:?}");
                }
            }
        });
    }

    #[test]
    fn two_threads_calls_of_one_op_get_distinct_indices() {
        loom::model(|| {
            let s = Arc::new(Sequences::new());
            let t = s.clone();
            let other = loom::thread::spawn(move || t.next(1, 4));
            let mine = s.next(1, 4);
            let theirs = other.join().unwrap();
            let mut both = [mine.unwrap(), theirs.unwrap()];
            both.sort_unstable();
            assert_eq!(both, [0, 1]);
        });
    }
}
