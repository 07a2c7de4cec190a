//! One window of activity data, names resolved, for the bindings: its histogram rows, marks,
//! counters and events, and the exact merge of windows (of threads, runs and ranks).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::aggregate::State;
use super::counters::{ActivityCounter, ActivityCounts, Combine};
use super::events;
use super::kinds::{kind_name, kind_names};
use super::layout::*;
use super::tables::*;
use crate::core::hist::Histogram;

/// The tables of a window's rows (a row's `table`).
pub const KERNELS: &str = "kernels";
pub const APIS: &str = "apis";
pub const COLLECTIVES: &str = "collectives";
pub const MEMCPY: &str = "memcpy";
pub const RANGES: &str = "ranges";
pub const LAUNCHES: &str = "launches";
pub const TABLES: [&str; 6] = [KERNELS, APIS, COLLECTIVES, MEMCPY, RANGES, LAUNCHES];
/// The metrics of a row (its `metric`): durations, the second histograms of collectives
/// (bandwidth in MB/s) and memory records (bytes), and a launch's three parts.
pub const DURATION: &str = "duration";
pub const BANDWIDTH: &str = "bandwidth";
pub const BYTES: &str = "bytes";
pub const API: &str = "api";
pub const QUEUE: &str = "queue";
pub const KERNEL: &str = "kernel";
pub const METRICS: [&str; 6] = [DURATION, BANDWIDTH, BYTES, API, QUEUE, KERNEL];

#[derive(Clone, Debug)]
pub struct HistRow {
    pub table: &'static str,
    pub keys: [String; 3],
    pub metric: &'static str,
    pub hist: Histogram,
    pub bytes: u64,
}

/// One collector's reading of its counters that are not sums (`Combine::per_collector`), with
/// the number of the window it was read in, so a merge keeps the latest (or highest) reading of
/// each collector and adds collectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The collector (unique per collector of a process, and across processes and hosts).
    pub collector: u64,
    /// The collector's snapshot number: later windows have higher ones.
    pub window: u64,
    pub values: ActivityCounts,
}

impl Reading {
    fn combine(&mut self, o: &Reading) {
        let later = o.window > self.window;
        for c in ActivityCounter::ALL {
            match c.combine() {
                Combine::Moment if later => self.values[c] = o.values[c],
                Combine::Peak => self.values[c] = self.values[c].max(o.values[c]),
                _ => {}
            }
        }
        self.window = self.window.max(o.window);
    }
}

/// A collector id no other collector has (random, so ids of processes on other hosts differ).
pub fn new_collector_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish()
}

/// One window of activity data, names resolved, ready for the binding layer.
#[derive(Clone, Debug, Default)]
pub struct ActivityTotals {
    pub rows: Vec<HistRow>,
    /// (domain, message, with device, count) of instantaneous marks.
    pub marks: Vec<(String, String, bool, u64)>,
    /// The window's value of every counter (see `ActivityCounter`): sums of the window, and for
    /// the other counters the sum over `readings` (or the highest, for flags).
    pub counters: ActivityCounts,
    /// Per collector, its latest reading of the counters that are not sums.
    pub readings: Vec<Reading>,
    pub join: String,
    pub clock_bridge: String,
    pub kinds: Vec<&'static str>,
    /// The window's device event log.
    pub events: events::EventLog,
}

impl ActivityTotals {
    /// Set `counters` of a single collector's window and its reading.
    pub fn set_counters(&mut self, collector: u64, window: u64, values: ActivityCounts) {
        self.counters = values;
        self.readings = vec![Reading { collector, window, values }];
    }

    /// The counters of several collectors' readings summed, sums and flags from `sums`.
    fn with_readings(sums: ActivityCounts, readings: &[Reading]) -> ActivityCounts {
        let mut out = sums;
        for c in ActivityCounter::ALL {
            if c.combine().per_collector() {
                out[c] = readings.iter().fold(0u64, |a, r| a.saturating_add(r.values[c]));
            }
        }
        out
    }

    /// Rebuild the readings of a window read back without them (files written before they
    /// existed): one collector of its own, whose reading is the window's values.
    pub fn set_counters_read_back(&mut self, values: ActivityCounts, readings: Option<Vec<Reading>>) {
        match readings {
            Some(r) if !r.is_empty() => {
                self.counters = ActivityTotals::with_readings(values, &r);
                self.readings = r;
            }
            _ => self.set_counters(new_collector_id(), 0, values),
        }
    }

    /// The exact sum of two windows (threads, runs, ranks): histograms of one row add, marks
    /// add, events concatenate (ordered by start); counters combine as `ActivityCounter::combine`
    /// declares: sums add, a collector's moments are its latest reading and its peaks its
    /// highest, collectors add, flags take the highest.
    pub fn merge(&self, o: &ActivityTotals) -> ActivityTotals {
        let mut rows: BTreeMap<(&'static str, [String; 3], &'static str), HistRow> = BTreeMap::new();
        for r in self.rows.iter().chain(&o.rows) {
            match rows.entry((r.table, r.keys.clone(), r.metric)) {
                Entry::Occupied(mut e) => {
                    let row = e.get_mut();
                    row.hist.merge(&r.hist);
                    row.bytes = row.bytes.saturating_add(r.bytes);
                }
                Entry::Vacant(e) => {
                    e.insert(r.clone());
                }
            }
        }
        let mut marks: BTreeMap<(String, String, bool), u64> = BTreeMap::new();
        for (d, n, dev, c) in self.marks.iter().chain(&o.marks) {
            *marks.entry((d.clone(), n.clone(), *dev)).or_default() += c;
        }
        let mut readings: BTreeMap<u64, Reading> = BTreeMap::new();
        for r in self.readings.iter().chain(&o.readings) {
            match readings.entry(r.collector) {
                Entry::Occupied(mut e) => e.get_mut().combine(r),
                Entry::Vacant(e) => {
                    e.insert(*r);
                }
            }
        }
        let readings: Vec<Reading> = readings.into_values().collect();
        let mut sums = ActivityCounts::default();
        for c in ActivityCounter::ALL {
            sums[c] = match c.combine() {
                Combine::Sum => self.counters[c].saturating_add(o.counters[c]),
                Combine::Flag => self.counters[c].max(o.counters[c]),
                Combine::Moment | Combine::Peak => 0,
            };
        }
        let both = |a: &str, b: &str| {
            if a == b || b.is_empty() {
                a.to_owned()
            } else if a.is_empty() {
                b.to_owned()
            } else {
                format!("{a} + {b}")
            }
        };
        let kinds =
            kind_names().into_iter().filter(|k| self.kinds.contains(k) || o.kinds.contains(k)).collect();
        ActivityTotals {
            rows: rows.into_values().collect(),
            marks: marks.into_iter().map(|((d, n, dev), c)| (d, n, dev, c)).collect(),
            counters: ActivityTotals::with_readings(sums, &readings),
            readings,
            join: both(&self.join, &o.join),
            clock_bridge: both(&self.clock_bridge, &o.clock_bridge),
            kinds,
            events: self.events.concat(&o.events),
        }
    }
}

/// The histogram rows and marks of the drain's state, names resolved, sorted.
pub(super) fn rows_of(st: &State, t: &mut ActivityTotals) {
    let name = |id: u32| st.name(id).to_owned();
    let mut push =
        |table: &'static str, keys: [String; 3], metric: &'static str, h: &Histogram, bytes: u64| {
            if h.count() > 0 {
                t.rows.push(HistRow { table, keys, metric, hist: h.clone(), bytes });
            }
        };
    for (&(n, ty, _), r) in st.kernels.iter() {
        push(KERNELS, [name(n), name(ty), String::new()], DURATION, &r.hist, 0);
    }
    for (&(kind, n, _), r) in st.apis.iter() {
        push(APIS, [kind_name(kind).to_owned(), name(n), String::new()], DURATION, &r.hist, 0);
    }
    for (&(g, op, src), r) in st.collectives.iter() {
        let keys = [name(g), name(op), COLL_SOURCES.get(src as usize).copied().unwrap_or("?").to_owned()];
        push(COLLECTIVES, keys.clone(), DURATION, &r.hist, r.bytes);
        if let Some(bw) = &r.second {
            push(COLLECTIVES, keys, BANDWIDTH, bw, r.bytes);
        }
    }
    for (&(kind, sub, _), r) in st.memcpy.iter() {
        let direction = match kind {
            KIND_MEMCPY => MEMCPY_KINDS.get(sub as usize).copied().unwrap_or("UNKNOWN").to_owned(),
            KIND_MEMORY => {
                let op = if sub / 16 == 0 { "ALLOCATION" } else { "RELEASE" };
                let mk = match sub % 16 {
                    1 => "DEVICE",
                    2 => "HOST",
                    3 => "MANAGED",
                    _ => "UNKNOWN",
                };
                format!("{op} {mk}")
            }
            _ => String::new(),
        };
        let keys = [kind_name(kind).to_owned(), direction, String::new()];
        push(MEMCPY, keys.clone(), DURATION, &r.hist, r.bytes);
        if let Some(b) = &r.second {
            push(MEMCPY, keys, BYTES, b, r.bytes);
        }
    }
    for (&(d, n, src), r) in st.ranges.iter() {
        let source = if src == RANGE_DEVICE { "device" } else { "host" };
        push(RANGES, [name(d), name(n), source.to_owned()], DURATION, &r.hist, 0);
    }
    for (&(n, src), r) in st.launches.iter() {
        let keys =
            [name(n), JOIN_SOURCES.get(src as usize).copied().unwrap_or("?").to_owned(), String::new()];
        push(LAUNCHES, keys.clone(), API, &r.api, 0);
        push(LAUNCHES, keys.clone(), QUEUE, &r.queue, 0);
        push(LAUNCHES, keys, KERNEL, &r.kernel, 0);
    }
    for (&(d, n, dev), &c) in &st.marks {
        t.marks.push((name(d), name(n), dev == 1, c));
    }
    t.rows.sort_by(|a, b| (a.table, &a.keys, a.metric).cmp(&(b.table, &b.keys, b.metric)));
    t.marks.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(collector: u64, window: u64, records: u64, pending: u64, peak: u64) -> ActivityTotals {
        let mut v = ActivityCounts::default();
        v[ActivityCounter::Records] = records;
        v[ActivityCounter::KernelsPending] = pending;
        v[ActivityCounter::PoolPeakInUse] = peak;
        v[ActivityCounter::LibraryReportsDrops] = 1;
        let mut t = ActivityTotals::default();
        t.set_counters(collector, window, v);
        t
    }

    #[test]
    fn windows_of_one_collector_add_sums_and_keep_the_latest_moment_and_the_highest_peak() {
        // Four windows of 25 kernels each, pending growing as they wait: 25, 50, 75, 100.
        let w: Vec<_> = (1..=4).map(|i| window(7, i, 25, 25 * i, [3, 9, 4, 2][i as usize - 1])).collect();
        // Merged in any order, pairwise or as a chain.
        let chain = w[1..].iter().fold(w[0].clone(), |a, b| a.merge(b));
        let shuffled = w[3].merge(&w[0]).merge(&w[2].merge(&w[1]));
        for m in [&chain, &shuffled] {
            assert_eq!(m.counters[ActivityCounter::Records], 100);
            assert_eq!(m.counters[ActivityCounter::KernelsPending], 100, "not 250");
            assert_eq!(m.counters[ActivityCounter::PoolPeakInUse], 9);
            assert_eq!(m.counters[ActivityCounter::LibraryReportsDrops], 1);
        }
    }

    #[test]
    fn collectors_add_their_moments() {
        let a = window(1, 5, 10, 30, 2).merge(&window(1, 6, 10, 40, 1));
        let b = window(2, 1, 10, 5, 4);
        let m = a.merge(&b);
        assert_eq!(m.counters[ActivityCounter::KernelsPending], 45);
        assert_eq!(m.counters[ActivityCounter::PoolPeakInUse], 6);
        assert_eq!(m.counters[ActivityCounter::Records], 30);
        assert_eq!(m.readings.len(), 2);
    }

    #[test]
    fn the_tables_and_metrics_are_unique() {
        for list in [&TABLES[..], &METRICS[..]] {
            let mut v = list.to_vec();
            v.sort_unstable();
            v.dedup();
            assert_eq!(v.len(), list.len());
        }
    }
}
