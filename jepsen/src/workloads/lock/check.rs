//! The `lock` workload's checker: grants rebuilt from the history, judged
//! by [`check_lock`], and liveness.

use super::*;

/// The liveness bound: the longest stretch without faults in which a
/// correct cluster may grant the lock to nobody.
///
/// After a fault ends, a grant may have to wait for a session that lost
/// its server during the fault: a holder, or a waiter queued ahead whose
/// client gave up on it, keeps its ephemeral node until the session
/// expires, up to one session timeout after the server last heard from it
/// — and a leader elected meanwhile restarts the expiry clocks, which can
/// cost a second session timeout. The extra 5 s cover the election itself,
/// a waiter's reconnect and re-listing, and scheduling on a loaded
/// two-core CI machine running a debug build. A healthy cluster grants the
/// lock many times a second, so a stretch this long without a grant means
/// the lock is stuck.
pub fn liveness_bound(session_timeout: Duration) -> Duration {
    session_timeout * 2 + LIVENESS_SLACK
}

/// A grant rebuilt from the history, with the operations that show it.
struct GrantOps {
    grant: Grant,
    acquire: u64,
    release: Option<u64>,
}

/// The fence's accepted writes (`write` ok with its `token`), in the
/// fence's own order: `(seq, token, invocation index)`; `seq` is the
/// write's place in the fence (its history index where not recorded).
pub(crate) fn fence_accepted(ops: &[Op]) -> Vec<(u64, u64, u64)> {
    let mut accepted: Vec<(u64, u64, u64)> = ops
        .iter()
        .filter(|o| o.invoke.f == "write" && o.outcome() == Kind::Ok)
        .filter_map(|o| {
            let v = o.value();
            Some((
                v.get("seq")
                    .and_then(Value::as_u64)
                    .unwrap_or(o.invoke.index),
                v.get("token").and_then(Value::as_u64)?,
                o.invoke.index,
            ))
        })
        .collect();
    accepted.sort_unstable();
    accepted
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let end = ctx.history_end(events);
    let mut by_process: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        if let Some(p) = op.invoke.process.client() {
            by_process.entry(p).or_default().push(op);
        }
    }

    let mut grants: Vec<GrantOps> = Vec::new();
    for (&process, ops) in &by_process {
        for (i, op) in ops.iter().enumerate() {
            if op.invoke.f != "acquire" || op.outcome() != Kind::Ok {
                continue;
            }
            let Some(done) = &op.complete else { continue };
            let value = &done.value;
            let (Some(token), session) = (
                value.get("token").and_then(Value::as_u64),
                value.get("session").and_then(Value::as_u64).unwrap_or(0),
            ) else {
                continue;
            };
            // The hold ends when the process invokes its release, or at its
            // next acquire (never expected), or with the history.
            let next = ops[i + 1..]
                .iter()
                .find(|o| o.invoke.f == "release" || o.invoke.f == "acquire");
            let release = next.filter(|o| o.invoke.f == "release");
            let released_ns = next.map(|o| o.invoke.time).unwrap_or(end);
            grants.push(GrantOps {
                grant: Grant {
                    process,
                    session_id: session,
                    token,
                    asked_ns: op.invoke.time,
                    acquired_ns: done.time,
                    released_ns,
                    session_expired: session_ended(release.copied()),
                },
                acquire: op.invoke.index,
                release: release.map(|o| o.invoke.index),
            });
        }
    }

    let accepted = fence_accepted(&ops);
    let fence_tokens: Vec<u64> = accepted.iter().map(|&(_, t, _)| t).collect();

    let plain: Vec<Grant> = grants.iter().map(|g| g.grant.clone()).collect();
    let mut anomalies = Vec::new();
    let mut notes = Vec::new();
    let ops_of = |g: &Grant| -> Vec<u64> {
        grants
            .iter()
            .filter(|o| o.grant == *g)
            .flat_map(|o| std::iter::once(o.acquire).chain(o.release))
            .collect()
    };
    for found in check_lock(&plain, &fence_tokens, ctx.session_timeout) {
        match found {
            LockAnomaly::DuplicateToken { token } => anomalies.push(Anomaly {
                kind: "duplicate-token".into(),
                message: format!("token {token} was granted more than once"),
                ops: grants
                    .iter()
                    .filter(|g| g.grant.token == token)
                    .map(|g| g.acquire)
                    .collect(),
                detail: json!({ "token": token }),
            }),
            LockAnomaly::TokenNotIncreasing { earlier, later } => anomalies.push(Anomaly {
                kind: "token-order".into(),
                message: format!(
                    "token {} was granted after token {} (grants in real-time order)",
                    later.token, earlier.token
                ),
                ops: [ops_of(&earlier), ops_of(&later)].concat(),
                detail: json!({ "earlier": grant_json(&earlier), "later": grant_json(&later) }),
            }),
            LockAnomaly::Overlap { a, b } => anomalies.push(Anomaly {
                kind: "overlap".into(),
                message: format!(
                    "process {} held the lock (token {}) while process {} did (token {}), granted {:.3} s after the first one's acquire: no session can have expired by then{}",
                    a.process, a.token, b.process, b.token,
                    b.acquired_ns.saturating_sub(a.acquired_ns) as f64 / 1e9,
                    if a.session_expired { "" } else { " (and the first holder's session lived on)" }
                ),
                ops: [ops_of(&a), ops_of(&b)].concat(),
                detail: json!({ "a": grant_json(&a), "b": grant_json(&b) }),
            }),
            LockAnomaly::OverlapAfterExpiry { a, b } => notes.push(Anomaly {
                kind: "overlap-after-expiry".into(),
                message: format!(
                    "process {} held the lock (token {}) while process {} did (token {}), granted {:.3} s after the first one's acquire, its session having expired or lost touch",
                    a.process, a.token, b.process, b.token,
                    b.acquired_ns.saturating_sub(a.acquired_ns) as f64 / 1e9
                ),
                ops: [ops_of(&a), ops_of(&b)].concat(),
                detail: json!({ "a": grant_json(&a), "b": grant_json(&b) }),
            }),
            LockAnomaly::FenceWentBack {
                accepted_before,
                accepted_now,
            } => anomalies.push(Anomaly {
                kind: "fence-went-back".into(),
                message: format!(
                    "the fenced resource accepted token {accepted_now} after accepting {accepted_before}"
                ),
                ops: accepted
                    .iter()
                    .filter(|&&(_, t, _)| t == accepted_before || t == accepted_now)
                    .map(|&(_, _, index)| index)
                    .collect(),
                detail: json!({ "accepted_before": accepted_before, "accepted_now": accepted_now }),
            }),
        }
    }

    // Liveness, over the time clients were asking for the lock.
    let acquires: Vec<&Op> = ops.iter().filter(|o| o.invoke.f == "acquire").collect();
    let from = acquires.iter().map(|o| o.invoke.time).min().unwrap_or(0);
    let to = acquires.iter().map(|o| o.invoke.time).max().unwrap_or(0);
    // Only faults that take the majority down or apart excuse a stall: with
    // a majority up and connected, the lock must keep being granted.
    let faults = crate::history::excusing_faults(&ctx.faults, events);
    let bound = liveness_bound(ctx.session_timeout);
    let granted_at: Vec<u64> = plain.iter().map(|g| g.acquired_ns).collect();
    anomalies.extend(no_grant_anomalies(
        &granted_at,
        &faults,
        (from, to),
        bound,
        &acquires,
        "without a fault",
    ));

    let count = |f: &str, kind: Kind| count_ops(&ops, f, kind);
    let (anomalies, anomaly_counts) = keep_first_per_kind(anomalies);
    let (notes, note_counts) = keep_first_per_kind(notes);
    let stats = json!({
        "acquire": { "ok": count("acquire", Kind::Ok), "fail": count("acquire", Kind::Fail), "info": count("acquire", Kind::Info) },
        "write": { "accepted": count("write", Kind::Ok), "refused": count("write", Kind::Fail) },
        "release": { "ok": count("release", Kind::Ok), "info": count("release", Kind::Info) },
        "grants": plain.len(),
        "grants_session_ended": plain.iter().filter(|g| g.session_expired).count(),
        "processes": by_process.len(),
        "anomalies_by_kind": anomaly_counts,
        "notes_by_kind": note_counts,
        "liveness_bound_ms": bound.as_millis() as u64,
    });
    CheckResult::from_anomalies(anomalies, notes, stats)
}

/// Keeps the first [`REPORTED_PER_KIND_MAX`] anomalies of each kind (a
/// broken lock overlaps thousands of times; the first few tell the story)
/// and counts them all.
pub(crate) fn keep_first_per_kind(all: Vec<Anomaly>) -> (Vec<Anomaly>, BTreeMap<String, usize>) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut kept = Vec::new();
    for a in all {
        let n = counts.entry(a.kind.clone()).or_default();
        *n += 1;
        if *n <= REPORTED_PER_KIND_MAX {
            kept.push(a);
        }
    }
    (kept, counts)
}

/// Whether a grant's session may have ended during the hold, which excuses
/// an overlap: the release saw the session expire (or the lock lost to
/// expiry), or the release did not complete and the session had lost touch
/// (or the release never happened): the session may have expired without
/// the client hearing of it yet. A release that completed while the
/// session lived proves the session (and its node) outlived the hold.
fn session_ended(release: Option<&Op>) -> bool {
    let Some(release) = release else {
        return true;
    };
    let value = release.complete.as_ref().map(|c| &c.value);
    let flag = |name: &str| {
        value
            .and_then(|v| v.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let lost_to_expiry = value
        .and_then(|v| v.get("lost"))
        .and_then(Value::as_str)
        .is_some_and(|l| l == LockLost::SessionExpired.to_string());
    let unknown = value.is_none_or(|v| v.get("disconnected").is_none());
    flag("expired")
        || lost_to_expiry
        || (release.outcome() != Kind::Ok && (flag("disconnected") || unknown))
}

fn grant_json(g: &Grant) -> Value {
    json!({
        "process": g.process,
        "session": g.session_id,
        "token": g.token,
        "acquired_ns": g.acquired_ns,
        "released_ns": g.released_ns,
        "session_ended": g.session_expired,
    })
}

/// A `no-grant-while-healthy` anomaly for every stretch of `bound` or more
/// within `span` with no grant (`granted_at`) and no fault in force
/// (`faults`, see [`check_liveness`]), with the acquires invoked in it;
/// `healthy` says what the stretch was ("without a fault").
pub(crate) fn no_grant_anomalies(
    granted_at: &[u64],
    faults: &[(u64, Option<u64>)],
    (from, to): (u64, u64),
    bound: Duration,
    acquires: &[&Op],
    healthy: &str,
) -> Vec<Anomaly> {
    let bound_ns = bound.as_nanos() as u64;
    check_liveness(granted_at, faults, from, to, bound_ns)
        .into_iter()
        .map(|w| Anomaly {
            kind: "no-grant-while-healthy".into(),
            message: format!(
                "no grant for {:.1} s {healthy} (bound {:.1} s)",
                (w.end - w.start) as f64 / 1e9,
                bound.as_secs_f64()
            ),
            ops: acquires
                .iter()
                .filter(|o| o.invoke.time >= w.start && o.invoke.time <= w.end)
                .map(|o| o.invoke.index)
                .collect(),
            detail: json!({ "start_ns": w.start, "end_ns": w.end, "bound_ns": bound_ns }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::planted::{planted_anomalies, Planted, MS};
    use super::*;
    use crate::workload::Validity;

    fn ctx() -> CheckCtx {
        CheckCtx {
            faults: Vec::new(),
            session_timeout: Duration::from_secs(10),
            end: 0,
        }
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Planted::new()
            .round(0, 0, 10, 1, 10)
            .round(1, 20, 12, 2, 30)
            .round(0, 40, 15, 3, 50)
            .refused(2, 45)
            .events();
        let result = check(&events, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert!(result.notes.is_empty());
        assert_eq!(result.stats["grants"], 3);
        assert_eq!(result.stats["acquire"]["fail"], 1);
    }

    #[test]
    fn overlap_after_expiry_is_a_note() {
        // Process 0's release saw its session expire, and process 1 was
        // granted 9.5 s after process 0's acquire: past a 10 s session
        // timeout less the slack.
        let events = Planted::new()
            .round(0, 0, 10, 1, 12_000)
            .session_ended(0)
            .round(1, 9_500, 12, 2, 9_600)
            .events();
        let result = check(&events, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1);
        assert_eq!(result.notes[0].kind, "overlap-after-expiry");
    }

    #[test]
    fn a_release_lost_in_a_disconnect_excuses_but_a_clean_one_does_not() {
        let base = Planted::new()
            .round(0, 0, 10, 1, 12_000)
            .round(1, 9_500, 12, 2, 9_600)
            .events();
        let mut disconnected_ok = base.clone();
        for e in disconnected_ok.iter_mut() {
            if e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(0) {
                e.value["disconnected"] = json!(true);
            }
        }
        // Disconnected, yet the release went through: the session lived,
        // so the overlap is the lock's fault.
        assert_eq!(check(&disconnected_ok, &ctx()).valid, Validity::Invalid);
        let mut disconnected_info = disconnected_ok;
        for e in disconnected_info.iter_mut() {
            if e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(0) {
                e.kind = Kind::Info;
            }
        }
        let result = check(&disconnected_info, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1);
    }

    #[test]
    fn a_refused_stale_write_is_fine() {
        let mut events = Planted::new()
            .round(0, 0, 10, 1, 10)
            .round(1, 20, 12, 2, 30)
            .events();
        let t = events.last().unwrap().time;
        events.push(Event {
            index: events.len() as u64,
            process: Process::Client(0),
            kind: Kind::Invoke,
            f: "write".into(),
            value: json!({ "token": 10 }),
            time: t + MS,
            mono_ns: t + MS,
            wall_ns: 0,
            error: None,
        });
        events.push(Event {
            index: events.len() as u64,
            process: Process::Client(0),
            kind: Kind::Fail,
            f: "write".into(),
            value: json!({ "token": 10, "accepted": false, "highest": 12 }),
            time: t + 2 * MS,
            mono_ns: t + 2 * MS,
            wall_ns: 0,
            error: Some("Stale".into()),
        });
        assert_eq!(check(&events, &ctx()).valid, Validity::Valid);
    }

    #[test]
    fn faults_excuse_a_long_stall() {
        // Faults that took the majority down or apart excuse it...
        let result = check(&with_kill(Value::Null), &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        let lost = json!({"nodes": [1, 2], "majority_kept": false});
        let result = check(&with_kill(lost), &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        // ...but with a majority up and connected, the lock must be granted.
        let kept = json!({"nodes": [1], "majority_kept": true});
        let result = check(&with_kill(kept), &ctx());
        assert_eq!(result.valid, Validity::Invalid, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "no-grant-while-healthy");
    }

    /// The planted stall with a kill over it whose value is `value`.
    fn with_kill(value: Value) -> Vec<Event> {
        let mut events = planted_anomalies()
            .into_iter()
            .find(|(name, _)| *name == "no grant in a long healthy window")
            .unwrap()
            .1;
        // A kill from just after the grant to past the last refusal.
        let n = events.len() as u64;
        for (i, (kind, f, at_ms)) in [
            (Kind::Invoke, "kill", 20),
            (Kind::Ok, "kill", 21),
            (Kind::Invoke, "restart", 700_000),
            (Kind::Ok, "restart", 700_001),
        ]
        .into_iter()
        .enumerate()
        {
            events.push(Event {
                index: n + i as u64,
                process: Process::NEMESIS,
                kind,
                f: f.into(),
                value: if f == "kill" {
                    value.clone()
                } else {
                    Value::Null
                },
                time: at_ms * MS,
                mono_ns: at_ms * MS,
                wall_ns: 0,
                error: None,
            });
        }
        events.sort_by_key(|e| e.time);
        events
    }
}
