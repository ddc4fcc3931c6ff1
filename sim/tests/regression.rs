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

/// Found by the simulator on its first day (Dec 5, 2026): the synced
/// watermark (`server/src/raft/watermark.rs`) is created holding sequence
/// 1 in its first slot, but a write goes to slot `seq % 2`, so the first
/// raise (sequence 2) overwrites that same slot; a power loss that tears
/// it leaves no valid slot, and the node refuses to start for ever ("no
/// slot passes its checksum"), though the file's own doc says no crash
/// leaves it so. Red until the watermark writes its first raise to the
/// other slot; then this seed joins `SEEDS`.
#[test]

fn a_torn_first_watermark_raise_does_not_keep_a_node_down() {
    let cfg = SimConfig {
        duration_ms: 10_000,
        ..SimConfig::default()
    };
    let outcome = run(2, &cfg);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
}
