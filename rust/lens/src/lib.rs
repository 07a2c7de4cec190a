//! mspti-lens native core: binds an MSPTI library at run time, pairs every ENTER/EXIT callback
//! into per-thread latency histograms, and merges them into snapshots.
//!
//! Layers, each using only those before it: `ffi` (the ABI, finding and binding a library) ->
//! `core` (histograms, shards, counters, clock, windows) -> `callback` (the hot path) ->
//! `session` (the subscription) -> `py` (feature `python`: conversion only).

// Public until the items nothing in the crate uses are gone (private, they fail the dead-code lint).
pub mod activity;
pub mod callback;
pub mod core;
mod error;
pub mod ffi;
pub mod session;
pub mod signals;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};

/// The extension module `mspti_lens._native`: what it exports is listed here, once; the binding
/// code is in `py/`.
// The hooks only tests and benchmarks call exist only with the feature `test-hooks` (Cargo.toml
// names them), which `make dev` turns on and wheels do not. A plain comment: the module's
// docstring is in every build, and scripts/check_wheels.py looks for the hooks' names.
#[cfg(feature = "python")]
#[pyo3::pymodule]
mod _native {
    use pyo3::prelude::*;

    use crate::activity::config;
    use crate::activity::counters::ActivityCounter;
    use crate::core::counters::Counter;
    use crate::core::{clock, hist, slowest};

    #[cfg(feature = "test-hooks")]
    #[pymodule_export]
    use crate::py::activity::{_bench_aggregate, _bench_complete};
    /// Device activity and MSTX.
    #[pymodule_export]
    use crate::py::activity::{
        activity_kinds, device_event_kinds, mstx_domain_create, mstx_library, mstx_mark, mstx_range_end,
        mstx_range_start, PyActivity, PyActivitySnapshot,
    };
    #[pymodule_export]
    use crate::py::arrivals::take_collective_arrivals;
    #[pymodule_export]
    use crate::py::errors::{
        LibraryError, MsptiCallError, MsptiError, PreloadRequiredError, SessionError, SubscriberBusyError,
    };
    #[cfg(feature = "test-hooks")]
    #[pymodule_export]
    use crate::py::functions::_trip_without_waking;
    #[pymodule_export]
    use crate::py::functions::self_cost;
    #[pymodule_export]
    use crate::py::functions::{
        bucket_bounds, bucket_index, bucket_tables, callback_data_layout, callbacks, health, nearest_rank,
        results, route_signal_to_main_thread, signal_handled,
    };
    #[pymodule_export]
    use crate::py::library::{find_library, load_library, mapped_libmspti, search_order, PyLibrary};
    #[pymodule_export]
    use crate::py::session::PySession;
    #[pymodule_export]
    use crate::py::snapshot::{PyCut, PySnapshot};
    /// Latency over time: the per-interval ring of windows.
    #[pymodule_export]
    use crate::py::timeline::{timeline_rows, timeline_start, timeline_stop, timeline_tick};

    #[allow(non_upper_case_globals)]
    #[pymodule_export]
    const __version__: &str = env!("CARGO_PKG_VERSION");
    /// Whether the extension was built with optimisations (benchmarks refuse a debug build).
    #[allow(non_upper_case_globals)]
    #[pymodule_export]
    const build_profile: &str = if cfg!(debug_assertions) { "debug" } else { "release" };
    // The histogram's constants, defined in core/hist.rs.
    #[pymodule_export]
    const SCALE: i32 = hist::SCALE;
    #[pymodule_export]
    const MIN_INDEX: i32 = hist::MIN_INDEX;
    #[pymodule_export]
    const MAX_INDEX: i32 = hist::MAX_INDEX;
    #[pymodule_export]
    const RANGE_MAX_NS: u64 = hist::RANGE_MAX_NS;
    #[pymodule_export]
    const MAX_RELATIVE_ERROR: f64 = hist::MAX_RELATIVE_ERROR;
    /// The slowest calls kept per (thread, key) and window, defined in core/slowest.rs.
    #[pymodule_export]
    const SLOWEST_PER_KEY: usize = slowest::K;
    /// HCCL calls' arrivals a thread keeps between two takes, defined in core/arrivals.rs.
    #[pymodule_export]
    const ARRIVALS_PER_THREAD: usize = crate::core::arrivals::RING;
    #[pymodule_export]
    const DEVICE_EVENTS_DEFAULT: usize = crate::activity::events::DEFAULT_CAP;
    #[pymodule_export]
    const DEVICE_EVENTS_MAX: usize = crate::activity::events::MAX_CAP;
    /// The activity buffer pool's memory cap by default, defined (with its reason) in
    /// activity/config.rs.
    #[pymodule_export]
    const ACTIVITY_POOL_CAP: usize = crate::activity::config::DEFAULT_POOL_CAP;

    /// The values computed when the module loads; then `__all__` (which every export extends)
    /// loses the private names, so that it is the same with the test hooks as without them.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("HISTOGRAM_BYTES", hist::AtomicHistogram::footprint())?;
        m.add("TSC_RELIABLE", clock::tsc_reliable())?;
        m.add("COUNTERS", Counter::ALL.map(|c| (c.name(), c.meaning())).to_vec())?;
        m.add("ACTIVITY_BUFFERS_DEFAULT", (config::DEFAULT_BUFFER_SIZE, config::DEFAULT_BUFFERS))?;
        m.add("ACTIVITY_SETTLE_TIMEOUT_S", config::DEFAULT_SETTLE_TIMEOUT.as_secs_f64())?;
        m.add("ACTIVITY_JOIN_SAMPLE_DEFAULT", config::DEFAULT_JOIN_SAMPLE)?;
        m.add(
            "ACTIVITY_COUNTERS",
            ActivityCounter::ALL
                .iter()
                .map(|c| (c.name(), c.combine().name(), c.is_loss(), c.meaning()))
                .collect::<Vec<_>>(),
        )?;
        let all = m.index()?;
        let public: Vec<String> = all
            .iter()
            .map(|name| name.extract::<String>())
            .collect::<PyResult<Vec<_>>>()?
            .into_iter()
            .filter(|name| name.starts_with("__") || !name.starts_with('_'))
            .collect();
        m.setattr("__all__", public)
    }
}
