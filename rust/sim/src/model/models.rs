//! Latency models of host API time, grounded in published traces and Huawei's MSPTI documentation.
//!
//! - Launches: tight around a few µs (cudaLaunchKernel p50 4-10 µs, p90 7-12, p99 17-150 in the
//!   real traces) with a right tail two orders of magnitude long: a log-normal body plus a rare
//!   log-normal tail.
//! - Copies and stream syncs: bimodal, µs when nothing waits and ms when the host waits for the
//!   device (cudaMemcpyAsync p50 6-15 µs, p99 0.5-6 ms; MSPTI's own sample: MemCopySync ≈51 µs).
//! - Allocation: DevMalloc ≈42 µs (MSPTI quick start).
//! - HCCL host time: the enqueue cost (tens of µs) plus a part growing with message size and rank
//!   count, occasional waits, and a slow first call per communicator and operation.

use std::f64::consts::PI;

/// A seeded random source (fastrand's wyrand) with the few distributions the models need.
pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    pub fn uniform(&mut self) -> f64 {
        self.0.f64()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.f64() < p
    }
    pub fn below(&mut self, n: u32) -> u32 {
        self.0.u32(0..n.max(1))
    }
    /// A standard normal deviate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.0.f64().max(f64::MIN_POSITIVE);
        let u2 = self.0.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
    }
    /// Log-normal with the given median (ns) and shape sigma.
    pub fn lognormal(&mut self, median_ns: f64, sigma: f64) -> f64 {
        median_ns * (sigma * self.normal()).exp()
    }
}

/// The shape of one API's host time.
#[derive(Clone, Copy, Debug)]
pub enum Model {
    /// Log-normal body; with probability `p_tail` a second log-normal.
    Mixture { median: f64, sigma: f64, p_tail: f64, tail_median: f64, tail_sigma: f64 },
}

impl Model {
    pub const fn body(median_us: f64, sigma: f64) -> Model {
        Model::Mixture { median: median_us * 1e3, sigma, p_tail: 0.0, tail_median: 0.0, tail_sigma: 0.0 }
    }
    pub const fn tailed(
        median_us: f64,
        sigma: f64,
        p_tail: f64,
        tail_median_us: f64,
        tail_sigma: f64,
    ) -> Model {
        Model::Mixture {
            median: median_us * 1e3,
            sigma,
            p_tail,
            tail_median: tail_median_us * 1e3,
            tail_sigma,
        }
    }

    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match *self {
            Model::Mixture { median, sigma, p_tail, tail_median, tail_sigma } => {
                if p_tail > 0.0 && rng.chance(p_tail) {
                    rng.lognormal(tail_median, tail_sigma)
                } else {
                    rng.lognormal(median, sigma)
                }
            }
        }
    }
}

/// Kernel launch (aclrtLaunchKernel and friends): ~5 µs, 1.5 % tail around 60 µs reaching ms.
pub const LAUNCH: Model = Model::tailed(5.0, 0.30, 0.015, 60.0, 1.0);
/// Asynchronous copy: ~8 µs; 8 % wait for a full queue, ~0.8 ms.
pub const MEMCPY_ASYNC: Model = Model::tailed(8.0, 0.30, 0.08, 800.0, 0.9);
/// Synchronous copy (D2H of a loss or logits): ~50 µs, or the host waits for the device (~1.5 ms).
pub const MEMCPY: Model = Model::tailed(50.0, 0.35, 0.45, 1500.0, 0.5);
/// Stream synchronize when the stream is already idle: ~4 µs. A busy stream makes it wait until
/// the device is done (`interpose::sync_wait`, `call::call`), ms in a training step.
pub const SYNC_CALL: Model = Model::body(4.0, 0.40);
/// An eager framework's host work per operator outside the runtime (dispatch, shape inference,
/// the op's workspace query): ~70 µs, so a step's host and device time are of one order, as in a
/// real eager loop whose small operators are host-bound and large ones device-bound.
pub const FRAMEWORK_OP: Model = Model::body(70.0, 0.50);
pub const MEMSET_ASYNC: Model = Model::tailed(6.0, 0.30, 0.02, 200.0, 0.8);
pub const MALLOC: Model = Model::tailed(42.0, 0.45, 0.05, 900.0, 0.7);
pub const FREE: Model = Model::body(15.0, 0.40);
pub const MALLOC_HOST: Model = Model::body(80.0, 0.50);
pub const FREE_HOST: Model = Model::body(25.0, 0.40);
pub const MEM_GET_INFO: Model = Model::body(3.0, 0.30);
pub const SET_DEVICE: Model = Model::body(1800.0, 0.30);
pub const RESET_DEVICE: Model = Model::body(900.0, 0.30);
pub const CREATE_STREAM: Model = Model::body(120.0, 0.40);
pub const DESTROY_STREAM: Model = Model::body(60.0, 0.40);
pub const CREATE_CONTEXT: Model = Model::body(400.0, 0.30);
pub const DESTROY_CONTEXT: Model = Model::body(200.0, 0.30);
/// Anything else the runtime does (cache flushes, VMM calls, IPC handles).
pub const MISC: Model = Model::body(10.0, 0.50);

/// Host time of one HCCL call (ns): enqueue cost, plus ~2 µs per doubling of ranks, plus a small
/// per-MiB part; 3 % of calls wait for the stream (~1 ms); the first call of an operation on a
/// communicator builds its resources (~8 ms).
pub fn hccl_host_ns(rng: &mut Rng, bytes: u64, ranks: u32, first: bool) -> f64 {
    let base =
        18_000.0 + 2_000.0 * f64::from(ranks.max(1)).log2() + 400.0 * (bytes as f64 / (1 << 20) as f64);
    let mut t = base * (0.35 * rng.normal()).exp();
    if rng.chance(0.03) {
        t += rng.lognormal(1_000_000.0, 0.8);
    }
    if first {
        t += rng.lognormal(8_000_000.0, 0.3);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantiles(m: &Model, n: usize) -> (f64, f64, f64) {
        let mut rng = Rng::new(7);
        let mut v: Vec<f64> = (0..n).map(|_| m.sample(&mut rng)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[n / 2], v[n * 9 / 10], v[n * 99 / 100])
    }

    #[test]
    fn launch_is_a_few_microseconds_with_a_long_tail() {
        let (p50, p90, p99) = quantiles(&LAUNCH, 200_000);
        assert!((4_000.0..7_000.0).contains(&p50), "p50 {p50}");
        assert!((6_000.0..12_000.0).contains(&p90), "p90 {p90}");
        assert!(p99 > 15_000.0, "p99 {p99}");
    }

    #[test]
    fn hccl_first_calls_are_slow_and_seeded_runs_repeat() {
        let mut a = Rng::new(3);
        let mut b = Rng::new(3);
        let x: Vec<f64> = (0..100).map(|_| hccl_host_ns(&mut a, 1 << 24, 8, false)).collect();
        let y: Vec<f64> = (0..100).map(|_| hccl_host_ns(&mut b, 1 << 24, 8, false)).collect();
        assert_eq!(x, y);
        let first = hccl_host_ns(&mut a, 1 << 24, 8, true);
        assert!(first > 3_000_000.0);
    }
}
