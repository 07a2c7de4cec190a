//! Device activity beside host API time: the MSPTI Activity API through our own buffer pool and
//! a drain thread, aggregated into the same native histograms as the callbacks, with the
//! host-device join per launch function. Knows no Python.
//!
//! ```text
//!  MSPTI record thread ──request──▶ pool (lend, grow)   MSPTI complete ──▶ pool (mark ready, O(1))
//!                                                                          │
//!  callback ──launch_hooks::around──▶ span rings ──────▶ drain thread ◀────┘  (+ FlushAll loop)
//!                                                          │ parse, intern, join
//!                                                          ▼
//!                                              aggregate::State (tables of Histogram)
//!                                                          │ collector: settle, window
//!                                                          ▼
//!                                                 totals::ActivityTotals ──▶ bindings
//! ```
//!
//! One file per job: `kinds` (the catalogue of kinds), `join` (how launches meet kernels),
//! `config` (defaults and their reasons), `counters` (every activity counter, declared once),
//! `collector` (enable, settle, windows), `drain` (the drain thread), `totals` (a window and its
//! merge), `pool` (the buffers), `launch_hooks` (what the callback does for the join),
//! `aggregate` (records into histograms), `span_queue` (a thread's spans awaiting its API records), `records`/`layout` (the ABI's records),
//! `loom_atomics` (std's atomics, or loom's in model tests).

pub mod aggregate;
pub mod bench;
pub mod clock_bridge;
pub mod collector;
pub mod config;
mod correlations;
pub mod counters;
mod drain;
pub mod events;
pub mod join;
pub mod kinds;
pub mod launch_hooks;
pub mod layout;
mod loom_atomics;
pub mod mstx;
pub mod names;
pub mod pool;
pub mod records;
mod span_queue;
pub mod symbols;
pub mod tables;
pub mod totals;

pub use collector::Collector;
pub use config::Config;
pub use join::JoinMode;
pub use kinds::{kind_by_name, kind_name, kind_names, KINDS};
pub use totals::{ActivityTotals, HistRow};
