//! Every counter an activity snapshot reports, declared once: its name, how windows of it combine,
//! whether it counts something lost, and what it means. The drain, the collector's windows,
//! `ActivityTotals::merge`, the bindings (`_native.ACTIVITY_COUNTERS`) and Python's summaries all
//! read this table.

use std::ops::{Index, IndexMut};

/// How a counter's values of several windows combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Counted within its window: windows add (threads, runs, ranks alike).
    Sum,
    /// A reading of one moment of one collector: the latest window of each collector counts,
    /// and collectors (processes, ranks) add.
    Moment,
    /// The highest reading of one collector: the highest of each collector's windows counts,
    /// and collectors add.
    Peak,
    /// Yes (1) or no (0) of the library: the highest of all.
    Flag,
}

impl Combine {
    pub const fn name(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Moment => "moment",
            Combine::Peak => "peak",
            Combine::Flag => "flag",
        }
    }

    /// Whether a collector's windows of this counter are read at one moment (not added).
    pub const fn per_collector(self) -> bool {
        matches!(self, Combine::Moment | Combine::Peak)
    }
}

macro_rules! declare {
    ($($var:ident => $name:literal, $combine:ident, $loss:literal, $meaning:literal;)*) => {
        /// One activity counter. The discriminant indexes `ActivityCounts`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(usize)]
        pub enum ActivityCounter { $($var,)* }

        impl ActivityCounter {
            /// Every counter, in discriminant (report) order.
            pub const ALL: [ActivityCounter; [$(ActivityCounter::$var,)*].len()] = [$(ActivityCounter::$var,)*];
            pub const COUNT: usize = ActivityCounter::ALL.len();

            /// The name in snapshots, files and Python.
            pub const fn name(self) -> &'static str {
                match self { $(ActivityCounter::$var => $name,)* }
            }

            pub const fn combine(self) -> Combine {
                match self { $(ActivityCounter::$var => Combine::$combine,)* }
            }

            /// Whether a non-zero value means records, joins or events were lost or left out
            /// (summaries show these).
            pub const fn is_loss(self) -> bool {
                match self { $(ActivityCounter::$var => $loss,)* }
            }

            /// One line for people.
            pub const fn meaning(self) -> &'static str {
                match self { $(ActivityCounter::$var => $meaning,)* }
            }
        }
    };
}

declare! {
    Records => "records", Sum, false, "records parsed from the buffers MSPTI handed back";
    Buffers => "buffers", Sum, false, "buffers handed back and parsed";
    BadRecords => "bad_records", Sum, true,
        "records of a kind this build does not know, or cut off: the rest of their buffer is skipped";
    SkippedBytes => "skipped_bytes", Sum, true, "bytes skipped after a bad record";
    Negative => "negative", Sum, true, "records that end before they start (not recorded)";
    UnpairedMarkers => "unpaired_markers", Sum, true,
        "MSTX range and launch-mark halves whose partner never came";
    UnjoinedKernels => "unjoined_kernels", Sum, true,
        "kernels whose correlation id never met a launch (evicted, ambiguous, or left at close)";
    Ambiguous => "ambiguous", Sum, true,
        "correlation ids seen on API records of two different launches: not joined";
    ZeroCorrelation => "zero_correlation", Sum, true,
        "API records with correlation id 0 inside a launch: not joined";
    ClockSkew => "clock_skew", Sum, true,
        "kernels that began before their launch's ENTER on the activity clock: not recorded";
    Overlapped => "overlapped", Sum, true,
        "launches whose external correlation id overlapped another pushed one: not joined";
    SpansLost => "spans_lost", Sum, true, "launch spans overwritten in their ring before the drain read them";
    IntoOther => "into_other", Sum, false, "records counted in a table's \"(other)\" row (the table was full)";
    NamesOverflow => "names_overflow", Sum, true, "names not interned (the name table was full)";
    BadPointers => "bad_pointers", Sum, true, "name pointers that could not be read";
    PoolExhausted => "pool_exhausted", Sum, true,
        "buffer requests answered with NULL: every buffer was out and the pool at its memory cap (MSPTI dropped the records)";
    NullBuffers => "null_buffers", Sum, false, "complete calls with a NULL buffer (26.0/26.1 make one after a NULL request)";
    ForeignBuffers => "foreign_buffers", Sum, true, "complete calls with a buffer that is not ours (ignored)";
    BuffersLent => "buffers_lent", Moment, false, "buffers lent to MSPTI and not yet handed back";
    PoolBuffers => "pool_buffers", Peak, false,
        "buffers allocated: the pool grows on demand up to its memory cap and never shrinks";
    PoolPeakInUse => "pool_peak_in_use", Peak, false,
        "the most buffers out at once (lent to MSPTI or waiting for the drain)";
    LibraryDropped => "library_dropped", Sum, true,
        "records the library says it dropped (msptiActivityGetNumDroppedRecords)";
    LibraryReportsDrops => "library_reports_drops", Flag, false,
        "1 when the library can report its dropped records (msptiActivityGetNumDroppedRecords)";
    KernelsPending => "kernels_pending", Moment, true, "kernels waiting for their launch's correlation id";
    LaunchesPending => "launches_pending", Moment, true,
        "launches whose kernel record had not come when the window was taken (after the settle wait)";
    UnjoinedLaunches => "unjoined_launches", Sum, true, "launches whose kernel never came, given up at close";
    SettleTimeouts => "settle_timeouts", Sum, true,
        "settle waits that ended at their bound with device records still missing";
    LateKernels => "late_kernels", Sum, false,
        "kernels that came after a settle wait had given up on them (joined when they came)";
    UnloggedLaunches => "unlogged_launches", Sum, true, "launches not logged: no span ring could be had for the thread";
    MarkFailures => "mark_failures", Sum, true, "launch marks that could not be made (no mstxMarkA)";
    DeviceEventsDropped => "device_events_dropped", Sum, true,
        "device events beyond the event log's cap per window (counted in the tables, not logged)";
    KernelsUnsampled => "kernels_unsampled", Sum, false,
        "kernels whose launch the sampled join did not record (launched outside its windows: join_sample < 1)";
    JoinSampledNs => "join_sampled_ns", Sum, false,
        "ns the launch join recorded launches (its sample windows, CLOCK_MONOTONIC; all of join_active_ns when exact)";
    JoinActiveNs => "join_active_ns", Sum, false,
        "ns the launch join was on (CLOCK_MONOTONIC; the sampled fraction is join_sampled_ns / join_active_ns)";
    JoinWindows => "join_windows", Sum, false, "sample windows of the sampled launch join, settled";
}

impl ActivityCounter {
    pub fn from_name(name: &str) -> Option<ActivityCounter> {
        ActivityCounter::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// A value of every activity counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityCounts([u64; ActivityCounter::COUNT]);

impl Default for ActivityCounts {
    fn default() -> ActivityCounts {
        ActivityCounts([0; ActivityCounter::COUNT])
    }
}

impl ActivityCounts {
    /// (counter, value) of every counter, in `ActivityCounter::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (ActivityCounter, u64)> + '_ {
        ActivityCounter::ALL.into_iter().map(|c| (c, self[c]))
    }

    /// This window's values: the sums since `base`, every other counter as it reads now.
    pub fn since(&self, base: &ActivityCounts) -> ActivityCounts {
        let mut out = *self;
        for c in ActivityCounter::ALL {
            if c.combine() == Combine::Sum {
                out[c] = self[c].saturating_sub(base[c]);
            }
        }
        out
    }
}

impl Index<ActivityCounter> for ActivityCounts {
    type Output = u64;
    fn index(&self, c: ActivityCounter) -> &u64 {
        &self.0[c as usize]
    }
}

impl IndexMut<ActivityCounter> for ActivityCounts {
    fn index_mut(&mut self, c: ActivityCounter) -> &mut u64 {
        &mut self.0[c as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_all_is_in_discriminant_order() {
        for (i, c) in ActivityCounter::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i);
            assert_eq!(ActivityCounter::from_name(c.name()), Some(c));
            assert!(!c.meaning().is_empty());
        }
        let mut names: Vec<_> = ActivityCounter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ActivityCounter::COUNT);
    }

    #[test]
    fn a_window_subtracts_the_baseline_of_sums_only() {
        let mut now = ActivityCounts::default();
        now[ActivityCounter::Records] = 100;
        now[ActivityCounter::KernelsPending] = 40;
        let mut base = ActivityCounts::default();
        base[ActivityCounter::Records] = 30;
        base[ActivityCounter::KernelsPending] = 25;
        let w = now.since(&base);
        assert_eq!(w[ActivityCounter::Records], 70);
        assert_eq!(w[ActivityCounter::KernelsPending], 40, "a moment is read, never differenced");
    }
}
