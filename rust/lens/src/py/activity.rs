//! Binding of the activity collector and MSTX: converts, and nothing else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::session::PySession;
use crate::activity::config::{self, DEFAULT_BUFFERS, DEFAULT_BUFFER_SIZE, DEFAULT_POOL_CAP};
use crate::activity::counters::{ActivityCounter, ActivityCounts};
use crate::activity::events::{Event, EventLog, Strings, EVENT_KINDS};
use crate::activity::names::{data_type_name, data_type_of};
use crate::activity::totals::{Reading, METRICS, TABLES};
use crate::activity::{self, mstx, ActivityTotals, Collector, Config, HistRow};
use crate::core::hist::{self, Histogram, Totals};
use crate::core::locks::lock;
use crate::error::Error;

fn to_py(e: Error) -> PyErr {
    PyErr::from(e)
}

fn kinds_of(names: Vec<String>) -> PyResult<Vec<u32>> {
    names.iter().map(|n| activity::kind_by_name(n).map_err(to_py)).collect()
}

/// The native activity collector of one session.
#[pyclass(name = "NativeActivity", module = "mspti_lens._native", frozen)]
pub struct PyActivity {
    inner: Arc<Mutex<Collector>>,
}

impl PyActivity {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Collector) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| f(&mut lock(&self.inner))).map_err(to_py)
    }
}

#[pymethods]
impl PyActivity {
    #[new]
    #[pyo3(signature = (session, buffer_size=DEFAULT_BUFFER_SIZE, buffers=DEFAULT_BUFFERS, flush_interval_ms=500,
                        mark_stream=None, device_events=activity::events::DEFAULT_CAP, pool_cap=None,
                        settle_timeout_s=None, join_sample=config::DEFAULT_JOIN_SAMPLE))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        session: &PySession,
        buffer_size: usize,
        buffers: usize,
        flush_interval_ms: u64,
        mark_stream: Option<usize>,
        device_events: usize,
        pool_cap: Option<usize>,
        settle_timeout_s: Option<f64>,
        join_sample: f64,
    ) -> PyResult<PyActivity> {
        let path = lock(&session.inner).library().path.clone();
        let config = Config {
            buffer_size,
            buffers,
            // The cap never refuses the buffers asked for at the start.
            pool_cap: pool_cap.unwrap_or_else(|| DEFAULT_POOL_CAP.max(buffer_size.saturating_mul(buffers))),
            flush_interval: Duration::from_millis(flush_interval_ms.max(1)),
            mark_stream,
            device_events,
            settle_timeout: settle_timeout_s.map_or(Ok(config::DEFAULT_SETTLE_TIMEOUT), settle_timeout)?,
            join_sample: config::check_join_sample(join_sample).map_err(PyValueError::new_err)?,
        };
        let c = py.detach(move || Collector::new(&path, config)).map_err(to_py)?;
        let inner = Arc::new(Mutex::new(c));
        let i2 = inner.clone();
        py.detach(|| lock(&session.inner).attach_activity(i2)).map_err(to_py)?;
        Ok(PyActivity { inner })
    }

    fn enable(&self, py: Python<'_>, kinds: Vec<String>) -> PyResult<()> {
        let k = kinds_of(kinds)?;
        self.with(py, |c| c.enable(&k))
    }

    fn disable(&self, py: Python<'_>, kinds: Vec<String>) -> PyResult<()> {
        let k = kinds_of(kinds)?;
        self.with(py, |c| c.disable(&k))
    }

    fn start(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |c| {
            let clock = c.session_clock();
            c.start(clock)
        })
    }

    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |c| {
            c.stop();
            Ok(())
        })
    }

    #[pyo3(signature = (settle=true))]
    fn flush(&self, py: Python<'_>, settle: bool) -> PyResult<()> {
        self.with(py, |c| {
            c.flush(settle);
            Ok(())
        })
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |c| {
            c.close();
            Ok(())
        })
    }

    #[pyo3(signature = (reset=false))]
    fn snapshot(&self, py: Python<'_>, reset: bool) -> PyResult<PyActivitySnapshot> {
        self.with(py, |c| Ok(c.snapshot(reset))).map(|t| PyActivitySnapshot { t })
    }

    /// Hold the drain thread still (tests of pool exhaustion); explicit flushes still drain.
    #[cfg(feature = "test-hooks")]
    fn _pause_drain(&self, paused: bool) {
        lock(&self.inner).pause_drain(paused);
    }

    #[getter]
    fn wanted(&self) -> Vec<&'static str> {
        lock(&self.inner).wanted()
    }

    #[getter]
    fn join(&self) -> String {
        lock(&self.inner).join().describe()
    }

    #[getter]
    fn clock_bridge(&self) -> &'static str {
        lock(&self.inner).clock_bridge()
    }

    #[getter]
    fn symbols(&self) -> Vec<&'static str> {
        lock(&self.inner).api().present.clone()
    }

    /// The longest a settle (snapshot, stop, close, `flush(settle=True)`) waits, in seconds, for
    /// device records known to be missing (see ACTIVITY_SETTLE_TIMEOUT_S).
    #[getter]
    fn get_settle_timeout(&self) -> f64 {
        lock(&self.inner).settle_timeout().as_secs_f64()
    }

    #[setter]
    fn set_settle_timeout(&self, seconds: f64) -> PyResult<()> {
        let t = settle_timeout(seconds)?;
        lock(&self.inner).set_settle_timeout(t).map_err(to_py)
    }
}

/// A settle bound in seconds: finite, 0 ..= the maximum.
fn settle_timeout(seconds: f64) -> PyResult<Duration> {
    let max = config::MAX_SETTLE_TIMEOUT.as_secs_f64();
    if !(0.0..=max).contains(&seconds) {
        return Err(PyValueError::new_err(format!(
            "settle_timeout is the longest a snapshot waits for device records known to be missing: \
             seconds from 0 to {max}, not {seconds}"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Counters by name, in declaration order (a dict keeps it).
fn counters_dict<'py>(py: Python<'py>, c: &ActivityCounts) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in c.iter() {
        d.set_item(k.name(), v)?;
    }
    Ok(d)
}

/// The per-collector readings as (collector, window, {counter: value}) for files.
fn readings_list(r: &[Reading]) -> Vec<(u64, u64, BTreeMap<&'static str, u64>)> {
    r.iter()
        .map(|r| {
            let v = r.values.iter().filter(|(c, _)| c.combine().per_collector()).map(|(c, v)| (c.name(), v));
            (r.collector, r.window, v.collect())
        })
        .collect()
}

/// A reading as files keep it: (collector, window, {counter: value}).
type ReadingColumns = (u64, u64, BTreeMap<String, u64>);

/// Counters read back: known names only (a newer file's others are left out).
fn counts_of(m: &BTreeMap<String, u64>) -> ActivityCounts {
    let mut c = ActivityCounts::default();
    for (k, v) in m {
        if let Some(d) = ActivityCounter::from_name(k) {
            c[d] = *v;
        }
    }
    c
}

/// One window of device activity: histogram rows per table, marks, counters.
#[pyclass(name = "NativeActivitySnapshot", module = "mspti_lens._native", frozen)]
pub struct PyActivitySnapshot {
    t: ActivityTotals,
}

fn check_q(q: &[f64]) -> PyResult<()> {
    match q.iter().find(|q| !(0.0..=1.0).contains(*q)) {
        Some(q) => Err(PyValueError::new_err(format!("quantile {q} is outside [0, 1]"))),
        None => Ok(()),
    }
}

#[pymethods]
impl PyActivitySnapshot {
    /// Per row: table, key0, key1, key2, metric, count, total, mean, min, max, std, bytes, and
    /// `q{i}` per quantile.
    fn stats<'py>(&self, py: Python<'py>, quantiles: Vec<f64>) -> PyResult<Bound<'py, PyDict>> {
        check_q(&quantiles)?;
        let r = &self.t.rows;
        let d = PyDict::new(py);
        d.set_item("table", r.iter().map(|x| x.table).collect::<Vec<_>>())?;
        for i in 0..3 {
            d.set_item(format!("key{i}"), r.iter().map(|x| x.keys[i].clone()).collect::<Vec<_>>())?;
        }
        d.set_item("metric", r.iter().map(|x| x.metric).collect::<Vec<_>>())?;
        d.set_item("count", r.iter().map(|x| x.hist.count()).collect::<Vec<_>>())?;
        d.set_item("total", r.iter().map(|x| x.hist.sum()).collect::<Vec<_>>())?;
        d.set_item("mean", r.iter().map(|x| x.hist.mean()).collect::<Vec<_>>())?;
        d.set_item("min", r.iter().map(|x| x.hist.min_value()).collect::<Vec<_>>())?;
        d.set_item("max", r.iter().map(|x| x.hist.max_value()).collect::<Vec<_>>())?;
        d.set_item("std", r.iter().map(|x| x.hist.std_sample()).collect::<Vec<_>>())?;
        d.set_item("bytes", r.iter().map(|x| x.bytes).collect::<Vec<_>>())?;
        for (i, &q) in quantiles.iter().enumerate() {
            d.set_item(format!("q{i}"), r.iter().map(|x| x.hist.quantile(q)).collect::<Vec<_>>())?;
        }
        Ok(d)
    }

    /// Non-empty buckets: row (index into stats), index (OTel index at scale 7; None for the zero
    /// and overflow rows), lower (exclusive), upper (inclusive; +inf for overflow), count.
    fn buckets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (mut row, mut index, mut lower, mut upper, mut count) = (vec![], vec![], vec![], vec![], vec![]);
        for (k, r) in self.t.rows.iter().enumerate() {
            for (slot, c) in r.hist.nonzero() {
                let i = hist::slot_index(slot);
                row.push(k as u32);
                index.push(i);
                lower.push(i.map_or(0.0, hist::bucket_lower));
                upper.push(i.map_or(0.0, hist::bucket_upper));
                count.push(c);
            }
            if r.hist.overflow() > 0 {
                row.push(k as u32);
                index.push(None);
                lower.push(hist::RANGE_MAX_NS as f64);
                upper.push(f64::INFINITY);
                count.push(r.hist.overflow());
            }
        }
        let d = PyDict::new(py);
        d.set_item("row", row)?;
        d.set_item("index", index)?;
        d.set_item("lower", lower)?;
        d.set_item("upper", upper)?;
        d.set_item("count", count)?;
        Ok(d)
    }

    /// (domain, message, with_device, count) of instantaneous marks.
    fn marks(&self) -> Vec<(String, String, bool, u64)> {
        self.t.marks.clone()
    }

    /// Every counter of `ACTIVITY_COUNTERS` by name, in its order.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counters_dict(py, &self.t.counters)
    }

    /// join, clock_bridge, kinds.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("join", &self.t.join)?;
        d.set_item("clock_bridge", &self.t.clock_bridge)?;
        d.set_item("kinds", self.t.kinds.clone())?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.t.rows.len()
    }

    /// The device event log's columns (DEVICE_EVENTS_SCHEMA's, without source), by start.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        events_dict(py, &self.t.events)
    }

    /// The exact sum of two device snapshots (events concatenated, by start).
    fn merge(&self, other: &PyActivitySnapshot) -> PyActivitySnapshot {
        PyActivitySnapshot { t: self.t.merge(&other.t) }
    }

    /// The exact state of every row for saving: table, key0-2, metric, bytes, sum, sum_sq, min,
    /// max, overflow, and sparse buckets (bucket indices and counts per row).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = &self.t.rows;
        let d = PyDict::new(py);
        d.set_item("table", r.iter().map(|x| x.table).collect::<Vec<_>>())?;
        for i in 0..3 {
            d.set_item(format!("key{i}"), r.iter().map(|x| x.keys[i].clone()).collect::<Vec<_>>())?;
        }
        d.set_item("metric", r.iter().map(|x| x.metric).collect::<Vec<_>>())?;
        d.set_item("bytes", r.iter().map(|x| x.bytes).collect::<Vec<_>>())?;
        d.set_item("sum", r.iter().map(|x| x.hist.sum()).collect::<Vec<_>>())?;
        d.set_item("sum_sq", r.iter().map(|x| x.hist.sum_sq()).collect::<Vec<_>>())?;
        d.set_item("min", r.iter().map(|x| x.hist.min()).collect::<Vec<_>>())?;
        d.set_item("max", r.iter().map(|x| x.hist.max()).collect::<Vec<_>>())?;
        d.set_item("overflow", r.iter().map(|x| x.hist.overflow()).collect::<Vec<_>>())?;
        // Buckets by their OTel index at scale 7 (None: the zero bucket), as snapshot files keep them.
        d.set_item(
            "buckets",
            r.iter()
                .map(|x| x.hist.nonzero().map(|(slot, _)| hist::slot_index(slot)).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        )?;
        d.set_item(
            "counts",
            r.iter().map(|x| x.hist.nonzero().map(|(_, c)| c).collect::<Vec<_>>()).collect::<Vec<_>>(),
        )?;
        d.set_item("marks", self.t.marks.clone())?;
        d.set_item("counters", counters_dict(py, &self.t.counters)?)?;
        d.set_item("readings", readings_list(&self.t.readings))?;
        d.set_item("join", &self.t.join)?;
        d.set_item("clock_bridge", &self.t.clock_bridge)?;
        d.set_item("kinds", self.t.kinds.clone())?;
        d.set_item("events", events_dict(py, &self.t.events)?)?;
        Ok(d)
    }

    /// Rebuild from `state()`'s columns; every value is checked (ValueError, never a wrong
    /// snapshot).
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (table, key0, key1, key2, metric, bytes, sum, sum_sq, min, max, overflow, buckets, counts, marks, counters, join, clock_bridge, kinds, events=None, readings=None))]
    fn from_state(
        table: Vec<String>,
        key0: Vec<String>,
        key1: Vec<String>,
        key2: Vec<String>,
        metric: Vec<String>,
        bytes: Vec<u64>,
        sum: Vec<u64>,
        sum_sq: Vec<u128>,
        min: Vec<Option<u64>>,
        max: Vec<Option<u64>>,
        overflow: Vec<u64>,
        buckets: Vec<Vec<Option<i32>>>,
        counts: Vec<Vec<u64>>,
        marks: Vec<(String, String, bool, u64)>,
        counters: BTreeMap<String, u64>,
        join: String,
        clock_bridge: String,
        kinds: Vec<String>,
        events: Option<EventColumns>,
        readings: Option<Vec<ReadingColumns>>,
    ) -> PyResult<PyActivitySnapshot> {
        let n = table.len();
        let lens = [key0.len(), key1.len(), key2.len(), metric.len(), bytes.len(), sum.len(), sum_sq.len()];
        if lens
            .iter()
            .chain(&[min.len(), max.len(), overflow.len(), buckets.len(), counts.len()])
            .any(|&l| l != n)
        {
            return Err(PyValueError::new_err("activity snapshot columns have different lengths"));
        }
        let bad = |m: String| PyValueError::new_err(m);
        let mut rows = Vec::with_capacity(n);
        for i in 0..n {
            let t = TABLES.iter().find(|t| **t == table[i]).ok_or_else(|| {
                bad(format!("unknown device table {:?}; valid tables are {}", table[i], TABLES.join(", ")))
            })?;
            let m = METRICS.iter().find(|m| **m == metric[i]).ok_or_else(|| {
                bad(format!("unknown metric {:?}; valid metrics are {}", metric[i], METRICS.join(", ")))
            })?;
            if buckets[i].len() != counts[i].len() {
                return Err(bad(format!(
                    "device row {i} has {} buckets but {} counts",
                    buckets[i].len(),
                    counts[i].len()
                )));
            }
            let totals =
                Totals { overflow: overflow[i], sum: sum[i], sum_sq: sum_sq[i], min: min[i], max: max[i] };
            let parts = buckets[i].iter().copied().zip(counts[i].iter().copied());
            let h = Histogram::from_parts(parts, totals).map_err(|e| bad(format!("device row {i}: {e}")))?;
            rows.push(HistRow {
                table: t,
                keys: [key0[i].clone(), key1[i].clone(), key2[i].clone()],
                metric: m,
                hist: h,
                bytes: bytes[i],
            });
        }
        let readings = readings.map(|r| {
            r.iter()
                .map(|(collector, window, values)| Reading {
                    collector: *collector,
                    window: *window,
                    values: counts_of(values),
                })
                .collect()
        });
        let kinds =
            kinds.iter().filter_map(|k| activity::kind_by_name(k).ok().map(activity::kind_name)).collect();
        let events = events.map_or_else(|| Ok(EventLog::default()), events_of)?;
        let mut t = ActivityTotals { rows, marks, join, clock_bridge, kinds, events, ..Default::default() };
        t.set_counters_read_back(counts_of(&counters), readings);
        Ok(PyActivitySnapshot { t })
    }
}

/// The event log's columns as `events()` gives them and `from_state` takes them back.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct EventColumns {
    kind: Vec<String>,
    name: Vec<String>,
    group: Vec<Option<String>>,
    device_id: Vec<u32>,
    stream_id: Vec<u32>,
    correlation_id: Vec<u64>,
    sequence: Vec<Option<u64>>,
    start_ns: Vec<u64>,
    end_ns: Vec<u64>,
    bytes: Vec<Option<u64>>,
    /// Absent in files written before the column.
    #[pyo3(default)]
    data_type: Option<Vec<Option<String>>>,
}

/// The events as columns, ordered by start (then delivery order).
fn events_dict<'py>(py: Python<'py>, log: &EventLog) -> PyResult<Bound<'py, PyDict>> {
    let by_start = log.by_start();
    let e = by_start.iter().map(|&i| &log.events[i]).collect::<Vec<_>>();
    let d = PyDict::new(py);
    d.set_item("kind", e.iter().map(|x| EVENT_KINDS[x.kind as usize]).collect::<Vec<_>>())?;
    d.set_item("name", e.iter().map(|x| log.name(x.name)).collect::<Vec<_>>())?;
    d.set_item("group", e.iter().map(|x| x.group.map(|g| log.name(g))).collect::<Vec<_>>())?;
    d.set_item("device_id", e.iter().map(|x| x.device).collect::<Vec<_>>())?;
    d.set_item("stream_id", e.iter().map(|x| x.stream).collect::<Vec<_>>())?;
    d.set_item("correlation_id", e.iter().map(|x| x.correlation).collect::<Vec<_>>())?;
    d.set_item("sequence", e.iter().map(|x| x.sequence).collect::<Vec<_>>())?;
    d.set_item("start_ns", e.iter().map(|x| x.start).collect::<Vec<_>>())?;
    d.set_item("end_ns", e.iter().map(|x| x.end).collect::<Vec<_>>())?;
    d.set_item("bytes", e.iter().map(|x| x.bytes).collect::<Vec<_>>())?;
    d.set_item("data_type", e.iter().map(|x| x.data_type.map(data_type_name)).collect::<Vec<_>>())?;
    Ok(d)
}

fn events_of(c: EventColumns) -> PyResult<EventLog> {
    let n = c.kind.len();
    let lens = [
        c.name.len(),
        c.group.len(),
        c.device_id.len(),
        c.stream_id.len(),
        c.correlation_id.len(),
        c.sequence.len(),
        c.start_ns.len(),
        c.end_ns.len(),
        c.bytes.len(),
    ];
    let types: Vec<Option<String>> = c.data_type.unwrap_or_else(|| vec![None; n]);
    if lens.iter().chain([&types.len()]).any(|&l| l != n) {
        return Err(PyValueError::new_err("device event columns have different lengths"));
    }
    let mut s = Strings::default();
    let mut out = Vec::with_capacity(n);
    for (i, data_type) in types.into_iter().enumerate() {
        let kind = EVENT_KINDS.iter().position(|k| *k == c.kind[i]).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown device event kind {:?}; valid kinds are {}",
                c.kind[i],
                EVENT_KINDS.join(", ")
            ))
        })? as u8;
        if c.end_ns[i] < c.start_ns[i] {
            return Err(PyValueError::new_err(format!("device event {i} ends before it starts")));
        }
        out.push(Event {
            kind,
            name: s.intern(&c.name[i]),
            group: c.group[i].as_deref().map(|g| s.intern(g)),
            device: c.device_id[i],
            stream: c.stream_id[i],
            correlation: c.correlation_id[i],
            sequence: c.sequence[i],
            start: c.start_ns[i],
            end: c.end_ns[i],
            bytes: c.bytes[i],
            data_type: match data_type.as_deref() {
                None => None,
                Some(t) => Some(data_type_of(t).ok_or_else(|| {
                    PyValueError::new_err(format!("device event {i} has an unknown data type {t:?}"))
                })?),
            },
        });
    }
    Ok(s.into_log(out))
}

/// The device event kinds, in their order (DEVICE_EVENTS_SCHEMA's `kind` values).
#[pyfunction]
pub fn device_event_kinds() -> Vec<&'static str> {
    EVENT_KINDS.to_vec()
}

/// The activity kinds by name.
#[pyfunction]
pub fn activity_kinds() -> Vec<&'static str> {
    activity::kind_names()
}

fn mstx_fns() -> PyResult<mstx::Mstx> {
    mstx::functions().map_err(|e| to_py(Error::InvalidArgument(e.to_string())))
}

fn message(s: &str) -> PyResult<std::ffi::CString> {
    mstx::message(s).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Where MSTX is bound from (binding it now if needed); raises with what was tried.
#[pyfunction]
pub fn mstx_library() -> PyResult<String> {
    mstx_fns()?;
    Ok(mstx::library().map(|p| p.display().to_string()).unwrap_or_default())
}

/// `mstxMarkA` (or `mstxDomainMarkA` with a domain handle).
#[pyfunction]
#[pyo3(signature = (message, stream=0, domain=0))]
pub fn mstx_mark(message: &str, stream: usize, domain: usize) -> PyResult<()> {
    let f = mstx_fns()?;
    let m = self::message(message)?;
    // SAFETY: MSTX functions take a NUL-terminated message and an opaque stream; the domain is a
    // handle mstxDomainCreateA returned (never destroyed by us).
    unsafe {
        match (domain, f.domain_mark) {
            (0, _) | (_, None) => (f.mark)(m.as_ptr(), stream as *mut _),
            (d, Some(dm)) => dm(d as *mut _, m.as_ptr(), stream as *mut _),
        }
    }
    Ok(())
}

/// `mstxRangeStartA` / `mstxDomainRangeStartA`; the range id (0: MSTX is not collecting).
#[pyfunction]
#[pyo3(signature = (message, stream=0, domain=0))]
pub fn mstx_range_start(message: &str, stream: usize, domain: usize) -> PyResult<u64> {
    let f = mstx_fns()?;
    let m = self::message(message)?;
    // SAFETY: as in mstx_mark.
    Ok(unsafe {
        match (domain, f.domain_range_start) {
            (0, _) | (_, None) => (f.range_start)(m.as_ptr(), stream as *mut _),
            (d, Some(drs)) => drs(d as *mut _, m.as_ptr(), stream as *mut _),
        }
    })
}

/// `mstxRangeEnd` / `mstxDomainRangeEnd`.
#[pyfunction]
#[pyo3(signature = (id, domain=0))]
pub fn mstx_range_end(id: u64, domain: usize) -> PyResult<()> {
    let f = mstx_fns()?;
    // SAFETY: an id from range start (unknown ids are ignored by MSTX) and a domain handle.
    unsafe {
        match (domain, f.domain_range_end) {
            (0, _) | (_, None) => (f.range_end)(id),
            (d, Some(dre)) => dre(d as *mut _, id),
        }
    }
    Ok(())
}

/// `mstxDomainCreateA`: an opaque handle (0 if the library has no domains).
#[pyfunction]
pub fn mstx_domain_create(name: &str) -> PyResult<usize> {
    let f = mstx_fns()?;
    let n = message(name)?;
    let Some(create) = f.domain_create else { return Ok(0) };
    // SAFETY: a NUL-terminated name; the handle is kept for the process.
    Ok(unsafe { create(n.as_ptr()) } as usize)
}

/// bench/activity.py: aggregate synthetic records on this thread; (ns, records).
#[cfg(feature = "test-hooks")]
#[pyfunction]
#[pyo3(signature = (records, names=64, api=false))]
pub fn _bench_aggregate(py: Python<'_>, records: usize, names: usize, api: bool) -> (u64, u64) {
    py.detach(|| activity::bench::aggregate_rate(records, names, api))
}

/// bench/activity.py: ns the complete callback takes per buffer.
#[cfg(feature = "test-hooks")]
#[pyfunction]
#[pyo3(signature = (buffers, pressure=false))]
pub fn _bench_complete(py: Python<'_>, buffers: usize, pressure: bool) -> PyResult<f64> {
    py.detach(|| activity::bench::complete_cost(buffers, pressure))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
