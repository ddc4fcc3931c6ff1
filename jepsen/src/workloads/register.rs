//! The `register` workload: reads, writes and compare-and-sets on a few
//! znodes, each a register holding a small integer (its data, in decimal;
//! empty data is the initial, empty register), judged by the
//! linearizability checker in [`crate::linearizable`].
//!
//! - `read`: [`Client::get_data_linearizable`]; a read has no effect, so
//!   any error makes it `fail`.
//! - `write(v)`: `set_data` with no expected version.
//! - `cas(from, to)`: `get_data`, then, if the value is `from`,
//!   `set_data(to)` expecting the version read. The version check makes the
//!   set apply only while the value is still `from`, so the operation
//!   linearizes at the set. A different value, `BadVersion` or `NoNode` is a
//!   `fail`; a lost or timed-out set is `info`.
//!
//! Keys rotate: every [`OPS_PER_KEY`] operations or so the workers move on
//! to [`ACTIVE_KEYS`] fresh znodes, which keeps each key's history short
//! enough for the checker's search (linearizability is compositional, so
//! keys are checked one by one). A key is created empty before a worker
//! first uses it; creating an empty node does not change the register's
//! value, so creation races are harmless.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;
use warden_client::{Client, ConnectOptions, CreateOptions, Error, ErrorCode, SessionState, Stat};

use crate::history::{pair, Event, History, Kind, Process};
use crate::linearizable::{check_keys, Operation, RegOp, Verdict};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx, Validity};

/// Parent of every run's registers.
pub const REGISTER_ROOT: &str = "/jepsen/register";
/// Keys in use at a time.
pub const ACTIVE_KEYS: u64 = 3;
/// Operations on one key before the workers move on (about: a worker
/// that read the counter late may still touch the old key).
pub const OPS_PER_KEY: u64 = 120;
/// Values written are drawn from `0..VALUES`: few values, so that reads
/// and compare-and-sets often meet the values they expect.
const VALUES: i64 = 5;
/// Pause between attempts to open a session while none will.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How long a finished client gets to close its session.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long `run` keeps trying to create the run's root.
const SETUP_WAIT: Duration = Duration::from_secs(30);
/// An `info` counts as this many operations towards moving to fresh
/// keys: every unknown outcome stays open for the rest of the history and
/// multiplies the checker's search, so a key that collects a few of them
/// is retired early (about four per key).
const INFO_WEIGHT: u64 = OPS_PER_KEY / 4;
/// After an operation that went wrong: a pause, and then, if the client is
/// disconnected, a wait (at most this long) for it to reconnect, rather
/// than a flood of calls that fail at once with `ConnectionLoss`.
const ERROR_PAUSE: Duration = Duration::from_millis(50);
const RECONNECT_WAIT_MAX: Duration = Duration::from_secs(1);
/// Stuck operations listed per non-linearizable key.
const STUCK_REPORTED_MAX: usize = 10;

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    // A root of its own per run, so that a cluster reused across runs
    // starts every key empty.
    let root = format!("{REGISTER_ROOT}/r{}", crate::clock::wall_ns());
    setup(ctx, &root).await?;
    let issued = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..ctx.concurrency.max(1) {
        let w = Worker {
            ctx: ctx.clone(),
            worker,
            root: root.clone(),
            issued: issued.clone(),
            rng: StdRng::seed_from_u64(ctx.seed ^ worker as u64),
            generation: 0,
            ensured: BTreeSet::new(),
        };
        workers.spawn(w.run());
    }
    let mut failed = Vec::new();
    while let Some(done) = workers.join_next().await {
        if let Err(e) = done {
            failed.push(e.to_string());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("register workers failed: {}", failed.join("; ")))
    }
}

fn options(ctx: &RunCtx) -> ConnectOptions {
    ConnectOptions {
        session_timeout: ctx.session_timeout,
        request_timeout: ctx.request_timeout,
        ..ConnectOptions::default()
    }
}

/// Creates `root` and its parents.
async fn setup(ctx: &RunCtx, root: &str) -> Result<(), String> {
    let until = Instant::now() + SETUP_WAIT;
    let mut last = String::from("no attempt");
    while Instant::now() < until {
        match Client::connect(&ctx.servers_for(0), options(ctx)).await {
            Ok(client) => {
                let made = ensure_path(&client, root).await;
                let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
                match made {
                    Ok(()) => return Ok(()),
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(CONNECT_RETRY_PAUSE).await;
    }
    Err(format!("register setup: could not create {root}: {last}"))
}

/// Creates `path` and its parents as persistent nodes (existing is fine).
async fn ensure_path(client: &Client, path: &str) -> Result<(), Error> {
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        match client.create(&at, b"", CreateOptions::persistent()).await {
            Ok(_) => {}
            Err(e) if e.code() == ErrorCode::NodeExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One operation, as chosen and as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Read,
    Write(i64),
    Cas { from: i64, to: i64 },
}

impl Choice {
    fn f(self) -> &'static str {
        match self {
            Choice::Read => "read",
            Choice::Write(_) => "write",
            Choice::Cas { .. } => "cas",
        }
    }

    fn value(self) -> Value {
        match self {
            Choice::Read => Value::Null,
            Choice::Write(v) => json!(v),
            Choice::Cas { from, to } => json!([from, to]),
        }
    }
}

/// How an operation ended.
enum Outcome {
    Ok(Value),
    Fail(String),
    Info(String),
}

struct Worker {
    ctx: RunCtx,
    worker: usize,
    root: String,
    /// Operations invoked by all workers (picks the key generation).
    issued: Arc<AtomicU64>,
    rng: StdRng,
    /// Infos so far (the process is `worker + generation * concurrency`).
    generation: u64,
    /// Keys this worker has made sure exist.
    ensured: BTreeSet<u64>,
}

impl Worker {
    fn history(&self) -> &History {
        &self.ctx.history
    }

    fn process(&self) -> Process {
        let n = self.ctx.concurrency.max(1) as u64;
        Process::Client(self.worker as u64 + self.generation * n)
    }

    async fn run(mut self) {
        let mut client: Option<Client> = None;
        while Instant::now() < self.ctx.deadline {
            let c = match &client {
                Some(c) if !c.session_events().borrow().is_terminal() => c.clone(),
                _ => match Client::connect(&self.ctx.servers_for(self.worker), options(&self.ctx))
                    .await
                {
                    Ok(c) => {
                        client = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        tracing::debug!(worker = self.worker, error = %e, "connect failed");
                        tokio::time::sleep(CONNECT_RETRY_PAUSE).await;
                        continue;
                    }
                },
            };
            self.one(&c).await;
            let pause = self.ctx.worker_interval();
            if !pause.is_zero() {
                tokio::time::sleep_until(self.ctx.deadline.min(Instant::now() + pause)).await;
            }
        }
        if let Some(c) = client {
            let _ = tokio::time::timeout(CLOSE_WAIT, c.close()).await;
        }
    }

    /// Picks, runs and records one operation.
    async fn one(&mut self, client: &Client) {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let key =
            (n / (OPS_PER_KEY * ACTIVE_KEYS)) * ACTIVE_KEYS + self.rng.random_range(0..ACTIVE_KEYS);
        let choice = match self.rng.random_range(0..3) {
            0 => Choice::Read,
            1 => Choice::Write(self.rng.random_range(0..VALUES)),
            _ => Choice::Cas {
                from: self.rng.random_range(0..VALUES),
                to: self.rng.random_range(0..VALUES),
            },
        };
        let path = format!("{}/{key}", self.root);
        if !self.ensured.contains(&key) {
            match client.create(&path, b"", CreateOptions::persistent()).await {
                Ok(_) => {
                    self.ensured.insert(key);
                }
                Err(e) if e.code() == ErrorCode::NodeExists => {
                    self.ensured.insert(key);
                }
                // Try again next time; the operation copes with NoNode.
                Err(_) => {}
            }
        }
        let inv = self.history().invoke(
            self.process(),
            choice.f(),
            json!({ "key": key.to_string(), "value": choice.value() }),
        );
        let outcome = apply(client, &path, choice).await;
        let outcome_kind = match &outcome {
            Outcome::Ok(_) => Kind::Ok,
            Outcome::Fail(_) => Kind::Fail,
            Outcome::Info(_) => Kind::Info,
        };
        let key = key.to_string();
        match outcome {
            Outcome::Ok(value) => self
                .history()
                .ok(&inv, json!({ "key": key, "value": value })),
            Outcome::Fail(why) => {
                self.history()
                    .fail(&inv, json!({ "key": key, "value": choice.value() }), why)
            }
            Outcome::Info(why) => {
                self.history()
                    .info(&inv, json!({ "key": key, "value": choice.value() }), why);
                self.generation += 1;
                self.issued.fetch_add(INFO_WEIGHT, Ordering::Relaxed);
                calm_down(client).await;
                return;
            }
        }
        // A refused operation is business as usual, unless it failed
        // because the client is offline.
        let offline = *client.session_events().borrow() == SessionState::Disconnected;
        if outcome_kind == Kind::Fail && offline {
            calm_down(client).await;
        }
    }
}

/// Pauses after an operation that went wrong, and waits for a
/// disconnected client to reconnect (bounded).
async fn calm_down(client: &Client) {
    tokio::time::sleep(ERROR_PAUSE).await;
    let mut state = client.session_events();
    let _ = tokio::time::timeout(
        RECONNECT_WAIT_MAX,
        state.wait_for(|s| *s != SessionState::Disconnected),
    )
    .await;
}

/// Runs `choice` on the register at `path`.
async fn apply(client: &Client, path: &str, choice: Choice) -> Outcome {
    match choice {
        Choice::Read => match client.get_data_linearizable(path).await {
            Ok((data, _)) => match decode(&data) {
                Ok(v) => Outcome::Ok(json!(v)),
                Err(why) => Outcome::Fail(why),
            },
            Err(e) if e.code() == ErrorCode::NoNode => Outcome::Ok(Value::Null),
            // A read changes nothing: whatever went wrong, it did not happen.
            Err(e) => Outcome::Fail(e.to_string()),
        },
        Choice::Write(v) => set(client, path, v, None).await.map_ok(json!(v)),
        Choice::Cas { from, to } => {
            let (data, stat) = match client.get_data(path).await {
                Ok(found) => found,
                Err(e) => return Outcome::Fail(format!("cas read: {e}")),
            };
            match decode(&data) {
                Ok(Some(v)) if v == from => {}
                Ok(other) => return Outcome::Fail(format!("cas read {other:?}, not {from}")),
                Err(why) => return Outcome::Fail(why),
            }
            set(client, path, to, Some(&stat))
                .await
                .map_ok(json!([from, to]))
        }
    }
}

/// `set_data`, classified: errors that prove nothing was written are
/// `fail`, any other `info`.
async fn set(client: &Client, path: &str, v: i64, expect: Option<&Stat>) -> Outcome {
    let data = v.to_string();
    match client
        .set_data(path, data.as_bytes(), expect.map(|s| s.version))
        .await
    {
        Ok(_) => Outcome::Ok(Value::Null),
        Err(e) if definite(&e) => Outcome::Fail(e.to_string()),
        Err(e) => Outcome::Info(e.to_string()),
    }
}

/// Errors after which the write certainly did not happen: the server
/// checked and refused it. (`NotReady` is not among them: a write
/// proposed before the leader went may still commit.)
fn definite(e: &Error) -> bool {
    matches!(
        e,
        Error::Api { .. } | Error::Multi { .. } | Error::BadArguments(_)
    ) && matches!(
        e.code(),
        ErrorCode::NoNode
            | ErrorCode::BadVersion
            | ErrorCode::BadArguments
            | ErrorCode::InvalidPath
            | ErrorCode::DataTooLarge
            | ErrorCode::NoAuth
    )
}

impl Outcome {
    fn map_ok(self, value: Value) -> Outcome {
        match self {
            Outcome::Ok(_) => Outcome::Ok(value),
            other => other,
        }
    }
}

/// A register's data: empty is the initial, empty register.
fn decode(data: &[u8]) -> Result<Option<i64>, String> {
    if data.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "register holds {:?}, not a number",
                String::from_utf8_lossy(data)
            )
        })
}

/// What the checker reads out of a history.
struct Registers {
    /// Per key, the operations: `fail` ones dropped, `info` ones open for
    /// ever.
    by_key: BTreeMap<String, Vec<Operation>>,
    /// The history index of each operation's invocation, by (process,
    /// invocation time).
    index: HashMap<(u64, u64), u64>,
    /// Operations whose values could not be read.
    unreadable: usize,
}

fn register_histories(events: &[Event]) -> Registers {
    let mut by_key: BTreeMap<String, Vec<Operation>> = BTreeMap::new();
    let mut index: HashMap<(u64, u64), u64> = HashMap::new();
    let mut unreadable = 0;
    for op in pair(events) {
        let Some(process) = op.invoke.process.client() else {
            continue;
        };
        let outcome = op.outcome();
        if outcome == Kind::Fail {
            continue;
        }
        let args = &op.invoke.value;
        let Some(key) = args.get("key").and_then(Value::as_str) else {
            continue;
        };
        let reg = match op.invoke.f.as_str() {
            "read" if outcome == Kind::Ok => {
                let seen = op.complete.as_ref().and_then(|c| c.value.get("value"));
                match seen {
                    Some(Value::Null) => RegOp::Read(None),
                    Some(v) => match v.as_i64() {
                        Some(v) => RegOp::Read(Some(v)),
                        None => {
                            unreadable += 1;
                            continue;
                        }
                    },
                    None => {
                        unreadable += 1;
                        continue;
                    }
                }
            }
            // A read whose outcome is unknown tells nothing.
            "read" => continue,
            "write" => match args.get("value").and_then(Value::as_i64) {
                Some(v) => RegOp::Write(v),
                None => {
                    unreadable += 1;
                    continue;
                }
            },
            "cas" => match args
                .get("value")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Value::as_i64).collect::<Vec<_>>())
                .as_deref()
            {
                Some([Some(from), Some(to)]) => RegOp::Cas {
                    from: *from,
                    to: *to,
                },
                _ => {
                    unreadable += 1;
                    continue;
                }
            },
            _ => continue,
        };
        index.insert((process, op.invoke.time), op.invoke.index);
        by_key.entry(key.to_string()).or_default().push(Operation {
            process,
            invoke: op.invoke.time,
            complete: op.completed_at(),
            op: reg,
        });
    }
    Registers {
        by_key,
        index,
        unreadable,
    }
}

/// Judges a history of this workload.
pub fn check(events: &[Event], _ctx: &CheckCtx) -> CheckResult {
    let Registers {
        by_key,
        index,
        unreadable,
    } = register_histories(events);
    let verdicts = check_keys(&by_key);
    let mut anomalies = Vec::new();
    let mut unknown_keys = Vec::new();
    let mut valid = Validity::Valid;
    for (key, verdict) in &verdicts {
        match verdict {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable { stuck } => {
                let shown: Vec<Value> = stuck
                    .iter()
                    .take(STUCK_REPORTED_MAX)
                    .map(|o| {
                        json!({
                            "process": o.process,
                            "op": format!("{:?}", o.op),
                            "invoke_ns": o.invoke,
                            "complete_ns": o.complete,
                        })
                    })
                    .collect();
                anomalies.push(Anomaly {
                    kind: "not-linearizable".into(),
                    message: format!(
                        "key {key}: no single-copy order explains its {} operations; {} could not be placed",
                        by_key[key].len(),
                        stuck.len()
                    ),
                    ops: stuck
                        .iter()
                        .filter_map(|o| index.get(&(o.process, o.invoke)).copied())
                        .collect(),
                    detail: json!({ "key": key, "stuck": shown }),
                });
            }
            Verdict::Unknown { explored } => {
                valid = valid.and(Validity::Unknown);
                unknown_keys.push(json!({ "key": key, "explored": explored }));
            }
        }
    }
    if !anomalies.is_empty() {
        valid = Validity::Invalid;
    }
    let outcomes = |f: &str| {
        let ops: Vec<_> = pair(events)
            .into_iter()
            .filter(|o| o.invoke.process.client().is_some() && o.invoke.f == f)
            .collect();
        json!({
            "ok": ops.iter().filter(|o| o.outcome() == Kind::Ok).count(),
            "fail": ops.iter().filter(|o| o.outcome() == Kind::Fail).count(),
            "info": ops.iter().filter(|o| o.outcome() == Kind::Info).count(),
        })
    };
    let stats = json!({
        "read": outcomes("read"),
        "write": outcomes("write"),
        "cas": outcomes("cas"),
        "keys": by_key.len(),
        "ops_per_key_max": by_key.values().map(Vec::len).max().unwrap_or(0),
        "keys_not_linearizable": anomalies.len(),
        "keys_unknown": unknown_keys,
        "unreadable_ops": unreadable,
    });
    CheckResult {
        valid,
        anomalies,
        notes: Vec::new(),
        stats,
    }
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "stale read",
            Planted::new()
                .op(0, "write", json!(1), json!(1), 0, 10)
                .op(1, "write", json!(2), json!(2), 20, 30)
                .op(2, "read", Value::Null, json!(1), 40, 50)
                .events(),
        ),
        (
            "lost write",
            Planted::new()
                .op(0, "write", json!(3), json!(3), 0, 10)
                .op(1, "read", Value::Null, json!(3), 20, 30)
                .op(2, "read", Value::Null, Value::Null, 40, 50)
                .events(),
        ),
        (
            "cas that succeeded from a wrong value",
            Planted::new()
                .op(0, "write", json!(1), json!(1), 0, 10)
                .op(1, "cas", json!([4, 2]), json!([4, 2]), 20, 30)
                .op(2, "read", Value::Null, json!(2), 40, 50)
                .events(),
        ),
    ]
}

/// Builds small register histories by hand, all on key "0" (times in
/// milliseconds).
struct Planted {
    events: Vec<Event>,
}

impl Planted {
    fn new() -> Planted {
        Planted { events: Vec::new() }
    }

    fn push(&mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) {
        let time = at_ms * 1_000_000;
        self.events.push(Event {
            index: 0,
            process: Process::Client(process),
            kind,
            f: f.to_string(),
            value: json!({ "key": "0", "value": value }),
            time,
            mono_ns: time,
            wall_ns: 0,
            error: None,
        });
    }

    /// An operation that completed `ok`.
    fn op(
        mut self,
        process: u64,
        f: &str,
        args: Value,
        result: Value,
        from_ms: u64,
        to_ms: u64,
    ) -> Planted {
        self.push(process, Kind::Invoke, f, args, from_ms);
        self.push(process, Kind::Ok, f, result, to_ms);
        self
    }

    /// An operation whose outcome is unknown (`info`) or refused (`fail`).
    #[cfg(test)]
    fn ended(
        mut self,
        process: u64,
        kind: Kind,
        f: &str,
        args: Value,
        from_ms: u64,
        to_ms: u64,
    ) -> Planted {
        self.push(process, Kind::Invoke, f, args.clone(), from_ms);
        self.push(process, kind, f, args, to_ms);
        self
    }

    fn events(mut self) -> Vec<Event> {
        self.events.sort_by_key(|e| e.time);
        for (i, e) in self.events.iter_mut().enumerate() {
            e.index = i as u64;
        }
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_planted_anomaly_is_invalid() {
        for (name, events) in planted_anomalies() {
            let result = check(&events, &CheckCtx::default());
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result:?}");
            assert_eq!(result.anomalies.len(), 1, "{name}");
            assert!(!result.anomalies[0].ops.is_empty(), "{name}");
        }
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Planted::new()
            .op(0, "read", Value::Null, Value::Null, 0, 5)
            .op(0, "write", json!(1), json!(1), 10, 20)
            .op(1, "read", Value::Null, json!(1), 15, 25)
            .op(2, "cas", json!([1, 3]), json!([1, 3]), 30, 40)
            // Refused compare-and-sets and an unknown write count for
            // nothing, or for what they may have done.
            .ended(3, Kind::Fail, "cas", json!([0, 4]), 30, 40)
            .ended(4, Kind::Info, "write", json!(2), 41, 45)
            .op(1, "read", Value::Null, json!(2), 50, 60)
            .op(0, "read", Value::Null, json!(2), 70, 80)
            .events();
        let result = check(&events, &CheckCtx::default());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.stats["cas"]["fail"], 1);
        assert_eq!(result.stats["write"]["info"], 1);
    }

    #[test]
    fn a_failed_write_must_not_be_seen() {
        let events = Planted::new()
            .ended(0, Kind::Fail, "write", json!(2), 0, 10)
            .op(1, "read", Value::Null, json!(2), 20, 30)
            .events();
        let result = check(&events, &CheckCtx::default());
        assert_eq!(result.valid, Validity::Invalid);
    }

    #[test]
    fn keys_are_judged_apart() {
        let mut events = Planted::new()
            .op(0, "write", json!(1), json!(1), 0, 10)
            .events();
        // The same read on another key, which nobody wrote: invalid there.
        let mut other = Planted::new()
            .op(1, "read", Value::Null, json!(1), 20, 30)
            .events();
        for e in other.iter_mut() {
            e.value["key"] = json!("1");
        }
        events.extend(other);
        for (i, e) in events.iter_mut().enumerate() {
            e.index = i as u64;
        }
        let result = check(&events, &CheckCtx::default());
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.anomalies[0].detail["key"], "1");
        assert_eq!(result.stats["keys"], 2);
    }

    #[test]
    fn register_data_decodes() {
        assert_eq!(decode(b""), Ok(None));
        assert_eq!(decode(b"4"), Ok(Some(4)));
        assert!(decode(b"x").is_err());
    }
}
