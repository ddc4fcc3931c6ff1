//! The `election` workload's checker: terms of office rebuilt from the
//! history and judged for one leader at a time, rising tokens and
//! successors taking over (within the liveness bound in any healthy
//! stretch, and within [`successor_bound`] after a leader was killed or
//! paused).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::checkers::{
    check_coverage, duplicate_tokens, expiry_excuses, token_order, GrantlessWindow, TokenSpan,
};
use crate::history::{outcome_counts, pair, Event, Kind, Op};
use crate::workload::{Anomaly, CheckCtx, CheckResult};
use crate::workloads::lock::{keep_first_per_kind, liveness_bound};

use super::{successor_bound, ELECTION_SLACK};

/// One term of office as its leader believed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub process: u64,
    pub session: u64,
    pub token: u64,
    /// The campaign's invocation: the candidate node (whose czxid is the
    /// token) cannot be older.
    pub asked_ns: u64,
    /// The campaign's `ok`: the leader believed it led from then...
    pub started_ns: u64,
    /// ...to the invocation of whatever ended the term (or the end).
    pub ended_ns: u64,
    /// The leader's last contact with the cluster: the campaign's `ok`,
    /// or the invocation of its last successful confirmation.
    pub last_contact_ns: u64,
    /// `resign`, `close`, `step-down: <reason>`, `killed` (a
    /// `kill-client` of the leader's process) or `end of history`.
    pub ended_by: String,
    /// Whether it ended by a resign that succeeded: the session surely
    /// lived through the term.
    pub clean: bool,
    /// History indices of the campaign's invocation and of the end's.
    pub ops: Vec<u64>,
}

impl Term {
    fn json(&self) -> Value {
        json!({
            "process": self.process,
            "session": self.session,
            "token": self.token,
            "started_ns": self.started_ns,
            "ended_ns": self.ended_ns,
            "last_contact_ns": self.last_contact_ns,
            "ended_by": self.ended_by,
        })
    }
}

/// A client fault that hit a candidate process: `kill-client` or
/// `pause-client` (see [`client_faults`](crate::workloads::client_faults)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFaultOp {
    pub f: String,
    /// The history process hit.
    pub client: u64,
    /// When the signal went (the invocation).
    pub at_ns: u64,
    /// How long it lasted: for ever for a kill, the pause for a pause.
    pub lasts_ns: u64,
    /// History index of the invocation.
    pub index: u64,
}

/// The client faults of a history that took effect (`ok`).
pub fn client_faults(ops: &[Op]) -> Vec<ClientFaultOp> {
    ops.iter()
        .filter(|o| matches!(o.invoke.f.as_str(), "kill-client" | "pause-client"))
        .filter(|o| o.outcome() == Kind::Ok)
        .filter_map(|o| {
            Some(ClientFaultOp {
                f: o.invoke.f.clone(),
                client: o.invoke.value.get("client")?.as_u64()?,
                at_ns: o.invoke.time,
                lasts_ns: match o.invoke.f.as_str() {
                    "kill-client" => u64::MAX,
                    _ => o
                        .invoke
                        .value
                        .get("ms")?
                        .as_u64()?
                        .saturating_mul(1_000_000),
                },
                index: o.invoke.index,
            })
        })
        .collect()
}

/// The terms of a history, in no particular order. A term ends at the
/// invocation of whatever ended it, or at the `kill-client` that killed
/// its process, whichever came first.
pub fn terms(ops: &[Op], end: u64) -> Vec<Term> {
    let mut by_process: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(p) = op.invoke.process.client() {
            by_process.entry(p).or_default().push(op);
        }
    }
    let mut killed: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for f in client_faults(ops) {
        if f.f == "kill-client" {
            killed.entry(f.client).or_insert((f.at_ns, f.index));
        }
    }
    let mut out = Vec::new();
    for (&process, list) in &by_process {
        for (i, op) in list.iter().enumerate() {
            if op.invoke.f != "campaign" || op.outcome() != Kind::Ok {
                continue;
            }
            let Some(done) = &op.complete else { continue };
            let Some(token) = done.value.get("token").and_then(Value::as_u64) else {
                continue;
            };
            let session = done
                .value
                .get("session")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let rest = &list[i + 1..];
            let ender = rest.iter().find(|o| {
                matches!(
                    o.invoke.f.as_str(),
                    "resign" | "close" | "step-down" | "campaign"
                )
            });
            let kill = killed
                .get(&process)
                .copied()
                .filter(|&(at, _)| at >= done.time && ender.is_none_or(|o| at < o.invoke.time));
            let ended_ns = match kill {
                Some((at, _)) => at,
                None => ender.map(|o| o.invoke.time).unwrap_or(end),
            };
            let last_contact_ns = rest
                .iter()
                .filter(|o| o.invoke.f == "confirm" && o.invoke.time < ended_ns)
                .filter(|o| o.outcome() == Kind::Ok && o.value()["exists"] == Value::Bool(true))
                .map(|o| o.invoke.time)
                .fold(done.time, u64::max);
            let ended_by = match ender {
                _ if kill.is_some() => "killed".to_string(),
                None => "end of history".to_string(),
                Some(o) if o.invoke.f == "step-down" => format!(
                    "step-down: {}",
                    o.invoke.value["reason"].as_str().unwrap_or("?")
                ),
                Some(o) => o.invoke.f.clone(),
            };
            let clean = kill.is_none()
                && ender.is_some_and(|o| o.invoke.f == "resign" && o.outcome() == Kind::Ok);
            let ender_index = match kill {
                Some((_, index)) => Some(index),
                None => ender.map(|o| o.invoke.index),
            };
            out.push(Term {
                process,
                session,
                token,
                asked_ns: op.invoke.time,
                started_ns: done.time,
                ended_ns,
                last_contact_ns,
                ended_by,
                clean,
                ops: std::iter::once(op.invoke.index)
                    .chain(ender_index)
                    .collect(),
            });
        }
    }
    out
}

/// What [`check_terms`] finds; terms are indices into its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionAnomaly {
    /// Two terms overlap, and the earlier leader's session cannot have
    /// expired in time to explain it.
    TwoLeaders {
        earlier: usize,
        later: usize,
    },
    /// Two terms overlap, the earlier leader's session may have ended, and
    /// the later term began at least the session timeout (less the slack)
    /// after the earlier leader's last contact: reported apart, as a note.
    OverlapAfterExpiry {
        earlier: usize,
        later: usize,
    },
    /// `earlier` was known before `later` was campaigned for, yet
    /// `later`'s token is lower.
    TokenOrder {
        earlier: usize,
        later: usize,
    },
    DuplicateToken {
        token: u64,
        a: usize,
        b: usize,
    },
}

/// The safety of an election's terms: one leader at a time (overlaps
/// judged by [`expiry_excuses`], the rule the lock checker uses), tokens
/// unique and rising over every pair of terms ([`token_order`]).
pub fn check_terms(terms: &[Term], session_timeout: Duration) -> Vec<ElectionAnomaly> {
    let mut out: Vec<ElectionAnomaly> = duplicate_tokens(terms.iter().map(|t| t.token))
        .into_iter()
        .map(|(token, a, b)| ElectionAnomaly::DuplicateToken { token, a, b })
        .collect();
    let spans: Vec<TokenSpan> = terms
        .iter()
        .map(|t| TokenSpan {
            token: t.token,
            earliest_ns: t.asked_ns,
            known_ns: t.started_ns,
        })
        .collect();
    out.extend(
        token_order(&spans)
            .into_iter()
            .map(|(earlier, later)| ElectionAnomaly::TokenOrder { earlier, later }),
    );
    let mut by_start: Vec<usize> = (0..terms.len()).collect();
    by_start.sort_by_key(|&i| (terms[i].started_ns, terms[i].token));
    for (k, &a) in by_start.iter().enumerate() {
        for &b in &by_start[k + 1..] {
            if terms[b].started_ns >= terms[a].ended_ns {
                break;
            }
            if terms[b].ended_ns <= terms[b].started_ns {
                continue;
            }
            let excused = !terms[a].clean
                && expiry_excuses(
                    terms[b].started_ns,
                    terms[a].last_contact_ns,
                    session_timeout,
                );
            out.push(if excused {
                ElectionAnomaly::OverlapAfterExpiry {
                    earlier: a,
                    later: b,
                }
            } else {
                ElectionAnomaly::TwoLeaders {
                    earlier: a,
                    later: b,
                }
            });
        }
    }
    out
}

/// What became of the leadership after a client fault hit a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    pub fault: ClientFaultOp,
    /// The term (index into the terms) the fault hit.
    pub term: usize,
    /// The first term of another process that began after the fault.
    pub successor: Option<usize>,
}

impl Takeover {
    /// From the fault to the successor's start.
    pub fn latency_ns(&self, terms: &[Term]) -> Option<u64> {
        self.successor
            .map(|s| terms[s].started_ns.saturating_sub(self.fault.at_ns))
    }
}

/// The takeovers to judge: every client fault that hit a process while it
/// led, and lasted at least `bound` (a kill lasts for ever; a pause
/// shorter than that may end before the session does).
pub fn takeovers(terms: &[Term], faults: &[ClientFaultOp], bound: Duration) -> Vec<Takeover> {
    let bound = bound.as_nanos() as u64;
    let mut out = Vec::new();
    for fault in faults.iter().filter(|f| f.lasts_ns >= bound) {
        let Some(term) = terms.iter().position(|t| {
            t.process == fault.client && t.started_ns <= fault.at_ns && fault.at_ns <= t.ended_ns
        }) else {
            continue;
        };
        let successor = (0..terms.len())
            .filter(|&i| terms[i].process != fault.client && terms[i].started_ns > fault.at_ns)
            .min_by_key(|&i| terms[i].started_ns);
        out.push(Takeover {
            fault: fault.clone(),
            term,
            successor,
        });
    }
    out
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let end = ctx.history_end(events);
    let terms = terms(&ops, end);
    let mut anomalies = Vec::new();
    let mut notes = Vec::new();
    let pair_ops = |a: usize, b: usize| [terms[a].ops.clone(), terms[b].ops.clone()].concat();
    let pair_detail =
        |a: usize, b: usize| json!({ "earlier": terms[a].json(), "later": terms[b].json() });
    for found in check_terms(&terms, ctx.session_timeout) {
        match found {
            ElectionAnomaly::TwoLeaders { earlier, later } => {
                let (a, b) = (&terms[earlier], &terms[later]);
                anomalies.push(Anomaly {
                    kind: "two-leaders".into(),
                    message: format!(
                        "process {} led (token {}) while process {} did (token {}), which began \
                         {:.3} s after the first one's last contact with the cluster{}",
                        a.process,
                        a.token,
                        b.process,
                        b.token,
                        (i128::from(b.started_ns) - i128::from(a.last_contact_ns)) as f64 / 1e9,
                        if a.clean {
                            " (whose session lived on: it resigned)"
                        } else {
                            ": too soon for its session to have expired"
                        }
                    ),
                    ops: pair_ops(earlier, later),
                    detail: pair_detail(earlier, later),
                });
            }
            ElectionAnomaly::OverlapAfterExpiry { earlier, later } => {
                let (a, b) = (&terms[earlier], &terms[later]);
                notes.push(Anomaly {
                    kind: "overlap-after-expiry".into(),
                    message: format!(
                        "process {} led (token {}) while process {} did (token {}), which began \
                         {:.3} s after the first one's last contact ({})",
                        a.process,
                        a.token,
                        b.process,
                        b.token,
                        (i128::from(b.started_ns) - i128::from(a.last_contact_ns)) as f64 / 1e9,
                        a.ended_by
                    ),
                    ops: pair_ops(earlier, later),
                    detail: pair_detail(earlier, later),
                });
            }
            ElectionAnomaly::TokenOrder { earlier, later } => {
                let (a, b) = (&terms[earlier], &terms[later]);
                anomalies.push(Anomaly {
                    kind: "token-order".into(),
                    message: format!(
                        "process {} led with token {} after process {} knew it led with token {}",
                        b.process, b.token, a.process, a.token
                    ),
                    ops: pair_ops(earlier, later),
                    detail: pair_detail(earlier, later),
                });
            }
            ElectionAnomaly::DuplicateToken { token, a, b } => anomalies.push(Anomaly {
                kind: "duplicate-token".into(),
                message: format!(
                    "token {token} was the token of two terms (processes {} and {})",
                    terms[a].process, terms[b].process
                ),
                ops: pair_ops(a, b),
                detail: pair_detail(a, b),
            }),
        }
    }

    // Successors: a leader in every long enough stretch in which a
    // majority of nodes was up and connected, over the time candidates
    // campaigned.
    let campaigns: Vec<&Op> = ops.iter().filter(|o| o.invoke.f == "campaign").collect();
    let from = campaigns.iter().map(|o| o.invoke.time).min().unwrap_or(0);
    let to = campaigns
        .iter()
        .map(|o| o.completed_at().unwrap_or(o.invoke.time))
        .max()
        .unwrap_or(0);
    let faults = crate::history::excusing_faults(&ctx.faults, events);
    let bound = liveness_bound(ctx.session_timeout);
    let spans: Vec<(u64, u64)> = terms.iter().map(|t| (t.started_ns, t.ended_ns)).collect();
    let leaderless = check_coverage(&spans, &faults, from, to, bound.as_nanos() as u64);
    anomalies.extend(leaderless.iter().map(|w| no_leader(w, bound, &campaigns)));

    // Successors after a client fault hit the leader: within the bound,
    // unless a nemesis fault was in force meanwhile (a new Raft leader
    // gives every session a fresh timeout; a cut-off server cannot expire
    // anything) or the history ends first.
    let successor_bound = successor_bound(ctx.session_timeout);
    let bound_ns = successor_bound.as_nanos() as u64;
    let nemesis: Vec<(u64, u64)> = ctx
        .faults
        .iter()
        .cloned()
        .chain(crate::history::fault_periods(events))
        .map(|f| (f.start, f.end.unwrap_or(u64::MAX)))
        .collect();
    let hit = client_faults(&ops);
    let mut latencies_ms = Vec::new();
    let (mut excused, mut unjudged) = (0usize, 0usize);
    for t in takeovers(&terms, &hit, successor_bound) {
        let latency = t.latency_ns(&terms);
        if let Some(l) = latency.filter(|&l| l <= bound_ns) {
            latencies_ms.push(l / 1_000_000);
            continue;
        }
        let (from, until) = (t.fault.at_ns, t.fault.at_ns.saturating_add(bound_ns));
        if nemesis.iter().any(|&(s, e)| s < until && e > from) {
            excused += 1;
            continue;
        }
        if latency.is_none() && to < until {
            unjudged += 1;
            continue;
        }
        anomalies.push(slow_successor(&t, &terms, successor_bound));
    }
    let outcomes = |f: &str| outcome_counts(&ops, f);
    let mut ended_by: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &terms {
        *ended_by.entry(t.ended_by.as_str()).or_default() += 1;
    }
    // The longest stretch with no leader, faults or not.
    let all = check_coverage(&spans, &[], from, to, 0);
    let longest_leaderless_ms = all.iter().map(|w| w.end - w.start).max().unwrap_or(0) / 1_000_000;
    let (anomalies, anomaly_counts) = keep_first_per_kind(anomalies);
    let (notes, note_counts) = keep_first_per_kind(notes);
    let stats = json!({
        "campaign": outcomes("campaign"),
        "confirm": outcomes("confirm"),
        "resign": outcomes("resign"),
        "close": outcomes("close"),
        "terms": terms.len(),
        "terms_ended_by": ended_by,
        "processes": ops.iter().filter_map(|o| o.invoke.process.client()).collect::<std::collections::BTreeSet<_>>().len(),
        "longest_leaderless_ms": longest_leaderless_ms,
        "liveness_bound_ms": bound.as_millis() as u64,
        "client_faults": {
            "kill-client": hit.iter().filter(|f| f.f == "kill-client").count(),
            "pause-client": hit.iter().filter(|f| f.f == "pause-client").count(),
        },
        "takeovers": {
            "successor_bound_ms": successor_bound.as_millis() as u64,
            "in_time": latencies_ms.len(),
            "excused_by_nemesis": excused,
            "unjudged_at_end": unjudged,
            "max_ms": latencies_ms.iter().max(),
            "latencies_ms": latencies_ms,
        },
        "anomalies_by_kind": anomaly_counts,
        "notes_by_kind": note_counts,
    });
    CheckResult::from_anomalies(anomalies, notes, stats)
}

/// A `slow-successor` anomaly: no new leader within the bound after the
/// leader was killed or paused.
fn slow_successor(t: &Takeover, terms: &[Term], bound: Duration) -> Anomaly {
    let hit = &terms[t.term];
    let what = if t.fault.f == "kill-client" {
        "was killed"
    } else {
        "was paused"
    };
    let after = match t.latency_ns(terms) {
        Some(l) => format!("the next leader began {:.3} s later", l as f64 / 1e9),
        None => "nobody led after it".to_string(),
    };
    Anomaly {
        kind: "slow-successor".into(),
        message: format!(
            "process {} {what} while leading (token {}) with no nemesis fault in force, and {after} \
             (bound {:.1} s: the session timeout and {:.1} s)",
            hit.process,
            hit.token,
            bound.as_secs_f64(),
            ELECTION_SLACK.as_secs_f64()
        ),
        ops: std::iter::once(t.fault.index)
            .chain(hit.ops.iter().copied())
            .chain(t.successor.map(|s| terms[s].ops[0]))
            .collect(),
        detail: json!({
            "fault": t.fault.f,
            "at_ns": t.fault.at_ns,
            "leader": hit.json(),
            "successor": t.successor.map(|s| terms[s].json()),
            "bound_ns": bound.as_nanos() as u64,
        }),
    }
}

/// A `no-leader-while-healthy` anomaly for a leaderless window, with the
/// campaigns waiting in it.
fn no_leader(w: &GrantlessWindow, bound: Duration, campaigns: &[&Op]) -> Anomaly {
    Anomaly {
        kind: "no-leader-while-healthy".into(),
        message: format!(
            "nobody led for {:.1} s with a majority of nodes up and connected (bound {:.1} s)",
            (w.end - w.start) as f64 / 1e9,
            bound.as_secs_f64()
        ),
        ops: campaigns
            .iter()
            .filter(|o| o.invoke.time <= w.end && o.completed_at().is_none_or(|c| c >= w.start))
            .map(|o| o.invoke.index)
            .collect(),
        detail: json!({ "start_ns": w.start, "end_ns": w.end, "bound_ns": bound.as_nanos() as u64 }),
    }
}
