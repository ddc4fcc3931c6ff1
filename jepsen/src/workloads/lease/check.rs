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

/// How long past its TTL a lease whose holder went silent may outlive its
/// last confirmation (and every fault boundary before that point; see
/// [`lease_free_by`]): one election (a few hundred milliseconds of ticks,
/// seconds on a loaded two-core machine), the leader's expiry check every
/// few ticks, and the commit of the removal.
pub const EXPIRY_BOUND: Duration = Duration::from_secs(5);
/// How long a refused waiter may go unserved past every claim on the lease
/// before that counts (`lease-outlived-ttl`): the time its request and the
/// refusal spent in transit.
const OUTLIVED_GRACE: Duration = Duration::from_secs(1);

/// A grant rebuilt from the history, with the operations that show it.
struct GrantOps {
    grant: LeaseGrant,
    /// Completion of its last successful acquire or renewal: the server
    /// stamped the lease no later.
    confirmed_done_ns: u64,
    /// Completion of a successful release.
    released_ok_ns: Option<u64>,
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
                        grants[g].confirmed_done_ns = grants[g].confirmed_done_ns.max(done.time);
                        continue;
                    }
                    let release = list
                        .iter()
                        .find(|o| o.invoke.f == "release" && o.invoke.time >= done.time);
                    let released_ok_ns = list
                        .iter()
                        .filter(|o| o.invoke.f == "release" && token_of(o) == Some(token))
                        .filter_map(|o| o.complete.as_ref().filter(|c| c.kind == Kind::Ok))
                        .map(|c| c.time)
                        .min();
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
                        confirmed_done_ns: done.time,
                        released_ok_ns,
                        acquires: vec![op.invoke.index],
                        release: release.map(|o| o.invoke.index),
                        node: done.value.get("node").and_then(Value::as_u64),
                        after_lost_answer,
                    });
                }
                "renew" => {
                    if let Some(&g) = mine.get(&token) {
                        grants[g].grant.confirmed_ns.push(op.invoke.time);
                        grants[g].confirmed_done_ns = grants[g].confirmed_done_ns.max(done.time);
                    }
                }
                _ => {}
            }
        }
    }

    // A renewal whose answer was lost may have stamped the lease, as late
    // as that answer was given up on.
    for g in grants.iter_mut() {
        for op in &by_client[g.grant.client_id.as_str()] {
            if op.invoke.f == "renew"
                && op.outcome() == Kind::Info
                && token_of(op) == Some(g.grant.token)
            {
                let at = op.complete.as_ref().map(|c| c.time).unwrap_or(end);
                g.confirmed_done_ns = g.confirmed_done_ns.max(at);
            }
        }
    }

    let accepted = fence_accepted(&ops);
    let fence_tokens: Vec<u64> = accepted.iter().map(|&(_, t, _)| t).collect();

    let plain: Vec<LeaseGrant> = grants.iter().map(|g| g.grant.clone()).collect();
    // A write is late when it came after its holder's release or a TTL
    // after the holder's last successful acquire or renewal sent before
    // it: the server may then have given the lease to another.
    let by_grant: BTreeMap<(&str, u64), usize> = grants
        .iter()
        .enumerate()
        .map(|(i, g)| ((g.grant.client_id.as_str(), g.grant.token), i))
        .collect();
    let writes: BTreeMap<u64, &Op> = ops
        .iter()
        .filter(|o| o.invoke.f == "write")
        .map(|o| (o.invoke.index, o))
        .collect();
    let late_write = |index: u64| -> bool {
        let Some(w) = writes.get(&index) else {
            return false;
        };
        let (Some(client), Some(token)) = (client_id_of(w), token_of(w)) else {
            return false;
        };
        let Some(&g) = by_grant.get(&(client, token)) else {
            // A token no acquire of this client id answered: not its lease.
            return true;
        };
        let g = &grants[g];
        let at = w.invoke.time;
        let released = g.release.is_some() && at >= g.grant.released_ns;
        let confirmed = g
            .grant
            .confirmed_ns
            .iter()
            .copied()
            .filter(|&c| c <= at)
            .max();
        released || confirmed.is_none_or(|c| at >= c.saturating_add(g.grant.ttl_ns))
    };
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
            } => {
                let ops: Vec<u64> = accepted
                    .iter()
                    .take(position + 1)
                    .filter(|&&(_, t, _)| t == accepted_before || t == accepted_now)
                    .map(|&(_, _, index)| index)
                    .collect();
                let detail =
                    json!({ "accepted_before": accepted_before, "accepted_now": accepted_now });
                if late_write(accepted[position].2) {
                    // Past the writer's lease: the server may have granted
                    // the lease again, and only a fence stops this write
                    // (with --unsafe-resource there is none).
                    notes.push(Anomaly {
                        kind: "late-write-accepted".into(),
                        message: format!(
                            "the resource accepted token {accepted_now}, written past its \
                             holder's lease, after accepting {accepted_before}"
                        ),
                        ops,
                        detail,
                    });
                } else {
                    anomalies.push(Anomaly {
                        kind: "fence-went-back".into(),
                        message: format!(
                            "the resource accepted token {accepted_now}, written within its \
                             holder's lease, after accepting {accepted_before}"
                        ),
                        ops,
                        detail,
                    });
                }
            }
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

    // A lease whose holder went silent lapses within its TTL and one
    // election, leader changes counted (see `lease_free_by`): a waiter the
    // server refused after every claim on the lease had run out shows it
    // did not.
    let periods: Vec<crate::history::FaultPeriod> = ctx
        .faults
        .iter()
        .cloned()
        .chain(crate::history::fault_periods(events))
        .collect();
    let boundaries: Vec<u64> = periods
        .iter()
        .flat_map(|f| std::iter::once(f.start).chain(f.end))
        .collect();
    let in_force: Vec<(u64, Option<u64>)> = periods.iter().map(|f| (f.start, f.end)).collect();
    let bound_ns = EXPIRY_BOUND.as_nanos() as u64;
    let mut claims: Vec<(u64, u64, bool)> = grants
        .iter()
        .map(|g| {
            let silent = g.released_ok_ns.is_none();
            let to = g.released_ok_ns.unwrap_or_else(|| {
                lease_free_by(g.confirmed_done_ns, g.grant.ttl_ns, bound_ns, &boundaries)
            });
            // From its answer, or, if an earlier attempt of its client id
            // was lost (and may have been the one granted), from that.
            let from = if g.after_lost_answer {
                g.grant.earliest_ns
            } else {
                g.grant.granted_ns
            };
            (from, to, silent)
        })
        .collect();
    // An acquire whose answer was lost and that no later answer of its
    // client id settled may have been granted, to nobody who knew.
    for (&client_id, list) in &by_client {
        if grants.iter().any(|g| g.grant.client_id == client_id) {
            continue;
        }
        for op in list.iter().filter(|o| o.invoke.f == "acquire") {
            if op.outcome() == Kind::Info {
                let ttl_ns = op.invoke.value["ttl_ms"].as_u64().unwrap_or(0) * 1_000_000;
                let done = op.complete.as_ref().map(|c| c.time).unwrap_or(end);
                claims.push((
                    op.invoke.time,
                    lease_free_by(done, ttl_ns, bound_ns, &boundaries),
                    true,
                ));
            }
        }
    }
    let refused: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            o.invoke.f == "acquire"
                && o.outcome() == Kind::Fail
                && o.value().get("status").and_then(Value::as_u64) == Some(409)
        })
        .collect();
    let waits: Vec<(u64, u64)> = refused
        .iter()
        .filter_map(|o| Some((o.invoke.time, o.completed_at()?)))
        .collect();
    for w in lease_outlived(&claims, &in_force, &waits, OUTLIVED_GRACE.as_nanos() as u64) {
        let waiting: Vec<u64> = refused
            .iter()
            .filter(|o| o.invoke.time < w.end && o.completed_at().unwrap_or(end) > w.start)
            .map(|o| o.invoke.index)
            .collect();
        anomalies.push(Anomaly {
            kind: "lease-outlived-ttl".into(),
            message: format!(
                "from {:.3} s to {:.3} s the lease outlived a holder gone silent (its last \
                 confirmation, TTL and {} s, also past every fault since, were over; nobody \
                 else had a claim), no fault was in force, and the server refused {} waiting \
                 acquire(s)",
                w.start as f64 / 1e9,
                w.end as f64 / 1e9,
                EXPIRY_BOUND.as_secs(),
                waiting.len()
            ),
            ops: waiting,
            detail: json!({ "start_ns": w.start, "end_ns": w.end }),
        });
    }

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
        "expiry_bound_ms": EXPIRY_BOUND.as_millis() as u64,
    });
    CheckResult::from_anomalies(anomalies, notes, stats)
}
