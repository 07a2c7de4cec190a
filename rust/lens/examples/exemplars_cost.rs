//! What keeping exemplars adds to each recorded pair (bench/exemplars.py runs this): the record
//! the callback makes (`AtomicHistogram::record`) with and without `Exemplars::offer`, on the same
//! stream of durations, in interleaved rounds. Prints one JSON object.
//!
//! `cargo run --release -p mspti-lens --example exemplars_cost -- ROUNDS N`

use std::hint::black_box;
use std::time::Instant;

use _native::core::exemplars::Exemplars;
use _native::core::hist::AtomicHistogram;

fn durations(n: usize) -> Vec<u64> {
    // Log-normal-ish host API times around 5 µs with a long tail, from a fixed xorshift seed.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let z = (u.max(1e-12).ln() * -2.0).sqrt() * (6.283_185_307 * u).cos();
            (5_000.0 * (0.6 * z).exp()) as u64
        })
        .collect()
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("ROUNDS N")).collect();
    let (rounds, n) = (args.first().copied().unwrap_or(15), args.get(1).copied().unwrap_or(2_000_000));
    // 64 Ki durations (512 KiB, cache-resident) replayed n / 64 Ki times: the loop measures the
    // record, not memory bandwidth.
    let vals = durations(1 << 16);
    let reps = (n >> 16).max(1);
    let n = reps << 16;
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    // Histograms touched once before timing (their pages faulted in), reused by every round.
    let (h1, h2) = (AtomicHistogram::new(), AtomicHistogram::new());
    for &v in &vals {
        h1.record(v, 0);
        h2.record(v, 0);
    }
    for round in 0..rounds {
        // A fresh window per round: every round pays the exemplars' first-K cold path again.
        let w = round as u64 + 1;
        let e = Exemplars::new();
        let time_plain = || {
            let t = Instant::now();
            for _ in 0..reps {
                for &v in &vals {
                    h1.record(black_box(v), w);
                }
            }
            t.elapsed().as_nanos() as f64 / n as f64
        };
        let time_with = || {
            let t = Instant::now();
            for r in 0..reps {
                for (i, &v) in vals.iter().enumerate() {
                    let v = black_box(v);
                    h2.record(v, w);
                    e.offer(v, (r << 16 | i) as u64, w);
                }
            }
            t.elapsed().as_nanos() as f64 / n as f64
        };
        // Alternate the order so neither side always runs first.
        if round % 2 == 0 {
            plain.push(time_plain());
            with.push(time_with());
        } else {
            with.push(time_with());
            plain.push(time_plain());
        }
        black_box(&e);
    }
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(",");
    println!("{{\"n\": {n}, \"plain_ns\": [{}], \"with_ns\": [{}]}}", fmt(&plain), fmt(&with));
}
