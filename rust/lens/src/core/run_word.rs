//! The RUN word's layout (its home, `windows::RUN`, describes the bits): the flags, the run's
//! epoch and the toggle generation, and the stamp an ENTER keeps of them. Apart from windows.rs
//! so that the shard, which keeps stamps, does not know the windows that read it.

pub const RECORDING: u64 = 1;
pub const SLOWEST: u64 = 2;
pub(crate) const EPOCH_SHIFT: u32 = 2;
pub(crate) const EPOCH_MASK: u64 = (1 << (TOGGLES_SHIFT - EPOCH_SHIFT)) - 1;
pub(crate) const TOGGLES_SHIFT: u32 = 32;

/// The epoch of a RUN value.
#[inline(always)]
pub fn epoch_of(run: u64) -> u32 {
    ((run >> EPOCH_SHIFT) & EPOCH_MASK) as u32
}

/// The toggle generation of a RUN value.
#[inline(always)]
pub fn toggles_of(run: u64) -> u32 {
    (run >> TOGGLES_SHIFT) as u32
}

/// A RUN value's epoch and toggle generation as one word (the value shifted past its flags): what
/// an ENTER keeps on its thread's stack, and its EXIT compares with one comparison.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stamp(u64);

impl Stamp {
    pub const ZERO: Stamp = Stamp(0);

    /// The stamp of a RUN value.
    #[inline(always)]
    pub fn of(run: u64) -> Stamp {
        Stamp(run >> EPOCH_SHIFT)
    }

    pub fn new(epoch: u32, toggles: u32) -> Stamp {
        Stamp(u64::from(epoch) & EPOCH_MASK | u64::from(toggles) << (TOGGLES_SHIFT - EPOCH_SHIFT))
    }

    /// `epoch_of` the RUN value.
    #[inline(always)]
    pub fn epoch(self) -> u32 {
        (self.0 & EPOCH_MASK) as u32
    }

    /// `toggles_of` the RUN value.
    #[inline(always)]
    pub fn toggles(self) -> u32 {
        (self.0 >> (TOGGLES_SHIFT - EPOCH_SHIFT)) as u32
    }
}
