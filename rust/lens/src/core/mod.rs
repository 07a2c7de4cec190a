//! The recording engine: histograms, per-thread shards, their counters, the clock and the
//! windows (run state, resets, snapshots). Knows nothing of Python, of MSPTI subscriptions or of
//! the callback; the callback and the session use it.

pub mod arrival_ring; // one thread's arrivals: the SPSC ring and the sequence words
pub mod arrivals; // when each HCCL call entered, for arrival skew
pub mod clock;
pub mod counters;
pub mod hist;
pub mod locks;
pub mod quiescence; // a stop waits for the callbacks that may still record
pub mod run_word; // the RUN word's bits: flags, epoch, toggle generation, the ENTER's stamp
pub mod sections; // the callback's quiescence section, the stop's wait over every shard
pub mod self_cost; // what mspti-lens itself costs, measured live
pub mod seqlock;
pub mod shard;
pub mod slowest; // the slowest calls per (thread, key)
pub mod timeline; // latency over time
pub mod toggles;
pub mod windows;
