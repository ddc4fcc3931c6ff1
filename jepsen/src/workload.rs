//! What every workload gets to run with, and what its checker returns.
//!
//! A workload is two functions: `run(&RunCtx)`, which drives clients against
//! the cluster until `ctx.deadline` and records every operation in
//! `ctx.history`, and `check(&[Event], &CheckCtx)`, a pure function of the
//! history, so that the selftest can feed it histories with planted
//! anomalies.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use crate::history::{FaultPeriod, History};
use crate::workloads::client_faults::ClientFault;

/// Everything a workload's `run` needs.
#[derive(Debug, Clone)]
pub struct RunCtx {
    /// Client addresses of the nodes (through the harness's proxies),
    /// node 1 first. A client should list all of them, its "home" node
    /// first, e.g. via [`RunCtx::servers_for`].
    pub servers: Vec<String>,
    /// HTTP addresses of the nodes (`--http-listen`, through the
    /// harness's proxies), node 1 first.
    pub http_servers: Vec<String>,
    /// ZooKeeper-port addresses of the nodes (`--zk-listen`, through the
    /// harness's proxies), node 1 first.
    pub zk_servers: Vec<String>,
    pub history: History,
    /// The run's seed; derive every random choice from it.
    pub seed: u64,
    /// Number of concurrent client workers.
    pub concurrency: usize,
    /// Target operations per second, over all workers (0: as fast as they go).
    pub rate: f64,
    /// Stop invoking new operations at this instant (then finish: final
    /// reads etc. belong before `run` returns).
    pub deadline: Instant,
    /// Session timeout clients ask for.
    pub session_timeout: Duration,
    /// Per-request timeout clients use (an operation that runs into it is
    /// recorded `info`).
    pub request_timeout: Duration,
    /// This binary, for workloads that run helper processes
    /// (`warden-jepsen <hidden subcommand>`).
    pub self_exe: PathBuf,
    /// Directory of this run's report, for workload-specific files.
    pub dir: PathBuf,
    /// Faults of client processes the workload deals (`--nemesis
    /// kill-client,pause-client`; see
    /// [`client_faults`](crate::workloads::client_faults)).
    pub client_faults: Vec<ClientFault>,
}

impl RunCtx {
    /// The servers string for worker `worker`: every node, starting from
    /// the worker's home node (workers spread round-robin).
    pub fn servers_for(&self, worker: usize) -> String {
        let n = self.servers.len();
        (0..n)
            .map(|i| self.servers[(worker + i) % n].as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Pause between one worker's operations that gives `rate` over all
    /// workers (zero for no limit).
    pub fn worker_interval(&self) -> Duration {
        if self.rate <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(self.concurrency.max(1) as f64 / self.rate)
        }
    }
}

/// What a checker knows besides the history.
#[derive(Debug, Clone, Default)]
pub struct CheckCtx {
    /// When faults were in force (from the history's nemesis events).
    pub faults: Vec<FaultPeriod>,
    /// The session timeout clients asked for.
    pub session_timeout: Duration,
    /// Total run time in nanoseconds (time of the last event).
    pub end: u64,
}

impl CheckCtx {
    /// The end of a history: its last event, or the run's end if later
    /// (an operation still open at the end lasts until then).
    pub fn history_end(&self, events: &[crate::history::Event]) -> u64 {
        events
            .iter()
            .map(|e| e.time)
            .max()
            .unwrap_or(0)
            .max(self.end)
    }
}

/// `valid` in results.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Validity {
    #[serde(rename = "true")]
    Valid,
    #[serde(rename = "false")]
    Invalid,
    #[serde(rename = "unknown")]
    Unknown,
}

impl Validity {
    /// Combines two verdicts: any invalid makes it invalid, else any unknown
    /// makes it unknown.
    pub fn and(self, other: Validity) -> Validity {
        use Validity::*;
        match (self, other) {
            (Invalid, _) | (_, Invalid) => Invalid,
            (Unknown, _) | (_, Unknown) => Unknown,
            _ => Valid,
        }
    }

    /// As results.json writes it: `true`, `false` or `"unknown"`.
    pub fn to_json(self) -> Value {
        match self {
            Validity::Valid => Value::Bool(true),
            Validity::Invalid => Value::Bool(false),
            Validity::Unknown => Value::String("unknown".into()),
        }
    }

    /// Exit code of `warden-jepsen test`: 0 valid, 1 invalid, 2 unknown.
    pub fn exit_code(self) -> i32 {
        match self {
            Validity::Valid => 0,
            Validity::Invalid => 1,
            Validity::Unknown => 2,
        }
    }
}

/// One anomaly: what kind, a sentence, and the operations involved (history
/// indices of their invocations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub ops: Vec<u64>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// A checker's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    pub valid: Validity,
    pub anomalies: Vec<Anomaly>,
    /// Anomalies that do not make the run invalid but are worth reporting
    /// (e.g. overlapping lock holds after a session expired).
    pub notes: Vec<Anomaly>,
    /// Figures: operations by outcome, grants, events, ...
    pub stats: Value,
}

impl CheckResult {
    /// Valid when `anomalies` is empty.
    pub fn from_anomalies(anomalies: Vec<Anomaly>, notes: Vec<Anomaly>, stats: Value) -> Self {
        let valid = if anomalies.is_empty() {
            Validity::Valid
        } else {
            Validity::Invalid
        };
        CheckResult {
            valid,
            anomalies,
            notes,
            stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_combines_and_serializes() {
        assert_eq!(Validity::Valid.and(Validity::Unknown), Validity::Unknown);
        assert_eq!(Validity::Unknown.and(Validity::Invalid), Validity::Invalid);
        assert_eq!(Validity::Valid.to_json(), Value::Bool(true));
        assert_eq!(Validity::Unknown.exit_code(), 2);
    }
}
