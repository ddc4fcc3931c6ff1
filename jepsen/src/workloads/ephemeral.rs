//! The `ephemeral` workload: sessions holding ephemeral nodes, their
//! clients killed mid-run. An ephemeral must vanish once its session is
//! gone (within the session timeout plus [`LINGER_SLACK`]) and never while
//! its session lives.
//!
//! Each session lives in its own process, `warden-jepsen ephemeral-holder`
//! ([`holder_main`]), so that it can be killed with SIGKILL like a crashed
//! application. A holder creates its node, then confirms every
//! [`CONFIRM_INTERVAL_MAX`] or so that its session lives (a linearizable
//! `exists` of its own node), and prints one line per operation with the
//! CLOCK_MONOTONIC times it took, which the run records with
//! [`History::record_at`](crate::history::History::record_at) so they line
//! up with the run's own events. The run kills some holders, has others
//! close their sessions cleanly, starts new ones, and an observer session
//! lists the parent linearizably every [`OBSERVE_INTERVAL`].
//!
//! Holder processes never outlive the run: the run kills whatever is left
//! at the end, every child is killed when its handle drops, and a holder
//! exits at once when its stdin closes (the run died).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::time::Instant;
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, SessionState};

use super::support::{
    connect_options, connect_until, ensure_path, helper_args, run_helper, run_tag, spawn_helper,
    HelperFlags, Planted, Processes, RETRY_PAUSE,
};
use crate::checkers::{check_ephemeral, ChildrenRead, Confirm, EphemeralAnomaly, EphemeralLife};
use crate::clock;
use crate::history::{pair, Event, FaultPeriod, History, Kind, Process};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx};

/// Where each run makes its own parent.
pub const ROOT: &str = "/jepsen/eph";
/// How long after its session ended (holder killed, close unanswered,
/// expiry seen) an ephemeral may still be seen, beyond the session timeout:
/// up to two leader elections (a new leader re-arms every session with a
/// full timeout; 2.5 s each at the default 100 ms tick, randomized up to
/// twice the 5-tick election timeout, plus the vote) and 10 s for a loaded
/// 2-core machine (the leader's expiry sweep, the CloseSession's commit,
/// the observer's next read). A fault in force in that window extends it
/// by the fault's length and another session timeout; a fault still in
/// force at the end skips the check (reported as a note).
pub const LINGER_SLACK: Duration = Duration::from_secs(15);
/// Pause between the observer's reads.
pub const OBSERVE_INTERVAL: Duration = Duration::from_millis(100);
/// Longest pause between a holder's confirmations.
pub const CONFIRM_INTERVAL_MAX: Duration = Duration::from_millis(300);
/// The run acts (kill, close, start) every this much, at random between.
const ACTION_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(300), Duration::from_millis(1500));
/// Most holders one run starts.
const HOLDERS_MAX: usize = 500;
/// How long the run waits for a holder to answer `close`.
const CLOSE_WAIT: Duration = Duration::from_secs(15);
/// How long a holder keeps trying to create its node.
const CREATE_BOUND: Duration = Duration::from_secs(30);

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let parent = format!("{ROOT}/{}", run_tag(ctx));
    ensure_path(ctx, &parent).await?;
    let processes = Processes::default();
    let observer = Observer::start(ctx, &parent, processes.fresh()).await?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ctx.dir.join("ephemeral-holders.log"))
        .map_err(|e| format!("holder log in {}: {e}", ctx.dir.display()))?;
    let mut holders = Holders {
        ctx: ctx.clone(),
        parent,
        processes: processes.clone(),
        killer: processes.fresh(),
        log,
        list: Vec::new(),
    };
    let result = drive(ctx, &mut holders).await;
    // Whatever happened, end every holder before returning.
    holders.finish().await;
    let last_end = holders.last_end_ns();
    drain(ctx, &observer, &holders, last_end).await;
    observer.stop().await;
    result
}

async fn drive(ctx: &RunCtx, holders: &mut Holders) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(ctx.seed ^ 0xe9e);
    let target = ctx.concurrency.max(2);
    for _ in 0..target {
        holders.spawn()?;
    }
    while Instant::now() < ctx.deadline {
        let pause = rng.random_range(ACTION_INTERVAL.0..=ACTION_INTERVAL.1);
        tokio::time::sleep_until((Instant::now() + pause).min(ctx.deadline)).await;
        if Instant::now() >= ctx.deadline {
            break;
        }
        let live = holders.live_created();
        if !live.is_empty() {
            let pick = live[rng.random_range(0..live.len())];
            match rng.random_range(0..10) {
                0..5 => holders.kill(pick).await,
                5..8 => holders.ask_close(pick).await,
                _ => {}
            }
        }
        while holders.running() < target && holders.list.len() < HOLDERS_MAX {
            holders.spawn()?;
        }
    }
    Ok(())
}

/// Waits until the observer has read the parent, after every session
/// ended, without any of the run's nodes in it; or until the last of them
/// is past its deadline (so the checker sees any that lingered).
async fn drain(ctx: &RunCtx, observer: &Observer, holders: &Holders, last_end: u64) {
    let bound = ctx.session_timeout + LINGER_SLACK + Duration::from_secs(2);
    let until = Instant::now() + bound;
    let paths: BTreeSet<String> = holders.list.iter().map(|h| h.path.clone()).collect();
    while Instant::now() < until {
        if let Some((invoked_ns, present)) = observer.latest() {
            if invoked_ns > last_end && present.is_disjoint(&paths) {
                return;
            }
        }
        tokio::time::sleep(OBSERVE_INTERVAL).await;
    }
}

/// What a holder's reader task has learned (shared with the run).
#[derive(Debug, Default)]
struct Status {
    created: bool,
    /// The holder's stdout ended (it exited or was killed).
    exited: bool,
    /// When its session stopped being kept alive (run ns), as far as the
    /// run knows: kill, close answered, expiry seen, exit.
    ended_ns: Option<u64>,
}

struct Holder {
    process: Process,
    path: String,
    child: Child,
    stdin: Option<ChildStdin>,
    status: Arc<Mutex<Status>>,
    /// Set once the run has killed it or asked it to close.
    ending: bool,
    reader: tokio::task::JoinHandle<()>,
}

struct Holders {
    ctx: RunCtx,
    parent: String,
    processes: Processes,
    /// The process that records `kill-client` operations.
    killer: Process,
    log: std::fs::File,
    list: Vec<Holder>,
}

impl Holders {
    fn spawn(&mut self) -> Result<(), String> {
        let n = self.list.len();
        let path = format!("{}/h-{n:04}", self.parent);
        let process = self.processes.fresh();
        let servers = self.ctx.servers_for(n);
        let inv = self
            .ctx
            .history
            .invoke(process, "create", json!({ "path": path }));
        let mut args = helper_args(&self.ctx, &servers);
        args.extend(["--path".to_string(), path.clone()]);
        let mut child =
            spawn_helper(&self.ctx, "ephemeral-holder", &args, &self.log).inspect_err(|e| {
                self.ctx
                    .history
                    .fail(&inv, json!({ "path": path }), e.clone());
            })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let status = Arc::new(Mutex::new(Status::default()));
        let reader = tokio::spawn(read_holder(
            self.ctx.history.clone(),
            process,
            path.clone(),
            stdout,
            status.clone(),
        ));
        self.list.push(Holder {
            process,
            path,
            child,
            stdin,
            status,
            ending: false,
            reader,
        });
        Ok(())
    }

    /// Holders that have made their node and are not being ended.
    fn live_created(&self) -> Vec<usize> {
        (0..self.list.len())
            .filter(|&i| {
                let h = &self.list[i];
                let s = h.status.lock().expect("status lock");
                !h.ending && s.created && !s.exited && s.ended_ns.is_none()
            })
            .collect()
    }

    /// Holders still running and not being ended.
    fn running(&self) -> usize {
        self.list
            .iter()
            .filter(|h| !h.ending && !h.status.lock().expect("status lock").exited)
            .count()
    }

    /// SIGKILLs holder `i` (a crash: its session is left to expire).
    async fn kill(&mut self, i: usize) {
        let history = self.ctx.history.clone();
        let h = &mut self.list[i];
        h.ending = true;
        let value = json!({ "path": h.path, "holder": h.process.client() });
        let inv = history.invoke(self.killer, "kill-client", value.clone());
        let _ = h.child.start_kill();
        match h.child.wait().await {
            Ok(_) => {
                history.ok(&inv, value);
                let mut s = h.status.lock().expect("status lock");
                s.ended_ns.get_or_insert(history.now());
            }
            Err(e) => {
                history.info(&inv, value, e.to_string());
                self.killer = self.processes.fresh();
            }
        }
    }

    /// Asks holder `i` to close its session; it answers on stdout.
    async fn ask_close(&mut self, i: usize) {
        let h = &mut self.list[i];
        h.ending = true;
        if let Some(stdin) = h.stdin.as_mut() {
            let _ = stdin.write_all(b"close\n").await;
            let _ = stdin.flush().await;
        }
    }

    fn last_end_ns(&self) -> u64 {
        self.list
            .iter()
            .filter_map(|h| h.status.lock().expect("status lock").ended_ns)
            .max()
            .unwrap_or(0)
    }

    /// Closes every holder still running, waits (bounded) for them to
    /// answer, kills the rest, and waits for every reader to finish.
    async fn finish(&mut self) {
        for i in 0..self.list.len() {
            if !self.list[i].ending {
                self.ask_close(i).await;
            }
        }
        let until = Instant::now() + CLOSE_WAIT;
        for i in 0..self.list.len() {
            let waited = tokio::time::timeout_at(until, self.list[i].child.wait()).await;
            if waited.is_err() {
                self.kill(i).await;
            }
        }
        for h in &mut self.list {
            h.stdin = None;
            let _ = (&mut h.reader).await;
        }
    }
}

/// One line a holder prints (see [`holder_main`]); times are
/// CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HolderLine {
    Created {
        session: u64,
        invoked: u64,
        done: u64,
    },
    CreateFailed {
        at: u64,
        error: String,
    },
    CreateUnknown {
        at: u64,
        error: String,
    },
    Confirm {
        invoked: u64,
        done: u64,
        present: bool,
    },
    ConfirmFailed {
        invoked: u64,
        done: u64,
        error: String,
    },
    Closing {
        at: u64,
    },
    Closed {
        invoked: u64,
        done: u64,
    },
    CloseFailed {
        invoked: u64,
        done: u64,
        error: String,
    },
    Ended {
        at: u64,
        state: String,
    },
}

impl HolderLine {
    /// Parses a whole line; `None` for anything malformed or cut short.
    fn parse(line: &str) -> Option<HolderLine> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| words.get(i)?.parse::<u64>().ok();
        // Error texts are at least one word.
        let text = |i: usize| (words.len() > i).then(|| words[i..].join(" "));
        let exactly = |len: usize| (words.len() == len).then_some(());
        Some(match *words.first()? {
            "created" => {
                exactly(4)?;
                HolderLine::Created {
                    session: n(1)?,
                    invoked: n(2)?,
                    done: n(3)?,
                }
            }
            "create-failed" => HolderLine::CreateFailed {
                at: n(1)?,
                error: text(2)?,
            },
            "create-unknown" => HolderLine::CreateUnknown {
                at: n(1)?,
                error: text(2)?,
            },
            "confirm" => {
                exactly(4)?;
                HolderLine::Confirm {
                    invoked: n(1)?,
                    done: n(2)?,
                    present: match words[3] {
                        "1" => true,
                        "0" => false,
                        _ => return None,
                    },
                }
            }
            "confirm-failed" => HolderLine::ConfirmFailed {
                invoked: n(1)?,
                done: n(2)?,
                error: text(3)?,
            },
            "closing" => {
                exactly(2)?;
                HolderLine::Closing { at: n(1)? }
            }
            "closed" => {
                exactly(3)?;
                HolderLine::Closed {
                    invoked: n(1)?,
                    done: n(2)?,
                }
            }
            "close-failed" => HolderLine::CloseFailed {
                invoked: n(1)?,
                done: n(2)?,
                error: text(3)?,
            },
            "ended" => {
                exactly(3)?;
                HolderLine::Ended {
                    at: n(1)?,
                    state: words[2].to_string(),
                }
            }
            _ => return None,
        })
    }
}

/// Records what one holder prints (see [`holder_main`] for the lines).
async fn read_holder(
    history: History,
    process: Process,
    path: String,
    stdout: tokio::process::ChildStdout,
    status: Arc<Mutex<Status>>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut create_open = true;
    let mut close_asked: Option<u64> = None;
    let pv = || json!({ "path": path });
    let pair = |f: &str, from: u64, kind: Kind, value: Value, error: Option<String>, to: u64| {
        history.record_at(process, Kind::Invoke, f, pv(), None, from);
        history.record_at(process, kind, f, value, error, to);
    };
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(parsed) = HolderLine::parse(&line) else {
            // A line cut short by SIGKILL, say: what it said is not known.
            tracing::warn!(%line, %path, "unreadable line from an ephemeral holder");
            continue;
        };
        let ended = |at: u64| {
            let mut s = status.lock().expect("status lock");
            s.ended_ns.get_or_insert(history.time_of(at));
        };
        match parsed {
            HolderLine::Created { session, done, .. } if create_open => {
                create_open = false;
                let value = json!({ "path": path, "session": session });
                history.record_at(process, Kind::Ok, "create", value, None, done);
                status.lock().expect("status lock").created = true;
            }
            HolderLine::CreateFailed { at, error } if create_open => {
                create_open = false;
                history.record_at(process, Kind::Fail, "create", pv(), Some(error), at);
            }
            HolderLine::CreateUnknown { at, error } if create_open => {
                create_open = false;
                history.record_at(process, Kind::Info, "create", pv(), Some(error), at);
            }
            HolderLine::Confirm {
                invoked,
                done,
                present,
            } => {
                let value = json!({ "path": path, "present": present });
                pair("confirm", invoked, Kind::Ok, value, None, done);
            }
            HolderLine::ConfirmFailed {
                invoked,
                done,
                error,
            } => pair("confirm", invoked, Kind::Fail, pv(), Some(error), done),
            HolderLine::Closing { at } => close_asked = Some(at),
            HolderLine::Closed { invoked, done } => {
                close_asked = None;
                pair("close", invoked, Kind::Ok, pv(), None, done);
                ended(done);
            }
            HolderLine::CloseFailed {
                invoked,
                done,
                error,
            } => {
                close_asked = None;
                pair("close", invoked, Kind::Info, pv(), Some(error), done);
                ended(done);
            }
            HolderLine::Ended { at, state } => {
                let value = json!({ "path": path, "state": state });
                pair("session-ended", at, Kind::Ok, value, None, at);
                ended(at);
            }
            other => tracing::warn!(?other, %path, "unexpected line from an ephemeral holder"),
        }
    }
    let now = clock::mono_ns();
    if create_open {
        let error = Some("the holder exited before its create was answered".into());
        history.record_at(process, Kind::Info, "create", pv(), error, now);
    }
    if let Some(at) = close_asked {
        let error = Some("the holder exited before its close was answered".into());
        pair("close", at, Kind::Info, pv(), error, now);
    }
    let mut s = status.lock().expect("status lock");
    s.exited = true;
    s.ended_ns.get_or_insert(history.time_of(now));
}

/// The invocation time (run ns) and paths of the observer's latest `ok`
/// read.
type Latest = Arc<Mutex<Option<(u64, BTreeSet<String>)>>>;

/// The observer: one session listing the parent linearizably.
struct Observer {
    latest: Latest,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    async fn start(ctx: &RunCtx, parent: &str, process: Process) -> Result<Observer, String> {
        let latest = Arc::new(Mutex::new(None));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(observe(
            ctx.clone(),
            parent.to_string(),
            process,
            latest.clone(),
            stopped,
        ));
        Ok(Observer { latest, stop, task })
    }

    /// Invocation time (run ns) and paths of the latest `ok` read.
    fn latest(&self) -> Option<(u64, BTreeSet<String>)> {
        self.latest.lock().expect("observer lock").clone()
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn observe(
    ctx: RunCtx,
    parent: String,
    process: Process,
    latest: Latest,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let options = connect_options(&ctx);
    let servers = ctx.servers_for(ctx.concurrency);
    let mut client: Option<Client> = None;
    while !*stopped.borrow() {
        let c = match &client {
            Some(c) if !c.session_events().borrow().is_terminal() => c.clone(),
            _ => {
                let until = Instant::now() + ctx.session_timeout;
                match connect_until(&servers, &options, until).await {
                    Some(c) => {
                        client = Some(c.clone());
                        c
                    }
                    None => continue,
                }
            }
        };
        let inv = ctx
            .history
            .invoke(process, "read", json!({ "parent": parent }));
        match c.get_children_linearizable(&parent).await {
            Ok((names, _)) => {
                let paths: BTreeSet<String> =
                    names.iter().map(|n| format!("{parent}/{n}")).collect();
                ctx.history
                    .ok(&inv, json!({ "parent": parent, "present": paths }));
                *latest.lock().expect("observer lock") = Some((inv.time, paths));
            }
            // A read changes nothing: whatever went wrong, it is a `fail`.
            Err(e) => ctx
                .history
                .fail(&inv, json!({ "parent": parent }), e.to_string()),
        }
        tokio::select! {
            _ = tokio::time::sleep(OBSERVE_INTERVAL) => {}
            _ = stopped.changed() => {}
        }
    }
    if let Some(c) = client {
        let _ = c.close().await;
    }
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let mut lives: BTreeMap<String, EphemeralLife> = BTreeMap::new();
    let mut ends: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut reads = Vec::new();
    let (mut kills, mut closes, mut expiries, mut confirms) = (0u64, 0u64, 0u64, 0u64);
    for op in pair(events) {
        let path = op.invoke.value["path"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let done = op.complete.as_ref().map(|c| c.time);
        match (op.invoke.f.as_str(), op.outcome()) {
            ("create", kind) if kind != Kind::Fail => {
                lives.insert(
                    path.clone(),
                    EphemeralLife {
                        path,
                        create_op: op.invoke.index,
                        created_at: if kind == Kind::Ok { done } else { None },
                        confirms: Vec::new(),
                        closed: None,
                        must_be_gone_by: None,
                    },
                );
            }
            ("confirm", Kind::Ok) => {
                confirms += 1;
                if let Some(l) = lives.get_mut(&path) {
                    l.confirms.push(Confirm {
                        op: op.invoke.index,
                        invoked: op.invoke.time,
                        completed: done.unwrap_or(op.invoke.time),
                        present: op.value()["present"].as_bool().unwrap_or(true),
                    });
                }
            }
            ("close", Kind::Ok) => {
                closes += 1;
                if let Some(l) = lives.get_mut(&path) {
                    l.closed = Some((op.invoke.index, done.unwrap_or(op.invoke.time)));
                }
            }
            ("close", _) => {
                let at = op.complete.as_ref().map(|c| c.time).unwrap_or(ctx.end);
                end_at(&mut ends, &path, op.invoke.index, at);
            }
            ("kill-client", kind) => {
                kills += 1;
                // Unknown whether the kill landed: the session may have
                // lived on, so there is no deadline.
                if kind == Kind::Ok {
                    end_at(&mut ends, &path, op.invoke.index, done.unwrap_or(ctx.end));
                }
            }
            ("session-ended", _) => {
                expiries += 1;
                end_at(&mut ends, &path, op.invoke.index, op.invoke.time);
            }
            ("read", Kind::Ok) => {
                let present = op.value()["present"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                reads.push(ChildrenRead {
                    op: op.invoke.index,
                    invoked: op.invoke.time,
                    completed: done.unwrap_or(op.invoke.time),
                    present,
                });
            }
            _ => {}
        }
    }
    let mut notes = Vec::new();
    for (path, &(op, at)) in &ends {
        let Some(life) = lives.get_mut(path) else {
            continue;
        };
        match linger_deadline(at, ctx.session_timeout, &ctx.faults) {
            Some(deadline) => life.must_be_gone_by = Some((op, deadline)),
            None => notes.push(Anomaly {
                kind: "linger-unchecked".into(),
                message: format!(
                    "{path}: a fault was still in force at the end, so how long it \
                     lingered after its session ended is not judged"
                ),
                ops: vec![op],
                detail: Value::Null,
            }),
        }
    }
    let lives: Vec<EphemeralLife> = lives.into_values().collect();
    let linger = linger_figures(&lives, &ends, &reads);
    let stats = json!({
        "holders": lives.len(),
        "created": lives.iter().filter(|l| l.created_at.is_some()).count(),
        "kills": kills,
        "closes_ok": closes,
        "sessions_ended_seen": expiries,
        "confirms_ok": confirms,
        "reads_ok": reads.len(),
        "linger_after_end": linger,
    });
    let anomalies = check_ephemeral(&lives, &reads)
        .into_iter()
        .map(to_anomaly)
        .collect();
    CheckResult::from_anomalies(anomalies, notes, stats)
}

/// Keeps the earliest end of each path's session: once its process is gone
/// or its close was sent, nothing keeps it alive.
fn end_at(ends: &mut BTreeMap<String, (u64, u64)>, path: &str, op: u64, at: u64) {
    let e = ends.entry(path.to_string()).or_insert((op, at));
    if at < e.1 {
        *e = (op, at);
    }
}

/// When an ephemeral whose session stopped being kept alive at `end` must
/// be gone: `end + session_timeout + LINGER_SLACK`, pushed out past every
/// fault in force meanwhile (by another timeout and slack from its end:
/// a new leader re-arms sessions), `None` if one never ended.
fn linger_deadline(end: u64, session_timeout: Duration, faults: &[FaultPeriod]) -> Option<u64> {
    let grace = (session_timeout + LINGER_SLACK).as_nanos() as u64;
    let mut deadline = end + grace;
    loop {
        let mut moved = false;
        for f in faults {
            if f.start > deadline {
                continue;
            }
            let fault_end = f.end?;
            if fault_end < end {
                continue;
            }
            if fault_end + grace > deadline {
                deadline = fault_end + grace;
                moved = true;
            }
        }
        if !moved {
            return Some(deadline);
        }
    }
}

/// How long after its session ended (run's view) each node was first
/// seen gone: count, median and max in ms (how close runs come to the
/// bound).
fn linger_figures(
    lives: &[EphemeralLife],
    ends: &BTreeMap<String, (u64, u64)>,
    reads: &[ChildrenRead],
) -> Value {
    let mut lingers: Vec<u64> = Vec::new();
    for l in lives {
        let (Some(&(_, end)), Some(created)) = (ends.get(&l.path), l.created_at) else {
            continue;
        };
        if let Some(r) = reads
            .iter()
            .find(|r| r.invoked > created && !r.present.contains(&l.path))
        {
            lingers.push(r.completed.saturating_sub(end) / 1_000_000);
        }
    }
    lingers.sort();
    json!({
        "seen_gone": lingers.len(),
        "median_ms": lingers.get(lingers.len() / 2),
        "max_ms": lingers.last(),
    })
}

fn to_anomaly(a: EphemeralAnomaly) -> Anomaly {
    let (kind, message, ops) = match &a {
        EphemeralAnomaly::VanishedWhileAlive {
            path,
            gone_op,
            confirm_op,
        } => (
            "vanished-while-alive",
            format!("{path} was seen gone before its session was confirmed alive"),
            vec![*gone_op, *confirm_op],
        ),
        EphemeralAnomaly::Reappeared {
            path,
            gone_op,
            present_op,
        } => (
            "reappeared",
            format!("{path} was seen again after it was seen gone"),
            vec![*gone_op, *present_op],
        ),
        EphemeralAnomaly::LingeredAfterClose {
            path,
            close_op,
            read_op,
        } => (
            "lingered-after-close",
            format!("{path} was still there in a read invoked after its session closed"),
            vec![*close_op, *read_op],
        ),
        EphemeralAnomaly::Lingered {
            path,
            end_op,
            read_op,
            late_ns,
        } => (
            "lingered",
            format!(
                "{path} was still there {} ms past its deadline after its session ended",
                late_ns / 1_000_000
            ),
            vec![*end_op, *read_op],
        ),
    };
    Anomaly {
        kind: kind.into(),
        message,
        ops,
        detail: Value::Null,
    }
}

const MS: u64 = 1_000_000;
const PP: &str = "/jepsen/eph/planted";

/// A planted history: holder 1 is killed at 1 s and its node seen gone at
/// 5 s; holder 2 closes at 2 s and is seen gone at 2.1 s (with
/// `lingering`, the reads that see them gone are left out). `plant` adds
/// to it.
fn planted_history(lingering: bool, plant: impl Fn(&Planted)) -> Vec<Event> {
    let h = Planted::new();
    let (a, b) = (format!("{PP}/h-0000"), format!("{PP}/h-0001"));
    for (p, path) in [(1, &a), (2, &b)] {
        h.op(
            p,
            "create",
            json!({ "path": path }),
            0,
            Kind::Ok,
            json!({ "path": path, "session": p }),
            10 * MS,
        );
        h.op(
            p,
            "confirm",
            json!({ "path": path }),
            500 * MS,
            Kind::Ok,
            json!({ "path": path, "present": true }),
            510 * MS,
        );
    }
    h.op(
        9,
        "kill-client",
        json!({ "path": a, "holder": 1 }),
        1_000 * MS,
        Kind::Ok,
        json!({ "path": a, "holder": 1 }),
        1_010 * MS,
    );
    h.op(
        2,
        "close",
        json!({ "path": b }),
        2_000 * MS,
        Kind::Ok,
        json!({ "path": b }),
        2_010 * MS,
    );
    let read = |at: u64, present: &[&String]| {
        h.op(
            0,
            "read",
            json!({ "parent": PP }),
            at,
            Kind::Ok,
            json!({ "parent": PP, "present": present }),
            at + 5 * MS,
        );
    };
    read(20 * MS, &[&a, &b]);
    read(1_500 * MS, &[&a, &b]);
    if !lingering {
        read(2_100 * MS, &[&a]);
        read(5_000 * MS, &[]);
    }
    plant(&h);
    h.events()
}

/// A clean history.
pub fn clean_history() -> Vec<Event> {
    planted_history(false, |_| {})
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    let a = format!("{PP}/h-0000");
    let b = format!("{PP}/h-0001");
    vec![
        (
            "ephemeral vanished while its session lived",
            planted_history(false, |h| {
                // Seen gone by the read at 5 s, yet holder 1 confirmed its
                // session at 5.1 s (as if the kill had not landed).
                h.op(
                    1,
                    "confirm",
                    json!({ "path": a }),
                    5_100 * MS,
                    Kind::Ok,
                    json!({ "path": a, "present": true }),
                    5_110 * MS,
                );
            }),
        ),
        (
            "ephemeral lingering after its session was killed",
            planted_history(true, |h| {
                // Deadline: 1.01 s + 5 s timeout + slack.
                let late = 1_010 * MS + (5_000 * MS) + LINGER_SLACK.as_nanos() as u64 + 1;
                h.op(
                    0,
                    "read",
                    json!({ "parent": PP }),
                    late,
                    Kind::Ok,
                    json!({ "parent": PP, "present": [&a] }),
                    late + 5 * MS,
                );
            }),
        ),
        (
            "ephemeral lingering after its session closed",
            planted_history(true, |h| {
                h.op(
                    0,
                    "read",
                    json!({ "parent": PP }),
                    2_100 * MS,
                    Kind::Ok,
                    json!({ "parent": PP, "present": [&a, &b] }),
                    2_105 * MS,
                );
            }),
        ),
    ]
}

// ---------------------------------------------------------------- holder

/// The holder's command line.
#[derive(Debug, Clone, PartialEq)]
struct HolderArgs {
    servers: String,
    path: String,
    session_timeout: Duration,
    request_timeout: Duration,
}

fn parse_holder_args(args: &[String]) -> Result<HolderArgs, String> {
    let flags = HelperFlags::parse(
        args,
        &[
            "--servers",
            "--path",
            "--session-timeout-ms",
            "--request-timeout-ms",
        ],
    )?;
    let options = flags.connect_options()?;
    Ok(HolderArgs {
        servers: flags.required("--servers")?,
        path: flags.required("--path")?,
        session_timeout: options.session_timeout,
        request_timeout: options.request_timeout,
    })
}

/// `warden-jepsen ephemeral-holder --servers S --path P
/// [--session-timeout-ms N] [--request-timeout-ms M]`: a helper process the
/// workload starts and kills. It connects, creates the ephemeral `P`, and
/// prints one line per operation (times are CLOCK_MONOTONIC ns):
///
/// - `created SESSION INVOKED DONE`, `create-failed AT ERROR...`,
///   `create-unknown AT ERROR...` (then it exits);
/// - `confirm INVOKED DONE 1|0` (its session lives; 1 if the node is
///   there), or `confirm-failed INVOKED DONE ERROR...`;
/// - on a `close` line on stdin: `closing AT`, then `closed INVOKED DONE` or
///   `close-failed INVOKED DONE ERROR...`, and it exits;
/// - `ended AT Expired|Closed` when the session ends on its own.
///
/// When stdin closes (the run is gone) it exits at once, leaving its
/// session to expire. Returns the exit code.
pub fn holder_main(args: Vec<String>) -> i32 {
    let args = match parse_holder_args(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ephemeral-holder: {e}");
            return 2;
        }
    };
    run_helper("ephemeral-holder", hold(args))
}

async fn hold(args: HolderArgs) -> i32 {
    let options = ConnectOptions {
        session_timeout: args.session_timeout,
        request_timeout: args.request_timeout,
        ..ConnectOptions::default()
    };
    let create_until = Instant::now() + CREATE_BOUND;
    let Some(client) = connect_until(&args.servers, &options, create_until).await else {
        println!(
            "create-failed {} no server took a session",
            clock::mono_ns()
        );
        return 1;
    };
    let session = client.session_id();
    let invoked = clock::mono_ns();
    if let Err(line) = create(&client, &args.path, create_until).await {
        println!("{line}");
        return 1;
    }
    println!("created {session} {invoked} {}", clock::mono_ns());

    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut states = client.session_events();
    let interval = CONFIRM_INTERVAL_MAX.min(args.session_timeout / 4);
    loop {
        tokio::select! {
            line = stdin.next_line() => match line {
                Ok(Some(l)) if l.trim() == "close" => {
                    let invoked = clock::mono_ns();
                    println!("closing {invoked}");
                    match client.close().await {
                        Ok(()) => println!("closed {invoked} {}", clock::mono_ns()),
                        Err(e) => println!("close-failed {invoked} {} {e}", clock::mono_ns()),
                    }
                    return 0;
                }
                Ok(Some(_)) => {}
                // The run is gone: leave like a crash, without closing.
                _ => std::process::exit(3),
            },
            _ = states.changed() => {
                let state = *states.borrow_and_update();
                if state.is_terminal() {
                    let name = if state == SessionState::Expired { "Expired" } else { "Closed" };
                    println!("ended {} {name}", clock::mono_ns());
                    return 0;
                }
            }
            _ = tokio::time::sleep(interval) => {
                let invoked = clock::mono_ns();
                match client.exists_linearizable(&args.path).await {
                    Ok(stat) => println!(
                        "confirm {invoked} {} {}",
                        clock::mono_ns(),
                        u8::from(stat.is_some())
                    ),
                    Err(e) => println!("confirm-failed {invoked} {} {e}", clock::mono_ns()),
                }
            }
        }
    }
}

/// Creates the ephemeral, finding out after a lost answer whether it was
/// made (it is ours if its owner is our session). Err: the line to print.
async fn create(client: &Client, path: &str, until: Instant) -> Result<(), String> {
    let session = client.session_id();
    let mut unsure: Option<String> = None;
    while Instant::now() < until {
        match client.create(path, b"", CreateOptions::ephemeral()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == ErrorCode::NodeExists && unsure.is_some() => {
                match client.exists(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => return Ok(()),
                    Ok(_) => {
                        return Err(format!("create-failed {} {e}", clock::mono_ns()));
                    }
                    Err(e) => unsure = Some(e.to_string()),
                }
            }
            Err(e) if e.is_retryable() => unsure = Some(e.to_string()),
            Err(e) if unsure.is_some() || e.code() == ErrorCode::SessionExpired => {
                return Err(format!("create-unknown {} {e}", clock::mono_ns()));
            }
            Err(e) => return Err(format!("create-failed {} {e}", clock::mono_ns())),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    let why = unsure.unwrap_or_else(|| "no answer".into());
    Err(format!(
        "create-unknown {} gave up after {CREATE_BOUND:?}: {why}",
        clock::mono_ns()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
    use crate::workloads::support::planted_ctx;

    #[test]
    fn clean_history_is_valid() {
        let events = clean_history();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
        assert_eq!(r.stats["kills"], 1);
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        crate::workloads::support::assert_every_planted_invalid(planted_anomalies(), check);
    }

    #[test]
    fn faults_push_the_linger_deadline_out() {
        let grace = (Duration::from_secs(5) + LINGER_SLACK).as_nanos() as u64;
        let fault = |start: u64, end: Option<u64>| FaultPeriod {
            kind: "kill".into(),
            start,
            end,
            detail: Value::Null,
        };
        let t = Duration::from_secs(5);
        assert_eq!(linger_deadline(100, t, &[]), Some(100 + grace));
        assert_eq!(
            linger_deadline(100, t, &[fault(50, Some(90))]),
            Some(100 + grace)
        );
        assert_eq!(
            linger_deadline(100, t, &[fault(150, Some(1_000))]),
            Some(1_000 + grace)
        );
        assert_eq!(linger_deadline(100, t, &[fault(150, None)]), None);
    }

    #[test]
    fn holder_lines_parse_strictly() {
        assert_eq!(
            HolderLine::parse("confirm 10 20 1"),
            Some(HolderLine::Confirm {
                invoked: 10,
                done: 20,
                present: true
            })
        );
        // Cut short by a SIGKILL: not taken as "absent".
        assert_eq!(HolderLine::parse("confirm 10 20"), None);
        assert_eq!(HolderLine::parse("confirm 10 2"), None);
        assert_eq!(HolderLine::parse("created 7 1 2 3"), None);
        assert_eq!(
            HolderLine::parse("close-failed 1 2 ConnectionLoss: x"),
            Some(HolderLine::CloseFailed {
                invoked: 1,
                done: 2,
                error: "ConnectionLoss: x".into()
            })
        );
        assert_eq!(HolderLine::parse("create-unknown 5"), None);
    }

    #[test]
    fn holder_args_parse() {
        let args: Vec<String> = [
            "--servers",
            "a:1,b:2",
            "--path",
            "/e/h",
            "--session-timeout-ms",
            "4000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let parsed = parse_holder_args(&args).unwrap();
        assert_eq!(parsed.path, "/e/h");
        assert_eq!(parsed.session_timeout, Duration::from_secs(4));
        assert!(parse_holder_args(&args[..3]).is_err());
        assert!(parse_holder_args(&["--servers".to_string()]).is_err());
    }
}
