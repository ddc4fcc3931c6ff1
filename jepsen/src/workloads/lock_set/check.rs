//! The lock-set checker: judges the resource's accepted writes, not the
//! grants. In the resource's own order (`seq`), every accepted write must
//! have been based on the version the previous accepted write made (its
//! read saw that write: no lost update) and set the value it read plus
//! one, and the tokens of accepted writes must never go back. The lock
//! must also be granted in every long enough stretch without faults (the
//! lock workload's bound).

use serde_json::{json, Value};

use crate::history::{count_ops, pair, Event, Kind, Op};
use crate::workload::{Anomaly, CheckCtx, CheckResult};
use crate::workloads::lock::{keep_first_per_kind, liveness_bound, no_grant_anomalies};
use crate::workloads::support::Planted;

/// An accepted write as the history shows it.
#[derive(Debug, Clone, Copy)]
struct Accepted {
    seq: u64,
    token: u64,
    based_on: u64,
    value: u64,
    op: u64,
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let field = |o: &Op, name: &str| o.value().get(name).and_then(Value::as_u64);
    let mut accepted: Vec<Accepted> = ops
        .iter()
        .filter(|o| o.invoke.f == "write" && o.outcome() == Kind::Ok)
        .filter_map(|o| {
            Some(Accepted {
                seq: field(o, "seq")?,
                token: field(o, "token")?,
                based_on: field(o, "based_on")?,
                value: field(o, "value")?,
                op: o.invoke.index,
            })
        })
        .collect();
    accepted.sort_by_key(|a| a.seq);

    let mut anomalies = Vec::new();
    // The state before the first write: version 0, value 0.
    let mut prev: Option<Accepted> = None;
    let mut highest: Option<Accepted> = None;
    for &a in &accepted {
        let (version, value) = prev.map(|p| (p.seq, p.value)).unwrap_or((0, 0));
        let before: Vec<u64> = prev.iter().map(|p| p.op).collect();
        if a.based_on < version {
            anomalies.push(Anomaly {
                kind: "lost-update".into(),
                message: format!(
                    "write #{} (token {}) was based on version {}, but the resource was at \
                     version {version}: the update(s) since were overwritten",
                    a.seq, a.token, a.based_on
                ),
                ops: [before, vec![a.op]].concat(),
                detail: json!({ "seq": a.seq, "token": a.token, "based_on": a.based_on, "version": version }),
            });
        } else if a.based_on != version || a.value != value + 1 {
            anomalies.push(Anomaly {
                kind: "broken-chain".into(),
                message: format!(
                    "write #{} (token {}) set {} based on version {}; the resource was at \
                     version {version} with value {value}",
                    a.seq, a.token, a.value, a.based_on
                ),
                ops: [before, vec![a.op]].concat(),
                detail: json!({ "seq": a.seq, "value": a.value, "based_on": a.based_on, "version": version, "previous_value": value }),
            });
        }
        if let Some(h) = highest.filter(|h| a.token < h.token) {
            anomalies.push(Anomaly {
                kind: "token-went-back".into(),
                message: format!(
                    "the resource accepted write #{} with token {} after write #{} with token {}",
                    a.seq, a.token, h.seq, h.token
                ),
                ops: vec![h.op, a.op],
                detail: json!({ "seq": a.seq, "token": a.token, "earlier_seq": h.seq, "earlier_token": h.token }),
            });
        }
        if highest.is_none_or(|h| a.token > h.token) {
            highest = Some(a);
        }
        prev = Some(a);
    }

    // Liveness, over the time clients were asking for the lock; only
    // faults that took the majority down or apart excuse a stall.
    let acquires: Vec<&Op> = ops.iter().filter(|o| o.invoke.f == "acquire").collect();
    let from = acquires.iter().map(|o| o.invoke.time).min().unwrap_or(0);
    let to = acquires.iter().map(|o| o.invoke.time).max().unwrap_or(0);
    let faults = crate::history::excusing_faults(&ctx.faults, events);
    let granted_at: Vec<u64> = acquires
        .iter()
        .filter(|o| o.outcome() == Kind::Ok)
        .filter_map(|o| o.completed_at())
        .collect();
    let bound = liveness_bound(ctx.session_timeout);
    anomalies.extend(no_grant_anomalies(
        &granted_at,
        &faults,
        (from, to),
        bound,
        &acquires,
        "without a fault",
    ));

    let count = |f: &str, kind: Kind| count_ops(&ops, f, kind);
    let zombie_writes = |kind: Kind| {
        ops.iter()
            .filter(|o| o.invoke.f == "write" && o.outcome() == kind)
            .filter(|o| o.invoke.value["zombie"] == json!(true))
            .count()
    };
    let (anomalies, by_kind) = keep_first_per_kind(anomalies);
    let stats = json!({
        "acquire": { "ok": count("acquire", Kind::Ok), "fail": count("acquire", Kind::Fail), "info": count("acquire", Kind::Info) },
        "read": { "ok": count("read", Kind::Ok), "refused": count("read", Kind::Fail) },
        "write": { "accepted": count("write", Kind::Ok), "refused": count("write", Kind::Fail) },
        "release": { "ok": count("release", Kind::Ok), "info": count("release", Kind::Info) },
        "zombies": count("pause-client", Kind::Ok),
        "zombie_writes": { "accepted": zombie_writes(Kind::Ok), "refused": zombie_writes(Kind::Fail) },
        "final_version": accepted.last().map(|a| a.seq).unwrap_or(0),
        "clients": ops.iter().filter(|o| o.invoke.f == "acquire").filter_map(|o| o.invoke.process.client()).collect::<std::collections::BTreeSet<_>>().len(),
        "sessions_expired": ops.iter().filter(|o| o.invoke.f == "session-ended" && o.value()["state"] == "Expired").count(),
        "anomalies_by_kind": by_kind,
        "liveness_bound_ms": bound.as_millis() as u64,
    });
    CheckResult::from_anomalies(anomalies, Vec::new(), stats)
}

const MS: u64 = 1_000_000;

/// A round by `process` at `at` ms: granted `token`, read `version`
/// (value = version, as in a healthy chain), written as `seq` based on
/// it (no write if `seq` is 0), released.
fn round(h: &Planted, process: u64, at: u64, token: u64, version: u64, seq: u64) {
    let t = |ms: u64| (at + ms) * MS;
    h.op(
        process,
        "acquire",
        Value::Null,
        t(0),
        Kind::Ok,
        json!({ "token": token, "session": 100 + process }),
        t(1),
    );
    let read = json!({ "token": token, "version": version, "value": version });
    h.op(
        process,
        "read",
        json!({ "token": token }),
        t(2),
        Kind::Ok,
        read,
        t(2),
    );
    if seq > 0 {
        let w =
            json!({ "token": token, "based_on": version, "value": version + 1, "zombie": false });
        let mut done = w.clone();
        done["seq"] = json!(seq);
        h.op(process, "write", w, t(5), Kind::Ok, done, t(5));
    }
    let r = json!({ "token": token });
    h.op(process, "release", r.clone(), t(6), Kind::Ok, r, t(7));
}

/// A clean history: three holders in turn, the third a zombie refused.
pub fn clean_history() -> Vec<Event> {
    let h = Planted::new();
    round(&h, 1, 0, 10, 0, 1);
    round(&h, 2, 10, 12, 1, 2);
    let w = json!({ "token": 10, "based_on": 0, "value": 1, "zombie": true });
    let mut refused = w.clone();
    refused["highest"] = json!(12);
    h.op(1, "write", w, 30 * MS, Kind::Fail, refused, 30 * MS);
    round(&h, 3, 40, 14, 2, 3);
    h.events()
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        ("lost update: a write based on a stale read", {
            let h = Planted::new();
            round(&h, 1, 0, 10, 0, 1);
            round(&h, 2, 10, 12, 1, 2);
            // Token 14 read version 1 (the write of token 12 was lost).
            round(&h, 3, 20, 14, 1, 3);
            h.events()
        }),
        ("a zombie's write accepted after a newer token's", {
            let h = Planted::new();
            round(&h, 1, 0, 10, 0, 1);
            round(&h, 2, 10, 12, 1, 2);
            // Token 10 again, after 12, and (to plant only this) on the
            // latest version.
            round(&h, 1, 20, 10, 2, 3);
            h.events()
        }),
        ("no grant in a long healthy window", {
            let h = Planted::new();
            round(&h, 1, 0, 10, 0, 1);
            for k in 1..=20u64 {
                let at = k * 30_000 * MS;
                h.op(
                    1 + k % 3,
                    "acquire",
                    Value::Null,
                    at,
                    Kind::Fail,
                    Value::Null,
                    at + 3_000 * MS,
                );
            }
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
        assert_eq!(r.stats["write"]["accepted"], 3);
        assert_eq!(r.stats["zombie_writes"]["refused"], 1);
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
            ["lost-update", "token-went-back", "no-grant-while-healthy"]
        );
    }
}
