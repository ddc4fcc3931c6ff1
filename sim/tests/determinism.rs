//! One seed, one history: two runs of a seed give the same trace, byte for
//! byte, and another seed another.

use warden_sim::{run, SimConfig};

#[test]
fn a_seed_run_twice_gives_the_same_trace_byte_for_byte() {
    let cfg = SimConfig {
        duration_ms: 4_000,
        fault_mean_ms: 300,
        ..SimConfig::default()
    };
    // A seed whose run does things (which seed does moves with the draws).
    let a = run(12, &cfg);
    let b = run(12, &cfg);
    assert!(a.violation.is_none(), "{:?}", a.violation);
    // A run that did things: faults, crashes, acknowledged writes.
    assert!(a.stats.faults > 3 && a.stats.acked > 10, "{:?}", a.stats);
    assert_eq!(a.trace.render(), b.trace.render());
    let other = run(13, &cfg);
    assert_ne!(a.trace.render(), other.trace.render());
}
