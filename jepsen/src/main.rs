//! `warden-jepsen`: Warden's Jepsen-style test suite (see the crate docs and
//! docs/jepsen.md).
//!
//! Exit codes of `test` and `check`: 0 valid, 1 invalid, 2 unknown or could
//! not run. `selftest`: 0 when every planted anomaly was caught, 1 if not.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use warden_jepsen::nemesis;
use warden_jepsen::run::{self, TestOpts, Workload};
use warden_jepsen::selftest;

#[derive(Parser)]
#[command(
    name = "warden-jepsen",
    version = warden_log::VERSION,
    about = "Fault-injection tests of a real Warden cluster"
)]
struct Cli {
    #[command(flatten)]
    log: warden_log::LogArgs,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a workload against a fresh cluster under a nemesis, check the
    /// history and write the report to store/<workload>/<timestamp>/.
    Test(TestArgs),
    /// Show that the suite catches anomalies: planted histories for every
    /// checker, and the lock workload with a deliberately unsafe client.
    Selftest(SelftestArgs),
    /// Check a stored history again.
    Check {
        #[arg(long, value_parser = parse_workload)]
        workload: Workload,
        /// history.jsonl of a run.
        history: PathBuf,
        #[arg(long, default_value_t = 3000)]
        session_timeout_ms: u64,
    },
    /// (internal) A process holding an ephemeral node, for the ephemeral
    /// workload.
    #[command(hide = true)]
    EphemeralHolder {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// (internal) A lock-set client process.
    #[command(hide = true)]
    LockSetClient {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// (internal) An election candidate process.
    #[command(hide = true)]
    ElectionCandidate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args, Clone)]
struct ClusterArgs {
    /// Nodes in the cluster (3 or 5).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Where runs are stored.
    #[arg(long, default_value = "store")]
    store: PathBuf,
    /// The `warden` binary (default: next to this one, or $WARDEN_BIN).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Raft tick of the nodes.
    #[arg(long, default_value_t = 100)]
    tick_ms: u64,
    /// Nodes snapshot and compact every this many entries (small values
    /// exercise snapshot transfer to restarted nodes).
    #[arg(long, default_value_t = 2000)]
    snapshot_entries: u64,
    /// Session timeout clients ask for.
    #[arg(long, default_value_t = 3000)]
    session_timeout_ms: u64,
    /// How long a client waits for one answer (then the op is `info`).
    #[arg(long, default_value_t = 6000)]
    request_timeout_ms: u64,
}

#[derive(Args)]
struct TestArgs {
    #[arg(long, value_parser = parse_workload)]
    workload: Workload,
    /// Faults, comma-separated: kill, pause, partition, client-partition,
    /// membership, restart-all, corrupt, clock, lose-unsynced, one-way-cut
    /// (the clients' server hears no member), one-way-kill (that cut, then
    /// the leader killed), isolate-after-expiry (the leader cut off just
    /// after it proposed a TTL removal, then leadership moved until it
    /// leads again) (or none);
    /// with --workload election also kill-client and pause-client (the
    /// leading candidate's process killed, or stopped past its session).
    #[arg(long, default_value = "kill,partition")]
    nemesis: String,
    /// Seconds of load.
    #[arg(long, default_value_t = 60.0)]
    time_limit: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Target operations per second over all clients (0: no limit).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seed of every random choice (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Quiet seconds before each fault.
    #[arg(long, default_value_t = 5.0)]
    nemesis_interval: f64,
    /// Seconds each fault stays in force.
    #[arg(long, default_value_t = 5.0)]
    fault_duration: f64,
    /// Run process faults (kill, pause, membership, restart-all) and
    /// network faults (partition, client-partition) at the same time, in
    /// two lanes, instead of one fault at a time.
    #[arg(long)]
    overlap: bool,
    /// Start the servers in a known-bad mode: linearizable reads served
    /// without ReadIndex (stale on a partitioned or lagging server; must
    /// be caught).
    #[arg(long)]
    unsafe_server: bool,
    /// Start the servers in a known-bad mode: the Raft log acknowledged
    /// without fsync (writes are lost under --nemesis lose-unsynced; must
    /// be caught).
    #[arg(long)]
    unsafe_skip_fsync: bool,
    /// Start the servers in a known-bad mode: a TTL or container removal
    /// in flight is kept across role changes, so one lost with a
    /// leadership is never proposed again when that server leads once
    /// more (a lease outlives its TTL under --nemesis isolate-after-expiry;
    /// must be caught).
    #[arg(long)]
    unsafe_keep_removals_across_roles: bool,
    /// Use the lock workload's deliberately unsafe client (must be caught).
    #[arg(long)]
    unsafe_client: bool,
    /// Give the lock-set or lease workload a resource that does not fence:
    /// lock-set must then be judged invalid (a zombie's write loses an
    /// update); lease judges the order of the tokens it accepted (writes
    /// made past the writer's lease are notes).
    #[arg(long)]
    unsafe_resource: bool,
    #[command(flatten)]
    cluster: ClusterArgs,
}

#[derive(Args)]
struct SelftestArgs {
    /// Seconds the unsafe lock client runs.
    #[arg(long, default_value_t = 10.0)]
    time_limit: f64,
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse()
}

fn secs(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("{what} must be a non-negative number of seconds, not {s}"))
}

fn warden_bin(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given.or_else(|| std::env::var_os("WARDEN_BIN").map(PathBuf::from)) {
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let p = exe.with_file_name("warden");
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "no warden binary at {}: build it (cargo build -p warden-server) or pass --bin",
            p.display()
        ))
    }
}

fn seed_or_clock(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| warden_jepsen::clock::wall_ns() % 1_000_000_000)
}

fn test_opts(args: TestArgs) -> Result<TestOpts, String> {
    let c = args.cluster;
    if !(1..=9).contains(&c.nodes) {
        return Err(format!("--nodes must be between 1 and 9, not {}", c.nodes));
    }
    if args.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    if args.unsafe_resource && !matches!(args.workload, Workload::LockSet | Workload::Lease) {
        return Err("--unsafe-resource is for --workload lock-set or lease only".into());
    }
    let (faults, client_faults) = nemesis::parse_nemesis(&args.nemesis)?;
    if let Some(f) = client_faults.first() {
        if args.workload != Workload::Election {
            return Err(format!(
                "--nemesis {} is for --workload election only (lock-set pauses its \
                 clients by itself)",
                f.name()
            ));
        }
    }
    if args.overlap
        && !(faults.iter().any(|f| f.is_network()) && faults.iter().any(|f| !f.is_network()))
    {
        return Err(
            "--overlap needs a process fault (kill, pause, membership, restart-all) \
                    and a network fault (partition, client-partition) in --nemesis"
                .into(),
        );
    }
    Ok(TestOpts {
        workload: args.workload,
        faults,
        client_faults,
        nodes: c.nodes,
        time_limit: secs(args.time_limit, "--time-limit")?,
        concurrency: args.concurrency,
        rate: args.rate.max(0.0),
        seed: seed_or_clock(args.seed),
        store: c.store,
        interval: secs(args.nemesis_interval, "--nemesis-interval")?,
        fault_duration: secs(args.fault_duration, "--fault-duration")?,
        overlap: args.overlap,
        session_timeout: Duration::from_millis(c.session_timeout_ms),
        request_timeout: Duration::from_millis(c.request_timeout_ms),
        tick_ms: c.tick_ms,
        snapshot_entries: c.snapshot_entries,
        bin: warden_bin(c.bin)?,
        unsafe_client: args.unsafe_client || args.unsafe_resource,
        unsafe_server: args.unsafe_server,
        unsafe_skip_fsync: args.unsafe_skip_fsync,
        unsafe_keep_removals: args.unsafe_keep_removals_across_roles,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if warden_log::parse_only() {
        return ExitCode::SUCCESS;
    }
    if let Cmd::EphemeralHolder { args } = cli.command {
        let code = warden_jepsen::workloads::ephemeral::holder_main(args);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if let Cmd::LockSetClient { args } = cli.command {
        let code = warden_jepsen::workloads::lock_set::client::client_main(args);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if let Cmd::ElectionCandidate { args } = cli.command {
        let code = warden_jepsen::workloads::election::candidate::candidate_main(args);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if let Err(e) = warden_log::init(&cli.log, warden_log::Level::Warn) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let code = runtime.block_on(async {
        match cli.command {
            Cmd::Test(args) => {
                let opts = match test_opts(args) {
                    Ok(o) => o,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return 2;
                    }
                };
                match run::test(&opts).await {
                    Ok(o) => {
                        run::summarize(&o);
                        o.valid.exit_code()
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        2
                    }
                }
            }
            Cmd::Selftest(args) => selftest_main(args).await,
            Cmd::Check {
                workload,
                history,
                session_timeout_ms,
            } => match run::recheck(
                workload,
                &history,
                Duration::from_millis(session_timeout_ms),
            ) {
                Ok(r) => {
                    for a in &r.anomalies {
                        println!("anomaly {}: {}", a.kind, a.message);
                    }
                    println!("valid: {}", r.valid.to_json());
                    r.valid.exit_code()
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            },
            Cmd::EphemeralHolder { .. }
            | Cmd::LockSetClient { .. }
            | Cmd::ElectionCandidate { .. } => {
                unreachable!("handled above")
            }
        }
    });
    // Leave no proxy task or helper process behind.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code as u8)
}

async fn selftest_main(args: SelftestArgs) -> i32 {
    let mut cases = selftest::planted_cases();
    let c = args.cluster;
    let opts = match (|| -> Result<TestOpts, String> {
        Ok(TestOpts {
            workload: Workload::Lock,
            faults: Vec::new(),
            client_faults: Vec::new(),
            nodes: c.nodes,
            time_limit: secs(args.time_limit, "--time-limit")?,
            concurrency: 5,
            rate: 0.0,
            seed: seed_or_clock(args.seed),
            store: c.store.join("selftest"),
            interval: Duration::from_secs(5),
            fault_duration: Duration::from_secs(5),
            overlap: false,
            session_timeout: Duration::from_millis(c.session_timeout_ms),
            request_timeout: Duration::from_millis(c.request_timeout_ms),
            tick_ms: c.tick_ms,
            snapshot_entries: c.snapshot_entries,
            bin: warden_bin(c.bin)?,
            unsafe_client: true,
            unsafe_server: false,
            unsafe_skip_fsync: false,
            unsafe_keep_removals: false,
        })
    })() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    cases.push(selftest::unsafe_lock_case(&opts).await);
    cases.push(selftest::unsafe_server_case(&opts).await);
    cases.push(selftest::unsafe_skip_fsync_case(&opts).await);
    cases.push(selftest::unsafe_keep_removals_case(&opts).await);
    let mut missed = 0;
    for case in &cases {
        let mark = if case.caught { "caught" } else { "MISSED" };
        println!("{mark:>7}  {}  ({})", case.name, case.detail);
        if !case.caught {
            missed += 1;
        }
    }
    println!(
        "selftest: {} of {} planted anomalies caught",
        cases.len() - missed,
        cases.len()
    );
    if missed == 0 {
        0
    } else {
        1
    }
}
