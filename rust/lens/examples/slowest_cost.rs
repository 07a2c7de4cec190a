//! What keeping the slowest calls adds to each recorded pair (bench/slowest.py runs this): the record
//! the callback makes (`AtomicHistogram::record_and`) with and without `SlowestCalls::keep` behind
//! the gate, on the same stream of durations. Each round times batches of 64 Ki records, the two sides alternating
//! batch by batch, on the thread's CPU clock, and keeps each side's best batch: a batch that other
//! jobs interrupted only ever looks slower. Prints one JSON object.
//!
//! `cargo run --release -p mspti-lens --example slowest_cost -- ROUNDS N`

use std::hint::black_box;

use _native::core::hist::AtomicHistogram;
use _native::core::slowest::SlowestCalls;

const BATCH: usize = 1 << 16;

fn durations(n: usize) -> Vec<u64> {
    // Log-normal-ish host API times around 5 µs with a long tail, from a fixed xorshift seed.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let z = (u.max(1e-12).ln() * -2.0).sqrt() * (std::f64::consts::TAU * u).cos();
            (5_000.0 * (0.6 * z).exp()) as u64
        })
        .collect()
}

/// This thread's CPU time in ns (time descheduled does not count).
fn cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid out pointer; the clock id exists on Linux.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("ROUNDS N")).collect();
    let (rounds, n) = (args.first().copied().unwrap_or(15), args.get(1).copied().unwrap_or(1 << 23));
    let vals = durations(BATCH); // 512 KiB, cache-resident: the loop measures the record
    let batches = (n / BATCH).max(1);
    // Histograms touched once before timing (their pages faulted in), reused by every round.
    let (h1, h2) = (AtomicHistogram::new(), AtomicHistogram::new());
    for &v in &vals {
        h1.record(v, || 0);
        h2.record(v, || 0);
    }
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // A fresh window per round: every round pays the slowest calls' first-K cold path again.
        let w = round as u64 + 1;
        let e = SlowestCalls::new();
        let (mut best_plain, mut best_with) = (u64::MAX, u64::MAX);
        for b in 0..batches {
            let t = cpu_ns();
            for &v in &vals {
                h1.record(black_box(v), || w);
            }
            best_plain = best_plain.min(cpu_ns() - t);
            let t = cpu_ns();
            for (i, &v) in vals.iter().enumerate() {
                let v = black_box(v);
                h2.record_and(v, || w, |w| e.keep(v, (b << 16 | i) as u64, w));
            }
            best_with = best_with.min(cpu_ns() - t);
        }
        plain.push(best_plain as f64 / BATCH as f64);
        with.push(best_with as f64 / BATCH as f64);
        black_box(&e);
    }
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(",");
    println!(
        "{{\"n\": {}, \"plain_ns\": [{}], \"with_ns\": [{}]}}",
        batches * BATCH,
        fmt(&plain),
        fmt(&with)
    );
}
