//! The history of a run: every operation's invocation and completion, and
//! every nemesis action, in the order they happened. Written one JSON
//! object a line to `history.jsonl`; checkers and the report read it back.
//!
//! An operation is a pair of events with the same `process` and `f`: an
//! `invoke`, then one of `ok` (it happened), `fail` (it definitely did not
//! happen) or `info` (unknown: it may have happened, at any time after its
//! invocation). A process has at most one operation open at a time; after an
//! `info` a client process moves on under a new process number, as in
//! Jepsen, so that the unknown operation may stay open for ever.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;

/// Who did it: a client process (numbered), or the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    Client(u64),
    Nemesis(NemesisTag),
}

/// Serializes as the string `"nemesis"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NemesisTag {
    #[serde(rename = "nemesis")]
    Nemesis,
}

impl Process {
    pub const NEMESIS: Process = Process::Nemesis(NemesisTag::Nemesis);

    pub fn client(&self) -> Option<u64> {
        match self {
            Process::Client(p) => Some(*p),
            Process::Nemesis(_) => None,
        }
    }
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Process::Client(p) => write!(f, "{p}"),
            Process::Nemesis(_) => f.write_str("nemesis"),
        }
    }
}

/// What an event says of its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One line of `history.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the history (0, 1, 2, ...).
    pub index: u64,
    pub process: Process,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// The operation's function: `acquire`, `read`, `cas`, `kill`, ...
    pub f: String,
    /// Arguments on invoke; results on completion.
    #[serde(default)]
    pub value: Value,
    /// Nanoseconds since the run started (monotonic clock).
    pub time: u64,
    /// CLOCK_MONOTONIC when it happened (comparable across processes).
    pub mono_ns: u64,
    /// Wall clock, nanoseconds since the Unix epoch.
    pub wall_ns: u64,
    /// Why it failed or is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An invocation waiting for its completion.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub process: Process,
    pub f: String,
    pub index: u64,
    pub time: u64,
}

/// The shared, append-only recorder (cheap to clone).
#[derive(Debug, Clone)]
pub struct History {
    inner: Arc<Mutex<Vec<Event>>>,
    start_mono_ns: u64,
}

impl History {
    /// A recorder whose `time` 0 is now.
    pub fn new() -> History {
        History::starting_at(clock::mono_ns())
    }

    /// A recorder whose `time` 0 is `start_mono_ns` (CLOCK_MONOTONIC).
    pub fn starting_at(start_mono_ns: u64) -> History {
        History {
            inner: Arc::new(Mutex::new(Vec::new())),
            start_mono_ns,
        }
    }

    /// CLOCK_MONOTONIC at `time` 0.
    pub fn start_mono_ns(&self) -> u64 {
        self.start_mono_ns
    }

    /// Nanoseconds since the run started.
    pub fn now(&self) -> u64 {
        clock::mono_ns().saturating_sub(self.start_mono_ns)
    }

    /// Converts a CLOCK_MONOTONIC reading into run time.
    pub fn time_of(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_sub(self.start_mono_ns)
    }

    /// Records an invocation now.
    pub fn invoke(&self, process: Process, f: &str, value: Value) -> Invocation {
        let e = self.push(process, Kind::Invoke, f, value, None, clock::mono_ns());
        Invocation {
            process,
            f: f.to_string(),
            index: e.index,
            time: e.time,
        }
    }

    /// Records `inv`'s completion now.
    pub fn complete(&self, inv: &Invocation, kind: Kind, value: Value, error: Option<String>) {
        assert_ne!(kind, Kind::Invoke, "a completion is ok, fail or info");
        self.push(inv.process, kind, &inv.f, value, error, clock::mono_ns());
    }

    pub fn ok(&self, inv: &Invocation, value: Value) {
        self.complete(inv, Kind::Ok, value, None);
    }

    pub fn fail(&self, inv: &Invocation, value: Value, error: impl Into<String>) {
        self.complete(inv, Kind::Fail, value, Some(error.into()));
    }

    pub fn info(&self, inv: &Invocation, value: Value, error: impl Into<String>) {
        self.complete(inv, Kind::Info, value, Some(error.into()));
    }

    /// Records an event that happened at `mono_ns` (taken by another
    /// process); events stay in index order, which is the order recorded.
    pub fn record_at(
        &self,
        process: Process,
        kind: Kind,
        f: &str,
        value: Value,
        error: Option<String>,
        mono_ns: u64,
    ) -> Event {
        self.push(process, kind, f, value, error, mono_ns)
    }

    fn push(
        &self,
        process: Process,
        kind: Kind,
        f: &str,
        value: Value,
        error: Option<String>,
        mono_ns: u64,
    ) -> Event {
        let mut events = self.inner.lock().expect("history lock");
        let e = Event {
            index: events.len() as u64,
            process,
            kind,
            f: f.to_string(),
            value,
            time: mono_ns.saturating_sub(self.start_mono_ns),
            mono_ns,
            wall_ns: clock::wall_ns(),
            error,
        };
        events.push(e.clone());
        e
    }

    /// Whether an `f` operation has completed (any outcome), e.g. the
    /// nemesis's final `heal-all`.
    pub fn completed(&self, f: &str) -> bool {
        self.inner
            .lock()
            .expect("history lock")
            .iter()
            .rev()
            .any(|e| e.kind != Kind::Invoke && e.f == f)
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.inner.lock().expect("history lock").clone()
    }

    /// Writes `history.jsonl`.
    pub fn write_jsonl(&self, path: &Path) -> std::io::Result<()> {
        write_jsonl(&self.events(), path)
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

/// Writes events one JSON object a line.
pub fn write_jsonl(events: &[Event], path: &Path) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for e in events {
        serde_json::to_writer(&mut out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads `history.jsonl` back.
pub fn read_jsonl(path: &Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} line {}: {e}", path.display(), n + 1),
                )
            })
        })
        .collect()
}

/// An operation: its invocation paired with its completion (`None` while
/// still open at the end of the history, which counts as `info`).
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub invoke: Event,
    pub complete: Option<Event>,
}

impl Op {
    /// `ok`, `fail` or `info` (an operation never completed is `info`).
    pub fn outcome(&self) -> Kind {
        self.complete.as_ref().map(|c| c.kind).unwrap_or(Kind::Info)
    }

    /// Completion time, if it completed `ok` or `fail`.
    pub fn completed_at(&self) -> Option<u64> {
        self.complete
            .as_ref()
            .filter(|c| c.kind != Kind::Info)
            .map(|c| c.time)
    }

    /// The completion's value, or the invocation's when there is none.
    pub fn value(&self) -> &Value {
        self.complete
            .as_ref()
            .map(|c| &c.value)
            .filter(|v| !v.is_null())
            .unwrap_or(&self.invoke.value)
    }
}

/// Pairs invocations with completions (per process, in order). Events of
/// the nemesis are paired the same way.
pub fn pair(events: &[Event]) -> Vec<Op> {
    let mut open: BTreeMap<Process, usize> = BTreeMap::new();
    let mut ops: Vec<Op> = Vec::new();
    for e in events {
        match e.kind {
            Kind::Invoke => {
                open.insert(e.process, ops.len());
                ops.push(Op {
                    invoke: e.clone(),
                    complete: None,
                });
            }
            _ => {
                if let Some(i) = open.remove(&e.process) {
                    ops[i].complete = Some(e.clone());
                }
            }
        }
    }
    ops
}

/// How many of `ops` are `f` with `kind` as their outcome.
pub fn count_ops(ops: &[Op], f: &str, kind: Kind) -> usize {
    ops.iter()
        .filter(|o| o.invoke.f == f && o.outcome() == kind)
        .count()
}

/// `{"ok": n, "fail": n, "info": n}` of the `f` operations, for a
/// checker's stats.
pub fn outcome_counts(ops: &[Op], f: &str) -> Value {
    serde_json::json!({
        "ok": count_ops(ops, f, Kind::Ok),
        "fail": count_ops(ops, f, Kind::Fail),
        "info": count_ops(ops, f, Kind::Info),
    })
}

/// A stretch of time during which a fault was in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPeriod {
    /// `kill`, `pause`, `partition`, `membership`, `restart-all`.
    pub kind: String,
    pub start: u64,
    /// `None`: still in force when the history ends.
    pub end: Option<u64>,
    /// What the nemesis did (nodes, grudge, and `majority_kept`: whether a
    /// majority of nodes stayed up and connected throughout).
    pub detail: Value,
}

impl FaultPeriod {
    /// Whether a majority of nodes stayed up and connected throughout (as
    /// the nemesis recorded it; `false` when it did not say).
    pub fn majority_kept(&self) -> bool {
        self.detail
            .get("majority_kept")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The stretches that excuse a stall (no grant, no leader) in a liveness
/// check: every fault that did not keep a majority up and connected, and
/// every stretch where two or more faults were in force at once (with
/// `--overlap`, a kill and a partition that each keep a majority may
/// together leave none). `known` are faults the caller already has; the
/// history's own are added. Sorted, without repeats.
pub fn excusing_faults(known: &[FaultPeriod], events: &[Event]) -> Vec<(u64, Option<u64>)> {
    let all: Vec<FaultPeriod> = known.iter().cloned().chain(fault_periods(events)).collect();
    let mut out: Vec<(u64, Option<u64>)> = all
        .iter()
        .filter(|f| !f.majority_kept())
        .map(|f| (f.start, f.end))
        .collect();
    let end = |e: Option<u64>| e.unwrap_or(u64::MAX);
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if a.start == b.start && a.end == b.end && a.kind == b.kind {
                continue; // the same fault, known twice
            }
            let start = a.start.max(b.start);
            let stop = end(a.end).min(end(b.end));
            if start < stop {
                out.push((start, (stop != u64::MAX).then_some(stop)));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The nemesis operation that starts each fault, and the one that ends it.
pub const FAULTS: &[(&str, &str, &str)] = &[
    ("kill", "kill", "restart"),
    ("pause", "pause", "resume"),
    ("partition", "partition", "heal"),
    ("client-partition", "client-partition", "client-heal"),
    ("corrupt", "corrupt", "recover"),
    ("membership", "remove", "add"),
    ("restart-all", "stop-all", "start-all"),
    ("clock", "clock-jump", "clock-reset"),
    ("lose-unsynced", "lose-unsynced", "rejoin"),
    ("one-way-cut", "one-way-cut", "one-way-heal"),
    ("one-way-kill", "one-way-kill", "one-way-restart"),
    (
        "isolate-after-expiry",
        "isolate-after-expiry",
        "expiry-heal",
    ),
];

/// The periods during which nemesis faults were in force, from the start
/// of each fault's invocation to the completion of the operation that ended
/// it.
pub fn fault_periods(events: &[Event]) -> Vec<FaultPeriod> {
    let mut out: Vec<FaultPeriod> = Vec::new();
    let mut open: BTreeMap<&str, usize> = BTreeMap::new();
    for op in pair(events) {
        if op.invoke.process != Process::NEMESIS {
            continue;
        }
        let f = op.invoke.f.as_str();
        if let Some((kind, _, _)) = FAULTS.iter().find(|(_, s, _)| *s == f) {
            open.insert(kind, out.len());
            out.push(FaultPeriod {
                kind: kind.to_string(),
                start: op.invoke.time,
                end: None,
                detail: op.value().clone(),
            });
        } else if let Some((kind, _, _)) = FAULTS.iter().find(|(_, _, e)| *e == f) {
            if let Some(i) = open.remove(kind) {
                let end = op
                    .complete
                    .as_ref()
                    .map(|c| c.time)
                    .unwrap_or(op.invoke.time);
                out[i].end = Some(end);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overlapping_faults_excuse_a_stall_where_each_alone_does_not() {
        let h = History::new();
        let k = h.invoke(Process::NEMESIS, "kill", json!({"majority_kept": true}));
        h.ok(&k, json!({"majority_kept": true}));
        let p = h.invoke(
            Process::NEMESIS,
            "partition",
            json!({"majority_kept": true}),
        );
        h.ok(&p, json!({"majority_kept": true}));
        let r = h.invoke(Process::NEMESIS, "restart", Value::Null);
        h.ok(&r, Value::Null);
        let heal = h.invoke(Process::NEMESIS, "heal", Value::Null);
        h.ok(&heal, Value::Null);
        let events = h.events();
        let periods = fault_periods(&events);
        assert_eq!(periods.len(), 2);
        let excused = excusing_faults(&[], &events);
        // Each kept a majority; only the stretch with both in force counts.
        assert_eq!(excused.len(), 1, "{excused:?}");
        let (start, end) = excused[0];
        assert_eq!(start, periods[1].start);
        assert_eq!(end, periods[0].end);
        // A fault known to the caller and found in the history again is
        // not an overlap with itself.
        assert_eq!(excusing_faults(&periods[..1], &events).len(), 1);
    }

    #[test]
    fn events_round_trip_through_jsonl() {
        let h = History::new();
        let a = h.invoke(Process::Client(0), "write", json!({"key": "k", "value": 1}));
        let n = h.invoke(Process::NEMESIS, "partition", json!({"grudge": "halves"}));
        h.ok(&a, json!({"key": "k", "value": 1}));
        h.info(&n, Value::Null, "took long");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        h.write_jsonl(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .contains(r#""process":"nemesis""#));
        assert!(text.lines().next().unwrap().contains(r#""type":"invoke""#));
        let back = read_jsonl(&path).unwrap();
        assert_eq!(back, h.events());
    }

    #[test]
    fn pairs_and_fault_periods() {
        let h = History::new();
        let k = h.invoke(Process::NEMESIS, "kill", json!({"nodes": [2]}));
        h.ok(&k, json!({"nodes": [2]}));
        let c = h.invoke(Process::Client(3), "read", Value::Null);
        let r = h.invoke(Process::NEMESIS, "restart", json!({"nodes": [2]}));
        h.ok(&r, Value::Null);
        h.fail(&c, Value::Null, "NoNode");
        let p = h.invoke(Process::NEMESIS, "partition", json!({}));
        h.ok(&p, Value::Null);
        let ops = pair(&h.events());
        assert_eq!(ops.len(), 4);
        assert_eq!(ops[1].outcome(), Kind::Fail);
        let periods = fault_periods(&h.events());
        assert_eq!(periods.len(), 2);
        assert_eq!(periods[0].kind, "kill");
        assert!(periods[0].end.is_some());
        assert_eq!(periods[1].kind, "partition");
        assert_eq!(periods[1].end, None);
    }
}
