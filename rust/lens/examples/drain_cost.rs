//! The drain's CPU per record with the launch join on (`activity::bench::join_rate`): a launch
//! loop's spans, RUNTIME_API and KERNEL records, parsed, joined and aggregated on this thread,
//! timed on its CPU clock, so other jobs on the machine do not count. Each round parses the same
//! stream in a fresh state; prints one JSON object with the best and median round.
//!
//! `cargo run --release -p mspti-lens --example drain_cost -- ROUNDS LAUNCHES`

use _native::activity::bench::join_rate;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("ROUNDS LAUNCHES: integers"));
    let rounds = args.next().unwrap_or(9).max(1);
    let launches = args.next().unwrap_or(288_000).max(1);
    let mut per: Vec<f64> = (0..rounds)
        .map(|_| {
            let (ns, records) = join_rate(launches);
            ns as f64 / records.max(1) as f64
        })
        .collect();
    per.sort_by(f64::total_cmp);
    println!(
        "{{\"rounds\": {rounds}, \"launches\": {launches}, \"records\": {}, \"best_ns_per_record\": {:.2}, \"median_ns_per_record\": {:.2}}}",
        2 * launches,
        per[0],
        per[rounds / 2]
    );
}
