//! Log-linear latency histograms in the HdrHistogram layout.
//!
//! Values below 256 ns get a bucket each; above, every power of two is split into 128 equal
//! sub-buckets, so a bucket is at most 1/128 (0.78 %) of its lower bound wide. 3,968 buckets
//! reach 2^37 ns (137 s) in 31 KiB of u64 counters; larger values land in the last bucket and
//! are counted as overflow (their exact max is still kept). Histograms merge by adding counts,
//! so threads, windows, runs and ranks all merge exactly.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two (2^7).
pub const SUB_BUCKETS: u64 = 128;
const SUB_BITS: u32 = 7;
/// Number of buckets: covers [0, 2^37) ns.
pub const BUCKETS: usize = 3968;
/// The first value that does not fit: 2^37 ns.
pub const RANGE_END_NS: u64 = 1 << 37;
/// The worst relative width of a bucket: 1/128.
pub const MAX_RELATIVE_ERROR: f64 = 1.0 / SUB_BUCKETS as f64;

/// The bucket of a value (values >= 2^37 land in the last bucket).
#[inline(always)]
pub fn bucket_index(v: u64) -> usize {
    if v >= RANGE_END_NS {
        return BUCKETS - 1;
    }
    let msb = 63 - (v | 1).leading_zeros();
    let e = msb.saturating_sub(SUB_BITS);
    ((e as u64) << SUB_BITS) as usize + (v >> e) as usize
}

/// The half-open value range [lower, upper) of a bucket.
pub fn bucket_bounds(i: usize) -> (u64, u64) {
    if i < 2 * SUB_BUCKETS as usize {
        return (i as u64, i as u64 + 1);
    }
    let e = (i >> SUB_BITS) as u32 - 1;
    let m = (i as u64) - (u64::from(e) << SUB_BITS);
    (m << e, (m + 1) << e)
}

/// The value a bucket stands for in quantiles: its midpoint (exact for unit-width buckets).
pub fn bucket_value(i: usize) -> u64 {
    let (lo, hi) = bucket_bounds(i);
    lo + (hi - lo - 1) / 2
}

/// A plain (non-atomic) histogram: the result of merging, the unit of statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub count: u64,
    /// Sum of durations in ns (u64: overflows only after 584 years of total time).
    pub sum: u64,
    /// Sum of squared durations, for the standard deviation.
    pub sum_sq: f64,
    /// Exact extremes; None when unknown (empty, or a race with reset, see `Window`).
    pub min: Option<u64>,
    pub max: Option<u64>,
    /// Values >= 2^37 ns, kept in the last bucket.
    pub overflow: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            sum_sq: 0.0,
            min: None,
            max: None,
            overflow: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_index(v)] += 1;
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
        self.sum_sq += (v as f64) * (v as f64);
        self.min = Some(self.min.map_or(v, |m| m.min(v)));
        self.max = Some(self.max.map_or(v, |m| m.max(v)));
        if v >= RANGE_END_NS {
            self.overflow += 1;
        }
    }

    /// Add another histogram's counts: exact.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.sum_sq += o.sum_sq;
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

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Sample standard deviation (n - 1), as nsys's `StdDev` and msprof-analyze's `stdev`.
    pub fn std_sample(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        let mean = self.sum as f64 / n;
        ((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0).sqrt()
    }

    /// The lowest and highest non-empty buckets' bounds, standing in for unknown extremes.
    fn bucket_extremes(&self) -> Option<(u64, u64)> {
        let lo = self.counts.iter().position(|&c| c > 0)?;
        let hi = self.counts.iter().rposition(|&c| c > 0)?;
        Some((bucket_bounds(lo).0, bucket_bounds(hi).1 - 1))
    }

    pub fn min_value(&self) -> u64 {
        self.min.or_else(|| self.bucket_extremes().map(|e| e.0)).unwrap_or(0)
    }

    pub fn max_value(&self) -> u64 {
        self.max.or_else(|| self.bucket_extremes().map(|e| e.1)).unwrap_or(0)
    }

    /// The q-quantile (0 <= q <= 1) by nearest rank: the value of the ceil(q*n)-th smallest
    /// sample, estimated by its bucket's midpoint and clamped to the exact [min, max], so it is
    /// within one bucket width (<= 0.78 %) of the exact sample. q = 1 gives the exact max.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let (lo, hi) = (self.min_value(), self.max_value());
        if q >= 1.0 {
            return hi;
        }
        let rank = ((q.max(0.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if self.overflow > 0 && rank > self.count.saturating_sub(self.overflow) {
            // The rank is one of the values beyond the range (the largest ones): the exact max
            // stands for them (exact when there is one), not the last bucket's midpoint.
            return hi;
        }
        // Skip whole blocks of buckets by their (vectorised) sum, then walk the block that
        // holds the rank.
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
                    return bucket_value(b * BLOCK + j).clamp(lo, hi);
                }
            }
        }
        hi
    }

    /// Non-empty buckets as (index, count).
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i, c))
    }
}

/// Words of the non-empty-bucket bitmap (one bit per bucket).
const NONZERO_WORDS: usize = BUCKETS / 64;
#[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; the MSRV is 1.80
const _: () = assert!(BUCKETS % 64 == 0);

/// The recording side: one per (thread, key), written by its owning thread only and read by
/// snapshots at any time. Single writer, so updates are a relaxed load and store (no locked
/// instruction); readers see each counter either before or after an update, never torn.
///
/// One allocation, aligned to 128 bytes and a multiple of 128 bytes long, so no cache line is
/// shared with anything another thread writes (x86 prefetches lines in pairs). The fields every
/// record writes (sum, sum of squares, extremes) sit together in the first line; a bitmap of the
/// buckets ever written lets readers visit only those (a bit is set once, when its bucket goes
/// from 0 to 1, so it costs the hot path nothing after the first record of a bucket).
#[repr(C, align(128))]
pub struct AtomicHistogram {
    sum: AtomicU64,
    /// f64 bits.
    sum_sq: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
    /// The window (see `Window`) in which min and max were last set.
    extremes_window: AtomicU64,
    overflow: AtomicU64,
    /// Bit i set: bucket i is (and stays) non-zero. Published after the count (Release).
    nonzero: [AtomicU64; NONZERO_WORDS],
    counts: [AtomicU64; BUCKETS],
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
        // (every field is an AtomicU64 or an array of them), so after the null check the pointer
        // may become the Box that owns it (allocated with the global allocator and this layout).
        let h = unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<AtomicHistogram>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(p)
        };
        h.min.store(u64::MAX, Ordering::Relaxed);
        h.extremes_window.store(u64::MAX, Ordering::Relaxed);
        h
    }

    /// Bytes this histogram occupies.
    pub fn footprint() -> usize {
        std::mem::size_of::<AtomicHistogram>()
    }

    /// Record one duration. Only the owning thread may call this.
    #[inline(always)]
    pub fn record(&self, v: u64, window: u64) {
        let i = bucket_index(v);
        let c = self.counts[i].load(Ordering::Relaxed);
        self.counts[i].store(c.wrapping_add(1), Ordering::Relaxed);
        if c == 0 {
            // First record of this bucket: publish it after the count it covers (Release pairs
            // with the reader's Acquire).
            let w = &self.nonzero[i / 64];
            w.store(w.load(Ordering::Relaxed) | (1u64 << (i % 64)), Ordering::Release);
        }
        bump(&self.sum, v);
        // Through i64: one instruction on x86-64 (durations never reach 2^63 ns).
        let x = v.min(i64::MAX as u64) as i64 as f64;
        if self.extremes_window.load(Ordering::Relaxed) != window {
            // First record of a window: the sum of squares, min and max are per window (a
            // cumulative f64 sum of squares minus a baseline would lose a small window's digits).
            self.sum_sq.store((x * x).to_bits(), Ordering::Relaxed);
            self.min.store(v, Ordering::Relaxed);
            self.max.store(v, Ordering::Relaxed);
            self.extremes_window.store(window, Ordering::Release);
        } else {
            let sq = f64::from_bits(self.sum_sq.load(Ordering::Relaxed)) + x * x;
            self.sum_sq.store(sq.to_bits(), Ordering::Relaxed);
            if v < self.min.load(Ordering::Relaxed) {
                self.min.store(v, Ordering::Relaxed);
            }
            if v > self.max.load(Ordering::Relaxed) {
                self.max.store(v, Ordering::Relaxed);
            }
        }
        if v >= RANGE_END_NS {
            bump(&self.overflow, 1);
        }
    }

    /// Add this histogram's current counts into `into`. The sum of squares, min and max are
    /// taken only when set in `window` (the current one); counts, sum and overflow are cumulative.
    pub fn read_into(&self, into: &mut Histogram, window: u64) {
        let mut n = 0;
        for (w, word) in self.nonzero.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let c = self.counts[i].load(Ordering::Relaxed);
                into.counts[i] += c;
                n += c;
            }
        }
        if n == 0 {
            return;
        }
        into.count += n;
        into.sum = into.sum.wrapping_add(self.sum.load(Ordering::Relaxed));
        into.overflow += self.overflow.load(Ordering::Relaxed);
        if self.extremes_window.load(Ordering::Acquire) == window {
            into.sum_sq += f64::from_bits(self.sum_sq.load(Ordering::Relaxed));
            let (mn, mx) = (self.min.load(Ordering::Relaxed), self.max.load(Ordering::Relaxed));
            into.min = Some(into.min.map_or(mn, |m| m.min(mn)));
            into.max = Some(into.max.map_or(mx, |m| m.max(mx)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut prev_upper = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_bounds(i);
            assert_eq!(lo, prev_upper, "bucket {i}");
            assert!(hi > lo);
            assert!((hi - lo) as f64 / lo.max(1) as f64 <= MAX_RELATIVE_ERROR + 1e-12 || lo < 256);
            assert_eq!(bucket_index(lo), i);
            assert_eq!(bucket_index(hi - 1), i);
            prev_upper = hi;
        }
        assert_eq!(prev_upper, RANGE_END_NS);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn footprint_is_under_32_kib() {
        assert!(AtomicHistogram::footprint() <= 32 * 1024, "{}", AtomicHistogram::footprint());
    }

    #[test]
    fn quantiles_are_within_one_bucket_of_the_exact_sample() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut vals = Vec::new();
        let mut h = Histogram::default();
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // log-uniform over 1 ns .. 100 s
            let v = (10f64.powf((rng % 1_000_000) as f64 / 1_000_000.0 * 11.0)) as u64;
            vals.push(v);
            h.record(v);
        }
        vals.sort_unstable();
        for q in [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * vals.len() as f64).ceil() as usize).clamp(1, vals.len());
            let exact = vals[rank - 1] as f64;
            let est = h.quantile(q) as f64;
            assert!((est - exact).abs() <= exact * MAX_RELATIVE_ERROR + 0.5, "q={q} exact={exact} est={est}");
        }
        assert_eq!(h.quantile(1.0), *vals.last().unwrap());
        assert_eq!(h.min, Some(vals[0]));
    }

    #[test]
    fn block_scan_quantiles_equal_a_bucket_by_bucket_walk() {
        let mut h = Histogram::default();
        for (i, v) in [0u64, 63, 64, 65, 127, 128, 1_000, 50_000, 1 << 30, (1 << 37) - 1].iter().enumerate() {
            for _ in 0..=i {
                h.record(*v);
            }
        }
        let naive = |q: f64| {
            let rank = ((q * h.count as f64).ceil() as u64).clamp(1, h.count);
            let mut seen = 0;
            for (i, &c) in h.counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_value(i).clamp(h.min.unwrap(), h.max.unwrap());
                }
            }
            unreachable!()
        };
        for k in 0..=1000 {
            let q = f64::from(k) / 1000.0;
            if q < 1.0 {
                assert_eq!(h.quantile(q), naive(q), "q={q}");
            }
        }
    }

    #[test]
    fn a_quantile_that_falls_beyond_the_range_is_the_exact_max() {
        let mut h = Histogram::default();
        h.record(0);
        h.record(138_250_600_835);
        assert_eq!(h.quantile(0.75), 138_250_600_835);
        assert_eq!(h.quantile(0.5), 0);
    }

    #[test]
    fn atomic_histograms_are_cache_line_isolated() {
        assert_eq!(std::mem::align_of::<AtomicHistogram>(), 128);
        assert_eq!(AtomicHistogram::footprint() % 128, 0);
        let h = AtomicHistogram::new();
        assert_eq!((&*h as *const AtomicHistogram as usize) % 128, 0);
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
        assert_eq!(merged.counts, all.counts);
        assert_eq!(
            (merged.count, merged.sum, merged.min, merged.max),
            (all.count, all.sum, all.min, all.max)
        );
        assert!((merged.sum_sq - all.sum_sq).abs() / all.sum_sq < 1e-12);
    }

    #[test]
    fn atomic_read_matches_plain_record() {
        let a = AtomicHistogram::new();
        let mut plain = Histogram::default();
        for v in [5u64, 300, 7_000, 1 << 40, 42] {
            a.record(v, 0);
            plain.record(v);
        }
        let mut read = Histogram::default();
        a.read_into(&mut read, 0);
        assert_eq!(read, plain);
        let mut other_window = Histogram::default();
        a.read_into(&mut other_window, 1);
        assert_eq!(other_window.min, None);
        assert_eq!(other_window.count, 5);
    }
}
