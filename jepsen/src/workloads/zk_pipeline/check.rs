//! The `zk-pipeline` workload's checker and its planted histories.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use crate::history::{pair, Event, Kind};
use crate::workload::{Anomaly, CheckCtx, CheckResult, Validity};
use crate::workloads::lock::keep_first_per_kind;

/// One write as the history shows it.
#[derive(Debug, Clone)]
struct WriteRec {
    worker: u64,
    session: String,
    i: u64,
    f: String,
    /// A create's or set's payload, a delete's path.
    arg: String,
    outcome: Kind,
    /// A create's acknowledged sequence number.
    seq: Option<i64>,
    /// When its batch was invoked, for ordering sets.
    at: u64,
    /// The batch's invocation index.
    op: u64,
}

/// A worker's final tree.
#[derive(Debug, Default)]
struct FinalTree {
    /// `(name, payload)` of every child.
    children: Vec<(String, String)>,
    register_version: i64,
    register_data: String,
}

fn kind_of(s: Option<&str>) -> Kind {
    match s {
        Some("ok") => Kind::Ok,
        Some("fail") => Kind::Fail,
        _ => Kind::Info,
    }
}

/// The sequence number at the end of a sequential node's name.
fn seq_of(name: &str) -> Option<i64> {
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    digits.parse().ok()
}

/// Judges a history of this workload.
pub fn check(events: &[Event], _ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let mut writes: Vec<WriteRec> = Vec::new();
    let mut trees: BTreeMap<u64, FinalTree> = BTreeMap::new();
    let mut read_failed = Vec::new();
    let mut batches = 0u64;
    for op in &ops {
        match op.invoke.f.as_str() {
            "batch" => {
                batches += 1;
                let v = &op.invoke.value;
                let worker = v["worker"].as_u64().unwrap_or(0);
                let session = v["session"].as_str().unwrap_or("").to_string();
                let done: HashMap<u64, &Value> = op
                    .complete
                    .as_ref()
                    .and_then(|c| c.value["writes"].as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|o| Some((o["i"].as_u64()?, o)))
                    .collect();
                for w in v["writes"].as_array().into_iter().flatten() {
                    let Some(i) = w["i"].as_u64() else { continue };
                    let f = w["f"].as_str().unwrap_or("").to_string();
                    let arg = if f == "delete" {
                        &w["path"]
                    } else {
                        &w["data"]
                    };
                    let answer = done.get(&i);
                    writes.push(WriteRec {
                        worker,
                        session: session.clone(),
                        i,
                        f,
                        arg: arg.as_str().unwrap_or("").to_string(),
                        outcome: kind_of(answer.and_then(|a| a["outcome"].as_str())),
                        seq: answer.and_then(|a| a["seq"].as_i64()),
                        at: op.invoke.time,
                        op: op.invoke.index,
                    });
                }
            }
            "read" => {
                let worker = op.invoke.value["worker"].as_u64().unwrap_or(0);
                match op.complete.as_ref().filter(|c| c.kind == Kind::Ok) {
                    Some(c) => {
                        let v = &c.value;
                        let children = v["children"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| {
                                Some((c[0].as_str()?.to_string(), c[1].as_str()?.to_string()))
                            })
                            .collect();
                        trees.insert(
                            worker,
                            FinalTree {
                                children,
                                register_version: v["register"]["version"].as_i64().unwrap_or(0),
                                register_data: v["register"]["data"]
                                    .as_str()
                                    .unwrap_or("")
                                    .to_string(),
                            },
                        );
                    }
                    None => read_failed.push(op.invoke.index),
                }
            }
            _ => {}
        }
    }

    let mut anomalies = Vec::new();
    let mut push = |kind: &str, message: String, ops: Vec<u64>, detail: Value| {
        anomalies.push(Anomaly {
            kind: kind.into(),
            message,
            ops,
            detail,
        })
    };
    let mut duplicates = 0u64;
    for (&worker, tree) in &trees {
        let mine: Vec<&WriteRec> = writes.iter().filter(|w| w.worker == worker).collect();
        let mut children_by_payload: HashMap<&str, Vec<&str>> = HashMap::new();
        for (name, payload) in &tree.children {
            children_by_payload
                .entry(payload.as_str())
                .or_default()
                .push(name.as_str());
        }
        let present: HashMap<&str, &str> = tree
            .children
            .iter()
            .map(|(n, p)| (n.as_str(), p.as_str()))
            .collect();
        // Deletes by the node's name: the best outcome among them.
        let mut deleted: HashMap<&str, (Kind, u64)> = HashMap::new();
        for d in mine.iter().filter(|w| w.f == "delete") {
            let name = d.arg.rsplit('/').next().unwrap_or("");
            let rank = |k: Kind| match k {
                Kind::Ok => 2,
                Kind::Info => 1,
                _ => 0,
            };
            let e = deleted.entry(name).or_insert((d.outcome, d.op));
            if rank(d.outcome) > rank(e.0) {
                *e = (d.outcome, d.op);
            }
        }
        let creates: Vec<&&WriteRec> = mine.iter().filter(|w| w.f == "create").collect();
        let known: HashMap<&str, &&WriteRec> =
            creates.iter().map(|c| (c.arg.as_str(), *c)).collect();
        for c in &creates {
            let names = children_by_payload
                .get(c.arg.as_str())
                .cloned()
                .unwrap_or_default();
            let count = names.len();
            let acked_name = c.seq.map(|s| format!("s-{s:010}"));
            let delete = acked_name.as_deref().and_then(|n| deleted.get(n)).copied();
            let (min, max) = match (c.outcome, delete.map(|d| d.0)) {
                (Kind::Ok, Some(Kind::Ok)) => (0, 0),
                // An unknown delete; or a refused one, whose node gone is
                // judged below as the delete's.
                (Kind::Ok, Some(Kind::Info | Kind::Fail)) => (0, 1),
                (Kind::Ok, _) => (1, 1),
                (Kind::Info, _) => (0, 1),
                _ => (0, 0),
            };
            let detail = json!({
                "worker": worker, "session": c.session, "i": c.i, "payload": c.arg,
                "outcome": format!("{:?}", c.outcome).to_lowercase(), "acknowledged_as": acked_name,
                "children": names,
            });
            let mut involved = vec![c.op];
            involved.extend(delete.map(|d| d.1));
            if count > max {
                if c.outcome == Kind::Fail {
                    push(
                        "failed-write-applied",
                        format!(
                            "create {} (session {}, write {}) was refused, yet {} holds it",
                            c.arg,
                            c.session,
                            c.i,
                            names.join(", ")
                        ),
                        involved,
                        detail,
                    );
                } else if count == 1 && acked_name.as_deref() == Some(names[0]) {
                    push(
                        "delete-lost",
                        format!(
                            "{} was deleted with an acknowledgement, yet it is still there",
                            names[0]
                        ),
                        involved,
                        detail,
                    );
                } else {
                    duplicates += (count - max) as u64;
                    push(
                        "duplicate-apply",
                        format!(
                            "create {} (session {}, write {}, {}) applied {count} times: {}",
                            c.arg,
                            c.session,
                            c.i,
                            kind_name(c.outcome),
                            names.join(", ")
                        ),
                        involved,
                        detail,
                    );
                }
            } else if count < min {
                push(
                    "lost-write",
                    format!(
                        "create {} (session {}, write {}) was acknowledged as {}, and no child \
                         holds it",
                        c.arg,
                        c.session,
                        c.i,
                        acked_name.as_deref().unwrap_or("?")
                    ),
                    involved,
                    detail,
                );
            } else if let (Some(n), 1) = (acked_name.as_deref(), count) {
                if present.contains_key(n) && names[0] != n {
                    push(
                        "wrong-answer",
                        format!(
                            "create {} was acknowledged as {n}, which holds {}",
                            c.arg, present[n]
                        ),
                        involved,
                        detail,
                    );
                }
            }
        }
        // A refused delete of a node that nothing else removed must leave
        // it there.
        for d in mine
            .iter()
            .filter(|w| w.f == "delete" && w.outcome == Kind::Fail)
        {
            let name = d.arg.rsplit('/').next().unwrap_or("");
            let removed_otherwise = deleted.get(name).is_some_and(|e| e.0 != Kind::Fail);
            let created = creates.iter().any(|c| {
                c.outcome == Kind::Ok
                    && c.seq.map(|s| format!("s-{s:010}")).as_deref() == Some(name)
            });
            if created && !removed_otherwise && !present.contains_key(name) {
                push(
                    "failed-write-applied",
                    format!("the delete of {name} was refused, yet the node is gone"),
                    vec![d.op],
                    json!({ "worker": worker, "session": d.session, "i": d.i, "path": d.arg }),
                );
            }
        }
        // Children nobody wrote.
        for (name, payload) in &tree.children {
            if !known.contains_key(payload.as_str()) {
                push(
                    "unknown-write",
                    format!("{name} holds {payload:?}, which no create sent"),
                    Vec::new(),
                    json!({ "worker": worker, "name": name, "payload": payload }),
                );
            }
        }
        // Per session: sequence numbers in the order the writes were sent
        // (the final tree's and the acknowledged ones; a payload applied
        // twice is reported above, not here).
        let mut by_session: BTreeMap<&str, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
        for (name, payload) in &tree.children {
            if children_by_payload[payload.as_str()].len() > 1 {
                continue;
            }
            if let (Some(c), Some(seq)) = (known.get(payload.as_str()), seq_of(name)) {
                by_session
                    .entry(c.session.as_str())
                    .or_default()
                    .insert(seq, (c.i, c.op));
            }
        }
        for c in creates.iter().filter(|c| c.outcome == Kind::Ok) {
            if children_by_payload.get(c.arg.as_str()).map_or(0, Vec::len) > 1 {
                continue;
            }
            if let Some(seq) = c.seq {
                by_session
                    .entry(c.session.as_str())
                    .or_default()
                    .insert(seq, (c.i, c.op));
            }
        }
        for (session, seqs) in &by_session {
            let mut last: Option<(i64, u64, u64)> = None;
            for (&seq, &(i, op)) in seqs {
                if let Some((prev_seq, prev_i, prev_op)) = last {
                    if i <= prev_i {
                        push(
                            "order-broken",
                            format!(
                                "session {session}: write {i} got sequence number {seq}, after \
                                 write {prev_i}'s {prev_seq}, though it was sent first"
                            ),
                            vec![prev_op, op],
                            json!({ "worker": worker, "session": session,
                                    "first": {"i": prev_i, "seq": prev_seq},
                                    "then": {"i": i, "seq": seq} }),
                        );
                        break;
                    }
                }
                last = Some((seq, i, op));
            }
        }
        // The register: every set makes one version.
        let sets: Vec<&&WriteRec> = mine.iter().filter(|w| w.f == "set").collect();
        let acked = sets.iter().filter(|s| s.outcome == Kind::Ok).count() as i64;
        let unknown = sets.iter().filter(|s| s.outcome == Kind::Info).count() as i64;
        let version = tree.register_version;
        let reg_detail = json!({ "worker": worker, "version": version, "data": tree.register_data,
                                 "sets_ok": acked, "sets_unknown": unknown });
        if version < acked {
            push(
                "lost-write",
                format!(
                    "the register of worker {worker} is at version {version}, after {acked} \
                     acknowledged sets"
                ),
                Vec::new(),
                reg_detail.clone(),
            );
        } else if version > acked + unknown {
            push(
                "failed-write-applied",
                format!(
                    "the register of worker {worker} is at version {version}: more than its \
                     {acked} acknowledged sets and {unknown} unknown ones (a refused set \
                     applied, or one applied twice)"
                ),
                Vec::new(),
                reg_detail.clone(),
            );
        } else if version > 0 {
            let last_ok = sets
                .iter()
                .filter(|s| s.outcome == Kind::Ok)
                .max_by_key(|s| (s.at, s.i));
            match sets.iter().find(|s| s.arg == tree.register_data) {
                None => push(
                    "unknown-write",
                    format!(
                        "the register of worker {worker} holds {:?}, which no set sent",
                        tree.register_data
                    ),
                    Vec::new(),
                    reg_detail.clone(),
                ),
                Some(s) if s.outcome == Kind::Fail => push(
                    "failed-write-applied",
                    format!(
                        "the register of worker {worker} holds {:?}, whose set was refused",
                        s.arg
                    ),
                    vec![s.op],
                    reg_detail.clone(),
                ),
                Some(s) => {
                    if let Some(l) = last_ok.filter(|l| (s.at, s.i) < (l.at, l.i)) {
                        push(
                            "order-broken",
                            format!(
                                "the register of worker {worker} holds {:?}, sent before {:?}, \
                                 the last acknowledged set",
                                s.arg, l.arg
                            ),
                            vec![s.op, l.op],
                            reg_detail.clone(),
                        );
                    }
                }
            }
        }
    }

    let workers_written: std::collections::BTreeSet<u64> =
        writes.iter().map(|w| w.worker).collect();
    let unread: Vec<u64> = workers_written
        .iter()
        .copied()
        .filter(|w| !trees.contains_key(w))
        .collect();

    let count = |f: &str, k: Kind| writes.iter().filter(|w| w.f == f && w.outcome == k).count();
    let outcomes = |f: &str| json!({ "ok": count(f, Kind::Ok), "fail": count(f, Kind::Fail), "info": count(f, Kind::Info) });
    let sessions: std::collections::BTreeSet<&str> =
        writes.iter().map(|w| w.session.as_str()).collect();
    let (anomalies, by_kind) = keep_first_per_kind(anomalies);
    let stats = json!({
        "batches": batches,
        "sessions": sessions.len(),
        "create": outcomes("create"),
        "set": outcomes("set"),
        "delete": outcomes("delete"),
        "children": trees.values().map(|t| t.children.len()).sum::<usize>(),
        "duplicates": duplicates,
        "workers_unread": unread,
        "anomalies_by_kind": by_kind,
    });
    let mut notes = Vec::new();
    let mut result = CheckResult::from_anomalies(anomalies, Vec::new(), stats);
    if !unread.is_empty() && result.valid == Validity::Valid {
        notes.push(Anomaly {
            kind: "no-final-read".into(),
            message: format!(
                "the final tree of worker(s) {unread:?} could not be read: their writes are \
                 not judged"
            ),
            ops: read_failed,
            detail: Value::Null,
        });
        result.valid = Validity::Unknown;
    }
    result.notes = notes;
    result
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Ok => "acknowledged",
        Kind::Fail => "refused",
        _ => "unknown",
    }
}

// ---------------------------------------------------------------- planted

/// A hand-made history: batches of one session of worker 0, then its
/// final read.
struct Plant {
    planted: crate::workloads::support::Planted,
    at: u64,
}

const MS: u64 = 1_000_000;

impl Plant {
    fn new() -> Plant {
        Plant {
            planted: crate::workloads::support::Planted::new(),
            at: 0,
        }
    }

    /// One batch: `(f, arg, outcome, seq)` per write, numbered from
    /// `first_i`.
    fn batch(&mut self, first_i: u64, writes: &[(&str, &str, Kind, Option<i64>)]) -> &mut Plant {
        let invoke: Vec<Value> = writes
            .iter()
            .enumerate()
            .map(|(k, (f, arg, _, _))| {
                let i = first_i + k as u64;
                match *f {
                    "delete" => json!({ "i": i, "f": f, "path": arg }),
                    "set" => json!({ "i": i, "f": f, "data": arg, "version": 0 }),
                    _ => json!({ "i": i, "f": f, "data": arg }),
                }
            })
            .collect();
        let done: Vec<Value> = writes
            .iter()
            .enumerate()
            .map(|(k, (_, _, kind, seq))| {
                let mut o = json!({ "i": first_i + k as u64, "outcome": super::kind_name(*kind) });
                if let Some(s) = seq {
                    o["seq"] = json!(s);
                }
                o
            })
            .collect();
        let kind = if writes.iter().all(|w| w.2 == Kind::Ok) {
            Kind::Ok
        } else {
            Kind::Info
        };
        self.planted.op(
            0,
            "batch",
            json!({ "worker": 0, "session": "w0s0", "node": 2, "writes": invoke }),
            self.at * MS,
            kind,
            json!({ "worker": 0, "session": "w0s0", "node": 2, "writes": done }),
            (self.at + 50) * MS,
        );
        self.at += 100;
        self
    }

    /// The final read: children `(seq, payload)` and the register.
    fn read(&mut self, children: &[(i64, &str)], version: i64, data: &str) -> Vec<Event> {
        let list: Vec<Value> = children
            .iter()
            .map(|(s, p)| json!([format!("s-{s:010}"), p]))
            .collect();
        self.planted.op(
            1,
            "read",
            json!({ "worker": 0 }),
            self.at * MS,
            Kind::Ok,
            json!({ "worker": 0, "children": list, "register": { "version": version, "data": data } }),
            (self.at + 10) * MS,
        );
        self.planted.events()
    }
}

/// Histories with one planted anomaly each, named; the selftest checks
/// that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    use Kind::{Fail, Info, Ok};
    vec![
        (
            "a create applied twice (re-proposed after a leader change)",
            // Three acknowledged creates; the tree holds the second one's
            // payload twice, the copy after the third.
            Plant::new()
                .batch(
                    0,
                    &[
                        ("create", "w0s0:0", Ok, Some(0)),
                        ("create", "w0s0:1", Ok, Some(1)),
                        ("create", "w0s0:2", Ok, Some(2)),
                    ],
                )
                .read(
                    &[(0, "w0s0:0"), (1, "w0s0:1"), (2, "w0s0:2"), (3, "w0s0:1")],
                    0,
                    "",
                ),
        ),
        (
            "an unacknowledged create applied twice",
            Plant::new()
                .batch(
                    0,
                    &[
                        ("create", "w0s0:0", Ok, Some(0)),
                        ("create", "w0s0:1", Info, None),
                    ],
                )
                .read(&[(0, "w0s0:0"), (1, "w0s0:1"), (2, "w0s0:1")], 0, ""),
        ),
        (
            "an acknowledged create lost",
            Plant::new()
                .batch(
                    0,
                    &[
                        ("create", "w0s0:0", Ok, Some(0)),
                        ("create", "w0s0:1", Ok, Some(1)),
                    ],
                )
                .read(&[(0, "w0s0:0")], 0, ""),
        ),
        (
            "a session's creates applied out of order",
            Plant::new()
                .batch(
                    0,
                    &[
                        ("create", "w0s0:0", Info, None),
                        ("create", "w0s0:1", Info, None),
                    ],
                )
                .read(&[(0, "w0s0:1"), (1, "w0s0:0")], 0, ""),
        ),
        (
            "a refused conditional set applied",
            Plant::new()
                .batch(
                    0,
                    &[("set", "w0s0:0", Ok, None), ("set", "w0s0:1", Fail, None)],
                )
                .read(&[], 2, "w0s0:1"),
        ),
        (
            "a refused delete applied",
            Plant::new()
                .batch(0, &[("create", "w0s0:0", Ok, Some(0))])
                .batch(
                    1,
                    &[(
                        "delete",
                        "/jepsen-zk-pipeline/t/w0/s-0000000000",
                        Fail,
                        None,
                    )],
                )
                .read(&[], 0, ""),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::support::{assert_every_planted_invalid, planted_ctx};

    #[test]
    fn every_planted_anomaly_is_invalid() {
        assert_every_planted_invalid(planted_anomalies(), check);
    }

    #[test]
    fn planted_anomalies_are_of_the_right_kind() {
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(_, events)| {
                check(&events, &planted_ctx(&events)).anomalies[0]
                    .kind
                    .clone()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "duplicate-apply",
                "duplicate-apply",
                "lost-write",
                "order-broken",
                "failed-write-applied",
                "failed-write-applied"
            ]
        );
    }

    #[test]
    fn a_clean_history_is_valid() {
        use Kind::{Fail, Info, Ok};
        let events = Plant::new()
            .batch(
                0,
                &[
                    ("create", "w0s0:0", Ok, Some(0)),
                    ("set", "w0s0:1", Ok, None),
                    ("create", "w0s0:2", Info, None),
                    ("set", "w0s0:3", Info, None),
                    ("create", "w0s0:4", Ok, Some(2)),
                ],
            )
            .batch(
                5,
                &[
                    ("delete", "/p/w0/s-0000000000", Ok, None),
                    ("set", "w0s0:6", Fail, None),
                    ("delete", "/p/w0/s-0000000002", Info, None),
                ],
            )
            // The unknown create applied once (seq 1); the unknown delete
            // did not happen; the unknown set did.
            .read(&[(1, "w0s0:2"), (2, "w0s0:4")], 2, "w0s0:3");
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert_eq!(r.stats["create"]["ok"], 2);
        assert_eq!(r.stats["children"], 2);
    }

    #[test]
    fn a_tree_never_read_is_unknown() {
        let mut p = Plant::new();
        p.batch(0, &[("create", "w0s0:0", Kind::Ok, Some(0))]);
        let events = p.planted.events();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Unknown);
        assert_eq!(r.notes[0].kind, "no-final-read");
    }
}
