//! The `lease` workload's checker and its planted histories.

use super::*;

/// The liveness bound: the longest stretch in which a majority of nodes
/// is up and connected and a correct cluster may grant the lease to
/// nobody. A zombie keeps it for its TTL (plus the server's TTL check
/// interval); a grant whose answer was lost is held by nobody who knows
/// until the retry picks it up or, if the round has ended, for its TTL; a
/// killed leader costs an election; and a client whose request hangs on a
/// cut-off server gives up only after its wait plus a request timeout.
/// Twice the TTL plus the wait plus 5 s covers one of each on a loaded
/// two-core machine. A healthy cluster grants the lease several times a
/// second.
pub fn liveness_bound(ttl: Duration) -> Duration {
    ttl * 2 + WAIT + LIVENESS_SLACK
}

/// A grant rebuilt from the history, with the operations that show it.
struct GrantOps {
    grant: LeaseGrant,
    /// Invocations of the acquires that answered it.
    acquires: Vec<u64>,
    release: Option<u64>,
    node: Option<u64>,
    /// Whether an acquire of its client id had an unknown outcome before.
    after_lost_answer: bool,
}

fn client_id_of(op: &Op) -> Option<&str> {
    op.invoke.value.get("client_id").and_then(Value::as_str)
}

fn token_of(op: &Op) -> Option<u64> {
    op.complete
        .as_ref()
        .and_then(|c| c.value.get("token"))
        .or_else(|| op.invoke.value.get("token"))
        .and_then(Value::as_u64)
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let end = ctx.history_end(events);
    // Every client id's operations, in invocation order.
    let mut by_client: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        if op.invoke.process.client().is_none() {
            continue;
        }
        if let Some(c) = client_id_of(op) {
            by_client.entry(c).or_default().push(op);
        }
    }

    let mut grants: Vec<GrantOps> = Vec::new();
    let mut ttl_max = Duration::ZERO;
    for (&client_id, list) in &by_client {
        let acquires: Vec<&&Op> = list.iter().filter(|o| o.invoke.f == "acquire").collect();
        let Some(earliest) = acquires.iter().map(|o| o.invoke.time).min() else {
            continue;
        };
        let mut mine: BTreeMap<u64, usize> = BTreeMap::new();
        for op in list {
            let Some(done) = op.complete.as_ref().filter(|c| c.kind == Kind::Ok) else {
                continue;
            };
            let Some(token) = token_of(op) else { continue };
            match op.invoke.f.as_str() {
                "acquire" => {
                    let ttl_ms = op
                        .invoke
                        .value
                        .get("ttl_ms")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    ttl_max = ttl_max.max(Duration::from_millis(ttl_ms));
                    if let Some(&g) = mine.get(&token) {
                        // The same grant answered again (a retry).
                        grants[g].grant.confirmed_ns.push(op.invoke.time);
                        grants[g].acquires.push(op.invoke.index);
                        continue;
                    }
                    let release = list
                        .iter()
                        .find(|o| o.invoke.f == "release" && o.invoke.time >= done.time);
                    let after_lost_answer = acquires
                        .iter()
                        .any(|o| o.invoke.time < op.invoke.time && o.outcome() == Kind::Info);
                    mine.insert(token, grants.len());
                    grants.push(GrantOps {
                        grant: LeaseGrant {
                            client_id: client_id.to_string(),
                            token,
                            earliest_ns: earliest,
                            granted_ns: done.time,
                            released_ns: release.map(|o| o.invoke.time).unwrap_or(end),
                            confirmed_ns: vec![op.invoke.time],
                            ttl_ns: ttl_ms.saturating_mul(1_000_000),
                        },
                        acquires: vec![op.invoke.index],
                        release: release.map(|o| o.invoke.index),
                        node: done.value.get("node").and_then(Value::as_u64),
                        after_lost_answer,
                    });
                }
                "renew" => {
                    if let Some(&g) = mine.get(&token) {
                        grants[g].grant.confirmed_ns.push(op.invoke.time);
                    }
                }
                _ => {}
            }
        }
    }

    let accepted = fence_accepted(&ops);
    let fence_tokens: Vec<u64> = accepted.iter().map(|&(_, t, _)| t).collect();

    let plain: Vec<LeaseGrant> = grants.iter().map(|g| g.grant.clone()).collect();
    let ops_of = |i: usize| -> Vec<u64> {
        grants[i]
            .acquires
            .iter()
            .copied()
            .chain(grants[i].release)
            .collect()
    };
    let json_of = |i: usize| {
        let g = &grants[i];
        json!({
            "client_id": g.grant.client_id,
            "token": g.grant.token,
            "earliest_ns": g.grant.earliest_ns,
            "granted_ns": g.grant.granted_ns,
            "released_ns": g.grant.released_ns,
            "last_confirmed_ns": g.grant.last_confirmed_ns(),
            "ttl_ms": g.grant.ttl_ns / 1_000_000,
            "node": g.node,
        })
    };
    let mut anomalies = Vec::new();
    let mut notes = Vec::new();
    for found in check_lease(&plain, &fence_tokens) {
        match found {
            LeaseAnomaly::DuplicateToken { token, a, b } => anomalies.push(Anomaly {
                kind: "duplicate-token".into(),
                message: format!(
                    "token {token} was granted to {} and to {}",
                    plain[a].client_id, plain[b].client_id
                ),
                ops: [ops_of(a), ops_of(b)].concat(),
                detail: json!({ "token": token, "a": json_of(a), "b": json_of(b) }),
            }),
            LeaseAnomaly::TokenOrder { earlier, later } => anomalies.push(Anomaly {
                kind: "token-order".into(),
                message: format!(
                    "{} was granted token {} after {} knew it held token {}",
                    plain[later].client_id,
                    plain[later].token,
                    plain[earlier].client_id,
                    plain[earlier].token
                ),
                ops: [ops_of(earlier), ops_of(later)].concat(),
                detail: json!({ "earlier": json_of(earlier), "later": json_of(later) }),
            }),
            LeaseAnomaly::Overlap {
                earlier,
                later,
                since_confirmed_ns,
            } => anomalies.push(Anomaly {
                kind: "overlap".into(),
                message: format!(
                    "{} held the lease (token {}) while {} did (token {}), granted {:.3} s after \
                     the first holder's last successful acquire or renew: less than its TTL of {:.3} s",
                    plain[earlier].client_id,
                    plain[earlier].token,
                    plain[later].client_id,
                    plain[later].token,
                    since_confirmed_ns as f64 / 1e9,
                    plain[earlier].ttl_ns as f64 / 1e9,
                ),
                ops: [ops_of(earlier), ops_of(later)].concat(),
                detail: json!({
                    "earlier": json_of(earlier), "later": json_of(later),
                    "since_confirmed_ns": since_confirmed_ns as i64,
                }),
            }),
            LeaseAnomaly::OverlapAfterExpiry {
                earlier,
                later,
                since_confirmed_ns,
            } => notes.push(Anomaly {
                kind: "overlap-after-expiry".into(),
                message: format!(
                    "{} held the lease (token {}) while {} did (token {}), granted {:.3} s after \
                     the first holder's last successful acquire or renew (TTL {:.3} s)",
                    plain[earlier].client_id,
                    plain[earlier].token,
                    plain[later].client_id,
                    plain[later].token,
                    since_confirmed_ns as f64 / 1e9,
                    plain[earlier].ttl_ns as f64 / 1e9,
                ),
                ops: [ops_of(earlier), ops_of(later)].concat(),
                detail: json!({
                    "earlier": json_of(earlier), "later": json_of(later),
                    "since_confirmed_ns": since_confirmed_ns as i64,
                }),
            }),
            LeaseAnomaly::FenceWentBack {
                accepted_before,
                accepted_now,
                position,
            } => anomalies.push(Anomaly {
                kind: "fence-went-back".into(),
                message: format!(
                    "the fenced resource accepted token {accepted_now} after accepting {accepted_before}"
                ),
                ops: accepted
                    .iter()
                    .take(position + 1)
                    .filter(|&&(_, t, _)| t == accepted_before || t == accepted_now)
                    .map(|&(_, _, index)| index)
                    .collect(),
                detail: json!({ "accepted_before": accepted_before, "accepted_now": accepted_now }),
            }),
        }
    }

    // Liveness, over the time clients were asking for the lease. Only
    // faults that take the majority down or apart excuse a stall.
    let acquires: Vec<&Op> = ops.iter().filter(|o| o.invoke.f == "acquire").collect();
    let from = acquires.iter().map(|o| o.invoke.time).min().unwrap_or(0);
    let to = acquires.iter().map(|o| o.invoke.time).max().unwrap_or(0);
    let faults = crate::history::excusing_faults(&ctx.faults, events);
    let bound = liveness_bound(ttl_max);
    let granted_at: Vec<u64> = plain.iter().map(|g| g.granted_ns).collect();
    anomalies.extend(no_grant_anomalies(
        &granted_at,
        &faults,
        (from, to),
        bound,
        &acquires,
        "with a majority of nodes up and connected",
    ));

    let count = |f: &str, kind: Kind| count_ops(&ops, f, kind);
    let outcomes = |f: &str| outcome_counts(&ops, f);
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for g in &grants {
        let node = g.node.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        *by_node.entry(node).or_default() += 1;
    }
    let mut sorted_grants = granted_at.clone();
    sorted_grants.sort_unstable();
    let longest_gap_ms = sorted_grants
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0)
        / 1_000_000;
    let zombie_writes = ops
        .iter()
        .filter(|o| o.invoke.f == "write" && o.invoke.value.get("zombie").is_some())
        .collect::<Vec<_>>();
    let (anomalies, anomaly_counts) = keep_first_per_kind(anomalies);
    let (notes, note_counts) = keep_first_per_kind(notes);
    let stats = json!({
        "acquire": outcomes("acquire"),
        "renew": outcomes("renew"),
        "release": outcomes("release"),
        "write": { "accepted": count("write", Kind::Ok), "refused": count("write", Kind::Fail) },
        "zombie_writes": {
            "accepted": zombie_writes.iter().filter(|o| o.outcome() == Kind::Ok).count(),
            "refused": zombie_writes.iter().filter(|o| o.outcome() == Kind::Fail).count(),
        },
        "grants": plain.len(),
        "grants_by_node": by_node,
        "grants_after_a_lost_answer": grants.iter().filter(|g| g.after_lost_answer).count(),
        "grants_answered_twice": grants.iter().filter(|g| g.acquires.len() > 1).count(),
        "client_ids": by_client.len(),
        "longest_gap_between_grants_ms": longest_gap_ms,
        "anomalies_by_kind": anomaly_counts,
        "notes_by_kind": note_counts,
        "liveness_bound_ms": bound.as_millis() as u64,
    });
    CheckResult::from_anomalies(anomalies, notes, stats)
}

// ---------------------------------------------------------------- planted

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "overlapping holds, the first lease live",
            // b is granted at 101 ms while a, granted at 1 ms with a 3 s
            // TTL, holds it until 400 ms.
            Plant::new()
                .round("a", 0, 10, 1, 400)
                .round("b", 100, 12, 2, 500)
                .events(),
        ),
        (
            "overlap a renewal kept live",
            // a is granted at 1 ms, renews at 2.5 s and holds to 5 s; b is
            // granted at 3.2 s: a TTL after a's acquire, not after its
            // renewal.
            Plant::new()
                .acquire_ok("a", 0, 10)
                .renew("a", 2_500, 10, Kind::Ok)
                .release("a", 5_000, 10, Kind::Ok)
                .acquire_ok("b", 3_200, 12)
                .release("b", 5_100, 12, Kind::Ok)
                .events(),
        ),
        (
            "duplicate token",
            Plant::new()
                .round("a", 0, 10, 1, 50)
                .round("b", 100, 10, 2, 150)
                .events(),
        ),
        (
            "token order broken between grants that are not adjacent",
            // a knows its grant at 101 ms; c asks at 200 ms, so c's grant
            // came after a's, yet its token is lower. b asked at 0 and
            // learned of its grant only at 400 ms: a-b and b-c are
            // unordered, and no adjacent pair in grant order is ordered.
            Plant::new()
                .acquire_ok_at("b", 0, 400, 60)
                .release("b", 450, 60, Kind::Ok)
                .acquire_ok_at("a", 100, 101, 50)
                .release("a", 150, 50, Kind::Ok)
                .acquire_ok_at("c", 200, 250, 40)
                .release("c", 300, 40, Kind::Ok)
                .events(),
        ),
        (
            "token going back at the fence",
            // A zombie write of a's, accepted after b's.
            Plant::new()
                .round("a", 0, 10, 1, 50)
                .round("b", 100, 12, 2, 150)
                .write("a", 200, 10, 3)
                .events(),
        ),
        ("no grant in a long healthy window", {
            // One grant, then ten minutes of refusals with no fault.
            let mut p = Plant::new();
            p.round("a", 0, 10, 1, 50);
            for k in 1..=20u64 {
                p.refused(&format!("w{k}"), k * 30_000);
            }
            p.events()
        }),
    ]
}

/// Builds small lease histories by hand (times in milliseconds; TTL 3 s).
#[derive(Default)]
struct Plant {
    /// (time, order recorded, event).
    events: Vec<(u64, usize, Event)>,
    /// A process per client id.
    processes: BTreeMap<String, u64>,
}

const MS: u64 = 1_000_000;
const PLANTED_TTL_MS: u64 = 3_000;

impl Plant {
    fn new() -> Plant {
        Plant::default()
    }

    fn process(&mut self, client_id: &str) -> u64 {
        let next = self.processes.len() as u64;
        *self.processes.entry(client_id.to_string()).or_insert(next)
    }

    fn push(&mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) {
        let time = at_ms * MS;
        let order = self.events.len();
        self.events.push((
            time,
            order,
            Event {
                index: 0,
                process: Process::Client(process),
                kind,
                f: f.to_string(),
                value,
                time,
                mono_ns: time,
                wall_ns: 0,
                error: (kind != Kind::Ok && kind != Kind::Invoke).then(|| "planted".to_string()),
            },
        ));
    }

    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        client_id: &str,
        f: &str,
        invoke: Value,
        at_ms: u64,
        kind: Kind,
        done: Value,
        done_ms: u64,
    ) -> &mut Plant {
        let p = self.process(client_id);
        self.push(p, Kind::Invoke, f, invoke, at_ms);
        self.push(p, kind, f, done, done_ms);
        self
    }

    fn acquire_invoke(client_id: &str) -> Value {
        json!({
            "lock": LEASE_NAME, "client_id": client_id, "node": 1,
            "ttl_ms": PLANTED_TTL_MS, "wait_timeout_ms": 3000,
        })
    }

    /// An acquire invoked at `at_ms` and granted `token` 1 ms later.
    fn acquire_ok(&mut self, client_id: &str, at_ms: u64, token: u64) -> &mut Plant {
        self.acquire_ok_at(client_id, at_ms, at_ms + 1, token)
    }

    /// An acquire invoked at `at_ms`, answered `token` at `done_ms`.
    fn acquire_ok_at(
        &mut self,
        client_id: &str,
        at_ms: u64,
        done_ms: u64,
        token: u64,
    ) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Ok,
            json!({ "client_id": client_id, "node": 1, "token": token }),
            done_ms,
        )
    }

    /// An acquire whose answer was lost (`info` at `done_ms`).
    #[cfg(test)]
    fn acquire_lost(&mut self, client_id: &str, at_ms: u64, done_ms: u64) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Info,
            json!({ "client_id": client_id, "node": 1 }),
            done_ms,
        )
    }

    /// An acquire not granted within its 3 s wait (a 409).
    fn refused(&mut self, client_id: &str, at_ms: u64) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Fail,
            json!({ "client_id": client_id, "node": 1, "status": 409, "acquired": false }),
            at_ms + 3_000,
        )
    }

    fn renew(&mut self, client_id: &str, at_ms: u64, token: u64, kind: Kind) -> &mut Plant {
        let v = json!({ "client_id": client_id, "token": token, "node": 1 });
        self.op(client_id, "renew", v.clone(), at_ms, kind, v, at_ms + 1)
    }

    fn release(&mut self, client_id: &str, at_ms: u64, token: u64, kind: Kind) -> &mut Plant {
        let v = json!({ "client_id": client_id, "token": token, "node": 1 });
        self.op(client_id, "release", v.clone(), at_ms, kind, v, at_ms + 1)
    }

    /// A write through the fence: accepted as its `seq`th, or refused
    /// (`seq` 0).
    fn write(&mut self, client_id: &str, at_ms: u64, token: u64, seq: u64) -> &mut Plant {
        let invoke = json!({ "client_id": client_id, "token": token });
        let (kind, done) = if seq == 0 {
            (
                Kind::Fail,
                json!({ "client_id": client_id, "token": token, "accepted": false }),
            )
        } else {
            (
                Kind::Ok,
                json!({ "client_id": client_id, "token": token, "accepted": true, "seq": seq }),
            )
        };
        self.op(client_id, "write", invoke, at_ms, kind, done, at_ms)
    }

    /// Granted `token` at `from_ms` (asked 1 ms before), one write (fence
    /// sequence `seq`), released at `to_ms`.
    fn round(
        &mut self,
        client_id: &str,
        from_ms: u64,
        token: u64,
        seq: u64,
        to_ms: u64,
    ) -> &mut Plant {
        self.acquire_ok(client_id, from_ms, token)
            .write(client_id, from_ms + 2, token, seq)
            .release(client_id, to_ms, token, Kind::Ok)
    }

    /// The events in time order (invocations before completions at the same
    /// time, as recorded), numbered.
    fn events(&self) -> Vec<Event> {
        let mut sorted = self.events.clone();
        sorted.sort_by_key(|(time, order, _)| (*time, *order));
        sorted
            .into_iter()
            .enumerate()
            .map(|(i, (_, _, mut e))| {
                e.index = i as u64;
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
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
                "overlap",
                "overlap",
                "duplicate-token",
                "token-order",
                "fence-went-back",
                "no-grant-while-healthy"
            ]
        );
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Plant::new()
            .round("a", 0, 10, 1, 10)
            .refused("b", 5)
            .round("c", 20, 12, 2, 30)
            .acquire_ok("d", 40, 15)
            .write("d", 42, 15, 3)
            .renew("d", 45, 15, Kind::Ok)
            .write("d", 47, 15, 4)
            .release("d", 50, 15, Kind::Ok)
            .events();
        let result = check(&events, &planted_ctx(&events));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert!(result.notes.is_empty());
        assert_eq!(result.stats["grants"], 3);
        assert_eq!(result.stats["acquire"]["fail"], 1);
        assert_eq!(result.stats["renew"]["ok"], 1);
        assert_eq!(result.stats["write"]["accepted"], 4);
    }

    #[test]
    fn a_zombie_past_its_ttl_is_a_note_and_its_late_write_refused() {
        // a is granted at 1 ms and stalls; its lease lapses, b is granted
        // at 3.5 s and writes; a's late write is refused, its release too.
        let events = Plant::new()
            .acquire_ok("a", 0, 10)
            .write("a", 2, 10, 1)
            .acquire_ok("b", 3_500, 12)
            .write("b", 3_502, 12, 2)
            .write("a", 3_600, 10, 0)
            .renew("a", 3_610, 10, Kind::Fail)
            .release("a", 3_700, 10, Kind::Fail)
            .release("b", 3_800, 12, Kind::Ok)
            .events();
        let result = check(&events, &planted_ctx(&events));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1, "{:?}", result.notes);
        assert_eq!(result.notes[0].kind, "overlap-after-expiry");
        assert_eq!(result.stats["write"]["refused"], 1);
    }

    #[test]
    fn a_retry_after_a_lost_answer_is_the_same_grant() {
        // a's first acquire is lost (it was granted, token 10); the retry
        // answers the same grant. Its TTL runs from the retry (which
        // renewed it), so b's grant 3.1 s after a's first attempt is still
        // an overlap.
        let retried = Plant::new()
            .acquire_lost("a", 0, 1_000)
            .acquire_ok("a", 1_100, 10)
            .release("a", 3_400, 10, Kind::Ok)
            .acquire_ok("b", 3_100, 12)
            .release("b", 3_500, 12, Kind::Ok)
            .events();
        let result = check(&retried, &planted_ctx(&retried));
        assert_eq!(result.valid, Validity::Invalid, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "overlap");
        assert_eq!(result.stats["grants_after_a_lost_answer"], 1);

        // The same grant answered twice is one grant, not a duplicate.
        let twice = Plant::new()
            .acquire_ok("a", 0, 10)
            .acquire_ok("a", 10, 10)
            .release("a", 20, 10, Kind::Ok)
            .round("b", 30, 12, 1, 40)
            .events();
        let result = check(&twice, &planted_ctx(&twice));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.stats["grants"], 2);
        assert_eq!(result.stats["grants_answered_twice"], 1);

        // A token granted to a earlier in the run and to b, whose first
        // (lost) attempt was before a's grant: unordered, but a duplicate.
        let dup = Plant::new()
            .acquire_lost("b", 0, 500)
            .round("a", 100, 10, 1, 200)
            .acquire_ok("b", 600, 10)
            .release("b", 700, 10, Kind::Ok)
            .events();
        let result = check(&dup, &planted_ctx(&dup));
        assert_eq!(result.anomalies.len(), 1, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "duplicate-token");
    }

    #[test]
    fn only_faults_that_lose_the_majority_excuse_a_stall() {
        let stalled = planted_anomalies().pop().unwrap().1;
        let with = |value: Value| {
            let mut events = stalled.clone();
            for (kind, f, at_ms) in [
                (Kind::Invoke, "kill", 20u64),
                (Kind::Ok, "kill", 21),
                (Kind::Invoke, "restart", 700_000),
                (Kind::Ok, "restart", 700_001),
            ] {
                events.push(Event {
                    index: events.len() as u64,
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
        };
        let lost = with(json!({"nodes": [1, 2], "majority_kept": false}));
        assert_eq!(check(&lost, &planted_ctx(&lost)).valid, Validity::Valid);
        let kept = with(json!({"nodes": [1], "majority_kept": true}));
        let result = check(&kept, &planted_ctx(&kept));
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.anomalies[0].kind, "no-grant-while-healthy");
    }

    #[test]
    fn replies_become_outcomes() {
        let base = json!({ "client_id": "c" });
        let answer = |status: u16, body: Value| judge(Reply::Answer { status, body }, base.clone());
        assert!(matches!(
            answer(200, json!({"acquired": true})),
            Answer::Ok(_)
        ));
        match answer(409, json!({"acquired": false, "error": "held"})) {
            Answer::Fail(v, why) => {
                assert_eq!(v["status"], 409);
                assert_eq!(v["acquired"], false);
                assert_eq!(v["client_id"], "c");
                assert!(why.contains("held"));
            }
            _ => panic!("a 409 is a fail"),
        }
        assert!(matches!(answer(400, Value::Null), Answer::Fail(..)));
        assert!(matches!(answer(503, Value::Null), Answer::Info(..)));
        assert!(matches!(answer(500, Value::Null), Answer::Info(..)));
        assert!(matches!(
            judge(Reply::Lost("closed".into()), base.clone()),
            Answer::Info(..)
        ));
        assert!(matches!(
            judge(Reply::NotSent("refused".into()), base),
            Answer::Fail(..)
        ));
    }
}
