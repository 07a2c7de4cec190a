//! `NativeSnapshot`: an immutable set of merged histograms and counters.

use std::collections::BTreeMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::counters::{Counter, Counters};
use crate::core::hist::{self, Histogram, Sparse};
use crate::core::shard::Key;
use crate::core::slowest::{self, SlowCall};
use crate::core::windows::{Cut, Totals};

type KeyRow = (u32, u32, String, Histogram);

/// An immutable set of merged histograms, one per (domain, cbid, function).
#[pyclass(name = "NativeSnapshot", module = "mspti_lens._native", frozen)]
pub struct PySnapshot {
    keys: Vec<KeyRow>,
    counters: Counters,
    in_flight: u64,
    threads: u64,
    /// The slowest calls per (thread, key); none for loaded or merged-in-from-file data.
    slowest: Vec<(Key, SlowCall)>,
}

impl PySnapshot {
    pub(crate) fn from_totals(t: Totals) -> PySnapshot {
        PySnapshot {
            keys: t.keys.into_iter().map(|((d, c, n), h)| (d, c, n, h)).collect(),
            counters: t.counters,
            in_flight: t.in_flight,
            threads: t.threads,
            slowest: t.slowest,
        }
    }
}

fn check_quantile(q: f64) -> PyResult<()> {
    if (0.0..=1.0).contains(&q) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!("quantile {q} is outside [0, 1]")))
    }
}

#[pymethods]
impl PySnapshot {
    /// Statistics per key as columns: domain, cbid, name, count, total, mean, min, max, std,
    /// overflow (values beyond the range), and one column `q{i}` per requested quantile (None when
    /// it falls beyond the range).
    fn stats<'py>(&self, py: Python<'py>, quantiles: Vec<f64>) -> PyResult<Bound<'py, PyDict>> {
        for &q in &quantiles {
            check_quantile(q)?;
        }
        let d = PyDict::new(py);
        d.set_item("domain", self.keys.iter().map(|k| k.0).collect::<Vec<_>>())?;
        d.set_item("cbid", self.keys.iter().map(|k| k.1).collect::<Vec<_>>())?;
        d.set_item("name", self.keys.iter().map(|k| k.2.clone()).collect::<Vec<_>>())?;
        d.set_item("count", self.keys.iter().map(|k| k.3.count()).collect::<Vec<_>>())?;
        d.set_item("total", self.keys.iter().map(|k| k.3.sum()).collect::<Vec<_>>())?;
        d.set_item("mean", self.keys.iter().map(|k| k.3.mean()).collect::<Vec<_>>())?;
        d.set_item("min", self.keys.iter().map(|k| k.3.min_value()).collect::<Vec<_>>())?;
        d.set_item("max", self.keys.iter().map(|k| k.3.max_value()).collect::<Vec<_>>())?;
        d.set_item("std", self.keys.iter().map(|k| k.3.std_sample()).collect::<Vec<_>>())?;
        d.set_item("overflow", self.keys.iter().map(|k| k.3.overflow()).collect::<Vec<_>>())?;
        // A quantile is None when its rank falls among values beyond the range (never invented).
        for (i, &q) in quantiles.iter().enumerate() {
            d.set_item(format!("q{i}"), self.keys.iter().map(|k| k.3.quantile(q)).collect::<Vec<_>>())?;
        }
        Ok(d)
    }

    /// Non-empty buckets as columns: key (row index of `stats`), index (the OTel index at scale 7;
    /// None for the zero bucket and the overflow row), lower (exclusive; 0 for the zero bucket),
    /// upper (inclusive; 0 for the zero bucket, inf for the overflow row), count.
    fn buckets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (mut key, mut index, mut lower, mut upper, mut count) = (vec![], vec![], vec![], vec![], vec![]);
        for (k, row) in self.keys.iter().enumerate() {
            for (slot, c) in row.3.nonzero() {
                let i = hist::slot_index(slot);
                key.push(k as u32);
                index.push(i);
                lower.push(i.map_or(0.0, hist::bucket_lower));
                upper.push(i.map_or(0.0, hist::bucket_upper));
                count.push(c);
            }
            if row.3.overflow() > 0 {
                key.push(k as u32);
                index.push(None);
                lower.push(hist::RANGE_MAX_NS as f64);
                upper.push(f64::INFINITY);
                count.push(row.3.overflow());
            }
        }
        let d = PyDict::new(py);
        d.set_item("key", key)?;
        d.set_item("index", index)?;
        d.set_item("lower", lower)?;
        d.set_item("upper", upper)?;
        d.set_item("count", count)?;
        Ok(d)
    }

    /// The exact per-key state for saving: domain, cbid, name, count, sum, sum_sq (an int, exact),
    /// min, max, overflow, zero (the zero bucket's count).
    fn key_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("domain", self.keys.iter().map(|k| k.0).collect::<Vec<_>>())?;
        d.set_item("cbid", self.keys.iter().map(|k| k.1).collect::<Vec<_>>())?;
        d.set_item("name", self.keys.iter().map(|k| k.2.clone()).collect::<Vec<_>>())?;
        d.set_item("count", self.keys.iter().map(|k| k.3.count()).collect::<Vec<_>>())?;
        d.set_item("sum", self.keys.iter().map(|k| k.3.sum()).collect::<Vec<_>>())?;
        d.set_item("sum_sq", self.keys.iter().map(|k| k.3.sum_sq()).collect::<Vec<_>>())?;
        d.set_item("min", self.keys.iter().map(|k| k.3.min()).collect::<Vec<_>>())?;
        d.set_item("max", self.keys.iter().map(|k| k.3.max()).collect::<Vec<_>>())?;
        d.set_item("overflow", self.keys.iter().map(|k| k.3.overflow()).collect::<Vec<_>>())?;
        d.set_item("zero", self.keys.iter().map(|k| k.3.zero_count()).collect::<Vec<_>>())?;
        Ok(d)
    }

    /// Every counter of `Counter::ALL` by name, then in_flight and threads.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (c, v) in self.counters.iter() {
            d.set_item(c.name(), v)?;
        }
        d.set_item("in_flight", self.in_flight)?;
        d.set_item("threads", self.threads)?;
        Ok(d)
    }

    /// The slowest calls per (thread, key) as columns: domain, cbid, name, thread_id,
    /// start_unix_ns (wall clock), duration_ns.
    fn slowest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = &self.slowest;
        let d = PyDict::new(py);
        d.set_item("domain", e.iter().map(|(k, _)| k.0).collect::<Vec<_>>())?;
        d.set_item("cbid", e.iter().map(|(k, _)| k.1).collect::<Vec<_>>())?;
        d.set_item("name", e.iter().map(|(k, _)| k.2.as_str()).collect::<Vec<_>>())?;
        d.set_item("thread_id", e.iter().map(|(_, x)| x.thread_id).collect::<Vec<_>>())?;
        d.set_item("start_unix_ns", e.iter().map(|(_, x)| x.start).collect::<Vec<_>>())?;
        d.set_item("duration_ns", e.iter().map(|(_, x)| x.duration).collect::<Vec<_>>())?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.keys.len()
    }

    /// Rebuild a snapshot from `key_state`-shaped columns, sparse buckets (index None: the zero
    /// bucket) and counters; every value is checked, so a corrupt file gives ValueError, never a
    /// wrong snapshot.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn from_state(
        domain: Vec<u32>,
        cbid: Vec<u32>,
        name: Vec<String>,
        sum: Vec<u64>,
        sum_sq: Vec<u128>,
        min: Vec<Option<u64>>,
        max: Vec<Option<u64>>,
        overflow: Vec<u64>,
        bucket_key: Vec<u32>,
        bucket_index: Vec<Option<i32>>,
        bucket_count: Vec<u64>,
        counters: BTreeMap<String, u64>,
    ) -> PyResult<PySnapshot> {
        let n = domain.len();
        if [cbid.len(), name.len(), sum.len(), sum_sq.len(), min.len(), max.len(), overflow.len()]
            .iter()
            .any(|&l| l != n)
            || bucket_index.len() != bucket_key.len()
            || bucket_count.len() != bucket_key.len()
        {
            return Err(PyValueError::new_err("snapshot columns have different lengths"));
        }
        let mut hs: Vec<Histogram> = vec![Histogram::default(); n];
        for ((&k, &i), &c) in bucket_key.iter().zip(&bucket_index).zip(&bucket_count) {
            let h = hs.get_mut(k as usize).ok_or_else(|| {
                PyValueError::new_err(format!("bucket row names key {k}, but there are {n} keys"))
            })?;
            h.add_bucket(i, c).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let mut keys = Vec::with_capacity(n);
        for (i, mut h) in hs.into_iter().enumerate() {
            let totals = hist::Totals {
                overflow: overflow[i],
                sum: sum[i],
                sum_sq: sum_sq[i],
                min: min[i],
                max: max[i],
            };
            h.set_totals(totals).map_err(|e| PyValueError::new_err(format!("key {i} ({}): {e}", name[i])))?;
            keys.push((domain[i], cbid[i], name[i].clone(), h));
        }
        let mut c = Counters::default();
        for (k, &v) in &counters {
            if let Some(k) = Counter::from_name(k) {
                c[k] = v;
            }
        }
        let get = |k: &str| counters.get(k).copied().unwrap_or(0);
        Ok(PySnapshot {
            keys,
            counters: c,
            in_flight: get("in_flight"),
            threads: get("threads"),
            slowest: vec![],
        })
    }

    /// One histogram of `values` (ns) under key (0, 0, name): for checking the histogram's math.
    #[staticmethod]
    #[pyo3(signature = (values, name="values"))]
    fn from_values(values: Vec<u64>, name: &str) -> PySnapshot {
        let mut h = Histogram::default();
        for v in values {
            h.record(v);
        }
        let keys = if h.count() > 0 { vec![(0, 0, name.to_owned(), h)] } else { vec![] };
        PySnapshot { keys, counters: Counters::default(), in_flight: 0, threads: 0, slowest: vec![] }
    }

    /// The sum of two snapshots (threads, runs or ranks): histograms of equal keys add exactly,
    /// and the slowest calls are the K slowest per thread and key of both (ties: the earlier
    /// start first), as one longer window would have kept them: the rule of the Python layer's
    /// slowest.merged, which a snapshot loaded from a file (its calls held in Python) still uses.
    /// A flight recorder's fine windows merge here alone (runs/flight_recorder.py).
    fn merge(&self, other: &PySnapshot) -> PySnapshot {
        let mut m: BTreeMap<(u32, u32, String), Histogram> = BTreeMap::new();
        for (d, c, n, h) in self.keys.iter().chain(&other.keys) {
            // A key's first histogram is copied, the second added: one pass over each.
            match m.entry((*d, *c, n.clone())) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(h.clone());
                }
                std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(h),
            }
        }
        let mut counters = self.counters;
        counters.add(&other.counters);
        PySnapshot {
            keys: m.into_iter().map(|((d, c, n), h)| (d, c, n, h)).collect(),
            counters,
            in_flight: self.in_flight + other.in_flight,
            threads: self.threads + other.threads,
            slowest: merged_slowest(&self.slowest, &other.slowest),
        }
    }

    /// This window with the calls of `cut` added (calls its session cut out of it earlier: a
    /// flight recorder's fine windows): histograms and counters add, touching the cut's slots
    /// alone, and the slowest calls merge as `merge`'s do; in_flight and threads stay this
    /// window's (moments, not sums).
    fn with_cut(&self, cut: &PyCut) -> PySnapshot {
        let mut keys = self.keys.clone();
        let mut added = false;
        for ((d, c, n), h) in &cut.0.keys {
            match keys.iter_mut().find(|k| k.0 == *d && k.1 == *c && k.2 == *n) {
                Some(k) => k.3.add_sparse(h),
                None => {
                    keys.push((*d, *c, n.clone(), h.to_histogram()));
                    added = true;
                }
            }
        }
        if added {
            keys.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        }
        let mut counters = self.counters;
        counters.add(&cut.0.counters);
        PySnapshot {
            keys,
            counters,
            in_flight: self.in_flight,
            threads: self.threads,
            slowest: merged_slowest(&self.slowest, &cut.0.slowest),
        }
    }
}

/// The calls a session cut out of its window (`NativeSession.cut()`: a flight recorder's fine
/// window): per key, the values of its non-empty slots alone, its counters' change, its slowest
/// calls. Cheap to make, merge and keep; `snapshot()` makes the dense NativeSnapshot when one is
/// written.
#[pyclass(name = "NativeCut", module = "mspti_lens._native", frozen)]
pub struct PyCut(pub(crate) Cut);

#[pymethods]
impl PyCut {
    /// The calls of both (`other` the later): values add, the slowest calls merge as
    /// `NativeSnapshot.merge`'s do, in_flight and threads are the later cut's (moments).
    fn merge(&self, other: &PyCut) -> PyCut {
        let (a, b) = (&self.0, &other.0);
        let mut m: BTreeMap<&Key, Sparse> = BTreeMap::new();
        for (k, h) in a.keys.iter().chain(&b.keys) {
            match m.entry(k) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(h.clone());
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    let sum = e.get().merge(h);
                    e.insert(sum);
                }
            }
        }
        let mut counters = a.counters;
        counters.add(&b.counters);
        PyCut(Cut {
            keys: m.into_iter().map(|(k, h)| (k.clone(), h)).collect(),
            counters,
            in_flight: b.in_flight,
            threads: b.threads,
            slowest: merged_slowest(&a.slowest, &b.slowest),
        })
    }

    /// Keys in the cut (as `NativeSnapshot`'s).
    fn __len__(&self) -> usize {
        self.0.keys.len()
    }

    /// As `NativeSnapshot.counters`: every counter of `Counter::ALL` by name, then in_flight
    /// and threads.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.snapshot_of_counters().counters(py)
    }

    /// The values of the counters named (as `counters` names them; 0 for a name it has not),
    /// without building the dict: a fine window's moment reading.
    fn counters_of(&self, names: Vec<String>) -> Vec<u64> {
        let c = &self.0;
        let of = |n: &str| match n {
            "in_flight" => c.in_flight,
            "threads" => c.threads,
            _ => c.counters.iter().find(|(k, _)| k.name() == n).map_or(0, |(_, v)| v),
        };
        names.iter().map(|n| of(n)).collect()
    }

    /// The dense NativeSnapshot of the same calls.
    fn snapshot(&self) -> PySnapshot {
        let c = &self.0;
        PySnapshot {
            keys: c.keys.iter().map(|((d, cb, n), h)| (*d, *cb, n.clone(), h.to_histogram())).collect(),
            ..self.snapshot_of_counters()
        }
    }
}

impl PyCut {
    fn snapshot_of_counters(&self) -> PySnapshot {
        let c = &self.0;
        PySnapshot {
            keys: vec![],
            counters: c.counters,
            in_flight: c.in_flight,
            threads: c.threads,
            slowest: c.slowest.clone(),
        }
    }
}

/// The `slowest::K` slowest calls per (thread, key) of `a` and `b` together: slowest first, ties
/// the earlier start first; grouped by key, then thread.
fn merged_slowest(a: &[(Key, SlowCall)], b: &[(Key, SlowCall)]) -> Vec<(Key, SlowCall)> {
    if a.is_empty() || b.is_empty() {
        return if a.is_empty() { b.to_vec() } else { a.to_vec() };
    }
    let mut both: Vec<&(Key, SlowCall)> = a.iter().chain(b).collect();
    both.sort_by(|(ka, x), (kb, y)| {
        (ka, x.thread_id, std::cmp::Reverse(x.duration), x.start).cmp(&(
            kb,
            y.thread_id,
            std::cmp::Reverse(y.duration),
            y.start,
        ))
    });
    let mut out: Vec<(Key, SlowCall)> = Vec::with_capacity(both.len());
    let mut run = 0;
    for (i, e) in both.iter().enumerate() {
        let same = i > 0 && both[i - 1].0 == e.0 && both[i - 1].1.thread_id == e.1.thread_id;
        run = if same { run + 1 } else { 0 };
        if run < slowest::K {
            out.push((*e).clone());
        }
    }
    out
}
