//! The `sequential` workload (to be written).

use crate::history::Event;
use crate::workload::{CheckCtx, CheckResult, RunCtx};

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(_ctx: &RunCtx) -> Result<(), String> {
    Err("the sequential workload is not written yet".into())
}

/// Judges a history of this workload.
pub fn check(_events: &[Event], _ctx: &CheckCtx) -> CheckResult {
    CheckResult {
        valid: crate::workload::Validity::Unknown,
        anomalies: Vec::new(),
        notes: Vec::new(),
        stats: serde_json::Value::Null,
    }
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    Vec::new()
}
