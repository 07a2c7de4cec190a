//! Latency histograms: the exponential buckets of OpenTelemetry exponential histograms and
//! Prometheus native histograms at scale 7, so exports need no re-bucketing and an exact downscale
//! merges neighbours.
//!
//! - base = 2^(2^-7): 128 buckets per power of two, relative error <= (base-1)/(base+1) = 0.27 %.
//! - Bucket `index` i holds the integer-ns values v with base^i < v <= base^(i+1) (OpenTelemetry's
//!   convention; a Prometheus native bucket index is i + 1). 1 ns is index -1.
//! - Range: 1 ns to 2^42 ns (73 min; HCCL's default timeout is 30 min). 0 ns has a zero bucket
//!   (threshold 0). Larger values are counted as `overflow` (and in count, sum, min, max, exactly)
//!   in no bucket; a quantile that falls among them is None, never a made-up number.
//! - Sum of squares in u128: exact, so the standard deviation is exact.
//! - Quantiles by nearest rank (numpy's `inverted_cdf`) with integer ranks: see `nearest_rank`.
//!
//! Storage: slots 0..=128 hold the values 0..=128 one each (finer than their buckets, and each in
//! a bucket of its own: consecutive integers there are more than a base apart); slots above hold
//! the buckets from index 896 (values 129..) up. Histograms merge by adding slots, so threads,
//! windows, runs and ranks all merge exactly.

use super::seqlock::{SeqLock, RUNTIME};
use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the log2 of the bucket base's inverse: base = 2^(2^-SCALE).
pub const SCALE: i32 = 7;
/// Buckets per power of two.
pub const PER_OCTAVE: u32 = 1 << SCALE;
/// The largest value in a bucket, 2^42 ns (the upper bound of `MAX_INDEX`); larger ones overflow.
pub const RANGE_MAX_NS: u64 = 1 << 42;
/// The bucket of 1 ns.
pub const MIN_INDEX: i32 = -1;
/// The bucket whose upper bound is 2^42 ns.
pub const MAX_INDEX: i32 = 42 * PER_OCTAVE as i32 - 1;
/// (base - 1) / (base + 1): the worst relative error of a bucket's representative value.
pub const MAX_RELATIVE_ERROR: f64 = 0.002_707_599_557_476_281;

/// Values up to this have a slot each.
pub const DIRECT_MAX: u64 = 128;
/// The bucket of 129 ns, the first one stored by index.
pub const FIRST_INDEXED: i32 = 7 * PER_OCTAVE as i32;
/// Slots: 0..=128 by value, then `FIRST_INDEXED..=MAX_INDEX` by index.
pub const SLOTS: usize = DIRECT_MAX as usize + 1 + (MAX_INDEX - FIRST_INDEXED + 1) as usize;
/// The slot of 0 ns: the zero bucket.
pub const ZERO_SLOT: usize = 0;
/// What `slot_of` returns for a value beyond the range.
pub const OVERFLOW_SLOT: usize = SLOTS;

/// floor(2^(62 + k/128)) for k = 1..=127, then a sentinel: the bucket boundaries within one power
/// of two as 63-bit fixed point (exact integers, computed with integer roots and checked by
/// `tests::boundary_table_is_exact`).
pub const MANTISSA_BOUNDS: [u64; 128] = [
    0x4058f6a7ecccd5b6,
    0x40b268f9de0183b9,
    0x410c57a1b9fe12f5,
    0x4166c34c5615d0eb,
    0x41c1aca777db771b,
    0x421d1461d66f2023,
    0x4278fb2b1bce0d14,
    0x42d561b3e6243d8a,
    0x433248adc91fdd01,
    0x438fb0cb4f468808,
    0x43ed9abffb4c6bc8,
    0x444c0740496d4293,
    0x44aaf701b0c72fee,
    0x450a6abaa4b77ecd,
    0x456a632296394492,
    0x45cae0f1f545eb73,
    0x462be4e23237a6ee,
    0x468d6fadbf2dd4f2,
    0x46ef821011734e6a,
    0x47521cc5a2e6a9e0,
    0x47b5408bf36472e2,
    0x4818ee218a3358ee,
    0x487d2645f7725895,
    0x48e1e9b9d588e19b,
    0x4947393eca98fcd6,
    0x49ad159789f37495,
    0x4a137f87d58e025b,
    0x4a7a77d47f7b84b0,
    0x4ae1ff436b663ff7,
    0x4b4a169b900c2d00,
    0x4bb2bea4f8bd5847,
    0x4c1bf828c6dc54b7,
    0x4c85c3f13360c4d4,
    0x4cf022c9905bfd32,
    0x4d5b157e4a7fc325,
    0x4dc69cdceaa72a9c,
    0x4e32b9b417619616,
    0x4e9f6cd3967fdba8,
    0x4f0cb70c4ea39210,
    0x4f7a993048d088d6,
    0x4fe91412b2006e82,
    0x50582887dcb8a7e1,
    0x50c7d76542a25b71,
    0x513821818624b40c,
    0x51a907b474015dc9,
    0x521a8ad704f3404f,
    0x528cabc35f4f799c,
    0x52ff6b54d8a89c75,
    0x5372ca67f774358e,
    0x53e6c9da74b29ab4,
    0x545b6a8b3d990704,
    0x54d0ad5a753e077c,
    0x5546932976483b14,
    0x55bd1cdad49f699b,
    0x56344b525f1ff494,
    0x56ac1f752150a563,
    0x57249a29651adc07,
    0x579dbc56b48521ba,
    0x581786e5db7022c1,
    0x5891fac0e95612c7,
    0x590d18d3330c7f1d,
    0x5988e20954889244,
    0x5a05575132a5cc20,
    0x5a827999fcef3242,
    0x5b0049d42f6afbb5,
    0x5b7ec8f19468bbc8,
    0x5bfdf7e546520f3e,
    0x5c7dd7a3b17dcf74,
    0x5cfe69229605cef5,
    0x5d7fad59099f22fd,
    0x5e01a53f7974fd86,
    0x5e8451cfac061b5f,
    0x5f07b404c304c9f1,
    0x5f8bccdb3d398841,
    0x60109d50f86846d8,
    0x6096266533384a2b,
    0x611c69188f1eb339,
    0x61a3666d124bb203,
    0x622b1f66299a6599,
    0x62b39508aa836d6e,
    0x633cc85ad5122fbc,
    0x63c6ba6455dcd8ae,
    0x64516c2e47ff1622,
    0x64dcdec3371793d1,
    0x6569132f21483ba6,
    0x65f60a7f79393e2e,
    0x6683c5c3281ee6e8,
    0x6712460a8fc24071,
    0x67a18c678c8c8c60,
    0x683199ed779592ca,
    0x68c26fb128b4cd63,
    0x69540ec8f895722d,
    0x69e6784cc2cd61bc,
    0x6a79ad55e7f6fd0f,
    0x6b0daeff4fcde703,
    0x6ba27e656b4eb57a,
    0x6c381ca636d99642,
    0x6cce8ae13c57ebda,
    0x6d65ca379564e638,
    0x6dfddbcbed791baa,
    0x6e96c0c284192610,
    0x6f307a412f074891,
    0x6fcb096f5c782210,
    0x70666f76154a7088,
    0x7102ad7fff41e9b4,
    0x719fc4b95f452d28,
    0x723db6501b9ed446,
    0x72dc8373be41a454,
    0x737c2d55770fe711,
    0x741cb5281e25ee34,
    0x74be1c203627c62b,
    0x75606373ee921c97,
    0x76038c5b260e5eee,
    0x76a7980f6cca15c2,
    0x774c87cc06d1812d,
    0x77f25ccdee6d7ae5,
    0x78991853d684a284,
    0x7940bb9e2cffd89c,
    0x79e947ef1d320d2d,
    0x7a92be8a92436616,
    0x7b3d20b6399fc236,
    0x7be86fb985689ddc,
    0x7c94acddaeea5d3a,
    0x7d41d96db915019d,
    0x7deff6b672f84e24,
    0x7e9f06067a4360ba,
    0x7f4f08ae3dc7c425,
    u64::MAX,
];

/// For each 1/256th of a power of two, how many boundaries lie at or below its start; each such
/// cell holds at most one boundary (cells are 1/256 wide, buckets at least 2^(1/128) - 1 > 1/186),
/// so a value's bucket is this count plus one comparison.
pub const CELL_FLOOR: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let start = (1u64 << 62) + ((c as u64) << 54);
        let mut k = 0;
        while k < 127 && MANTISSA_BOUNDS[k] <= start {
            k += 1;
        }
        t[c] = k as u8;
        c += 1;
    }
    t
};

/// The bucket index of a value in 1..=RANGE_MAX_NS (values outside give nonsense; see `slot_of`).
#[inline(always)]
pub fn index_of(v: u64) -> i32 {
    if v <= 1 {
        return MIN_INDEX;
    }
    // 2^e < v <= 2^(e+1); y = v * 2^(62-e) - 1 lies in [2^62, 2^63): v > a boundary b (irrational)
    // exactly when v * 2^(62-e) > floor(b), i.e. y >= floor(b).
    let e = 63 - (v - 1).leading_zeros();
    let y = (v << (62 - e)) - 1;
    let mut j = CELL_FLOOR[((y >> 54) & 0xff) as usize] as usize;
    j += usize::from(y >= MANTISSA_BOUNDS[j]);
    (e * PER_OCTAVE) as i32 + j as i32
}

/// The storage slot of a value: `OVERFLOW_SLOT` beyond the range.
#[inline(always)]
pub fn slot_of(v: u64) -> usize {
    if v <= DIRECT_MAX {
        v as usize
    } else if v > RANGE_MAX_NS {
        OVERFLOW_SLOT
    } else {
        (index_of(v) - FIRST_INDEXED) as usize + DIRECT_MAX as usize + 1
    }
}

/// The bucket index of a slot; None for the zero bucket.
pub fn slot_index(slot: usize) -> Option<i32> {
    match slot {
        ZERO_SLOT => None,
        s if s as u64 <= DIRECT_MAX => Some(index_of(s as u64)),
        s => Some((s - DIRECT_MAX as usize - 1) as i32 + FIRST_INDEXED),
    }
}

/// The slot that holds bucket `index`, or None when the bucket holds no integer value (below
/// 129 ns most buckets are narrower than 1 ns) or is outside MIN_INDEX..=MAX_INDEX.
pub fn index_slot(index: i32) -> Option<usize> {
    if !(MIN_INDEX..=MAX_INDEX).contains(&index) {
        return None;
    }
    if index >= FIRST_INDEXED {
        return Some((index - FIRST_INDEXED) as usize + DIRECT_MAX as usize + 1);
    }
    // The one integer a low bucket may hold is floor of its upper bound.
    let v = bucket_upper(index).floor() as u64;
    (v >= 1 && index_of(v) == index).then_some(v as usize)
}

/// base^index in ns: a bucket's exclusive lower bound.
pub fn bucket_lower(index: i32) -> f64 {
    (f64::from(index) / f64::from(PER_OCTAVE)).exp2()
}

/// base^(index+1) in ns: a bucket's inclusive upper bound.
pub fn bucket_upper(index: i32) -> f64 {
    bucket_lower(index + 1)
}

/// The value that stands for a slot in quantiles: exact below 129 ns; above, the integer nearest
/// the bucket's harmonic midpoint 2·lo·hi/(lo+hi) (within MAX_RELATIVE_ERROR of every value in it).
pub fn slot_value(slot: usize) -> u64 {
    if slot as u64 <= DIRECT_MAX {
        return slot as u64;
    }
    let i = slot_index(slot).unwrap_or(MAX_INDEX);
    let (lo, hi) = (bucket_lower(i), bucket_upper(i));
    let mut v = (2.0 * lo * hi / (lo + hi)).round().clamp(1.0, RANGE_MAX_NS as f64) as u64;
    while v > 1 && index_of(v) > i {
        v -= 1;
    }
    while v < RANGE_MAX_NS && index_of(v) < i {
        v += 1;
    }
    v
}

/// The nearest rank (1-based) of quantile q among n samples: ceil(q·n), at least 1, with q taken
/// to 9 decimals and the product in integers, so q = 0.55 of 100 samples is rank 55 (the f64
/// product 55.000000000000007 would give 56). numpy's `quantile(..., method="inverted_cdf")`.
pub fn nearest_rank(q: f64, n: u64) -> u64 {
    const PARTS: u128 = 1_000_000_000;
    let parts = (q.clamp(0.0, 1.0) * PARTS as f64).round() as u128;
    let rank = (parts * u128::from(n)).div_ceil(PARTS);
    (rank as u64).clamp(1, n.max(1))
}

/// The q-quantile of sparse slot counts ((slot, count) in slot order) and `overflow` values
/// beyond the range, whose exact extremes are unknown (an interval of the timeline, a
/// difference of windows): `Histogram::quantile` with its lowest and highest buckets standing
/// for min and max, and None when the rank falls beyond the range or there is no value.
pub fn sparse_quantile(slots: &[(u32, u64)], overflow: u64, q: f64) -> Option<u64> {
    let n = slots.iter().map(|s| s.1).sum::<u64>() + overflow;
    let (first, last) = (slots.first()?, slots.last()?);
    let rank = nearest_rank(q, n);
    if rank > n - overflow {
        return None;
    }
    let (lo, hi) = (slot_value(first.0 as usize), slot_value(last.0 as usize));
    let mut seen = 0u64;
    slots
        .iter()
        .find(|&&(_, c)| {
            seen += c;
            seen >= rank
        })
        .map(|&(slot, _)| slot_value(slot as usize).clamp(lo, hi))
}

/// A plain (non-atomic) histogram: the result of merging, the unit of statistics.
#[derive(Clone, Debug, PartialEq)]
///
/// Its fields are private: it is made by recording, merging, taking a window, or from parts
/// that `from_parts` (or `add_bucket` and `set_totals`) check, so count is always the sum of its
/// buckets and overflow, and min <= max.
pub struct Histogram {
    /// Per slot (see the module's Storage note).
    counts: Vec<u64>,
    /// Every value, zero and overflow included.
    count: u64,
    /// Sum of values in ns (exact below 2^64 ns, 584 years).
    sum: u64,
    /// Exact sum of squared values (exact below 2^128: any 2^44 values of the range).
    sum_sq: u128,
    min: Option<u64>,
    max: Option<u64>,
    /// Values > RANGE_MAX_NS: in count, sum, sum_sq, min and max, in no bucket.
    overflow: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; SLOTS], count: 0, sum: 0, sum_sq: 0, min: None, max: None, overflow: 0 }
    }
}

impl Histogram {
    #[inline]
    pub fn record(&mut self, v: u64) {
        match slot_of(v) {
            OVERFLOW_SLOT => self.overflow += 1,
            s => self.counts[s] += 1,
        }
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
        self.sum_sq = self.sum_sq.wrapping_add(u128::from(v) * u128::from(v));
        self.min = Some(self.min.map_or(v, |m| m.min(v)));
        self.max = Some(self.max.map_or(v, |m| m.max(v)));
    }

    /// Add another histogram: exact.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.sum_sq = self.sum_sq.wrapping_add(o.sum_sq);
        self.overflow += o.overflow;
        self.min = match (self.min, o.min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max = match (self.max, o.max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn zero_count(&self) -> u64 {
        self.counts[ZERO_SLOT]
    }

    /// The count of one slot (see `slot_of`).
    pub fn slot_count(&self, slot: usize) -> u64 {
        self.counts.get(slot).copied().unwrap_or(0)
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Sample standard deviation (n - 1), as nsys's `StdDev` and msprof-analyze's `stdev`, from
    /// the exact sums: with S = q·n + r, n·M2 = n·Q - S² splits into the integer A = Q - q·(S + r)
    /// and r²/n < n, so only the last division rounds.
    pub fn std_sample(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = u128::from(self.count);
        let s = u128::from(self.sum);
        let (q, r) = (s / n, s % n);
        let a = self.sum_sq.saturating_sub(q * (s + r));
        let m2 = a as f64 - (r as f64) * (r as f64) / n as f64;
        (m2.max(0.0) / (n - 1) as f64).sqrt()
    }

    pub fn min_value(&self) -> u64 {
        self.min.unwrap_or(0)
    }

    pub fn max_value(&self) -> u64 {
        self.max.unwrap_or(0)
    }

    /// The q-quantile (0 <= q <= 1) by nearest rank: the `nearest_rank(q, n)`-th smallest sample,
    /// estimated by its slot's `slot_value` clamped to the exact [min, max] (so within
    /// MAX_RELATIVE_ERROR of the exact sample; exact below 129 ns). The exact max for the largest
    /// rank. None when the rank falls among values beyond the range (their buckets are unknown),
    /// or the histogram is empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        // Extremes are unknown only in a histogram rebuilt from bucket counts alone (a plot's
        // frame): then the buckets stand for them.
        let (lo, hi) = (self.min.unwrap_or(0), self.max.unwrap_or(u64::MAX));
        let rank = nearest_rank(q, self.count);
        if rank == self.count && self.max.is_some() {
            return self.max;
        }
        if rank > self.count - self.overflow {
            return None;
        }
        // Skip whole blocks of slots by their (vectorised) sum, then walk the block that holds
        // the rank.
        const BLOCK: usize = 64;
        let mut seen = 0u64;
        for (b, block) in self.counts.chunks(BLOCK).enumerate() {
            let s: u64 = block.iter().sum();
            if seen + s < rank {
                seen += s;
                continue;
            }
            for (j, &c) in block.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Some(slot_value(b * BLOCK + j).clamp(lo, hi));
                }
            }
        }
        None
    }

    /// Whether `quantile(q)` falls among values beyond the range (and so is None).
    pub fn quantile_beyond_range(&self, q: f64) -> bool {
        self.count > 0 && self.quantile(q).is_none()
    }

    /// Non-empty slots as (slot, count), the zero bucket first.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i, c))
    }

    /// Add `count` values of bucket `index` (None: the zero bucket), as read from a file.
    ///
    /// # Errors
    /// The bucket holds no integer value or lies outside the range, or a count overflows.
    pub fn add_bucket(&mut self, index: Option<i32>, count: u64) -> Result<(), BucketError> {
        let slot = match index {
            None => ZERO_SLOT,
            Some(i) => index_slot(i).ok_or(BucketError::NoSuchBucket(i))?,
        };
        let c = self.counts[slot].checked_add(count).ok_or(BucketError::CountOverflow)?;
        self.count = self.count.checked_add(count).ok_or(BucketError::CountOverflow)?;
        self.counts[slot] = c;
        Ok(())
    }

    /// Set what the buckets do not say (values beyond the range, sums, extremes), as read from
    /// a file, after `add_bucket` gave the buckets.
    ///
    /// # Errors
    /// The histogram would be empty, `min` > `max`, or the count overflows; the histogram is
    /// then unchanged.
    pub fn set_totals(&mut self, t: Totals) -> Result<(), TotalsError> {
        let count = self.count.checked_add(t.overflow).ok_or(TotalsError::CountOverflow)?;
        if count == 0 {
            return Err(TotalsError::Empty);
        }
        if let (Some(min), Some(max)) = (t.min, t.max) {
            if min > max {
                return Err(TotalsError::MinAboveMax { min, max });
            }
        }
        self.count = count;
        self.overflow = t.overflow;
        self.sum = t.sum;
        self.sum_sq = t.sum_sq;
        self.min = t.min;
        self.max = t.max;
        Ok(())
    }

    /// A histogram of its buckets (index, count; None: the zero bucket) and totals, as a file
    /// keeps them: every invariant checked.
    ///
    /// # Errors
    /// A bucket as `add_bucket`, or the totals as `set_totals`, refuse them.
    pub fn from_parts(
        buckets: impl IntoIterator<Item = (Option<i32>, u64)>,
        totals: Totals,
    ) -> Result<Histogram, PartsError> {
        let mut h = Histogram::default();
        for (i, c) in buckets {
            h.add_bucket(i, c).map_err(PartsError::Bucket)?;
        }
        h.set_totals(totals).map_err(PartsError::Totals)?;
        Ok(h)
    }

    /// Every value, zero and overflow included.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of values in ns.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Exact sum of squared values.
    pub fn sum_sq(&self) -> u128 {
        self.sum_sq
    }

    /// The smallest value (None when empty, or rebuilt from buckets alone).
    pub fn min(&self) -> Option<u64> {
        self.min
    }

    pub fn max(&self) -> Option<u64> {
        self.max
    }

    /// Values > RANGE_MAX_NS: in count, sums and extremes, in no bucket.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }
}

/// A histogram's values with its non-empty slots alone: a flight recorder's fine window
/// (`windows::cut`). A cut of a second holds a few slots where a `Histogram` has `SLOTS` (36 KiB),
/// so cutting, merging and keeping one costs what it holds, not the dense storage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sparse {
    /// (slot, count): slots ascending, counts > 0.
    slots: Vec<(u32, u64)>,
    count: u64,
    sum: u64,
    sum_sq: u128,
    min: Option<u64>,
    max: Option<u64>,
    overflow: u64,
}

fn lesser(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn greater(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Histogram {
    /// Move every value into a `Sparse` and leave this histogram empty, its storage kept for the
    /// next values: a scan of the counts eight at a time, writing only the non-empty slots.
    pub fn drain(&mut self) -> Sparse {
        let mut slots = Vec::new();
        for (c, chunk) in self.counts.chunks_mut(8).enumerate() {
            if chunk.iter().fold(0, |a, &b| a | b) == 0 {
                continue;
            }
            for (i, n) in chunk.iter_mut().enumerate() {
                if *n > 0 {
                    slots.push(((c * 8 + i) as u32, std::mem::take(n)));
                }
            }
        }
        let out = Sparse {
            slots,
            count: self.count,
            sum: self.sum,
            sum_sq: self.sum_sq,
            min: self.min,
            max: self.max,
            overflow: self.overflow,
        };
        (self.count, self.sum, self.sum_sq, self.min, self.max, self.overflow) = (0, 0, 0, None, None, 0);
        out
    }

    /// Add a sparse histogram's values: exact, touching its slots alone.
    pub fn add_sparse(&mut self, o: &Sparse) {
        for &(slot, c) in &o.slots {
            self.counts[slot as usize] += c;
        }
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.sum_sq = self.sum_sq.wrapping_add(o.sum_sq);
        self.overflow += o.overflow;
        self.min = lesser(self.min, o.min);
        self.max = greater(self.max, o.max);
    }
}

impl Sparse {
    /// Every value, zero and overflow included.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The sum of two: exact (slots merged in order).
    pub fn merge(&self, o: &Sparse) -> Sparse {
        let (a, b) = (&self.slots, &o.slots);
        let mut slots = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => {
                    slots.push(a[i]);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    slots.push(b[j]);
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    slots.push((a[i].0, a[i].1 + b[j].1));
                    i += 1;
                    j += 1;
                }
            }
        }
        slots.extend_from_slice(&a[i..]);
        slots.extend_from_slice(&b[j..]);
        Sparse {
            slots,
            count: self.count + o.count,
            sum: self.sum.wrapping_add(o.sum),
            sum_sq: self.sum_sq.wrapping_add(o.sum_sq),
            min: lesser(self.min, o.min),
            max: greater(self.max, o.max),
            overflow: self.overflow + o.overflow,
        }
    }

    /// The dense histogram of the same values.
    pub fn to_histogram(&self) -> Histogram {
        let mut h = Histogram::default();
        h.add_sparse(self);
        h
    }
}

/// What a histogram's buckets do not say, as `set_totals` takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub overflow: u64,
    pub sum: u64,
    pub sum_sq: u128,
    pub min: Option<u64>,
    pub max: Option<u64>,
}

/// Why `add_bucket` refused a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketError {
    /// The index holds no integer-ns value at this scale, or lies outside the range.
    NoSuchBucket(i32),
    /// The bucket's or the histogram's count would overflow u64.
    CountOverflow,
}

impl std::fmt::Display for BucketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketError::NoSuchBucket(i) => write!(
                f,
                "bucket index {i} holds no integer-ns value at scale {SCALE} (valid: the indices of \
                 1..={RANGE_MAX_NS} ns, {MIN_INDEX}..={MAX_INDEX})"
            ),
            BucketError::CountOverflow => write!(f, "bucket count overflows"),
        }
    }
}

impl std::error::Error for BucketError {}

/// Why `set_totals` refused the totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TotalsError {
    /// No value at all: a histogram read back holds at least one.
    Empty,
    MinAboveMax {
        min: u64,
        max: u64,
    },
    /// Buckets plus overflow exceed u64.
    CountOverflow,
}

impl std::fmt::Display for TotalsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TotalsError::Empty => write!(f, "it has no samples"),
            TotalsError::MinAboveMax { min, max } => write!(f, "it has min {min} > max {max}"),
            TotalsError::CountOverflow => write!(f, "its count overflows"),
        }
    }
}

impl std::error::Error for TotalsError {}

/// Why `from_parts` refused a histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartsError {
    Bucket(BucketError),
    Totals(TotalsError),
}

impl std::fmt::Display for PartsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartsError::Bucket(e) => e.fmt(f),
            PartsError::Totals(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PartsError {}

/// Slots of a recording bank: the buckets, then overflow (`OVERFLOW_SLOT`), so a record finds its
/// counter with no branch.
const BANK_SLOTS: usize = SLOTS + 1;
/// Words of a non-empty-slot bitmap (one bit per slot).
const NONZERO_WORDS: usize = BANK_SLOTS.div_ceil(64);

/// One window's sums of a histogram (its counts are beside it in `AtomicHistogram`).
#[repr(C)]
struct Scalars {
    count: AtomicU64,
    sum: AtomicU64,
    sum_sq_lo: AtomicU64,
    sum_sq_hi: AtomicU64,
    /// u64::MAX and 0 while the bank is empty (read only when count > 0).
    min: AtomicU64,
    max: AtomicU64,
    /// The attached keeper's gate for this window (the slowest calls': see `record_and`); cleared
    /// with the bank, so a new window starts open. Here, beside the sums a record writes anyway,
    /// it costs a record one load and one compare.
    gate: AtomicU64,
}

/// The recording side: one per (thread, key), written by its owning thread only, and read by the
/// thread that closes a window. Two banks: records of window w go to bank w & 1, chosen inside a
/// write section of `lock` (see seqlock.rs), so a window's closer reads a bank no writer touches
/// any more, whole, and clears it for window w + 2. Every field of a call lands in one window.
///
/// One allocation, aligned to 128 bytes and a multiple of 128 bytes long, so no cache line is
/// shared with anything another thread writes (x86 prefetches lines in pairs). The lock and both
/// banks' sums share the first 128 bytes; a bitmap of the slots written lets the closer visit only
/// those; pages of slots never written are never touched. Overflow is counted in a last slot.
#[repr(C, align(128))]
pub struct AtomicHistogram {
    lock: SeqLock,
    scalars: [Scalars; 2],
    nonzero: [[AtomicU64; NONZERO_WORDS]; 2],
    counts: [[AtomicU64; BANK_SLOTS]; 2],
}

#[inline(always)]
fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(by), Ordering::Relaxed);
}

impl AtomicHistogram {
    /// A new, empty histogram on the heap (zeroed memory: pages never written are never touched).
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> Box<AtomicHistogram> {
        let layout = std::alloc::Layout::new::<AtomicHistogram>();
        // SAFETY: the layout has a non-zero size. All-zero bytes are a valid AtomicHistogram
        // apart from `lock` (every other field is an AtomicU64 or an array of them), and `lock`
        // is written in place before use; after the null check the pointer may become the Box
        // that owns it (allocated with the global allocator and this layout).
        unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<AtomicHistogram>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            std::ptr::addr_of_mut!((*p).lock).write(SeqLock::new());
            let h = Box::from_raw(p);
            for s in &h.scalars {
                s.min.store(u64::MAX, Ordering::Relaxed);
            }
            h
        }
    }

    /// Bytes this histogram occupies.
    pub fn footprint() -> usize {
        std::mem::size_of::<AtomicHistogram>()
    }

    /// Record one duration in the window `window()` reads (inside the write section; it must load
    /// with Acquire). Only the owning thread may call this.
    #[inline(always)]
    pub fn record(&self, v: u64, window: impl FnOnce() -> u64) {
        self.write::<false, RUNTIME>(v, window, |_| 0);
    }

    /// `record` with the write section's fence of kind `F` (seqlock.rs `light_fence_in`).
    #[inline(always)]
    pub fn record_in<const F: u8>(&self, v: u64, window: impl FnOnce() -> u64) {
        self.write::<false, F>(v, window, |_| 0);
    }

    /// `record`, and when `v` is at or past the bank's gate (0 when its window began),
    /// `past_gate(window)` in the same write section, which returns the new gate (the
    /// slowest-call keeper, whose gate is its K-th slowest call + 1). The common path adds one
    /// compare, and the window's closer settles and clears both at once.
    #[inline(always)]
    pub fn record_and(&self, v: u64, window: impl FnOnce() -> u64, past_gate: impl FnOnce(u64) -> u64) {
        self.write::<true, RUNTIME>(v, window, past_gate);
    }

    /// `record_and` with the write section's fence of kind `F` (seqlock.rs `light_fence_in`).
    #[inline(always)]
    pub fn record_and_in<const F: u8>(
        &self,
        v: u64,
        window: impl FnOnce() -> u64,
        past_gate: impl FnOnce(u64) -> u64,
    ) {
        self.write::<true, F>(v, window, past_gate);
    }

    #[inline(always)]
    fn write<const GATED: bool, const F: u8>(
        &self,
        v: u64,
        window: impl FnOnce() -> u64,
        past_gate: impl FnOnce(u64) -> u64,
    ) {
        // At most OVERFLOW_SLOT, the last slot of a bank (clamped so the index below is in bounds).
        let slot = slot_of(v).min(OVERFLOW_SLOT);
        let sq = u128::from(v) * u128::from(v);
        self.lock.write_in::<F, _>(
            window,
            #[inline(always)]
            |w| {
                let b = (w & 1) as usize;
                let s = &self.scalars[b];
                let n = s.count.load(Ordering::Relaxed);
                s.count.store(n + 1, Ordering::Relaxed);
                bump(&s.sum, v);
                let lo = s.sum_sq_lo.load(Ordering::Relaxed);
                let (lo2, carry) = lo.overflowing_add(sq as u64);
                s.sum_sq_lo.store(lo2, Ordering::Relaxed);
                bump(&s.sum_sq_hi, (sq >> 64) as u64 + u64::from(carry));
                // An empty bank holds min = u64::MAX and max = 0 (`new`, `take_window`), so the
                // first record needs no case of its own: branch-free, the stores hit lines the
                // record writes anyway.
                s.min.store(s.min.load(Ordering::Relaxed).min(v), Ordering::Relaxed);
                s.max.store(s.max.load(Ordering::Relaxed).max(v), Ordering::Relaxed);
                // SAFETY: slot <= OVERFLOW_SLOT < BANK_SLOTS (clamped above).
                let c = unsafe { self.counts[b].get_unchecked(slot) };
                let before = c.load(Ordering::Relaxed);
                c.store(before + 1, Ordering::Relaxed);
                if before == 0 {
                    let word = &self.nonzero[b][slot / 64];
                    word.store(word.load(Ordering::Relaxed) | (1u64 << (slot % 64)), Ordering::Relaxed);
                }
                if GATED && v >= s.gate.load(Ordering::Relaxed) {
                    s.gate.store(past_gate(w), Ordering::Relaxed);
                }
            },
        );
    }

    /// Take window `window`'s bank into `into` and clear it. Call only from the one thread that
    /// closes windows, after the window counter has moved past `window` and
    /// `seqlock::window_advanced()` has run; waits for an open write section to end.
    pub fn take_window(&self, window: u64, into: &mut Histogram) {
        let Some(t) = self.take_with(window, |i, c| into.counts[i] += c) else {
            return;
        };
        into.count += t.count;
        into.sum = into.sum.wrapping_add(t.sum);
        into.sum_sq = into.sum_sq.wrapping_add(t.sum_sq);
        into.overflow += t.overflow;
        into.min = lesser(into.min, t.min);
        into.max = greater(into.max, t.max);
    }

    /// `take_window` as a `Sparse` (None when the bank is empty): the bank's written slots alone
    /// are visited and nothing dense is touched (a flight recorder's cut, `windows::cut`).
    pub fn take_sparse(&self, window: u64) -> Option<Sparse> {
        let mut slots = Vec::new();
        let t = self.take_with(window, |i, c| slots.push((i as u32, c)))?;
        Some(Sparse { slots, ..t })
    }

    /// The bank of `window` settled, read and cleared: each written bucket slot (ascending,
    /// count > 0) to `slot`, the rest returned (None: the bank was empty).
    fn take_with(&self, window: u64, mut slot: impl FnMut(usize, u64)) -> Option<Sparse> {
        self.lock.settle();
        let b = (window & 1) as usize;
        let s = &self.scalars[b];
        let n = s.count.load(Ordering::Relaxed);
        if n == 0 {
            return None;
        }
        let mut overflow = 0;
        for (w, word) in self.nonzero[b].iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            if bits == 0 {
                continue;
            }
            word.store(0, Ordering::Relaxed);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let c = self.counts[b][i].swap(0, Ordering::Relaxed);
                if i == OVERFLOW_SLOT {
                    overflow += c;
                } else if c > 0 {
                    slot(i, c);
                }
            }
        }
        let sq = u128::from(s.sum_sq_lo.load(Ordering::Relaxed))
            | u128::from(s.sum_sq_hi.load(Ordering::Relaxed)) << 64;
        let t = Sparse {
            slots: Vec::new(),
            count: n,
            sum: s.sum.load(Ordering::Relaxed),
            sum_sq: sq,
            min: Some(s.min.load(Ordering::Relaxed)),
            max: Some(s.max.load(Ordering::Relaxed)),
            overflow,
        };
        for a in [&s.count, &s.sum, &s.sum_sq_lo, &s.sum_sq_hi, &s.max, &s.gate] {
            a.store(0, Ordering::Relaxed);
        }
        s.min.store(u64::MAX, Ordering::Relaxed);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_histogram_is_empty_and_its_sparse_values_add_back_exactly() {
        let values = [0u64, 3, 3, 90, 1000, 1000, 5000, 123_456, RANGE_MAX_NS + 9];
        let (mut a, mut b, mut both) = (Histogram::default(), Histogram::default(), Histogram::default());
        for (i, &v) in values.iter().enumerate() {
            if i % 2 == 0 {
                a.record(v)
            } else {
                b.record(v)
            }
            both.record(v);
        }
        let (sa, sb) = (a.drain(), b.drain());
        assert_eq!(a, Histogram::default());
        assert_eq!(sa.count() + sb.count(), values.len() as u64);
        assert_eq!(sa.merge(&sb).to_histogram(), both);
        assert_eq!(sb.merge(&sa), sa.merge(&sb));
        a.record(7); // the storage kept takes new values
        let mut with = a.clone();
        with.add_sparse(&sa.merge(&sb));
        let mut want = both.clone();
        want.record(7);
        assert_eq!(with, want);
        assert_eq!(Histogram::default().drain(), Sparse::default());
    }

    #[test]
    fn a_sparse_quantile_is_the_quantile_of_its_histogram_with_bucket_extremes() {
        let mut h = Histogram::default();
        for v in [3u64, 3, 90, 1000, 1000, 5000, 123_456, RANGE_MAX_NS + 9] {
            h.record(v);
        }
        let slots: Vec<(u32, u64)> = h.nonzero().map(|(s, c)| (s as u32, c)).collect();
        let (lo, hi) = (slot_value(slots[0].0 as usize), slot_value(slots.last().unwrap().0 as usize));
        let mut rebuilt = Histogram::default();
        for &(s, c) in &slots {
            rebuilt.add_bucket(slot_index(s as usize), c).unwrap();
        }
        rebuilt
            .set_totals(Totals { overflow: h.overflow(), sum: 0, sum_sq: 0, min: Some(lo), max: Some(hi) })
            .unwrap();
        for q in [0.0, 0.1, 0.5, 0.7, 0.8, 0.875, 0.9, 1.0] {
            let want = if q >= 0.9 { None } else { rebuilt.quantile(q) };
            assert_eq!(sparse_quantile(&slots, h.overflow(), q), want, "q={q}");
        }
        assert_eq!(sparse_quantile(&[], 0, 0.5), None);
    }

    /// Bits needed for b^128 (b^128 is never a power of two unless b is): exact big-integer powers.
    fn bits_of_pow128(b: u64) -> usize {
        let mut x: Vec<u32> = vec![b as u32, (b >> 32) as u32];
        for _ in 0..7 {
            let mut sq = vec![0u64; 2 * x.len() + 1];
            for (i, &a) in x.iter().enumerate() {
                let mut carry = 0u64;
                for (j, &c) in x.iter().enumerate() {
                    let t = sq[i + j] + u64::from(a) * u64::from(c) + carry;
                    sq[i + j] = t & 0xffff_ffff;
                    carry = t >> 32;
                }
                sq[i + x.len()] += carry;
            }
            x = sq.iter().map(|&w| w as u32).collect();
            while x.last() == Some(&0) {
                x.pop();
            }
        }
        (x.len() - 1) * 32 + (32 - x.last().unwrap().leading_zeros() as usize)
    }

    /// v > 2^(i/128) exactly, for v in 1..2^63: v^128 > 2^i.
    fn above(v: u64, i: i64) -> bool {
        if i < 0 {
            return v >= 1;
        }
        // v^128 > 2^i  <=>  bits(v^128) > i (v^128 = 2^i only for v a power of two, i = 128 log2 v)
        let bits = bits_of_pow128(v) as i64;
        if v.is_power_of_two() {
            128 * i64::from(v.trailing_zeros()) > i
        } else {
            bits > i
        }
    }

    #[test]
    fn boundary_table_is_exact() {
        for k in 1..128i64 {
            let b = MANTISSA_BOUNDS[k as usize - 1];
            // floor(2^(62 + k/128)): b <= 2^(62+k/128) < b + 1
            assert!(!above(b, 62 * 128 + k) && above(b + 1, 62 * 128 + k), "k={k}");
        }
        assert_eq!(MANTISSA_BOUNDS[127], u64::MAX);
    }

    #[test]
    fn each_cell_holds_at_most_one_boundary() {
        for c in 0..256u64 {
            let (start, end) = ((1u64 << 62) + (c << 54), (1u64 << 62) + ((c + 1) << 54));
            let n = MANTISSA_BOUNDS[..127].iter().filter(|&&b| b > start && b < end).count();
            assert!(n <= 1, "cell {c}");
            let floor = MANTISSA_BOUNDS[..127].iter().filter(|&&b| b <= start).count();
            assert_eq!(CELL_FLOOR[c as usize] as usize, floor);
        }
    }

    #[test]
    fn indices_follow_the_otel_convention_exactly_at_every_boundary() {
        // Bucket i holds base^i < v <= base^(i+1): check the integers on both sides of every
        // boundary of a spread of powers of two, and the powers of two themselves.
        for e in [0u32, 1, 2, 7, 8, 13, 20, 29, 33, 40, 41] {
            for j in 0..128i64 {
                let i = i64::from(e) * 128 + j;
                let approx = (i as f64 / 128.0).exp2();
                for v in [approx.floor() as u64, approx.floor() as u64 + 1, approx.ceil() as u64 + 1] {
                    if !(1..=RANGE_MAX_NS).contains(&v) {
                        continue;
                    }
                    let got = i64::from(index_of(v));
                    assert!(above(v, got) && !above(v, got + 1), "v={v} index {got}");
                }
            }
        }
        for e in 0..=42 {
            assert_eq!(index_of(1u64 << e), 128 * e - 1);
        }
        assert_eq!(index_of(1), -1);
        assert_eq!(index_of(2), 127);
        assert_eq!(index_of(3), 202); // ceil(128·log2 3) - 1 = ceil(202.88) - 1
    }

    #[test]
    fn the_range_is_1_ns_to_2_pow_42_ns_with_a_zero_bucket_and_overflow() {
        assert_eq!(slot_of(0), ZERO_SLOT);
        assert_eq!(slot_index(ZERO_SLOT), None);
        assert_eq!(slot_of(RANGE_MAX_NS), SLOTS - 1);
        assert_eq!(slot_index(SLOTS - 1), Some(MAX_INDEX));
        assert_eq!(slot_of(RANGE_MAX_NS + 1), OVERFLOW_SLOT);
        assert_eq!(slot_of(u64::MAX), OVERFLOW_SLOT);
        const { assert!(RANGE_MAX_NS >= 3_600_000_000_000, "at least an hour") };
        assert_eq!(bucket_upper(MAX_INDEX), RANGE_MAX_NS as f64);
        let base = 2f64.powf(2f64.powi(-SCALE));
        assert!(((base - 1.0) / (base + 1.0) - MAX_RELATIVE_ERROR).abs() < 1e-15);
    }

    #[test]
    fn slots_and_indices_map_both_ways() {
        let mut prev = None;
        for s in 1..SLOTS {
            let i = slot_index(s).unwrap();
            assert!(prev.is_none_or(|p| i > p), "slot {s}");
            assert_eq!(index_slot(i), Some(s), "index {i}");
            prev = Some(i);
        }
        // Low buckets narrower than 1 ns hold no integer: no slot.
        assert_eq!(index_slot(0), None);
        assert_eq!(index_slot(MIN_INDEX - 1), None);
        assert_eq!(index_slot(MAX_INDEX + 1), None);
        for v in (1..200_000u64).chain((0..2000).map(|k| (k * 2_199_023_255) + 7)) {
            let s = slot_of(v);
            let i = slot_index(s).unwrap();
            assert_eq!(i, index_of(v), "v={v}");
            let (lo, hi) = (bucket_lower(i), bucket_upper(i));
            assert!(lo < v as f64 * (1.0 + 1e-15) && v as f64 <= hi * (1.0 + 1e-15), "v={v}");
            let rep = slot_value(s);
            assert_eq!(slot_of(rep), s);
            assert!((rep as f64 - v as f64).abs() <= v as f64 * 2.0 * MAX_RELATIVE_ERROR + 1e-9, "v={v}");
        }
    }

    #[test]
    fn nearest_ranks_are_integers() {
        assert_eq!(nearest_rank(0.55, 100), 55);
        assert_eq!(nearest_rank(0.07, 100), 7);
        assert_eq!(nearest_rank(0.0, 100), 1);
        assert_eq!(nearest_rank(1.0, 100), 100);
        assert_eq!(nearest_rank(0.5, 101), 51);
        assert_eq!(nearest_rank(0.999, 1000), 999);
        assert_eq!(nearest_rank(0.5, 1), 1);
    }

    fn xorshift(r: &mut u64) -> u64 {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        *r
    }

    #[test]
    fn quantiles_are_within_the_relative_error_of_the_exact_sample() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut vals = Vec::new();
        let mut h = Histogram::default();
        for _ in 0..100_000 {
            // Log-uniform over 1 ns .. 2^40 ns (~18 min): a random octave, then a random value in
            // it. Integer arithmetic only: valgrind's memcheck mistakes libm's FMA pow for a read
            // of uninitialised memory.
            let r = xorshift(&mut rng);
            let octave = r % 40;
            let v = (1u64 << octave) | ((r >> 8) & ((1u64 << octave) - 1));
            vals.push(v);
            h.record(v);
        }
        vals.sort_unstable();
        for q in [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let exact = vals[nearest_rank(q, vals.len() as u64) as usize - 1] as f64;
            let est = h.quantile(q).unwrap() as f64;
            assert!((est - exact).abs() <= exact * MAX_RELATIVE_ERROR + 0.5, "q={q} exact={exact} est={est}");
        }
        assert_eq!(h.quantile(1.0), vals.last().copied());
        assert_eq!(h.min, Some(vals[0]));
    }

    #[test]
    fn a_quantile_among_values_beyond_the_range_is_none_not_invented() {
        let mut h = Histogram::default();
        h.record(400_000_000_000); // 400 s: in range
        for _ in 0..4 {
            h.record(5_000_000_000_000); // 83 min: beyond 2^42 ns
        }
        assert_eq!(h.overflow, 4);
        assert_eq!(h.count, 5);
        assert_eq!(h.sum, 400_000_000_000 + 4 * 5_000_000_000_000);
        assert!(h.quantile(0.2).unwrap().abs_diff(400_000_000_000) <= 400_000_000_000 / 300);
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.quantile(0.7), None);
        assert!(h.quantile_beyond_range(0.7));
        // The largest rank is the exact max, known whatever the range.
        assert_eq!(h.quantile(0.9), Some(5_000_000_000_000));
        assert_eq!(h.quantile(1.0), Some(5_000_000_000_000));
    }

    #[test]
    fn stddev_is_exact_for_a_million_calls_of_one_second_plus_minus_one_ns() {
        let mut h = Histogram::default();
        for i in 0..1_000_000u64 {
            h.record(if i % 2 == 0 { 999_999_999 } else { 1_000_000_001 });
        }
        // Exact: sample variance = n / (n - 1) for values mean ± 1.
        let truth = (1_000_000f64 / 999_999f64).sqrt();
        assert!((h.std_sample() - truth).abs() / truth < 1e-9, "{}", h.std_sample());
        assert_eq!(h.mean(), 1e9);
    }

    #[test]
    fn merge_equals_one_histogram_of_all_values() {
        let mut all = Histogram::default();
        let mut parts = vec![Histogram::default(); 4];
        for v in 0..40_000u64 {
            let x = v * v % 9_999_991 + 3;
            all.record(x);
            parts[(v % 4) as usize].record(x);
        }
        let mut merged = Histogram::default();
        for p in &parts {
            merged.merge(p);
        }
        assert_eq!(merged, all);
    }

    #[test]
    fn atomic_histograms_are_cache_line_isolated() {
        assert_eq!(std::mem::align_of::<AtomicHistogram>(), 128);
        assert_eq!(AtomicHistogram::footprint() % 128, 0);
        let h = AtomicHistogram::new();
        assert_eq!((&*h as *const AtomicHistogram as usize) % 128, 0);
    }

    #[test]
    fn the_lock_and_both_banks_sums_share_the_first_128_bytes() {
        assert!(std::mem::size_of::<SeqLock>() + 2 * std::mem::size_of::<Scalars>() <= 128);
    }

    #[test]
    fn the_gate_passes_calls_at_or_past_it_and_reopens_with_each_window() {
        let a = AtomicHistogram::new();
        let passed = std::cell::RefCell::new(Vec::new());
        // A keeper that raises the gate to one past each call it is shown.
        let offer = |v: u64, w: u64| {
            a.record_and(
                v,
                || w,
                |win| {
                    passed.borrow_mut().push((win, v));
                    v + 1
                },
            )
        };
        for v in [5, 3, 5, 6, 2] {
            offer(v, 0);
        }
        assert_eq!(*passed.borrow(), vec![(0, 5), (0, 6)]);
        offer(1, 1); // the other bank: open
        let mut closed = Histogram::default();
        a.take_window(0, &mut closed);
        assert_eq!(closed.count, 5);
        offer(1, 2); // bank 0 again, cleared with window 0: open
        assert_eq!(*passed.borrow(), vec![(0, 5), (0, 6), (1, 1), (2, 1)]);
    }

    #[test]
    fn a_window_taken_holds_exactly_its_records_and_its_bank_is_cleared() {
        let a = AtomicHistogram::new();
        let mut plain = Histogram::default();
        for v in [0u64, 5, 300, 7_000, 1 << 43, 42] {
            a.record(v, || 4);
            plain.record(v);
        }
        a.record(9, || 5); // the next window's bank
        let mut read = Histogram::default();
        a.take_window(4, &mut read);
        assert_eq!(read, plain);
        let mut again = Histogram::default();
        a.take_window(6, &mut again); // bank 0 again: cleared
        assert_eq!(again, Histogram::default());
        let mut next = Histogram::default();
        a.take_window(5, &mut next);
        assert_eq!((next.count, next.sum, next.min, next.max), (1, 9, Some(9), Some(9)));
    }
}
