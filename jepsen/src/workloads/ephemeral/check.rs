//! Judging an `ephemeral` history: every ephemeral gone once its session
//! ended (within the session timeout plus [`LINGER_SLACK`]), never while
//! it lived.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::checkers::{check_ephemeral, ChildrenRead, Confirm, EphemeralAnomaly, EphemeralLife};
use crate::history::{pair, Event, FaultPeriod, Kind};
use crate::workload::{Anomaly, CheckCtx, CheckResult};

use super::LINGER_SLACK;

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let mut lives: BTreeMap<String, EphemeralLife> = BTreeMap::new();
    let mut ends: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut reads = Vec::new();
    let (mut kills, mut closes, mut expiries, mut confirms) = (0u64, 0u64, 0u64, 0u64);
    for op in pair(events) {
        let path = op.invoke.value["path"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let done = op.complete.as_ref().map(|c| c.time);
        match (op.invoke.f.as_str(), op.outcome()) {
            ("create", kind) if kind != Kind::Fail => {
                lives.insert(
                    path.clone(),
                    EphemeralLife {
                        path,
                        create_op: op.invoke.index,
                        created_at: if kind == Kind::Ok { done } else { None },
                        confirms: Vec::new(),
                        closed: None,
                        must_be_gone_by: None,
                    },
                );
            }
            ("confirm", Kind::Ok) => {
                confirms += 1;
                if let Some(l) = lives.get_mut(&path) {
                    l.confirms.push(Confirm {
                        op: op.invoke.index,
                        invoked: op.invoke.time,
                        completed: done.unwrap_or(op.invoke.time),
                        present: op.value()["present"].as_bool().unwrap_or(true),
                    });
                }
            }
            ("close", Kind::Ok) => {
                closes += 1;
                if let Some(l) = lives.get_mut(&path) {
                    l.closed = Some((op.invoke.index, done.unwrap_or(op.invoke.time)));
                }
            }
            ("close", _) => {
                let at = op.complete.as_ref().map(|c| c.time).unwrap_or(ctx.end);
                end_at(&mut ends, &path, op.invoke.index, at);
            }
            ("kill-client", kind) => {
                kills += 1;
                // Unknown whether the kill landed: the session may have
                // lived on, so there is no deadline.
                if kind == Kind::Ok {
                    end_at(&mut ends, &path, op.invoke.index, done.unwrap_or(ctx.end));
                }
            }
            ("session-ended", _) => {
                expiries += 1;
                end_at(&mut ends, &path, op.invoke.index, op.invoke.time);
            }
            ("read", Kind::Ok) => {
                let present = op.value()["present"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                reads.push(ChildrenRead {
                    op: op.invoke.index,
                    invoked: op.invoke.time,
                    completed: done.unwrap_or(op.invoke.time),
                    present,
                });
            }
            _ => {}
        }
    }
    let mut notes = Vec::new();
    for (path, &(op, at)) in &ends {
        let Some(life) = lives.get_mut(path) else {
            continue;
        };
        match linger_deadline(at, ctx.session_timeout, &ctx.faults) {
            Some(deadline) => life.must_be_gone_by = Some((op, deadline)),
            None => notes.push(Anomaly {
                kind: "linger-unchecked".into(),
                message: format!(
                    "{path}: a fault was still in force at the end, so how long it \
                     lingered after its session ended is not judged"
                ),
                ops: vec![op],
                detail: Value::Null,
            }),
        }
    }
    let lives: Vec<EphemeralLife> = lives.into_values().collect();
    let linger = linger_figures(&lives, &ends, &reads);
    let stats = json!({
        "holders": lives.len(),
        "created": lives.iter().filter(|l| l.created_at.is_some()).count(),
        "kills": kills,
        "closes_ok": closes,
        "sessions_ended_seen": expiries,
        "confirms_ok": confirms,
        "reads_ok": reads.len(),
        "linger_after_end": linger,
    });
    let anomalies = check_ephemeral(&lives, &reads)
        .into_iter()
        .map(to_anomaly)
        .collect();
    CheckResult::from_anomalies(anomalies, notes, stats)
}

/// Keeps the earliest end of each path's session: once its process is gone
/// or its close was sent, nothing keeps it alive.
fn end_at(ends: &mut BTreeMap<String, (u64, u64)>, path: &str, op: u64, at: u64) {
    let e = ends.entry(path.to_string()).or_insert((op, at));
    if at < e.1 {
        *e = (op, at);
    }
}

/// When an ephemeral whose session stopped being kept alive at `end` must
/// be gone: `end + session_timeout + LINGER_SLACK`, pushed out past every
/// fault in force meanwhile (by another timeout and slack from its end:
/// a new leader re-arms sessions), `None` if one never ended.
fn linger_deadline(end: u64, session_timeout: Duration, faults: &[FaultPeriod]) -> Option<u64> {
    let grace = (session_timeout + LINGER_SLACK).as_nanos() as u64;
    let mut deadline = end + grace;
    loop {
        let mut moved = false;
        for f in faults {
            if f.start > deadline {
                continue;
            }
            let fault_end = f.end?;
            if fault_end < end {
                continue;
            }
            if fault_end + grace > deadline {
                deadline = fault_end + grace;
                moved = true;
            }
        }
        if !moved {
            return Some(deadline);
        }
    }
}

/// How long after its session ended (run's view) each node was first
/// seen gone: count, median and max in ms (how close runs come to the
/// bound).
fn linger_figures(
    lives: &[EphemeralLife],
    ends: &BTreeMap<String, (u64, u64)>,
    reads: &[ChildrenRead],
) -> Value {
    let mut lingers: Vec<u64> = Vec::new();
    for l in lives {
        let (Some(&(_, end)), Some(created)) = (ends.get(&l.path), l.created_at) else {
            continue;
        };
        if let Some(r) = reads
            .iter()
            .find(|r| r.invoked > created && !r.present.contains(&l.path))
        {
            lingers.push(r.completed.saturating_sub(end) / 1_000_000);
        }
    }
    lingers.sort();
    json!({
        "seen_gone": lingers.len(),
        "median_ms": lingers.get(lingers.len() / 2),
        "max_ms": lingers.last(),
    })
}

fn to_anomaly(a: EphemeralAnomaly) -> Anomaly {
    let (kind, message, ops) = match &a {
        EphemeralAnomaly::VanishedWhileAlive {
            path,
            gone_op,
            confirm_op,
        } => (
            "vanished-while-alive",
            format!("{path} was seen gone before its session was confirmed alive"),
            vec![*gone_op, *confirm_op],
        ),
        EphemeralAnomaly::Reappeared {
            path,
            gone_op,
            present_op,
        } => (
            "reappeared",
            format!("{path} was seen again after it was seen gone"),
            vec![*gone_op, *present_op],
        ),
        EphemeralAnomaly::LingeredAfterClose {
            path,
            close_op,
            read_op,
        } => (
            "lingered-after-close",
            format!("{path} was still there in a read invoked after its session closed"),
            vec![*close_op, *read_op],
        ),
        EphemeralAnomaly::Lingered {
            path,
            end_op,
            read_op,
            late_ns,
        } => (
            "lingered",
            format!(
                "{path} was still there {} ms past its deadline after its session ended",
                late_ns / 1_000_000
            ),
            vec![*end_op, *read_op],
        ),
    };
    Anomaly {
        kind: kind.into(),
        message,
        ops,
        detail: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_push_the_linger_deadline_out() {
        let grace = (Duration::from_secs(5) + LINGER_SLACK).as_nanos() as u64;
        let fault = |start: u64, end: Option<u64>| FaultPeriod {
            kind: "kill".into(),
            start,
            end,
            detail: Value::Null,
        };
        let t = Duration::from_secs(5);
        assert_eq!(linger_deadline(100, t, &[]), Some(100 + grace));
        assert_eq!(
            linger_deadline(100, t, &[fault(50, Some(90))]),
            Some(100 + grace)
        );
        assert_eq!(
            linger_deadline(100, t, &[fault(150, Some(1_000))]),
            Some(1_000 + grace)
        );
        assert_eq!(linger_deadline(100, t, &[fault(150, None)]), None);
    }
}
