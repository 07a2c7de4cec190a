//! The counters a shard keeps besides its histograms: every way a callback can fail to become a
//! clean pair. Defined once here; the shards, the windows, the bindings and Python iterate `ALL`.

use std::ops::{Index, IndexMut};
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter. The discriminant indexes `Counters`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Counter {
    /// EXIT with no matching ENTER on this thread (enabled mid-call, or ENTER lost).
    Unmatched,
    /// ENTERs that found `STACK_DEPTH` calls open and evicted the oldest.
    StackFull,
    /// Pairs not recorded: the thread's key table was full, or a clock reading failed.
    Dropped,
    /// ENTERs whose EXIT can no longer come: a thread ended mid-call, or the call began in an
    /// earlier recording run.
    Abandoned,
    /// Open calls given up because their EXIT never came (the id was disabled mid-call): closed
    /// over by an outer call's EXIT, or evicted from a full stack.
    Orphaned,
    /// Callbacks whose site was neither ENTER nor EXIT.
    BadSite,
    /// Pairs discarded because their id or domain was enabled or disabled while the call was
    /// open: the ENTER may be an earlier call's, whose EXIT was never delivered.
    Toggled,
}

impl Counter {
    pub const COUNT: usize = 7;
    /// Every counter, in the order of its discriminant.
    pub const ALL: [Counter; Counter::COUNT] = [
        Counter::Unmatched,
        Counter::StackFull,
        Counter::Dropped,
        Counter::Abandoned,
        Counter::Orphaned,
        Counter::BadSite,
        Counter::Toggled,
    ];

    /// The name Python and snapshot files use.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Unmatched => "unmatched",
            Counter::StackFull => "stack_full",
            Counter::Dropped => "dropped",
            Counter::Abandoned => "abandoned",
            Counter::Orphaned => "orphaned",
            Counter::BadSite => "bad_site",
            Counter::Toggled => "toggled",
        }
    }

    /// One line for people (docstrings, tables).
    pub const fn meaning(self) -> &'static str {
        match self {
            Counter::Unmatched => "EXIT without its ENTER on that thread",
            Counter::StackFull => "ENTERs that found 64 calls open and evicted the oldest",
            Counter::Dropped => "pairs not recorded: key table full or a failed clock reading",
            Counter::Abandoned => "calls begun in an earlier run or on a thread that ended mid-call",
            Counter::Orphaned => "ENTERs whose EXIT never came, closed over by an outer EXIT or evicted",
            Counter::BadSite => "callbacks whose site was neither ENTER nor EXIT",
            Counter::Toggled => "pairs discarded: their id or domain was toggled while the call was open",
        }
    }

    /// The counter of `name`, also accepting `overflow`, the stack counter's name in snapshot
    /// files written before it had its own.
    pub fn from_name(name: &str) -> Option<Counter> {
        if name == "overflow" {
            return Some(Counter::StackFull);
        }
        Counter::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// A value of every counter: cumulative in a shard, a difference in a window.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters([u64; Counter::COUNT]);

impl Counters {
    pub const ZERO: Counters = Counters([0; Counter::COUNT]);

    /// (counter, value) of every counter, in `Counter::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.into_iter().map(|c| (c, self[c]))
    }

    /// Add every counter of `other` (merging shards, snapshots).
    pub fn add(&mut self, other: &Counters) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.wrapping_add(b);
        }
    }

    /// Subtract a baseline (windows); saturating, so a baseline ahead of the current value gives 0.
    pub fn subtract(&mut self, base: &Counters) {
        for (a, b) in self.0.iter_mut().zip(base.0) {
            *a = a.saturating_sub(b);
        }
    }
}

impl Index<Counter> for Counters {
    type Output = u64;
    fn index(&self, c: Counter) -> &u64 {
        &self.0[c as usize]
    }
}

impl IndexMut<Counter> for Counters {
    fn index_mut(&mut self, c: Counter) -> &mut u64 {
        &mut self.0[c as usize]
    }
}

/// The counters of one shard: only its owner thread writes (load + store, no read-modify-write
/// instruction), snapshots read any time.
pub struct AtomicCounters([AtomicU64; Counter::COUNT]);

impl AtomicCounters {
    pub const fn new() -> AtomicCounters {
        AtomicCounters([const { AtomicU64::new(0) }; Counter::COUNT])
    }

    /// Add `n` to `c`. Owner thread only.
    #[inline(always)]
    pub fn add(&self, c: Counter, n: u64) {
        let a = &self.0[c as usize];
        a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Add one to `c`. Owner thread only.
    #[inline(always)]
    pub fn bump(&self, c: Counter) {
        self.add(c, 1);
    }

    pub fn load(&self) -> Counters {
        let mut v = Counters::default();
        for c in Counter::ALL {
            v[c] = self.0[c as usize].load(Ordering::Relaxed);
        }
        v
    }
}

impl Default for AtomicCounters {
    fn default() -> Self {
        AtomicCounters::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_all_is_in_discriminant_order() {
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i);
            assert_eq!(Counter::from_name(c.name()), Some(c));
        }
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Counter::COUNT);
        assert_eq!(Counter::from_name("overflow"), Some(Counter::StackFull));
        assert_eq!(Counter::from_name("nonsense"), None);
    }

    #[test]
    fn add_and_subtract_every_counter() {
        let a = AtomicCounters::new();
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            a.add(c, i as u64 + 1);
        }
        let mut x = a.load();
        x.add(&a.load());
        assert_eq!(x.iter().map(|(_, v)| v).collect::<Vec<_>>(), vec![2, 4, 6, 8, 10, 12, 14]);
        x.subtract(&a.load());
        assert_eq!(x, a.load());
        x.subtract(&Counters([100; Counter::COUNT]));
        assert_eq!(x, Counters::default());
    }
}
