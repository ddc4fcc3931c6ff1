//! Seeds nobody chose: as many as fit in a time budget, from a starting
//! seed drawn anew on every run, half of the budget for each subject
//! (raft alone, and the whole core). Every seed of the fixed lists
//! (`regression.rs`, `cores.rs`) passes on every run; these add new
//! schedules every time CI runs. A failure names its seed and how to
//! replay it (docs/simulation.md); a seed that found a bug then joins the
//! fixed lists.
//!
//! The budget is `WARDEN_SIM_RANDOM_SECS` seconds (CI: 180; 30 when
//! unset). It bounds how long the test runs, and asserts nothing about
//! speed: a slow machine runs fewer seeds.

use std::time::{Duration, Instant};

use warden_sim::{run, SimConfig, Subject};

const DEFAULT_SECS: u64 = 30;

fn budget() -> Duration {
    let secs = std::env::var("WARDEN_SIM_RANDOM_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS);
    Duration::from_secs(secs)
}

/// Runs seeds of `cfg` from a random start until `budget` has passed;
/// panics with the first failing seed.
fn random_seeds(name: &str, flag: &str, cfg: &SimConfig, budget: Duration) {
    let from = u64::from(rand::random::<u32>());
    let started = Instant::now();
    let mut seed = from;
    while started.elapsed() < budget {
        let outcome = run(seed, cfg);
        if let Some(v) = &outcome.violation {
            panic!(
                "{name}: seed {seed} failed: {v}\nreplay: cargo run -p warden-sim -- {flag}--seed {seed} --duration-ms {}\n{}",
                cfg.duration_ms,
                outcome.trace.tail(80).join("\n")
            );
        }
        seed += 1;
    }
    eprintln!(
        "{name}: seeds {from}..{seed} passed ({} in {:?})",
        seed - from,
        started.elapsed()
    );
}

#[test]
fn random_seeds_of_both_subjects_pass() {
    let half = budget() / 2;
    random_seeds(
        "raft",
        "",
        &SimConfig {
            duration_ms: 10_000,
            ..SimConfig::default()
        },
        half,
    );
    random_seeds(
        "core",
        "--core ",
        &SimConfig {
            subject: Subject::Cores,
            duration_ms: 8_000,
            ..SimConfig::default()
        },
        half,
    );
}
