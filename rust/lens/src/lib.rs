//! mspti-lens native core: binds an MSPTI library at run time, pairs every ENTER/EXIT callback
//! into per-thread latency histograms, and merges them into snapshots.
//!
//! Layers, each using only those before it: `ffi` (the ABI, finding and binding a library) ->
//! `core` (histograms, shards, counters, clock, windows) -> `callback` (the hot path) ->
//! `session` (the subscription) -> `py` (feature `python`: conversion only).

pub mod activity;
pub mod callback;
pub mod core;
pub mod error;
pub mod ffi;
pub mod session;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};

#[cfg(feature = "python")]
use pyo3::prelude::*;

/// The extension module `mspti_lens._native`.
#[cfg(feature = "python")]
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use crate::core::counters::Counter;
    use crate::core::{clock, hist};
    use py::errors::*;
    use py::{functions, library, session, snapshot, timeline};

    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The histogram's constants (issue 9's histogram v2 contract), defined in core/hist.rs.
    m.add("SCALE", hist::SCALE)?;
    m.add("MIN_INDEX", hist::MIN_INDEX)?;
    m.add("MAX_INDEX", hist::MAX_INDEX)?;
    m.add("RANGE_MAX_NS", hist::RANGE_MAX_NS)?;
    m.add("MAX_RELATIVE_ERROR", hist::MAX_RELATIVE_ERROR)?;
    // The slowest calls kept per (thread, key) and window (issue 13), defined in core/exemplars.rs.
    m.add("EXEMPLARS_PER_KEY", crate::core::exemplars::K)?;
    m.add("HISTOGRAM_BYTES", hist::AtomicHistogram::footprint())?;
    m.add("TSC_RELIABLE", clock::tsc_reliable())?;
    m.add("COUNTERS", Counter::ALL.map(|c| (c.name(), c.meaning())).to_vec())?;
    m.add("build_profile", if cfg!(debug_assertions) { "debug" } else { "release" })?;
    m.add("MsptiError", py.get_type::<MsptiError>())?;
    m.add("LibraryError", py.get_type::<LibraryError>())?;
    m.add("MsptiCallError", py.get_type::<MsptiCallError>())?;
    m.add("SubscriberBusyError", py.get_type::<SubscriberBusyError>())?;
    m.add("PreloadRequiredError", py.get_type::<PreloadRequiredError>())?;
    m.add("SessionError", py.get_type::<SessionError>())?;
    m.add_class::<library::PyLibrary>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<snapshot::PySnapshot>()?;
    m.add_function(wrap_pyfunction!(library::load_library, m)?)?;
    m.add_function(wrap_pyfunction!(library::find_library, m)?)?;
    m.add_function(wrap_pyfunction!(library::search_order, m)?)?;
    m.add_function(wrap_pyfunction!(library::mapped_libmspti, m)?)?;
    m.add_function(wrap_pyfunction!(functions::health, m)?)?;
    m.add_function(wrap_pyfunction!(functions::callbacks, m)?)?;
    m.add_function(wrap_pyfunction!(functions::results, m)?)?;
    m.add_function(wrap_pyfunction!(functions::bucket_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(functions::bucket_index, m)?)?;
    m.add_function(wrap_pyfunction!(functions::nearest_rank, m)?)?;
    m.add_function(wrap_pyfunction!(functions::bucket_tables, m)?)?;
    m.add_function(wrap_pyfunction!(functions::callback_data_layout, m)?)?;
    // issue 13: latency over time
    m.add_function(wrap_pyfunction!(timeline::timeline_start, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::timeline_stop, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::timeline_tick, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::timeline_rows, m)?)?;
    py::activity::register(m)?;
    Ok(())
}
