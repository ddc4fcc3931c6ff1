//! One test run: start the cluster, run a workload against it while the
//! nemesis works, heal, check the history, write the report.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::cluster::{Cluster, ClusterOpts};
use crate::history::{self, Event, History, Kind};
use crate::nemesis::{self, Fault, Schedule};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx, Validity};
use crate::workloads::client_faults::ClientFault;

/// How long the healed replicas have to stand at one index for their trees
/// to be compared (see `convergence`).
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
use crate::workloads;

/// The workloads `--workload` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Lock,
    Lease,
    Register,
    Sequential,
    Ephemeral,
    Watch,
    Election,
    LockSet,
    SessionOrder,
    ZkPipeline,
}

impl Workload {
    pub const ALL: [Workload; 10] = [
        Workload::Lock,
        Workload::Lease,
        Workload::Register,
        Workload::Sequential,
        Workload::Ephemeral,
        Workload::Watch,
        Workload::Election,
        Workload::LockSet,
        Workload::SessionOrder,
        Workload::ZkPipeline,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Lock => "lock",
            Workload::Lease => "lease",
            Workload::Register => "register",
            Workload::Sequential => "sequential",
            Workload::Ephemeral => "ephemeral",
            Workload::Watch => "watch",
            Workload::Election => "election",
            Workload::LockSet => "lock-set",
            Workload::SessionOrder => "session-order",
            Workload::ZkPipeline => "zk-pipeline",
        }
    }

    /// Runs the workload (when `unsafe_client`: the lock workload's
    /// deliberately unsafe client, the lock-set workload's unfenced
    /// resource).
    pub async fn run(self, ctx: &RunCtx, unsafe_client: bool) -> Result<(), String> {
        match self {
            Workload::Lock if unsafe_client => workloads::lock::run_unsafe(ctx).await,
            Workload::Lock => workloads::lock::run(ctx).await,
            Workload::Lease => workloads::lease::run(ctx, unsafe_client).await,
            Workload::Register => workloads::register::run(ctx).await,
            Workload::Sequential => workloads::sequential::run(ctx).await,
            Workload::Ephemeral => workloads::ephemeral::run(ctx).await,
            Workload::Watch => workloads::watch::run(ctx).await,
            Workload::Election => workloads::election::run(ctx).await,
            Workload::LockSet if unsafe_client => workloads::lock_set::run_unsafe(ctx).await,
            Workload::LockSet => workloads::lock_set::run(ctx).await,
            Workload::SessionOrder => workloads::session_order::run(ctx).await,
            Workload::ZkPipeline => workloads::zk_pipeline::run(ctx).await,
        }
    }

    pub fn check(self, events: &[Event], ctx: &CheckCtx) -> CheckResult {
        match self {
            Workload::Lock => workloads::lock::check(events, ctx),
            Workload::Lease => workloads::lease::check(events, ctx),
            Workload::Register => workloads::register::check(events, ctx),
            Workload::Sequential => workloads::sequential::check(events, ctx),
            Workload::Ephemeral => workloads::ephemeral::check(events, ctx),
            Workload::Watch => workloads::watch::check(events, ctx),
            Workload::Election => workloads::election::check(events, ctx),
            Workload::LockSet => workloads::lock_set::check(events, ctx),
            Workload::SessionOrder => workloads::session_order::check(events, ctx),
            Workload::ZkPipeline => workloads::zk_pipeline::check(events, ctx),
        }
    }

    pub fn planted_anomalies(self) -> Vec<(&'static str, Vec<Event>)> {
        match self {
            Workload::Lock => workloads::lock::planted_anomalies(),
            Workload::Lease => workloads::lease::planted_anomalies(),
            Workload::Register => workloads::register::planted_anomalies(),
            Workload::Sequential => workloads::sequential::planted_anomalies(),
            Workload::Ephemeral => workloads::ephemeral::planted_anomalies(),
            Workload::Watch => workloads::watch::planted_anomalies(),
            Workload::Election => workloads::election::planted_anomalies(),
            Workload::LockSet => workloads::lock_set::planted_anomalies(),
            Workload::SessionOrder => workloads::session_order::planted_anomalies(),
            Workload::ZkPipeline => workloads::zk_pipeline::planted_anomalies(),
        }
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown workload {s:?}: expected one of {}",
                    Workload::ALL.map(Workload::name).join(", ")
                )
            })
    }
}

/// Everything a run is made of; with the seed, enough to reproduce it.
#[derive(Debug, Clone)]
pub struct TestOpts {
    pub workload: Workload,
    pub faults: Vec<Fault>,
    /// Faults of client processes (`kill-client`, `pause-client`), dealt
    /// by the workload.
    pub client_faults: Vec<ClientFault>,
    pub nodes: usize,
    pub time_limit: Duration,
    pub concurrency: usize,
    pub rate: f64,
    pub seed: u64,
    pub store: PathBuf,
    pub interval: Duration,
    pub fault_duration: Duration,
    /// Process and network faults at once (`--overlap`).
    pub overlap: bool,
    pub session_timeout: Duration,
    pub request_timeout: Duration,
    pub tick_ms: u64,
    pub snapshot_entries: u64,
    pub bin: PathBuf,
    /// The lock workload's deliberately unsafe client (selftest), or the
    /// lock-set workload's unfenced resource (`--unsafe-resource`).
    pub unsafe_client: bool,
    /// Servers in a known-bad mode (`--unsafe-server`: linearizable reads
    /// without ReadIndex), for the selftest.
    pub unsafe_server: bool,
    /// Servers that never fsync their Raft log (`--unsafe-skip-fsync`), for
    /// the selftest.
    pub unsafe_skip_fsync: bool,
    /// Servers that keep TTL and container removals in flight across role
    /// changes (`--unsafe-keep-removals-across-roles`), for the selftest.
    pub unsafe_keep_removals: bool,
}

impl TestOpts {
    /// The command line that reproduces this run.
    pub fn command_line(&self) -> String {
        let faults: Vec<&str> = self
            .faults
            .iter()
            .map(|f| f.name())
            .chain(self.client_faults.iter().map(|f| f.name()))
            .collect();
        format!(
            "warden-jepsen test --workload {} --nemesis {} --nodes {} --time-limit {} \
             --concurrency {} --rate {} --seed {} --nemesis-interval {} --fault-duration {} \
             --session-timeout-ms {} --request-timeout-ms {} --tick-ms {} --snapshot-entries {}{}{}{}{}{}",
            self.workload.name(),
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(",")
            },
            self.nodes,
            self.time_limit.as_secs_f64(),
            self.concurrency,
            self.rate,
            self.seed,
            self.interval.as_secs_f64(),
            self.fault_duration.as_secs_f64(),
            self.session_timeout.as_millis(),
            self.request_timeout.as_millis(),
            self.tick_ms,
            self.snapshot_entries,
            if self.overlap { " --overlap" } else { "" },
            if self.unsafe_server {
                " --unsafe-server"
            } else {
                ""
            },
            if self.unsafe_skip_fsync {
                " --unsafe-skip-fsync"
            } else {
                ""
            },
            if self.unsafe_keep_removals {
                " --unsafe-keep-removals-across-roles"
            } else {
                ""
            },
            match (self.unsafe_client, self.workload) {
                (false, _) => "",
                (true, Workload::LockSet | Workload::Lease) => " --unsafe-resource",
                (true, _) => " --unsafe-client",
            },
        )
    }
}

/// What a run concluded.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub valid: Validity,
    pub dir: PathBuf,
    pub results: Value,
}

/// `store/<workload>/<timestamp>/`, made unique.
fn run_dir(store: &Path, workload: &str) -> std::io::Result<PathBuf> {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "");
    let base = store.join(workload);
    std::fs::create_dir_all(&base)?;
    let mut dir = base.join(&stamp);
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = base.join(format!("{stamp}-{n}"));
    }
    std::fs::create_dir_all(&dir)?;
    let latest = base.join("latest");
    let _ = std::fs::remove_file(&latest);
    #[cfg(unix)]
    let _ = std::os::unix::fs::symlink(dir.file_name().expect("dir name"), &latest);
    Ok(dir)
}

/// Runs one test; `Err` when it could not run at all (exit code 2).
pub async fn test(opts: &TestOpts) -> Result<Outcome, String> {
    // A run killed with SIGKILL left its faultfs mounts behind, unserved.
    let (detached, stuck) = crate::faultfs::stale::detach_stale_under(&opts.store);
    for m in &detached {
        println!(
            "warden-jepsen: detached a stale faultfs mount {}",
            m.display()
        );
    }
    for (m, e) in &stuck {
        eprintln!(
            "warden-jepsen: cannot detach the stale faultfs mount {}: {e}",
            m.display()
        );
    }
    let dir = run_dir(&opts.store, opts.workload.name()).map_err(|e| {
        format!(
            "cannot create the run directory under {}: {e}",
            opts.store.display()
        )
    })?;
    let command = opts.command_line();
    std::fs::write(dir.join("command.txt"), format!("{command}\n"))
        .map_err(|e| format!("cannot write into {}: {e}", dir.display()))?;
    println!("warden-jepsen: {command}");
    println!("warden-jepsen: run directory {}", dir.display());

    let cluster = Cluster::start(ClusterOpts {
        nodes: opts.nodes,
        bin: opts.bin.clone(),
        dir: dir.join("nodes"),
        tick_ms: opts.tick_ms,
        snapshot_entries: opts.snapshot_entries,
        unsafe_server: opts.unsafe_server,
        unsafe_skip_fsync: opts.unsafe_skip_fsync,
        unsafe_keep_removals: opts.unsafe_keep_removals,
        faultfs: opts.faults.contains(&Fault::LoseUnsynced),
    })
    .await
    .map_err(|e| format!("cannot start the cluster: {e}"))?;
    let servers = cluster.client_addrs();
    let http_servers = cluster.http_addrs();
    let zk_servers = cluster.zk_addrs();
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));

    let history = History::new();
    let deadline = Instant::now() + opts.time_limit;
    let ctx = RunCtx {
        servers,
        http_servers,
        zk_servers,
        history: history.clone(),
        seed: opts.seed,
        concurrency: opts.concurrency,
        rate: opts.rate,
        deadline,
        session_timeout: opts.session_timeout,
        request_timeout: opts.request_timeout,
        self_exe: std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?,
        dir: dir.clone(),
        client_faults: opts.client_faults.clone(),
    };
    let nemesis = tokio::spawn(nemesis::run(
        cluster.clone(),
        history.clone(),
        Schedule {
            faults: opts.faults.clone(),
            interval: opts.interval,
            duration: opts.fault_duration,
            overlap: opts.overlap,
        },
        opts.seed,
        deadline,
    ));
    let ran = opts.workload.run(&ctx, opts.unsafe_client).await;
    let tally = nemesis.await.unwrap_or_default();
    // The nemesis healed everything: the replicas must hold one tree.
    let (converged, convergence_seen) = {
        let c = cluster.lock().await;
        let members = c.member_http_addrs().await;
        crate::convergence::check(&members, CONVERGENCE_TIMEOUT).await
    };
    let counters = {
        let c = cluster.lock().await;
        server_counters(&c.member_http_addrs().await).await
    };
    let crashed = {
        let mut c = cluster.lock().await;
        let crashed = c.crashed();
        c.shutdown();
        crashed
    };

    let events = history.events();
    history::write_jsonl(&events, &dir.join("history.jsonl"))
        .map_err(|e| format!("cannot write history.jsonl: {e}"))?;
    let check_ctx = CheckCtx {
        faults: history::fault_periods(&events),
        session_timeout: opts.session_timeout,
        end: events.last().map(|e| e.time).unwrap_or(0),
    };
    let mut result = opts.workload.check(&events, &check_ctx);
    if let Err(e) = &ran {
        result.valid = result.valid.and(Validity::Unknown);
        result.notes.push(Anomaly {
            kind: "workload-error".into(),
            message: format!("the workload stopped early: {e}"),
            ops: Vec::new(),
            detail: Value::Null,
        });
    }
    if let Some((invalid, anomaly)) = crate::convergence::anomaly(&converged, &convergence_seen) {
        if invalid {
            result.valid = Validity::Invalid;
            result.anomalies.push(anomaly);
        } else {
            result.valid = result.valid.and(Validity::Unknown);
            result.notes.push(anomaly);
        }
    }
    // The corrupt nemesis: a node must not serve from a snapshot file whose
    // checksum no longer matches.
    for e in &events {
        if e.f == "corrupt" && e.kind == Kind::Ok && e.value["accepted_damaged_snapshot"] == true {
            result.valid = Validity::Invalid;
            result.anomalies.push(Anomaly {
                kind: "damaged-snapshot-accepted".into(),
                message: format!(
                    "node {} started on a snapshot file with a flipped byte ({})",
                    e.value["node"], e.value["damage"]["file"]
                ),
                ops: vec![e.index],
                detail: e.value.clone(),
            });
        }
    }
    // The lose-unsynced nemesis: a node may refuse to start on what a power
    // failure left it (it is then wiped and added back). Noted, and counted
    // in results.json's `faults.refused_restarts`: a server that fsyncs
    // what it acknowledges never needs to.
    let mut refused_restarts = 0u64;
    for e in &events {
        if e.f != "lose-unsynced" || e.kind != Kind::Ok {
            continue;
        }
        for o in e.value["outcomes"].as_array().into_iter().flatten() {
            if o["outcome"]
                .as_str()
                .is_some_and(|s| s.starts_with("refused"))
            {
                refused_restarts += 1;
                result.notes.push(Anomaly {
                    kind: "refused-after-power-loss".into(),
                    message: format!(
                        "node {} refused to start after losing its unsynced writes: {}",
                        o["node"], o["outcome"]
                    ),
                    ops: vec![e.index],
                    detail: o.clone(),
                });
            }
        }
    }
    // ... and the write acknowledged just before the power failure must
    // still be there after it.
    for e in &events {
        if e.f == "rejoin" && e.kind == Kind::Ok && e.value["marker_found"] == false {
            result.valid = Validity::Invalid;
            result.anomalies.push(Anomaly {
                kind: "acknowledged-write-lost".into(),
                message: format!(
                    "{} was created and acknowledged just before a power failure, \
                     and is gone after it",
                    e.value["marker"]
                ),
                ops: vec![e.index],
                detail: e.value.clone(),
            });
        }
    }
    for (id, status) in &crashed {
        result.valid = Validity::Invalid;
        result.anomalies.push(Anomaly {
            kind: "node-crashed".into(),
            message: format!("node {id} exited on its own ({status}); see nodes/node-{id}.log"),
            ops: Vec::new(),
            detail: json!({"node": id}),
        });
    }

    let count = |k: Kind| {
        events
            .iter()
            .filter(|e| e.process.client().is_some() && e.kind == k)
            .count()
    };
    let results = json!({
        "valid": result.valid.to_json(),
        "workload": opts.workload.name(),
        "nemesis": opts.faults.iter().map(|f| f.name()).chain(opts.client_faults.iter().map(|f| f.name())).collect::<Vec<_>>(),
        "seed": opts.seed,
        "command": command,
        "nodes": opts.nodes,
        "time_limit_s": opts.time_limit.as_secs_f64(),
        "ops": {
            "invoked": count(Kind::Invoke),
            "ok": count(Kind::Ok),
            "fail": count(Kind::Fail),
            "info": count(Kind::Info),
        },
        "faults": {
            "injected": tally.started,
            "by_kind": tally.by_kind,
            "errors": tally.errors,
            "refused_restarts": refused_restarts,
        },
        "convergence": match &converged {
            crate::convergence::Verdict::Converged { zxid, digest } => json!({"converged": true, "zxid": zxid, "digest": digest}),
            _ => json!({"converged": false, "seen": convergence_seen}),
        },
        "server_counters": counters,
        "anomalies": result.anomalies,
        "notes": result.notes,
        "stats": result.stats,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&results).expect("json") + "\n",
    )
    .map_err(|e| format!("cannot write results.json: {e}"))?;
    crate::report::write_report(
        &dir,
        &format!(
            "{} · {} · {} nodes · seed {}",
            opts.workload.name(),
            results["nemesis"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "no faults".into()),
            opts.nodes,
            opts.seed
        ),
        &events,
        &results,
    )
    .map_err(|e| format!("cannot write the report: {e}"))?;
    Ok(Outcome {
        valid: result.valid,
        dir,
        results,
    })
}

/// Re-checks a stored history (`warden-jepsen check`).
pub fn recheck(
    workload: Workload,
    history_path: &Path,
    session_timeout: Duration,
) -> Result<CheckResult, String> {
    let events = history::read_jsonl(history_path).map_err(|e| e.to_string())?;
    let ctx = CheckCtx {
        faults: history::fault_periods(&events),
        session_timeout,
        end: events.last().map(|e| e.time).unwrap_or(0),
    };
    Ok(workload.check(&events, &ctx))
}

/// Prints a short summary of a run.
pub fn summarize(o: &Outcome) {
    let r = &o.results;
    println!(
        "warden-jepsen: {} ops ({} ok, {} fail, {} info), {} faults injected",
        r["ops"]["invoked"],
        r["ops"]["ok"],
        r["ops"]["fail"],
        r["ops"]["info"],
        r["faults"]["injected"]
    );
    if let Some(a) = r["anomalies"].as_array() {
        for x in a.iter().take(20) {
            println!(
                "  anomaly {}: {}",
                x["kind"].as_str().unwrap_or("?"),
                x["message"].as_str().unwrap_or("")
            );
        }
        if a.len() > 20 {
            println!("  ... and {} more (results.json)", a.len() - 20);
        }
    }
    println!(
        "warden-jepsen: valid: {} ({})",
        r["valid"],
        o.dir.join("results.json").display()
    );
}

/// Server counters a run's report shows, per node (`GET /metrics` at the
/// end of the run; a node restarted during the run counts from its
/// restart): client writes recognised as copies of applied ones and
/// answered from the first (`warden_duplicate_writes_total`), and writes
/// refused as out of their session's order or from a connection it left
/// (`warden_refused_writes_total`).
pub const SERVER_COUNTERS: [&str; 2] = [
    "warden_duplicate_writes_total",
    "warden_refused_writes_total",
];

async fn server_counters(members: &[(u64, String)]) -> Value {
    let mut out = serde_json::Map::new();
    for (id, addr) in members {
        let Some(text) =
            crate::http::get_text(addr, "/metrics", std::time::Duration::from_secs(5)).await
        else {
            continue;
        };
        out.insert(id.to_string(), counters_in(&text));
    }
    Value::Object(out)
}

/// The [`SERVER_COUNTERS`] in a Prometheus text page (summed over labels).
fn counters_in(text: &str) -> Value {
    let mut node = serde_json::Map::new();
    for name in SERVER_COUNTERS {
        let sum: f64 = text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        node.insert(name.to_string(), json!(sum as u64));
    }
    Value::Object(node)
}

#[cfg(test)]
mod counter_tests {
    use super::*;

    #[test]
    fn counters_are_read_from_a_metrics_page() {
        let page = "# HELP warden_duplicate_writes_total x\n\
                    warden_duplicate_writes_total 12\n\
                    warden_duplicate_writes_total_other 5\n\
                    warden_refused_writes_total{door=\"zk\"} 2\n\
                    warden_refused_writes_total{door=\"native\"} 1\n";
        assert_eq!(
            counters_in(page),
            json!({"warden_duplicate_writes_total": 12, "warden_refused_writes_total": 3})
        );
    }
}
