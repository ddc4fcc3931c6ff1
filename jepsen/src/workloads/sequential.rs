//! The `sequential` workload: concurrent sequential creates under one
//! parent. Every acknowledged create must exist at the end (no lost
//! writes), names must be unique, sequence order must be commit (czxid)
//! order, and a create that completed before another was invoked must have
//! the lower number.
//!
//! Each worker has its own session and creates `PARENT/n-` children until
//! the deadline: `ok` with the name and czxid the server returned, `fail`
//! on a definite refusal, `info` when the answer never came (the child may
//! exist). Then one final `read` lists the children linearizably and reads
//! each one's czxid, retrying for up to [`FINAL_READ_BOUND`]; without it
//! the verdict is at best unknown.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use tokio::time::Instant;
use warden_client::{Client, CreateOptions, ErrorCode};

use super::support::{
    connect_options, connect_until, ensure_path, run_tag, write_outcome, Planted, Processes,
    ERROR_PAUSE, RETRY_PAUSE,
};
use crate::checkers::{check_sequential, SeqChild, SeqCreate, SeqUnknown, SequentialAnomaly};
use crate::history::{pair, Event, Kind};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx, Validity};

/// Where each run makes its own parent.
pub const ROOT: &str = "/jepsen/seq";
/// How long the final read keeps trying.
pub const FINAL_READ_BOUND: Duration = Duration::from_secs(60);
/// Child stats read at once during the final read.
const STAT_BATCH: usize = 64;

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let parent = format!("{ROOT}/{}", run_tag(ctx));
    ensure_path(ctx, &parent).await?;
    let processes = Processes::default();
    let workers: Vec<_> = (0..ctx.concurrency.max(1))
        .map(|w| tokio::spawn(worker(ctx.clone(), w, parent.clone(), processes.clone())))
        .collect();
    for w in join_all(workers).await {
        w.map_err(|e| format!("sequential worker panicked: {e}"))?;
    }
    final_read(ctx, &parent, &processes).await;
    Ok(())
}

async fn worker(ctx: RunCtx, w: usize, parent: String, processes: Processes) {
    let options = connect_options(&ctx);
    let servers = ctx.servers_for(w);
    let prefix = format!("{parent}/n-");
    let interval = ctx.worker_interval();
    let mut process = processes.fresh();
    let mut client: Option<Client> = None;
    while Instant::now() < ctx.deadline {
        let c = match &client {
            Some(c) if !c.session_events().borrow().is_terminal() => c.clone(),
            _ => match connect_until(&servers, &options, ctx.deadline).await {
                Some(c) => {
                    client = Some(c.clone());
                    c
                }
                None => break,
            },
        };
        let inv = ctx
            .history
            .invoke(process, "create", json!({ "parent": parent }));
        match c.create(&prefix, b"", CreateOptions::sequential()).await {
            Ok((path, stat)) => {
                let name = path.rsplit('/').next().unwrap_or(&path).to_string();
                ctx.history.ok(
                    &inv,
                    json!({ "parent": parent, "name": name, "czxid": stat.czxid }),
                );
            }
            Err(e) => {
                let value = json!({ "parent": parent });
                if write_outcome(&e) == Kind::Fail {
                    ctx.history.fail(&inv, value, e.to_string());
                } else {
                    ctx.history.info(&inv, value, e.to_string());
                    process = processes.fresh();
                }
                // While disconnected calls fail at once: do not spin.
                tokio::time::sleep_until((Instant::now() + ERROR_PAUSE).min(ctx.deadline)).await;
                if e.code() == ErrorCode::SessionExpired {
                    client = None;
                }
            }
        }
        if !interval.is_zero() {
            tokio::time::sleep_until((Instant::now() + interval).min(ctx.deadline)).await;
        }
    }
    if let Some(c) = client {
        let _ = c.close().await;
    }
}

/// Lists the children and each one's czxid: one `read` operation, retried
/// (new sessions as needed) until it succeeds or the bound passes.
async fn final_read(ctx: &RunCtx, parent: &str, processes: &Processes) {
    let until = Instant::now() + FINAL_READ_BOUND;
    let options = connect_options(ctx);
    let inv = ctx
        .history
        .invoke(processes.fresh(), "read", json!({ "parent": parent }));
    let mut last = String::from("no server took a session");
    let mut attempt = 0;
    while Instant::now() < until {
        let Some(client) = connect_until(&ctx.servers_for(attempt), &options, until).await else {
            break;
        };
        attempt += 1;
        match tokio::time::timeout_at(until, read_children(&client, parent)).await {
            Ok(Ok(children)) => {
                let _ = client.close().await;
                let list: Vec<Value> = children.iter().map(|c| json!([c.name, c.czxid])).collect();
                ctx.history
                    .ok(&inv, json!({ "parent": parent, "children": list }));
                return;
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "final read bound passed".into(),
        }
        let _ = client.close().await;
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    // A read changes nothing: one that never answered is a `fail`.
    ctx.history.fail(
        &inv,
        json!({ "parent": parent }),
        format!("no final read within {FINAL_READ_BOUND:?}: {last}"),
    );
}

async fn read_children(client: &Client, parent: &str) -> warden_client::Result<Vec<SeqChild>> {
    let (names, _) = client.get_children_linearizable(parent).await?;
    let mut out = Vec::with_capacity(names.len());
    for batch in names.chunks(STAT_BATCH) {
        // Children are never deleted, and the session has seen the
        // linearizable list, so a local exists finds each one.
        let paths: Vec<String> = batch.iter().map(|n| format!("{parent}/{n}")).collect();
        let stats = join_all(paths.iter().map(|p| client.exists(p))).await;
        for (name, stat) in batch.iter().zip(stats) {
            let stat = stat?.ok_or_else(|| {
                warden_client::Error::api(
                    ErrorCode::NoNode,
                    format!("{parent}/{name}"),
                    "listed by the linearizable read, then missing",
                )
            })?;
            out.push(SeqChild {
                name: name.clone(),
                czxid: stat.czxid,
            });
        }
    }
    Ok(out)
}

/// Judges a history of this workload.
pub fn check(events: &[Event], _ctx: &CheckCtx) -> CheckResult {
    let mut acked = Vec::new();
    let mut unknown = Vec::new();
    let mut failed = 0u64;
    let mut final_children: Option<Vec<SeqChild>> = None;
    for op in pair(events) {
        match (op.invoke.f.as_str(), op.outcome()) {
            ("create", Kind::Ok) => {
                let v = op.value();
                let complete = op.complete.as_ref().expect("ok has a completion");
                acked.push(SeqCreate {
                    op: op.invoke.index,
                    invoked: op.invoke.time,
                    completed: complete.time,
                    name: v["name"].as_str().unwrap_or_default().to_string(),
                    czxid: v["czxid"].as_u64().unwrap_or(0),
                });
            }
            ("create", Kind::Info) => unknown.push(SeqUnknown {
                op: op.invoke.index,
                invoked: op.invoke.time,
            }),
            ("create", _) => failed += 1,
            ("read", Kind::Ok) => {
                let list = op.value()["children"].as_array().cloned();
                final_children = Some(
                    list.unwrap_or_default()
                        .iter()
                        .map(|c| SeqChild {
                            name: c[0].as_str().unwrap_or_default().to_string(),
                            czxid: c[1].as_u64().unwrap_or(0),
                        })
                        .collect(),
                );
            }
            _ => {}
        }
    }
    let stats = json!({
        "creates_ok": acked.len(),
        "creates_info": unknown.len(),
        "creates_fail": failed,
        "final_children": final_children.as_ref().map(Vec::len),
    });
    let mut notes = Vec::new();
    let found = match &final_children {
        Some(children) => check_sequential(&acked, &unknown, children),
        None => {
            notes.push(Anomaly {
                kind: "no-final-read".into(),
                message: "the final read never succeeded: lost creates cannot be judged".into(),
                ops: Vec::new(),
                detail: Value::Null,
            });
            // Without the end state only the acknowledged creates can be
            // compared among themselves; pretend each is present.
            let present: Vec<SeqChild> = acked
                .iter()
                .map(|a| SeqChild {
                    name: a.name.clone(),
                    czxid: a.czxid,
                })
                .collect();
            check_sequential(&acked, &unknown, &present)
        }
    };
    let anomalies: Vec<Anomaly> = found.into_iter().map(to_anomaly).collect();
    let mut result = CheckResult::from_anomalies(anomalies, notes, stats);
    if final_children.is_none() && result.valid == Validity::Valid {
        result.valid = Validity::Unknown;
    }
    result
}

fn to_anomaly(a: SequentialAnomaly) -> Anomaly {
    let (kind, message, ops) = match &a {
        SequentialAnomaly::Lost { op, name } => (
            "lost-create",
            format!("acknowledged create of {name} is missing at the end"),
            vec![*op],
        ),
        SequentialAnomaly::Duplicate { ops, name } => (
            "duplicate-name",
            format!("two acknowledged creates both got {name}"),
            ops.to_vec(),
        ),
        SequentialAnomaly::CzxidChanged {
            op,
            name,
            acked,
            found,
        } => (
            "czxid-changed",
            format!("{name} was created at czxid {acked} but the final read says {found}"),
            vec![*op],
        ),
        SequentialAnomaly::OutOfOrder { a, b } => (
            "sequence-out-of-order",
            format!(
                "{} (czxid {}) is numbered before {} (czxid {}) but committed after it",
                a.0, a.1, b.0, b.1
            ),
            Vec::new(),
        ),
        SequentialAnomaly::RealTime {
            earlier,
            later,
            earlier_name,
            later_name,
        } => (
            "real-time-order",
            format!(
                "create of {earlier_name} completed before the create of {later_name} \
                 was invoked, yet got the higher number"
            ),
            vec![*earlier, *later],
        ),
        SequentialAnomaly::Unexplained { names } => (
            "unexplained-children",
            format!(
                "{} children no create (acknowledged or unknown) can account for: {}",
                names.len(),
                names.join(", ")
            ),
            Vec::new(),
        ),
        SequentialAnomaly::BadName { name } => (
            "bad-name",
            format!("{name} has no 10-digit sequence suffix"),
            Vec::new(),
        ),
    };
    Anomaly {
        kind: kind.into(),
        message,
        ops,
        detail: Value::Null,
    }
}

const P: &str = "/jepsen/seq/planted";

/// A clean history of three creates and the final read; `plant` changes
/// it before it is recorded: (process, name, czxid, invoke ns, ok ns) for
/// each create, and the final children.
fn planted_history(
    creates: &[(u64, &str, u64, u64, u64)],
    info: &[(u64, u64)],
    children: &[(&str, u64)],
) -> Vec<Event> {
    let h = Planted::new();
    for &(process, name, czxid, at, done) in creates {
        h.op(
            process,
            "create",
            json!({ "parent": P }),
            at,
            Kind::Ok,
            json!({ "parent": P, "name": name, "czxid": czxid }),
            done,
        );
    }
    for &(process, at) in info {
        h.op(
            process,
            "create",
            json!({ "parent": P }),
            at,
            Kind::Info,
            json!({ "parent": P }),
            at + 50,
        );
    }
    let list: Vec<Value> = children.iter().map(|(n, z)| json!([n, z])).collect();
    h.op(
        99,
        "read",
        json!({ "parent": P }),
        1_000,
        Kind::Ok,
        json!({ "parent": P, "children": list }),
        1_100,
    );
    h.events()
}

const CLEAN_CREATES: &[(u64, &str, u64, u64, u64)] = &[
    (0, "n-0000000000", 10, 0, 100),
    (1, "n-0000000001", 12, 50, 150),
    (0, "n-0000000002", 15, 200, 300),
];
const CLEAN_CHILDREN: &[(&str, u64)] = &[
    ("n-0000000000", 10),
    ("n-0000000001", 12),
    ("n-0000000002", 15),
    ("n-0000000003", 17),
];

/// A clean history (the info create at 250 explains n-3).
pub fn clean_history() -> Vec<Event> {
    planted_history(CLEAN_CREATES, &[(2, 250)], CLEAN_CHILDREN)
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "lost create",
            planted_history(CLEAN_CREATES, &[(2, 250)], &CLEAN_CHILDREN[1..]),
        ),
        (
            "duplicate name",
            planted_history(
                &[
                    (0, "n-0000000000", 10, 0, 100),
                    (1, "n-0000000000", 10, 50, 150),
                ],
                &[],
                &CLEAN_CHILDREN[..1],
            ),
        ),
        (
            "out-of-order sequence",
            planted_history(
                CLEAN_CREATES,
                &[(2, 250)],
                &[
                    ("n-0000000000", 10),
                    ("n-0000000001", 12),
                    ("n-0000000002", 15),
                    ("n-0000000003", 14),
                ],
            ),
        ),
        (
            "real-time order",
            planted_history(
                &[
                    (0, "n-0000000001", 12, 0, 100),
                    (1, "n-0000000000", 10, 150, 200),
                ],
                &[],
                &CLEAN_CHILDREN[..2],
            ),
        ),
        (
            "child nobody created",
            planted_history(CLEAN_CREATES, &[], CLEAN_CHILDREN),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::support::planted_ctx;

    #[test]
    fn clean_history_is_valid() {
        let events = clean_history();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
        assert_eq!(r.stats["creates_ok"], 3);
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        crate::workloads::support::assert_every_planted_invalid(planted_anomalies(), check);
    }

    #[test]
    fn no_final_read_is_unknown() {
        let events: Vec<Event> = clean_history()
            .into_iter()
            .filter(|e| e.f != "read")
            .collect();
        assert_eq!(
            check(&events, &planted_ctx(&events)).valid,
            Validity::Unknown
        );
    }
}
