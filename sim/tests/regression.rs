//! Seeds that must pass: every seed that ever found a bug stays here (with
//! the config it was found with), and a few that exercise every fault.

use warden_sim::{run, SimConfig};

/// (seed, why it is here).
const SEEDS: &[(u64, &str)] = &[
    (
        1,
        "four nodes, power losses, partitions, a clock jump, disk faults",
    ),
    (4, "catches skip-fsync (a second vote in term 2)"),
    (12, "catches a vote not persisted (two leaders of term 1)"),
];

#[test]
fn the_regression_seeds_pass() {
    let cfg = SimConfig {
        duration_ms: 10_000,
        ..SimConfig::default()
    };
    for &(seed, why) in SEEDS {
        let outcome = run(seed, &cfg);
        if let Some(v) = &outcome.violation {
            panic!(
                "seed {seed} ({why}): {v}\n{}",
                outcome.trace.tail(60).join("\n")
            );
        }
    }
}
