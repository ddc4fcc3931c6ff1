//! The session-order checker.
//!
//! From the history it learns the zxid of every write it can: from the
//! write's own answer, or from any read that returned its value (values
//! are unique, and a read's `mzxid` is the zxid of the write that set what
//! it returned). Then, per session:
//!
//! - **No read older than what the session saw.** Let `seen` be the
//!   highest zxid among the session's operations completed before a read
//!   was invoked (its acknowledged writes and its reads). A server that
//!   may serve the session has applied at least `seen`, so the read of a
//!   key must return that key's state as of `seen` or later: no write to
//!   the key with a zxid in `(read zxid, seen]` may exist.
//! - **Writes apply in the order sent.** The session's writes, in send
//!   order, have increasing zxids (where known; a write whose answer was
//!   lost counts once a read shows it applied).
//!
//! And a read returns a value some write wrote (or the empty initial
//! value).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::history::{pair, Event, Kind, Op};
use crate::workload::{Anomaly, CheckCtx, CheckResult};
use crate::workloads::lock::keep_first_per_kind;
use crate::workloads::support::Planted;

/// One write of a batch.
#[derive(Debug, Clone)]
struct Write {
    session: u64,
    key: String,
    value: String,
    outcome: String,
    /// From its answer, or learned from a read.
    zxid: Option<u64>,
    op: u64,
}

/// An `ok` read.
#[derive(Debug, Clone)]
struct Read {
    session: u64,
    key: String,
    value: String,
    zxid: u64,
    invoked: u64,
    completed: u64,
    op: u64,
}

fn str_of(v: &Value, name: &str) -> String {
    v.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Judges a history of this workload.
pub fn check(events: &[Event], _ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let mut writes: Vec<Write> = Vec::new();
    let mut reads: Vec<Read> = Vec::new();
    // Per session: (completed, zxid, op) of what it observed.
    let mut observed: BTreeMap<u64, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let (mut batches, mut read_fails, mut moves) = (0u64, 0u64, 0u64);
    for op in &ops {
        match op.invoke.f.as_str() {
            "write" => {
                batches += 1;
                collect_writes(op, &mut writes, &mut observed);
            }
            "read" if op.outcome() == Kind::Ok => {
                let (Some(done), Some(zxid)) = (&op.complete, op.value()["zxid"].as_u64()) else {
                    continue;
                };
                let v = &done.value;
                let r = Read {
                    session: v["session"].as_u64().unwrap_or(0),
                    key: str_of(v, "key"),
                    value: str_of(v, "value"),
                    zxid,
                    invoked: op.invoke.time,
                    completed: done.time,
                    op: op.invoke.index,
                };
                observed
                    .entry(r.session)
                    .or_default()
                    .push((r.completed, r.zxid, r.op));
                reads.push(r);
            }
            "read" => read_fails += 1,
            "move" => moves += 1,
            _ => {}
        }
    }

    let mut anomalies = Vec::new();
    // Learn zxids from reads; flag values nobody wrote.
    let by_value: BTreeMap<(&str, &str), usize> = writes
        .iter()
        .enumerate()
        .map(|(i, w)| ((w.key.as_str(), w.value.as_str()), i))
        .collect();
    let mut learned: Vec<(usize, u64)> = Vec::new();
    for r in &reads {
        if r.value.is_empty() {
            continue;
        }
        match by_value.get(&(r.key.as_str(), r.value.as_str())) {
            Some(&i) => learned.push((i, r.zxid)),
            None => anomalies.push(Anomaly {
                kind: "unknown-value".into(),
                message: format!(
                    "session {:x} read {:?} from {}, a value no write wrote",
                    r.session, r.value, r.key
                ),
                ops: vec![r.op],
                detail: json!({ "key": r.key, "value": r.value, "zxid": r.zxid }),
            }),
        }
    }
    let mut applied_unacked = BTreeSet::new();
    for (i, zxid) in learned {
        if writes[i].zxid.is_none() {
            applied_unacked.insert(i);
            writes[i].zxid = Some(zxid);
        }
    }

    // Known write zxids per key.
    let mut key_zxids: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for w in &writes {
        if let Some(z) = w.zxid {
            key_zxids.entry(w.key.as_str()).or_default().push((z, w.op));
        }
    }
    for v in key_zxids.values_mut() {
        v.sort_unstable();
    }

    // Stale reads.
    let mut stale = 0u64;
    for list in observed.values_mut() {
        list.sort_unstable();
    }
    for r in &reads {
        let Some(list) = observed.get(&r.session) else {
            continue;
        };
        let before = list.partition_point(|&(done, _, _)| done < r.invoked);
        let Some(&(_, seen, seen_op)) = list[..before].iter().max_by_key(|&&(_, z, _)| z) else {
            continue;
        };
        let Some(missed) = key_zxids.get(r.key.as_str()).and_then(|zs| {
            zs.iter()
                .rev()
                .find(|&&(z, _)| z > r.zxid && z <= seen)
                .copied()
        }) else {
            continue;
        };
        stale += 1;
        anomalies.push(Anomaly {
            kind: "stale-read".into(),
            message: format!(
                "session {:x} read {} at zxid {} after it had seen zxid {seen}, \
                 missing the write of zxid {} to that key",
                r.session, r.key, r.zxid, missed.0
            ),
            ops: vec![missed.1, seen_op, r.op],
            detail: json!({ "key": r.key, "read_zxid": r.zxid, "seen": seen, "missed_zxid": missed.0 }),
        });
    }

    // Writes of a session in send order (writes is in it already).
    let mut highest: BTreeMap<u64, &Write> = BTreeMap::new();
    for w in &writes {
        let Some(z) = w.zxid else { continue };
        match highest.get(&w.session) {
            Some(h) if h.zxid.is_some_and(|hz| hz > z) => anomalies.push(Anomaly {
                kind: "writes-out-of-order".into(),
                message: format!(
                    "session {:x} sent {}={} after {}={}, yet it applied at zxid {z}, \
                     before the other's {}",
                    w.session,
                    w.key,
                    w.value,
                    h.key,
                    h.value,
                    h.zxid.unwrap_or(0)
                ),
                ops: vec![h.op, w.op],
                detail: json!({ "session": w.session, "earlier": { "key": h.key, "value": h.value, "zxid": h.zxid, "outcome": h.outcome }, "later": { "key": w.key, "value": w.value, "zxid": z, "outcome": w.outcome } }),
            }),
            _ => {
                highest.insert(w.session, w);
            }
        }
    }

    let outcome = |o: &str| writes.iter().filter(|w| w.outcome == o).count();
    let (anomalies, by_kind) = keep_first_per_kind(anomalies);
    let stats = json!({
        "sessions": observed.len(),
        "batches": batches,
        "writes": { "ok": outcome("ok"), "fail": outcome("fail"), "info": outcome("info"),
                    "info_seen_applied": applied_unacked.len() },
        "reads": { "ok": reads.len(), "fail": read_fails, "stale": stale },
        "moves": moves,
        "anomalies_by_kind": by_kind,
    });
    CheckResult::from_anomalies(anomalies, Vec::new(), stats)
}

/// The writes of one batch operation, in the order sent; acknowledged ones
/// are observations of their session.
fn collect_writes(
    op: &Op,
    out: &mut Vec<Write>,
    observed: &mut BTreeMap<u64, Vec<(u64, u64, u64)>>,
) {
    let session = op.invoke.value["session"].as_u64().unwrap_or(0);
    let sent = op.invoke.value["writes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let answered = op
        .complete
        .as_ref()
        .and_then(|c| c.value["writes"].as_array().cloned())
        .unwrap_or_default();
    let completed = op.complete.as_ref().map(|c| c.time);
    for (i, w) in sent.iter().enumerate() {
        let a = answered.get(i).filter(|a| a["value"] == w["value"]);
        let outcome = a
            .and_then(|a| a["outcome"].as_str())
            .unwrap_or("info")
            .to_string();
        let zxid = a
            .filter(|_| outcome == "ok")
            .and_then(|a| a["zxid"].as_u64());
        if let (Some(z), Some(done)) = (zxid, completed) {
            observed
                .entry(session)
                .or_default()
                .push((done, z, op.invoke.index));
        }
        out.push(Write {
            session,
            key: str_of(w, "key"),
            value: str_of(w, "value"),
            outcome,
            zxid,
            op: op.invoke.index,
        });
    }
}

const MS: u64 = 1_000_000;
const K: &str = "/jepsen/session-order/planted/k0";
const L: &str = "/jepsen/session-order/planted/k1";

/// A batch by `process` of `session` at `at` ms: (key, value, zxid or
/// `None` for a lost answer).
fn batch(h: &Planted, process: u64, session: u64, at: u64, writes: &[(&str, &str, Option<u64>)]) {
    let sent: Vec<Value> = writes
        .iter()
        .map(|(k, v, _)| json!({ "key": k, "value": v }))
        .collect();
    let done: Vec<Value> = writes
        .iter()
        .map(|(k, v, z)| match z {
            Some(z) => json!({ "key": k, "value": v, "outcome": "ok", "zxid": z }),
            None => json!({ "key": k, "value": v, "outcome": "info", "error": "ConnectionLoss" }),
        })
        .collect();
    let kind = if writes.iter().all(|w| w.2.is_some()) {
        Kind::Ok
    } else {
        Kind::Info
    };
    h.op(
        process,
        "write",
        json!({ "session": session, "writes": sent }),
        at * MS,
        kind,
        json!({ "session": session, "writes": done }),
        at * MS + 2 * MS,
    );
}

fn read(h: &Planted, process: u64, session: u64, at: u64, key: &str, value: &str, zxid: u64) {
    h.op(
        process,
        "read",
        json!({ "session": session, "key": key }),
        at * MS,
        Kind::Ok,
        json!({ "session": session, "key": key, "value": value, "zxid": zxid }),
        at * MS + MS,
    );
}

fn mv(h: &Planted, at: u64, to: u64) {
    let v = json!({ "worker": 0, "to": to });
    h.op(
        99,
        "move",
        v.clone(),
        at * MS,
        Kind::Ok,
        v,
        at * MS + 1_500 * MS,
    );
}

/// A clean history: two sessions, keys created at zxids 2 and 3.
pub fn clean_history() -> Vec<Event> {
    let h = Planted::new();
    batch(&h, 1, 0xa, 0, &[(K, "a-1", Some(10)), (L, "a-2", Some(11))]);
    read(&h, 1, 0xa, 5, K, "a-1", 10);
    mv(&h, 6, 2);
    // Session b has seen nothing yet: an old state is fine for it.
    read(&h, 2, 0xb, 7, K, "", 2);
    read(&h, 2, 0xb, 9, L, "a-2", 11);
    // A lost answer, applied in order (seen by a read at zxid 12).
    batch(&h, 1, 0xa, 10, &[(K, "a-3", None)]);
    read(&h, 3, 0xa, 20, K, "a-3", 12);
    batch(&h, 3, 0xa, 21, &[(L, "a-4", Some(13))]);
    h.events()
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        ("stale read of the session's own write after a move", {
            let h = Planted::new();
            batch(&h, 1, 0xa, 0, &[(K, "a-1", Some(10))]);
            mv(&h, 3, 2);
            // Moved to a server that has not applied zxid 10.
            read(&h, 1, 0xa, 5, K, "", 2);
            h.events()
        }),
        (
            "stale read of another session's write the session had passed",
            {
                let h = Planted::new();
                batch(&h, 2, 0xb, 0, &[(K, "b-1", Some(10)), (L, "b-2", Some(12))]);
                // Session a sees zxid 12 on L, then reads K from before 10.
                read(&h, 1, 0xa, 5, L, "b-2", 12);
                mv(&h, 6, 3);
                read(&h, 1, 0xa, 8, K, "", 2);
                h.events()
            },
        ),
        ("pipelined writes acknowledged out of order", {
            let h = Planted::new();
            batch(&h, 1, 0xa, 0, &[(K, "a-1", Some(21)), (L, "a-2", Some(20))]);
            h.events()
        }),
        ("a write with a lost answer applied after a later write", {
            let h = Planted::new();
            batch(&h, 1, 0xa, 0, &[(K, "a-1", None)]);
            mv(&h, 1, 2);
            batch(&h, 2, 0xa, 3, &[(L, "a-2", Some(30))]);
            // Left behind on the old server, applied after a-2.
            read(&h, 3, 0xb, 8, K, "a-1", 31);
            h.events()
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
    use crate::workloads::support::{assert_every_planted_invalid, planted_ctx};

    #[test]
    fn clean_history_is_valid() {
        let events = clean_history();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
        assert_eq!(r.stats["writes"]["info_seen_applied"], 1);
        assert_eq!(r.stats["moves"], 1);
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        assert_every_planted_invalid(planted_anomalies(), check);
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(_, e)| check(&e, &planted_ctx(&e)).anomalies[0].kind.clone())
            .collect();
        assert_eq!(
            kinds,
            [
                "stale-read",
                "stale-read",
                "writes-out-of-order",
                "writes-out-of-order"
            ]
        );
    }

    #[test]
    fn a_value_nobody_wrote_is_caught() {
        let h = Planted::new();
        read(&h, 1, 0xa, 0, K, "zz", 4);
        let e = h.events();
        assert_eq!(
            check(&e, &planted_ctx(&e)).anomalies[0].kind,
            "unknown-value"
        );
    }
}
