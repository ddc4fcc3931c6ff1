//! `warden-zkbench`: one ZooKeeper-protocol load generator for any
//! ZooKeeper ensemble: Apache ZooKeeper, or Warden through its ZooKeeper
//! ports. `bench/compare.sh` runs it against both, side by side.
//!
//! Clients are spread over the servers round-robin, each a session of its
//! own connected to one server only, and run a closed loop (each sends its
//! next operation once the previous one is answered): a warm-up that is not
//! counted, then the measured window. Latencies of successful operations go
//! to one HDR histogram per client (microseconds), merged at the end.
//! Every operation is bounded by `--op-timeout-ms`; a failed one is counted
//! by kind and followed by a short pause.
//!
//! The nodes of a run live under `/zkbench-<random>`, deleted at the end;
//! `populate` keeps its nodes (under `/zkbench-populate`) on purpose.

mod lock;
mod report;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use zookeeper_client as zk;

use report::{FailoverReport, PopulateReport, Report};

/// Largest latency the histograms hold (any op times out well before).
const LATENCY_US_MAX: u64 = 600 * 1_000_000;
/// Pause after a failed operation, so a disconnected client does not spin.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// Root of `populate`'s nodes (kept after the run).
const POPULATE_ROOT: &str = "/zkbench-populate";
/// Children per parent in `populate`.
const POPULATE_FANOUT: u64 = 1000;

#[derive(Debug, Parser)]
#[command(name = "warden-zkbench", version, about)]
struct Args {
    /// The ensemble: host:port,host:port,... (clients are spread over all).
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    servers: Vec<String>,
    /// What each client does in its loop.
    #[arg(long, value_enum)]
    workload: Workload,
    /// How many clients (sessions); for `failover`, writers.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    clients: u32,
    /// The measured window, in seconds (for `failover`: from the end of
    /// the warm-up to the end of the run, the kill included).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Seconds of load before the measured window, not counted.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=600))]
    warmup_seconds: u64,
    /// Bytes of data per write (and per znode in `populate`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    value_size: u64,
    /// Name of the system in the output (e.g. `zookeeper`, `warden`).
    #[arg(long, default_value = "zookeeper-protocol")]
    label: String,
    /// Print one JSON object per run instead of a table row.
    #[arg(long)]
    json: bool,
    /// Print the table header before the row.
    #[arg(long)]
    header: bool,
    /// Session timeout asked for, in ms.
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// Longest one operation may take before it counts as an error.
    #[arg(long, default_value_t = 10_000)]
    op_timeout_ms: u64,
    /// `failover`: the process to kill with SIGKILL (the leader).
    #[arg(long, value_name = "PID")]
    kill_pid: Option<i32>,
    /// `failover`: seconds after the warm-up at which it is killed.
    #[arg(long, default_value_t = 3)]
    kill_after_seconds: u64,
    /// `populate`: how many znodes to create (in parents of 1000).
    #[arg(long, default_value_t = 1_000_000)]
    znodes: u64,
    /// `populate`: requests in flight per client.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pipeline: u64,
}

/// One kind of load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// set_data of the client's own node.
    Set,
    /// get_data of the client's own node.
    Get,
    /// Create an ephemeral node, then delete it (the pair is one op).
    CreateDelete,
    /// Acquire and release the client's own lock (one cycle is one op).
    Lock,
    /// All clients acquire and release one shared lock (one hand-off is one op).
    Handoff,
    /// Writers set_data in a loop while `--kill-pid` is killed.
    Failover,
    /// Create `--znodes` znodes, pipelined, and keep them.
    Populate,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Set => "set",
            Workload::Get => "get",
            Workload::CreateDelete => "create-delete",
            Workload::Lock => "lock",
            Workload::Handoff => "handoff",
            Workload::Failover => "failover",
            Workload::Populate => "populate",
        }
    }
}

type Fail = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args = Args::parse();
    if args.workload == Workload::Failover && args.kill_pid.is_none() {
        eprintln!("warden-zkbench: --workload failover needs --kill-pid");
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("warden-zkbench: {e}");
            std::process::exit(1);
        }
    }
    // Sessions still closing in the background are not waited for.
    runtime.shutdown_timeout(Duration::from_secs(2));
}

async fn run(args: Args) -> Result<(), Fail> {
    match args.workload {
        Workload::Failover => {
            let r = failover(&args).await?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", report::failover_row(&r));
            }
        }
        Workload::Populate => {
            let r = populate(&args).await?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{}: {} znodes of {} B: {} created, {} there already, {} errors in {:.1} s ({:.0}/s)",
                    r.system,
                    r.znodes,
                    args.value_size,
                    r.created,
                    r.existed,
                    r.errors,
                    r.seconds,
                    r.creates_per_sec
                );
            }
        }
        _ => {
            let r = closed_loop(&args).await?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                if args.header {
                    println!("{}", report::TABLE_HEADER);
                }
                println!("{}", report::table_row(&r));
            }
        }
    }
    Ok(())
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

/// The name of an error in the counts: the client's error, or `timeout`.
fn kind(e: &zk::Error) -> String {
    if let zk::Error::Custom(_) = e {
        // The client's own errors: their message says what happened.
        return format!("Custom: {e}");
    }
    let s = format!("{e:?}");
    // `UnexpectedErrorCode(-7)` stays whole; others keep only the variant.
    match s.find(['(', ' ', '{']) {
        Some(i) if !s.starts_with("UnexpectedErrorCode") => s[..i].to_string(),
        _ => s,
    }
}

/// Server `i`'s address, round-robin.
fn server_of(args: &Args, i: u32) -> &str {
    &args.servers[i as usize % args.servers.len()]
}

async fn connect(hosts: &str, args: &Args) -> Result<zk::Client, Fail> {
    let connecting = zk::Client::connector()
        .with_session_timeout(Duration::from_millis(args.session_timeout_ms))
        .with_connection_timeout(Duration::from_secs(5))
        .connect(hosts);
    match tokio::time::timeout(Duration::from_secs(20), connecting).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connect to {hosts}: {e}").into()),
        Err(_) => Err(format!("connect to {hosts}: no session within 20 s").into()),
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

fn ephemeral_sequential() -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all())
}

/// Creates `path` (persistent); one already there is fine.
async fn ensure(client: &zk::Client, path: &str, data: &[u8]) -> Result<(), Fail> {
    match client.create(path, data, &persistent()).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(format!("create {path}: {e}").into()),
    }
}

/// Deletes `root` and everything under it (two levels deep, all the runs
/// make), retrying while ephemerals of closing sessions linger; bounded.
async fn delete_tree(client: &zk::Client, root: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let children = match client.list_children(root).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for child in children {
            let path = format!("{root}/{child}");
            if let Ok(grandchildren) = client.list_children(&path).await {
                for g in grandchildren {
                    let _ = client.delete(&format!("{path}/{g}"), None).await;
                }
            }
            let _ = client.delete(&path, None).await;
        }
        match client.delete(root, None).await {
            Ok(()) | Err(zk::Error::NoNode) => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    eprintln!("warden-zkbench: warning: could not delete {root} within 30 s");
}

/// One closed-loop client.
struct Worker {
    client: zk::Client,
    workload: Workload,
    /// The client's own node (set, get, create-delete).
    path: String,
    /// The lock node (lock: the client's own; handoff: the shared one).
    lock_dir: String,
    /// Prefix of this client's lock nodes.
    tag: String,
    data: Vec<u8>,
}

impl Worker {
    async fn op(&self) -> Result<(), zk::Error> {
        match self.workload {
            Workload::Set => self
                .client
                .set_data(&self.path, &self.data, None)
                .await
                .map(drop),
            Workload::Get => self.client.get_data(&self.path).await.map(drop),
            Workload::CreateDelete => {
                let created = self
                    .client
                    .create(&self.path, &self.data, &ephemeral())
                    .await;
                // Delete even after a failed create (it may have been made).
                let deleted = self.client.delete(&self.path, None).await;
                created.map(drop).and(deleted)
            }
            Workload::Lock | Workload::Handoff => {
                let mine = self.acquire().await?;
                self.client.delete(&mine, None).await
            }
            Workload::Failover | Workload::Populate => unreachable!("not a closed-loop workload"),
        }
    }

    /// The lock recipe: create an ephemeral-sequential node, then until it
    /// is the lowest, wait for its predecessor to go. Returns its path.
    async fn acquire(&self) -> Result<String, zk::Error> {
        let prefix = format!("{}/{}", self.lock_dir, lock::node_prefix(&self.tag));
        let (_, seq) = self
            .client
            .create(&prefix, b"", &ephemeral_sequential())
            .await?;
        let mine_path = format!("{prefix}{seq}");
        let mine = mine_path.rsplit('/').next().unwrap_or_default().to_string();
        loop {
            let children = self.client.list_children(&self.lock_dir).await?;
            match lock::turn(&children, &mine) {
                lock::Turn::Holds => return Ok(mine_path),
                lock::Turn::Gone => return Err(zk::Error::NoNode),
                lock::Turn::WaitOn(pred) => {
                    let pred = format!("{}/{pred}", self.lock_dir);
                    let (stat, watcher) = self.client.check_and_watch_stat(&pred).await?;
                    if stat.is_some() {
                        watcher.changed().await;
                    }
                }
            }
        }
    }

    /// After a failed lock op: remove any lock node of ours left behind
    /// (a reply lost to a timeout leaves one we cannot name otherwise).
    async fn clean_up_lock(&self) {
        let prefix = lock::node_prefix(&self.tag);
        let work = async {
            if let Ok(children) = self.client.list_children(&self.lock_dir).await {
                for c in children.iter().filter(|c| c.starts_with(&prefix)) {
                    let _ = self
                        .client
                        .delete(&format!("{}/{c}", self.lock_dir), None)
                        .await;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), work).await;
    }
}

struct WorkerResult {
    latencies: Histogram<u64>,
    error_kinds: BTreeMap<String, u64>,
}

async fn run_worker(
    w: Worker,
    measure_from: Instant,
    end: Instant,
    op_timeout: Duration,
) -> WorkerResult {
    let mut latencies = new_histogram();
    let mut error_kinds = BTreeMap::new();
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let result = tokio::time::timeout(op_timeout, w.op()).await;
        let us = start.elapsed().as_micros().clamp(1, LATENCY_US_MAX as u128) as u64;
        let failed = match result {
            Ok(Ok(())) => {
                if start >= measure_from {
                    latencies.saturating_record(us);
                }
                None
            }
            Ok(Err(e)) => Some(kind(&e)),
            Err(_) => Some("timeout".to_string()),
        };
        if let Some(k) = failed {
            if start >= measure_from {
                *error_kinds.entry(k).or_insert(0) += 1;
            }
            if matches!(w.workload, Workload::Lock | Workload::Handoff) {
                w.clean_up_lock().await;
            }
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
    }
    WorkerResult {
        latencies,
        error_kinds,
    }
}

/// set, get, create-delete, lock, handoff.
async fn closed_loop(args: &Args) -> Result<Report, Fail> {
    let root = format!("/zkbench-{:08x}", rand::random::<u32>());
    let data = vec![b'x'; args.value_size as usize];
    let admin = connect(&args.servers[0], args).await?;
    ensure(&admin, &root, b"").await?;
    let shared_lock = format!("{root}/lock");
    let setup = async {
        if args.workload == Workload::Handoff {
            ensure(&admin, &shared_lock, b"").await?;
        }
        for i in 0..args.clients {
            match args.workload {
                Workload::Set | Workload::Get => {
                    ensure(&admin, &format!("{root}/c{i}"), &data).await?
                }
                Workload::Lock => ensure(&admin, &format!("{root}/lock-{i}"), b"").await?,
                _ => {}
            }
        }
        let connecting = (0..args.clients).map(|i| connect(server_of(args, i), args));
        futures::future::try_join_all(connecting).await
    };
    let clients = match setup.await {
        Ok(c) => c,
        Err(e) => {
            delete_tree(&admin, &root).await;
            return Err(e);
        }
    };
    let op_timeout = Duration::from_millis(args.op_timeout_ms);
    let measure_from = Instant::now() + Duration::from_secs(args.warmup_seconds);
    let end = measure_from + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let lock_dir = match args.workload {
            Workload::Handoff => shared_lock.clone(),
            _ => format!("{root}/lock-{i}"),
        };
        let path = match args.workload {
            Workload::CreateDelete => format!("{root}/e{i}"),
            _ => format!("{root}/c{i}"),
        };
        let w = Worker {
            client,
            workload: args.workload,
            path,
            lock_dir,
            tag: format!("c{i}"),
            data: data.clone(),
        };
        tasks.push(tokio::spawn(run_worker(w, measure_from, end, op_timeout)));
    }
    let mut latencies = new_histogram();
    let mut error_kinds = BTreeMap::new();
    for t in tasks {
        let r = t.await?;
        latencies.add(&r.latencies)?;
        for (k, n) in r.error_kinds {
            *error_kinds.entry(k).or_insert(0) += n;
        }
    }
    // The workers' clients are dropped with their tasks: sessions close.
    delete_tree(&admin, &root).await;
    Ok(Report::new(
        (&args.label, args.workload.name(), args.clients),
        args.seconds as f64,
        args.value_size as usize,
        &latencies,
        error_kinds,
    ))
}

/// One write of a failover writer.
struct Sample {
    start: Instant,
    end: Instant,
    error: Option<String>,
}

/// Writers connected with the whole server list (as real clients are; the
/// client picks a server at random), each set_data of its own node in a
/// loop; `--kill-pid` gets SIGKILL `--kill-after-seconds` after the
/// warm-up. From the writers' own clocks: when each wrote again.
async fn failover(args: &Args) -> Result<FailoverReport, Fail> {
    let pid = args.kill_pid.expect("checked in main");
    let root = format!("/zkbench-{:08x}", rand::random::<u32>());
    let data = vec![b'x'; args.value_size as usize];
    let hosts = args.servers.join(",");
    let admin = connect(&hosts, args).await?;
    ensure(&admin, &root, b"").await?;
    for i in 0..args.clients {
        ensure(&admin, &format!("{root}/w{i}"), &data).await?;
    }
    let connecting = (0..args.clients).map(|_| connect(&hosts, args));
    let writers = futures::future::try_join_all(connecting).await?;
    let op_timeout = Duration::from_millis(args.op_timeout_ms);
    let measure_from = Instant::now() + Duration::from_secs(args.warmup_seconds);
    let kill_at = measure_from + Duration::from_secs(args.kill_after_seconds);
    let end = measure_from + Duration::from_secs(args.seconds);
    if kill_at >= end {
        return Err("--kill-after-seconds must be less than --seconds".into());
    }
    let mut tasks = Vec::new();
    for (i, client) in writers.into_iter().enumerate() {
        let path = format!("{root}/w{i}");
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            // Whether this writer's connection drops (bounded by `end`).
            let mut states = client.state_watcher();
            let lost = tokio::spawn(async move {
                let mut lost = false;
                while let Ok(state) = tokio::time::timeout_at(end.into(), states.changed()).await {
                    lost |= state == zk::SessionState::Disconnected;
                    if state.is_terminated() {
                        break;
                    }
                }
                lost
            });
            let mut samples = Vec::new();
            loop {
                let start = Instant::now();
                if start >= end {
                    break;
                }
                let r = tokio::time::timeout(op_timeout, client.set_data(&path, &data, None)).await;
                let error = match r {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(kind(&e)),
                    Err(_) => Some("timeout".to_string()),
                };
                let failed = error.is_some();
                samples.push(Sample {
                    start,
                    end: Instant::now(),
                    error,
                });
                if failed {
                    tokio::time::sleep(ERROR_BACKOFF).await;
                }
            }
            drop(client);
            (samples, lost.await.unwrap_or(false))
        }));
    }
    tokio::time::sleep_until(kill_at.into()).await;
    let killed = Instant::now();
    // SAFETY: kill(2) with a pid the caller named; no memory is involved.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        eprintln!(
            "warden-zkbench: kill -9 {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut r = FailoverReport {
        system: args.label.clone(),
        workload: "failover".into(),
        writers: args.clients,
        killed_pid: pid,
        resume_ms: Vec::new(),
        disconnected: Vec::new(),
        max_gap_ms: Vec::new(),
        writes_before_kill: 0,
        writes_after_kill: 0,
        errors: 0,
        error_kinds: BTreeMap::new(),
    };
    for t in tasks {
        let (samples, lost) = t.await?;
        let resume = samples
            .iter()
            .find(|s| s.start >= killed && s.error.is_none())
            .map(|s| (s.end - killed).as_secs_f64() * 1000.0);
        // Longest stretch without a successful write, from the last one
        // before the kill on.
        let mut last_ok = samples
            .iter()
            .filter(|s| s.error.is_none() && s.end <= killed)
            .map(|s| s.end)
            .next_back()
            .unwrap_or(killed);
        let mut gap = Duration::ZERO;
        for s in samples.iter().filter(|s| s.end > killed) {
            if s.error.is_none() {
                gap = gap.max(s.end - last_ok);
                last_ok = s.end;
            }
        }
        if resume.is_none() {
            gap = gap.max(end.saturating_duration_since(last_ok));
        }
        for s in &samples {
            match (&s.error, s.start >= measure_from, s.end > killed) {
                (None, true, false) => r.writes_before_kill += 1,
                (None, _, true) => r.writes_after_kill += 1,
                (Some(k), _, true) => {
                    r.errors += 1;
                    *r.error_kinds.entry(k.clone()).or_insert(0) += 1;
                }
                _ => {}
            }
        }
        r.resume_ms.push(resume);
        r.disconnected.push(lost);
        r.max_gap_ms.push(gap.as_secs_f64() * 1000.0);
    }
    delete_tree(&admin, &root).await;
    Ok(r)
}

/// `--znodes` znodes of `--value-size` bytes under `/zkbench-populate`, in
/// parents of 1000; each client works through its share of the parents
/// with up to `--pipeline` creates in flight. Creates already there count
/// as `existed` (a rerun); no create is sent after one hour.
async fn populate(args: &Args) -> Result<PopulateReport, Fail> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3600);
    let data = vec![b'p'; args.value_size as usize];
    let admin = connect(&args.servers[0], args).await?;
    ensure(&admin, POPULATE_ROOT, b"").await?;
    let parents = args.znodes.div_ceil(POPULATE_FANOUT);
    for p in 0..parents {
        ensure(&admin, &format!("{POPULATE_ROOT}/p{p:04}"), b"").await?;
    }
    let connecting = (0..args.clients).map(|i| connect(server_of(args, i), args));
    let clients = futures::future::try_join_all(connecting).await?;
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let (n, clients, znodes, pipeline) =
            (i as u64, args.clients as u64, args.znodes, args.pipeline);
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            let paths = (0..znodes)
                .filter(move |k| (k / POPULATE_FANOUT) % clients == n)
                .map(|k| {
                    format!(
                        "{POPULATE_ROOT}/p{:04}/n{:04}",
                        k / POPULATE_FANOUT,
                        k % POPULATE_FANOUT
                    )
                });
            let results = stream::iter(paths)
                .take_while(|_| futures::future::ready(Instant::now() < deadline))
                .map(|path| {
                    let (client, data) = (&client, &data);
                    async move {
                        let create = client.create(&path, data, &persistent());
                        tokio::time::timeout(Duration::from_secs(60), create).await
                    }
                })
                .buffer_unordered(pipeline as usize)
                .fold(
                    (0u64, 0u64, BTreeMap::<String, u64>::new()),
                    |(mut c, mut x, mut e), r| {
                        match r {
                            Ok(Ok(_)) => c += 1,
                            Ok(Err(zk::Error::NodeExists)) => x += 1,
                            Ok(Err(err)) => *e.entry(kind(&err)).or_insert(0) += 1,
                            Err(_) => *e.entry("timeout".to_string()).or_insert(0) += 1,
                        }
                        futures::future::ready((c, x, e))
                    },
                )
                .await;
            drop(client);
            results
        }));
    }
    let mut r = PopulateReport {
        system: args.label.clone(),
        workload: "populate".into(),
        znodes: args.znodes,
        created: 0,
        existed: 0,
        errors: 0,
        error_kinds: BTreeMap::new(),
        seconds: 0.0,
        creates_per_sec: 0.0,
    };
    for t in tasks {
        let (c, x, e) = t.await?;
        r.created += c;
        r.existed += x;
        for (k, n) in e {
            r.errors += n;
            *r.error_kinds.entry(k).or_insert(0) += n;
        }
    }
    r.seconds = started.elapsed().as_secs_f64();
    r.creates_per_sec = r.created as f64 / r.seconds;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        let a = Args::try_parse_from([
            "warden-zkbench",
            "--servers",
            "127.0.0.1:2181,127.0.0.1:2182",
            "--workload",
            "create-delete",
            "--clients",
            "64",
        ])
        .unwrap();
        assert_eq!(a.servers, ["127.0.0.1:2181", "127.0.0.1:2182"]);
        assert_eq!(a.workload, Workload::CreateDelete);
        assert_eq!((a.clients, a.seconds, a.value_size), (64, 10, 64));
        assert_eq!(server_of(&a, 0), "127.0.0.1:2181");
        assert_eq!(server_of(&a, 3), "127.0.0.1:2182");
        assert!(Args::try_parse_from(["warden-zkbench", "--workload", "set"]).is_err());
        assert!(Args::try_parse_from([
            "warden-zkbench",
            "--servers",
            "h:1",
            "--workload",
            "set",
            "--clients",
            "0"
        ])
        .is_err());
    }

    #[test]
    fn error_kinds_are_short() {
        assert_eq!(kind(&zk::Error::ConnectionLoss), "ConnectionLoss");
        assert_eq!(
            kind(&zk::Error::UnexpectedErrorCode(-7)),
            "UnexpectedErrorCode(-7)"
        );
        assert_eq!(
            kind(&zk::Error::UnexpectedError("x y".into())),
            "UnexpectedError"
        );
    }
}
