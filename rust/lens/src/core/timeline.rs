//! Latency over time: a bounded ring of per-interval histograms, exact and merged coarser with age.
//!
//! Built on the window accounting its caller passes in, so it adds nothing to the callback: at
//! each tick the window's records so far (`open`, every call whole) minus what the last tick saw
//! is exactly the calls of the interval; a reset hands over the closed window first, so no
//! call is lost or counted twice. Intervals are kept sparse (non-empty buckets only) in levels:
//! level 0 holds the newest `per_level` intervals, and when a level overflows its two oldest merge
//! into one interval of the next level (twice as long). Memory is bounded by
//! `levels * per_level` intervals; the oldest level's overflow is dropped (counted in `dropped`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clock::wall_ns;
use super::hist::{self, Histogram};
use super::locks::lock;
use super::shard::Key;

/// One key's calls in one interval: non-empty buckets (ascending index) and counts.
#[derive(Clone, Debug, Default, PartialEq)]
struct Sparse {
    count: u64,
    overflow: u64,
    buckets: Vec<(u32, u64)>,
}

impl Sparse {
    /// `now - before`, bucket by bucket (both cumulative over the same window).
    fn delta(now: &Histogram, before: Option<&Histogram>) -> Sparse {
        let mut s = Sparse::default();
        for (i, c) in now.nonzero() {
            let b = before.map_or(0, |h| h.slot_count(i));
            if c > b {
                s.buckets.push((i as u32, c - b));
                s.count += c - b;
            }
        }
        s.overflow = now.overflow().saturating_sub(before.map_or(0, |h| h.overflow()));
        s
    }

    fn add(&mut self, o: &Sparse) {
        let mut out = Vec::with_capacity(self.buckets.len() + o.buckets.len());
        let (mut a, mut b) = (self.buckets.iter().peekable(), o.buckets.iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (Some(&&(i, x)), Some(&&(j, y))) if i == j => {
                    out.push((i, x + y));
                    a.next();
                    b.next();
                }
                (Some(&&(i, x)), Some(&&(j, _))) if i < j => {
                    out.push((i, x));
                    a.next();
                }
                (_, Some(&&(j, y))) => {
                    out.push((j, y));
                    b.next();
                }
                (Some(&&(i, x)), None) => {
                    out.push((i, x));
                    a.next();
                }
                (None, None) => break,
            }
        }
        self.buckets = out;
        self.count += o.count;
        self.overflow += o.overflow;
    }
}

#[derive(Clone, Debug)]
struct Interval {
    start_ns: u64,
    end_ns: u64,
    keys: BTreeMap<u32, Sparse>,
}

impl Interval {
    fn merge(mut self, newer: Interval) -> Interval {
        for (k, s) in newer.keys {
            self.keys.entry(k).or_default().add(&s);
        }
        self.end_ns = newer.end_ns;
        self
    }
}

/// One row of `rows()`: an interval's calls of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub start_ns: u64,
    pub end_ns: u64,
    pub key: Key,
    pub count: u64,
    /// Quantiles by the histogram's own rule (hist.rs), over the interval's buckets; None when
    /// the rank falls among calls beyond the range.
    pub p50: Option<u64>,
    pub p99: Option<u64>,
}

/// The ring and the accounting that feeds it.
pub struct Timeline {
    pub interval: Duration,
    per_level: usize,
    levels: Vec<VecDeque<Interval>>,
    names: Vec<Key>,
    ids: HashMap<Key, u32>,
    /// What the last tick saw of the current window (cumulative per key).
    seen: BTreeMap<Key, Histogram>,
    /// Calls since the last tick handed over by a reset (the closed window's tail).
    pending: BTreeMap<u32, Sparse>,
    last_tick_ns: u64,
    /// Intervals dropped off the oldest level.
    pub dropped: u64,
}

impl Timeline {
    pub fn new(interval: Duration, levels: usize, per_level: usize) -> Timeline {
        Timeline {
            interval,
            per_level: per_level.max(2),
            levels: vec![VecDeque::new(); levels.max(1)],
            names: Vec::new(),
            ids: HashMap::new(),
            seen: BTreeMap::new(),
            pending: BTreeMap::new(),
            last_tick_ns: wall_ns(),
            dropped: 0,
        }
    }

    fn id(&mut self, k: &Key) -> u32 {
        if let Some(&i) = self.ids.get(k) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(k.clone());
        self.ids.insert(k.clone(), i);
        i
    }

    /// The calls of the current window since the last tick (or handover), by key id.
    fn take_delta(&mut self, open: &BTreeMap<Key, Histogram>) -> BTreeMap<u32, Sparse> {
        let mut out = std::mem::take(&mut self.pending);
        for (k, h) in open {
            let d = Sparse::delta(h, self.seen.get(k));
            if d.count > 0 || d.overflow > 0 {
                let id = self.id(k);
                out.entry(id).or_default().add(&d);
            }
        }
        self.seen = open.clone();
        out
    }

    /// A reset is about to clear the window whose records are `closing`: keep its calls since
    /// the last tick for the interval in progress.
    pub fn before_reset(&mut self, closing: &BTreeMap<Key, Histogram>) {
        self.pending = self.take_delta(closing);
        self.seen.clear();
    }

    /// End the interval in progress at `now_ns` with the current window's records `open`.
    pub fn tick_at(&mut self, open: &BTreeMap<Key, Histogram>, now_ns: u64) {
        let keys = self.take_delta(open);
        let iv = Interval { start_ns: self.last_tick_ns, end_ns: now_ns.max(self.last_tick_ns), keys };
        self.last_tick_ns = iv.end_ns;
        self.push(iv);
    }

    pub fn tick(&mut self, open: &BTreeMap<Key, Histogram>) {
        self.tick_at(open, wall_ns());
    }

    fn push(&mut self, iv: Interval) {
        self.levels[0].push_back(iv);
        for l in 0..self.levels.len() {
            if self.levels[l].len() <= self.per_level {
                break;
            }
            let a = self.levels[l].pop_front().expect("over capacity");
            let b = self.levels[l].pop_front().expect("over capacity");
            if l + 1 < self.levels.len() {
                self.levels[l + 1].push_back(a.merge(b));
            } else {
                self.dropped += 2;
            }
        }
    }

    /// Intervals held now (for tests and memory bounds).
    pub fn len(&self) -> usize {
        self.levels.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every interval's calls per key, oldest first.
    pub fn rows(&self) -> Vec<Row> {
        let mut out = Vec::new();
        for level in self.levels.iter().rev() {
            for iv in level {
                for (&id, s) in &iv.keys {
                    // An interval's exact extremes are unknown (it is a difference of windows):
                    // its lowest and highest buckets stand for them.
                    let q = |q: f64| hist::sparse_quantile(&s.buckets, s.overflow, q);
                    let (p50, p99) = (q(0.5), q(0.99));
                    out.push(Row {
                        start_ns: iv.start_ns,
                        end_ns: iv.end_ns,
                        key: self.names[id as usize].clone(),
                        count: s.count + s.overflow,
                        p50,
                        p99,
                    });
                }
            }
        }
        out
    }
}

/// The process's timeline (windows are process-wide too), and its ticker thread.
pub static TIMELINE: Mutex<Option<Timeline>> = Mutex::new(None);
static TICKER: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>> = Mutex::new(None);

/// Start keeping a timeline of `interval` (replacing any earlier one), with a thread that calls
/// `tick` every interval (the caller's function, which ends the interval under its own lock), or
/// with none (`None`: the caller ticks).
pub fn start(interval: Duration, levels: usize, per_level: usize, tick: Option<fn()>) {
    stop();
    *lock(&TIMELINE) = Some(Timeline::new(interval, levels, per_level));
    let Some(tick) = tick else { return };
    let quit = Arc::new(AtomicBool::new(false));
    let q = quit.clone();
    let handle = std::thread::Builder::new()
        .name("mspti-lens-timeline".into())
        .spawn(move || {
            let mut next = std::time::Instant::now() + interval;
            while !q.load(Ordering::Acquire) {
                let now = std::time::Instant::now();
                if now >= next {
                    tick();
                    next += interval;
                    if next < now {
                        next = now + interval; // fell behind (a suspended process): skip ahead
                    }
                } else {
                    std::thread::park_timeout((next - now).min(Duration::from_millis(50)));
                }
            }
        })
        .expect("spawn the timeline thread");
    *lock(&TICKER) = Some((quit, handle));
}

/// Hand the closing window's records to the timeline, if one is kept (the caller holds the lock
/// that orders this with the window's writes).
pub fn before_reset(closing: &BTreeMap<Key, Histogram>) {
    if let Some(t) = lock(&TIMELINE).as_mut() {
        t.before_reset(closing);
    }
}

/// Whether a timeline is kept (`Session(interval=...)`).
pub fn kept() -> bool {
    lock(&TIMELINE).is_some()
}

/// End the interval in progress, if a timeline is kept (the caller holds the lock that orders
/// this with the window's writes).
pub fn tick(open: &BTreeMap<Key, Histogram>) {
    if let Some(t) = lock(&TIMELINE).as_mut() {
        t.tick(open);
    }
}

/// Stop the ticker thread; the timeline stays readable.
pub fn stop() {
    if let Some((quit, handle)) = lock(&TICKER).take() {
        quit.store(true, Ordering::Release);
        handle.thread().unpark();
        let _ = handle.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> Key {
        (0, 1, n.to_string())
    }

    fn window(vals: &[(&str, u64, u64)]) -> BTreeMap<Key, Histogram> {
        let mut m = BTreeMap::new();
        for &(n, v, times) in vals {
            let h: &mut Histogram = m.entry(key(n)).or_default();
            for _ in 0..times {
                h.record(v);
            }
        }
        m
    }

    #[test]
    fn each_interval_holds_exactly_its_calls_across_a_reset() {
        let mut t = Timeline::new(Duration::from_secs(1), 4, 8);
        t.last_tick_ns = 0;
        t.tick_at(&window(&[("a", 1000, 5)]), 1);
        // 3 more calls, then a reset closes the window with 8 in all; 2 calls in the new one.
        t.before_reset(&window(&[("a", 1000, 5), ("a", 9000, 3)]));
        t.tick_at(&window(&[("a", 1000, 2)]), 2);
        t.tick_at(&window(&[("a", 1000, 2)]), 3);
        let rows = t.rows();
        let counts: Vec<(u64, u64)> = rows.iter().map(|r| (r.end_ns, r.count)).collect();
        assert_eq!(counts, vec![(1, 5), (2, 5)]);
        assert_eq!(rows[1].p99, Some(hist::slot_value(hist::slot_of(9000))));
        assert_eq!(t.len(), 3); // the third interval is empty (kept, with no rows)
    }

    #[test]
    fn older_intervals_merge_coarser_and_memory_stays_bounded() {
        let (levels, per) = (3, 4);
        let mut t = Timeline::new(Duration::from_secs(1), levels, per);
        t.last_tick_ns = 0;
        let mut total = 0;
        for i in 1..=200u64 {
            total += i;
            let w = window(&[("a", 500, total)]);
            t.tick_at(&w, i);
            assert!(t.len() <= levels * per, "{} intervals", t.len());
        }
        let rows = t.rows();
        // Rows are in time order, contiguous, and the kept ones hold exactly their calls.
        for w in rows.windows(2) {
            assert_eq!(w[0].end_ns, w[1].start_ns);
        }
        let last = rows.last().unwrap();
        assert_eq!((last.start_ns, last.end_ns, last.count), (199, 200, 200));
        let kept: u64 = rows.iter().map(|r| r.count).sum();
        let first = rows[0].start_ns;
        assert_eq!(kept, (first + 1..=200).sum::<u64>());
        // Coarser with age: the oldest kept interval spans 2^(levels-1) ticks.
        assert_eq!(rows[0].end_ns - rows[0].start_ns, 1 << (levels - 1));
        assert!(t.dropped > 0);
    }
}
