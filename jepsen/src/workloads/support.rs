//! What the sequential, ephemeral and watch workloads share: how an error
//! becomes an outcome, connecting with a deadline, making parent paths,
//! numbering processes, and building hand-made histories for the planted
//! anomalies.

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
