//! The recording engine: histograms, per-thread shards, the clock, the recorder's windows and the
//! session state machine. Knows nothing of Python.

pub mod clock;
pub mod hist;
pub mod recorder;
pub mod seqlock;
pub mod session;
pub mod shard;
