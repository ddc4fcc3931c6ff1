//! What the sequential, ephemeral, watch, lock-set and session-order
//! workloads share: how an error becomes an outcome, connecting with a
//! deadline, making parent paths, numbering processes, starting and running
//! helper processes (`warden-jepsen <hidden subcommand>`), and building
//! hand-made histories for the planted anomalies.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use warden_client::{Client, ConnectOptions, CreateOptions, Error, ErrorCode};

use crate::history::{Event, History, Kind, Process};
use crate::workload::RunCtx;

/// Pause between attempts to connect or to make a setup node.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Pause after a failed operation (calls fail at once while a client is
/// disconnected; this keeps a worker from spinning through them).
pub const ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Longest a workload tries to make its parent nodes before giving up.
pub const SETUP_BOUND: Duration = Duration::from_secs(60);

/// How a failed write is recorded: `fail` only when the server refused it
/// for a reason decided before or by the state machine (it did not and
/// will not happen); anything else (connection lost, timeout, no leader,
/// session over while the answer was pending) may have been applied, so
/// it is `info`.
pub fn write_outcome(e: &Error) -> Kind {
    match e.code() {
        ErrorCode::NoNode
        | ErrorCode::NodeExists
        | ErrorCode::BadVersion
        // Overtaken by a later write of the session: refused, not applied.
        | ErrorCode::SessionMoved
        | ErrorCode::NotEmpty
        | ErrorCode::NoChildrenForEphemerals
        | ErrorCode::InvalidPath
        | ErrorCode::DataTooLarge
        | ErrorCode::BadArguments
        | ErrorCode::NoAuth
        | ErrorCode::InvalidAcl
        | ErrorCode::Unimplemented => Kind::Fail,
        _ => Kind::Info,
    }
}

/// The options every client of these workloads connects with.
pub fn connect_options(ctx: &RunCtx) -> ConnectOptions {
    ConnectOptions {
        session_timeout: ctx.session_timeout,
        request_timeout: ctx.request_timeout,
        ..ConnectOptions::default()
    }
}

/// Connects, retrying until `until`; `None` if no server took a session by
/// then.
pub async fn connect_until(
    servers: &str,
    options: &ConnectOptions,
    until: Instant,
) -> Option<Client> {
    loop {
        match tokio::time::timeout_at(until, Client::connect(servers, options.clone())).await {
            Ok(Ok(c)) => return Some(c),
            Err(_) => return None,
            Ok(Err(e)) => tracing::debug!(error = %e, "connect failed; retrying"),
        }
        if Instant::now() + RETRY_PAUSE >= until {
            return None;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Makes `path` and every missing ancestor (persistent, empty), retrying
/// retryable errors and new sessions until `SETUP_BOUND` passes.
pub async fn ensure_path(ctx: &RunCtx, path: &str) -> Result<(), String> {
    let until = Instant::now() + SETUP_BOUND;
    let options = connect_options(ctx);
    let mut last = String::from("no server took a session");
    while Instant::now() < until {
        let Some(client) = connect_until(&ctx.servers_for(0), &options, until).await else {
            break;
        };
        match make_ancestors(&client, path).await {
            Ok(()) => {
                let _ = client.close().await;
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        let _ = client.close().await;
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(format!(
        "could not create {path} within {SETUP_BOUND:?}: {last}"
    ))
}

async fn make_ancestors(client: &Client, path: &str) -> Result<(), Error> {
    let mut prefix = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        loop {
            match client
                .create(&prefix, b"", CreateOptions::persistent())
                .await
            {
                Ok(_) => break,
                Err(e) if e.code() == ErrorCode::NodeExists => break,
                Err(e) if e.is_retryable() => tokio::time::sleep(RETRY_PAUSE).await,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A name for this run's own subtree, so that runs against one cluster do
/// not see each other's nodes.
pub fn run_tag(ctx: &RunCtx) -> String {
    format!("r{:x}-{:x}", crate::clock::wall_ns() / 1_000_000, ctx.seed)
}

/// Hands out client process numbers (a process that saw an `info` moves on
/// to a fresh one).
#[derive(Debug, Clone, Default)]
pub struct Processes(Arc<AtomicU64>);

impl Processes {
    pub fn fresh(&self) -> Process {
        Process::Client(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// Starts this binary as a helper process: `warden-jepsen <subcommand>
/// <args>`, stdin and stdout piped (the run talks to it by lines), stderr
/// appended to `log`, killed when its handle drops. A helper exits when its
/// stdin closes, so none outlives the run.
pub fn spawn_helper(
    ctx: &RunCtx,
    subcommand: &str,
    args: &[String],
    log: &std::fs::File,
) -> Result<tokio::process::Child, String> {
    let stderr = log.try_clone().map_err(|e| format!("helper log: {e}"))?;
    tokio::process::Command::new(&ctx.self_exe)
        .arg(subcommand)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {} {subcommand}: {e}", ctx.self_exe.display()))
}

/// A helper process the run started, with the task that reads its stdout
/// (its end means the process is gone) and its stdin, for the run's lines.
pub struct HelperProc {
    child: tokio::process::Child,
    pub pid: Option<u32>,
    pub stdin: Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl HelperProc {
    /// Starts a helper ([`spawn_helper`]) and `serve(pid, stdout, stdin)`
    /// as the task that reads it.
    pub fn start<F, Fut>(
        ctx: &RunCtx,
        subcommand: &str,
        args: &[String],
        log: &std::fs::File,
        serve: F,
    ) -> Result<HelperProc, String>
    where
        F: FnOnce(
            Option<u32>,
            tokio::process::ChildStdout,
            Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>,
        ) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut child = spawn_helper(ctx, subcommand, args, log)?;
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = Arc::new(tokio::sync::Mutex::new(child.stdin.take()));
        let reader = tokio::spawn(serve(pid, stdout, stdin.clone()));
        Ok(HelperProc {
            child,
            pid,
            stdin,
            reader,
        })
    }

    /// Whether its stdout ended (the process exited or was killed).
    pub fn is_finished(&self) -> bool {
        self.reader.is_finished()
    }
}

/// How often [`keep_helpers`] replaces helpers that exited.
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(200);

/// Keeps `count` helpers running until `deadline`: starts them with
/// `spawn(n)` (`n` counts every helper started, from 0) and replaces each
/// that exits, `max` in all. Returns those still running, and the error
/// of a `spawn` that failed (which ends it early).
pub async fn keep_helpers(
    deadline: Instant,
    count: usize,
    max: usize,
    mut spawn: impl FnMut(usize) -> Result<HelperProc, String>,
) -> (Vec<HelperProc>, Result<(), String>) {
    let mut helpers: Vec<HelperProc> = Vec::new();
    let mut started = 0usize;
    while Instant::now() < deadline {
        helpers.retain(|h| !h.is_finished());
        while helpers.len() < count && started < max {
            match spawn(started) {
                Ok(h) => helpers.push(h),
                Err(e) => return (helpers, Err(e)),
            }
            started += 1;
        }
        tokio::time::sleep_until((Instant::now() + SUPERVISE_INTERVAL).min(deadline)).await;
    }
    (helpers, Ok(()))
}

/// Writes `line` to a helper's stdin (nothing if it is closed or gone).
pub async fn send_line(stdin: &tokio::sync::Mutex<Option<tokio::process::ChildStdin>>, line: &str) {
    use tokio::io::AsyncWriteExt;
    if let Some(s) = stdin.lock().await.as_mut() {
        let _ = s.write_all(format!("{line}\n").as_bytes()).await;
        let _ = s.flush().await;
    }
}

/// Asks every helper to finish (a `stop` line) and waits for them until
/// `until`; one still there then is let go on (SIGCONT, if it was
/// stopped) and killed. Their readers are awaited, so every line they
/// printed is recorded when this returns.
pub async fn finish_helpers(helpers: &mut [HelperProc], until: Instant) {
    for h in helpers.iter() {
        send_line(&h.stdin, "stop").await;
    }
    for h in helpers.iter_mut() {
        if tokio::time::timeout_at(until, h.child.wait())
            .await
            .is_err()
        {
            crate::workloads::client_faults::resume(h.pid);
            let _ = h.child.start_kill();
            let _ = h.child.wait().await;
        }
        *h.stdin.lock().await = None;
        let _ = (&mut h.reader).await;
    }
}

/// The flags every helper gets: `--servers`, `--session-timeout-ms`,
/// `--request-timeout-ms`, as [`helper_args`] writes them.
pub fn helper_args(ctx: &RunCtx, servers: &str) -> Vec<String> {
    vec![
        "--servers".into(),
        servers.into(),
        "--session-timeout-ms".into(),
        ctx.session_timeout.as_millis().to_string(),
        "--request-timeout-ms".into(),
        ctx.request_timeout.as_millis().to_string(),
    ]
}

/// A helper's command line: `--flag value` pairs, each flag one of those
/// the helper knows.
#[derive(Debug, Clone, PartialEq)]
pub struct HelperFlags(BTreeMap<String, String>);

impl HelperFlags {
    /// Parses `args`; an unknown flag or one without a value is an error.
    pub fn parse(args: &[String], known: &[&str]) -> Result<HelperFlags, String> {
        let mut out = BTreeMap::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            if !known.contains(&flag.as_str()) {
                return Err(format!("unknown flag {flag}"));
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            out.insert(flag.clone(), value.clone());
        }
        Ok(HelperFlags(out))
    }

    /// A flag that must be given.
    pub fn required(&self, flag: &str) -> Result<String, String> {
        self.0
            .get(flag)
            .cloned()
            .ok_or_else(|| format!("{flag} is required"))
    }

    /// A positive number of milliseconds, `default` when not given.
    pub fn millis(&self, flag: &str, default: u64) -> Result<Duration, String> {
        let Some(v) = self.0.get(flag) else {
            return Ok(Duration::from_millis(default));
        };
        match v.parse::<u64>() {
            Ok(0) => Err(format!("{flag} must be at least 1")),
            Ok(n) => Ok(Duration::from_millis(n)),
            Err(e) => Err(format!("{flag} {v}: {e}")),
        }
    }

    /// The connect options of `--session-timeout-ms` and
    /// `--request-timeout-ms` (5 s each by default).
    pub fn connect_options(&self) -> Result<ConnectOptions, String> {
        Ok(ConnectOptions {
            session_timeout: self.millis("--session-timeout-ms", 5_000)?,
            request_timeout: self.millis("--request-timeout-ms", 5_000)?,
            ..ConnectOptions::default()
        })
    }
}

/// Runs a helper process's body on a single-threaded runtime; returns its
/// exit code (2 when the runtime cannot start). The runtime is shut down
/// without waiting for its blocking threads: a read of stdin cannot be
/// cancelled, and waiting for it would keep the process alive until the
/// run closed its stdin.
pub fn run_helper<F>(name: &str, body: F) -> i32
where
    F: std::future::Future<Output = i32>,
{
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            let code = runtime.block_on(body);
            runtime.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!("{name}: runtime: {e}");
            2
        }
    }
}

/// One event of an operation that a helper process did, as it reports it
/// on its stdout (one JSON object a line); the run records it under the
/// helper's process number with the helper's own time (CLOCK_MONOTONIC,
/// see [`crate::clock`]), so a helper's history reads like an in-process
/// client's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HelperEvent {
    pub kind: Kind,
    pub f: String,
    #[serde(default)]
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// CLOCK_MONOTONIC, ns.
    pub at: u64,
}

impl HelperEvent {
    /// Prints an event that happens now (in a helper process).
    pub fn report(kind: Kind, f: &str, value: Value, error: Option<String>) {
        let e = HelperEvent {
            kind,
            f: f.to_string(),
            value,
            error,
            at: crate::clock::mono_ns(),
        };
        println!(
            "{}",
            serde_json::to_string(&e).expect("an event serializes")
        );
    }

    /// Reads a line a helper printed.
    pub fn parse(line: &str) -> Result<HelperEvent, String> {
        serde_json::from_str(line).map_err(|e| format!("unreadable helper line {line:?}: {e}"))
    }

    /// Records it in `history` as an event of `process`.
    pub fn record(self, history: &History, process: Process) -> Event {
        history.record_at(process, self.kind, &self.f, self.value, self.error, self.at)
    }
}

/// One event of a hand-made history at `at_ms` milliseconds (index 0:
/// numbered once the history is sorted); a `fail` says `refused`.
pub fn hand_event(process: Process, kind: Kind, f: &str, value: Value, at_ms: u64) -> Event {
    let time = at_ms * 1_000_000;
    Event {
        index: 0,
        process,
        kind,
        f: f.to_string(),
        value,
        time,
        mono_ns: time,
        wall_ns: 0,
        error: (kind == Kind::Fail).then(|| "refused".to_string()),
    }
}

/// Builds a history by hand, with chosen times (ns), for planted anomalies
/// and tests.
#[derive(Debug, Default)]
pub struct Planted {
    history: History,
}

impl Planted {
    pub fn new() -> Planted {
        Planted {
            history: History::starting_at(0),
        }
    }

    /// Records a whole operation; returns the index of its invocation.
    #[allow(clippy::too_many_arguments)]
    pub fn op(
        &self,
        process: u64,
        f: &str,
        invoke: Value,
        at: u64,
        kind: Kind,
        result: Value,
        done: u64,
    ) -> u64 {
        let p = Process::Client(process);
        let i = self
            .history
            .record_at(p, Kind::Invoke, f, invoke, None, at)
            .index;
        let error = (kind != Kind::Ok).then(|| "planted".to_string());
        self.history.record_at(p, kind, f, result, error, done);
        i
    }

    pub fn events(&self) -> Vec<Event> {
        self.history.events()
    }
}

/// `CheckCtx` for a hand-made history.
#[cfg(test)]
pub fn planted_ctx(events: &[Event]) -> crate::workload::CheckCtx {
    crate::workload::CheckCtx {
        faults: crate::history::fault_periods(events),
        session_timeout: Duration::from_secs(5),
        end: events.iter().map(|e| e.time).max().unwrap_or(0),
    }
}

/// Test helper: every planted history of a workload is judged invalid, with
/// exactly the one anomaly planted in it.
#[cfg(test)]
pub fn assert_every_planted_invalid(
    planted: Vec<(&'static str, Vec<Event>)>,
    check: fn(&[Event], &crate::workload::CheckCtx) -> crate::workload::CheckResult,
) {
    for (name, events) in planted {
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, crate::workload::Validity::Invalid, "{name}");
        assert_eq!(r.anomalies.len(), 1, "{name}: {:?}", r.anomalies);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_helper_event_is_recorded_as_printed_and_bad_lines_are_named() {
        let e = HelperEvent {
            kind: Kind::Ok,
            f: "campaign".into(),
            value: json!({ "token": 7 }),
            error: None,
            at: 5_000,
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(HelperEvent::parse(&line), Ok(e.clone()));
        let h = History::starting_at(1_000);
        let recorded = e.record(&h, Process::Client(3));
        assert_eq!(
            (
                recorded.time,
                recorded.kind,
                recorded.value["token"].as_u64()
            ),
            (4_000, Kind::Ok, Some(7))
        );
        assert!(HelperEvent::parse("granted 1 2")
            .unwrap_err()
            .contains("granted 1 2"));
    }
}
