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
        }
    }
}
