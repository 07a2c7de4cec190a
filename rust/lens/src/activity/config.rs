//! The collector's configuration and its defaults, each defined here once with its reason
//! (Python reads them from the native module: `ACTIVITY_BUFFERS_DEFAULT`, `ACTIVITY_POOL_CAP`,
//! `ACTIVITY_SETTLE_TIMEOUT_S`).

use std::time::Duration;

use super::events;

/// Bytes per activity buffer. 8 MiB is Huawei's own choice (the MSPTI samples'
/// `DEFAULT_BUFFER_SIZE` in samples/common/helper_mspti.h and the `mspti` Python package's
/// adapter), four times the 2 MiB below which the library warns that buffers are too small
/// (ActivityBuffer::Init). At 56 bytes per KERNEL or RUNTIME_API record one buffer holds about
/// 150,000 records: a training step's launches fit in one or two, and MSPTI hands a buffer over
/// only when it is full or flushed, so fewer, larger buffers mean fewer hand-overs.
pub const DEFAULT_BUFFER_SIZE: usize = 8 << 20;
/// Buffers allocated at the start (the pool grows on demand beyond them, up to the cap). Eight
/// cover the drain thread's 20 ms poll at well over a million records per second; they are
/// mapped, not written (pool.rs `map_zeroed`), so the pages MSPTI never writes cost no resident
/// memory, and growing costs a mapping, not a memset of the new buffers.
pub const DEFAULT_BUFFERS: usize = 8;
/// The most memory one pool's buffers may take, growth included: the `mspti` Python package's
/// `MAX_BUFFER_SIZE` (256 MiB, its pool is that divided by the buffer size). Past it a request is
/// answered with NULL, MSPTI drops the record and counts it, and so do we (`pool_exhausted`).
pub const DEFAULT_POOL_CAP: usize = 256 << 20;
/// How often the drain calls FlushAll while kinds are enabled (FlushPeriod never hands over
/// partial buffers): twice a second keeps a live view under a second old.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// How long a snapshot, stop or close waits at most for device records that are known to be
/// missing: launches whose correlation id the library reported but whose kernel has not come, or
/// device records the library says are still pending. Device records trail their launch by the
/// device's queue (milliseconds, seconds behind a long kernel queue), so the wait ends on
/// evidence, normally long before this bound; a launch waited for once is not waited for again.
/// What has not come by then is counted (`launches_pending`, `settle_timeouts`).
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest settle wait a caller may ask for.
pub const MAX_SETTLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The fraction of time the RUNTIME_API launch join records, by default. The exact join asks the
/// library for a RUNTIME_API record per launch, which doubles the records it writes on the
/// launching thread and the drain parses (on the mixed training step of bench/cann_monitors.py,
/// 591,608 records instead of 303,000), and logs a span per launch; sampled a tenth of the time,
/// in windows at random offsets of each 50 ms (`DEFAULT_JOIN_PERIOD`), the launch split's quantiles keep a
/// Dvoretzky-Kiefer-Wolfowitz rank error of 0.4 % at 100,000 joined launches, and cost a tenth.
/// 1.0 joins every launch (exact).
pub const DEFAULT_JOIN_SAMPLE: f64 = 0.1;

/// Check a `join_sample`: a fraction of time in (0, 1].
///
/// # Errors
/// One line naming the valid range.
pub fn check_join_sample(f: f64) -> Result<f64, String> {
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err(format!(
            "join_sample is the fraction of time the launch join records launches: a number in (0, 1] \
             (1.0 joins every launch), not {f}"
        ))
    }
}

/// How often the sampled join opens a window (of `join_sample` of it, at a random offset in
/// it). Far shorter than a flush period: a job, or a phase of one, shorter than the period
/// between windows may fall wholly between two (on bench/cann_monitors.py's mixed step, 0.2 s of
/// launches, a window per 0.5 s sampled none in 6 of 9 processes; per 50 ms every process had 3
/// to 6 windows). Each window costs two FlushAll calls, an enable and a disable, and wakes the
/// drain twice: 40 wakes a second beside its 20 ms poll.
pub const DEFAULT_JOIN_PERIOD: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub buffer_size: usize,
    /// Buffers allocated at the start.
    pub buffers: usize,
    /// The most bytes the pool may grow to (at least `buffer_size * buffers`).
    pub pool_cap: usize,
    /// How often the drain calls FlushAll while running.
    pub flush_interval: Duration,
    /// `mark_launches`: the stream (an `aclrtStream`) to mark each launch on.
    pub mark_stream: Option<usize>,
    /// Device events kept per window (0: no event log).
    pub device_events: usize,
    /// The bound of a settle wait (see `DEFAULT_SETTLE_TIMEOUT`).
    pub settle_timeout: Duration,
    /// The fraction of time the RUNTIME_API join records (`DEFAULT_JOIN_SAMPLE`; 1.0: exact).
    pub join_sample: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            buffer_size: DEFAULT_BUFFER_SIZE,
            buffers: DEFAULT_BUFFERS,
            pool_cap: DEFAULT_POOL_CAP,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            mark_stream: None,
            device_events: events::DEFAULT_CAP,
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
            join_sample: DEFAULT_JOIN_SAMPLE,
        }
    }
}
