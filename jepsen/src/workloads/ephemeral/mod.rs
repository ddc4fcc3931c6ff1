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

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::time::Instant;
use warden_client::Client;

use super::support::{
    connect_options, connect_until, ensure_path, helper_args, run_tag, spawn_helper, Processes,
};
use crate::clock;
use crate::history::{History, Kind, Process};
use crate::workload::RunCtx;

mod check;
mod holder;
mod planted;

pub use check::check;
pub use holder::holder_main;
use holder::HolderLine;
pub use planted::{clean_history, planted_anomalies};

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
