//! Proof that a check can fail: a known-bad mode run over seeds 0.. of a
//! budget until one of them fails, and the catching seed run again
//! without the mode, where it must pass (so it is the mode that broke it,
//! not the simulator or its clients). The tests under `sim/tests/` and
//! `sim/known-bad.sh` state the budgets.

use crate::invariants::{Violation, CRASH_RECOVERABLE, RAFT_ASSERTION};
use crate::{run, BadModes, SimConfig};

/// Which violations count as catching a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    /// The simulator's own checks only (invariants, histories).
    OwnChecks,
    /// Raft-rs's own assertions and a node refused at start as well.
    AnyViolation,
}

/// The first seed below `budget` at which `cfg` (with its known-bad
/// mode) fails as `counts` says, once the same seed has passed with
/// `cfg.bad` cleared; or what went wrong, for a test to panic with.
pub fn caught_within(
    cfg: &SimConfig,
    budget: u64,
    counts: Counts,
) -> Result<(u64, Violation), String> {
    let caught = (0..budget).find_map(|seed| {
        run(seed, cfg)
            .violation
            .filter(|v| {
                counts == Counts::AnyViolation
                    || (v.invariant != RAFT_ASSERTION && v.invariant != CRASH_RECOVERABLE)
            })
            .map(|v| (seed, v))
    });
    let Some((seed, violation)) = caught else {
        return Err(format!("{:?} went uncaught in seeds 0..{budget}", cfg.bad));
    };
    let real = SimConfig {
        bad: BadModes::default(),
        ..cfg.clone()
    };
    match run(seed, &real).violation {
        None => Ok((seed, violation)),
        Some(v) => Err(format!(
            "seed {seed} catches {:?} ({violation}) but fails without it too: {v}",
            cfg.bad
        )),
    }
}
