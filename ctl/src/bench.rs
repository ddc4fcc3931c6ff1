//! `wardenctl bench`: load on the whole system, measured from the outside.
//!
//! N clients, each with a session of its own, run one workload in a closed
//! loop: every client sends its next operation as soon as the previous one
//! answered, so the load adapts to the service (and never queues up
//! unboundedly). A warm-up whose operations are not counted comes first,
//! then the measured window. Each client keeps its own HDR histogram of
//! latencies in microseconds, and the histograms are merged at the end, so
//! the hot loop shares nothing but two progress counters.
//!
//! Every node the bench makes lives under one root, `/bench-<random>`,
//! deleted at the end (also after a failure or a Ctrl-C). The bench owns
//! that root; it must never touch anything outside it.
//!
//! The workers run on a multi-threaded runtime of their own: `wardenctl`'s
//! runtime has one thread, on which 64 clients would measure the client's
//! CPU rather than the service.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use hdrhistogram::Histogram;
use serde::Serialize;
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_protocol::{path, DATA_BYTES_MAX};

use crate::{Failure, Output};

/// Most clients one run may start (each is a session and a connection).
const CLIENTS_MAX: u32 = 4096;
/// Largest latency the histograms hold exactly; slower operations are
/// recorded as this (any request times out well before).
const LATENCY_US_MAX: u64 = 3_600 * 1_000_000;
/// Significant decimal digits the histograms keep.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// How often the progress line is updated.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after a failed operation, so that a client that is disconnected
/// (and fails at once) does not spin.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// `wardenctl bench` flags.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// What each client does in its loop.
    #[arg(long, value_enum)]
    workload: Workload,
    /// How many clients (sessions) run at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=CLIENTS_MAX as i64))]
    clients: u32,
    /// How long the measured window lasts, in seconds.
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Bytes of data per write (at most 1 MiB).
    #[arg(long, value_name = "B", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(0..=DATA_BYTES_MAX as i64))]
    value_size: u32,
    /// Seconds of load before the measured window, not counted.
    #[arg(long, value_name = "W", default_value_t = 1)]
    warmup_seconds: u64,
}

/// One kind of load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// set_data of the client's own node.
    Write,
    /// get_data of the client's own node.
    Read,
    /// create, then delete, the client's own node (the pair is one op).
    CreateDelete,
    /// Acquire and release the client's own lock (uncontended).
    Lock,
    /// Every client acquires and releases one shared lock.
    LockContended,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Write => "write",
            Workload::Read => "read",
            Workload::CreateDelete => "create-delete",
            Workload::Lock => "lock",
            Workload::LockContended => "lock-contended",
        }
    }
}

/// Runs the bench: `control` (wardenctl's own session) makes and finally
/// deletes the bench's root; the clients connect to `servers` on their own.
pub async fn run(
    control: &Client,
    servers: &str,
    options: ConnectOptions,
    tls: Option<warden_client::TlsOptions>,
    args: BenchArgs,
    out: &Output,
) -> Result<(), Failure> {
    let root = format!("/bench-{:016x}", rand::random::<u64>());
    control.create(&root, b"", CreateOptions::default()).await?;
    let plan = Plan {
        workload: args.workload,
        clients: args.clients,
        measured: Duration::from_secs(args.seconds),
        warmup: Duration::from_secs(args.warmup_seconds),
        value: vec![b'x'; args.value_size as usize],
        root: root.clone(),
        servers: servers.to_string(),
        options,
        tls,
        progress: Arc::new(Progress::default()),
    };
    let progress = Arc::clone(&plan.progress);
    let mut measured = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        runtime.block_on(plan.run())
    });
    // Ctrl-C ends the run early: the workers stop after their current
    // operation, and what was measured so far is reported.
    let joined = tokio::select! {
        joined = &mut measured => joined,
        _ = tokio::signal::ctrl_c() => {
            progress.stop.store(true, Ordering::Relaxed);
            measured.await
        }
    };
    let result = joined.unwrap_or_else(|e| Err(Failure::Io(io::Error::other(e))));
    let cleaned = crate::rmr(control, &root).await;
    let report = result?;
    cleaned?;
    report.print(out)
}

/// Everything the workers need, moved onto their runtime.
struct Plan {
    workload: Workload,
    clients: u32,
    measured: Duration,
    warmup: Duration,
    value: Vec<u8>,
    root: String,
    servers: String,
    options: ConnectOptions,
    tls: Option<warden_client::TlsOptions>,
    progress: Arc<Progress>,
}

impl Plan {
    async fn run(self) -> Result<Report, Failure> {
        let plan = Arc::new(self);
        // Connect and set up every client before the clock starts, so that
        // connection storms are in neither the warm-up nor the window.
        let setups = (0..plan.clients).map(|i| {
            let plan = Arc::clone(&plan);
            async move { Worker::setup(&plan, i).await }
        });
        let workers = futures::future::try_join_all(setups).await?;

        let progress = Arc::clone(&plan.progress);
        let start = Instant::now();
        let measure_from = start + plan.warmup;
        let end = measure_from + plan.measured;
        let tasks: Vec<_> = workers
            .into_iter()
            .map(|w| tokio::spawn(w.run(measure_from, end, Arc::clone(&progress))))
            .collect();
        let reporter = tokio::spawn(report_progress(
            Arc::clone(&progress),
            start,
            plan.warmup,
            plan.measured,
        ));

        let mut latencies = new_histogram();
        let mut errors = 0;
        let mut first_error = None;
        for task in tasks {
            let done = task.await.map_err(io::Error::other)?;
            latencies
                .add(&done.latencies)
                .expect("histograms share their bounds");
            errors += done.errors;
            first_error = first_error.or(done.first_error);
            // Closing now ends the session's ephemeral nodes before the
            // root is deleted; a failed close changes nothing measured.
            let _ = done.client.close().await;
        }
        reporter.abort();
        progress.finish();
        if let Some(e) = first_error {
            eprintln!("warning: {errors} operations failed; the first: {e}");
        }
        let window = Instant::now()
            .min(end)
            .saturating_duration_since(measure_from);
        if window < plan.measured {
            eprintln!(
                "warning: interrupted after {:.1} s of the measured {} s",
                window.as_secs_f64(),
                plan.measured.as_secs()
            );
        }
        Ok(Report::new(&plan, &latencies, errors, window))
    }
}

/// One client and the nodes it works on.
struct Worker {
    client: Client,
    workload: Workload,
    /// The client's own node (write, read, create-delete).
    node: String,
    value: Vec<u8>,
    lock: Option<BenchLock>,
}

/// What a worker hands back.
struct Done {
    client: Client,
    latencies: Histogram<u64>,
    errors: u64,
    first_error: Option<warden_recipes::Error>,
}

impl Worker {
    async fn setup(plan: &Plan, i: u32) -> Result<Worker, Failure> {
        let client = crate::connect(&plan.servers, plan.options.clone(), plan.tls.clone()).await?;
        let node = path::join(&plan.root, &format!("c{i}"));
        let value = plan.value.clone();
        let mut lock = None;
        match plan.workload {
            Workload::Write | Workload::Read => {
                client
                    .create(&node, &value, CreateOptions::default())
                    .await?;
            }
            Workload::CreateDelete => {}
            Workload::Lock => {
                let dir = path::join(&plan.root, &format!("lock{i}"));
                lock =
                    Some(BenchLock::new(client.clone(), &dir).map_err(|e| lock_failure(e, &dir))?);
            }
            Workload::LockContended => {
                let dir = path::join(&plan.root, "lock");
                lock =
                    Some(BenchLock::new(client.clone(), &dir).map_err(|e| lock_failure(e, &dir))?);
            }
        }
        Ok(Worker {
            client,
            workload: plan.workload,
            node,
            value,
            lock,
        })
    }

    /// Closed loop until `end`; operations that start before
    /// `measure_from` are the warm-up and are not recorded.
    async fn run(self, measure_from: Instant, end: Instant, progress: Arc<Progress>) -> Done {
        let mut latencies = new_histogram();
        let mut errors = 0;
        let mut first_error = None;
        loop {
            let started = Instant::now();
            if started >= end || progress.stop.load(Ordering::Relaxed) {
                break;
            }
            let result = self.op().await;
            let measured = started >= measure_from;
            match result {
                Ok(()) => {
                    if measured {
                        let us = started.elapsed().as_micros();
                        latencies.saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
                    }
                    progress.ops.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let over = matches!(e.code(), ErrorCode::SessionExpired);
                    if measured {
                        errors += 1;
                        progress.errors.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert(e);
                    }
                    if over {
                        // Every later call would fail the same way at once.
                        break;
                    }
                    tokio::time::sleep(ERROR_BACKOFF).await;
                }
            }
        }
        Done {
            client: self.client,
            latencies,
            errors,
            first_error,
        }
    }

    async fn op(&self) -> Result<(), warden_recipes::Error> {
        match self.workload {
            Workload::Write => {
                self.client.set_data(&self.node, &self.value, None).await?;
            }
            Workload::Read => {
                self.client.get_data(&self.node).await?;
            }
            Workload::CreateDelete => {
                // The delete runs even if the create failed, so that a node
                // left over by a lost answer does not fail every later
                // create: one failed op, then back on track.
                let created = self
                    .client
                    .create(&self.node, &self.value, CreateOptions::default())
                    .await;
                let deleted = self.client.delete(&self.node, None).await;
                created?;
                deleted?;
            }
            Workload::Lock | Workload::LockContended => {
                let lock = self.lock.as_ref().expect("lock workloads set up a lock");
                lock.acquire_release().await?;
            }
        }
        Ok(())
    }
}

/// The lock the lock workloads take and give back: the recipes' [`Mutex`]
/// (ephemeral-sequential contenders, each waiting on its predecessor).
///
/// [`Mutex`]: warden_recipes::Mutex
struct BenchLock {
    mutex: warden_recipes::Mutex,
}

impl BenchLock {
    /// The lock whose container node is `dir` (made by the first acquire;
    /// nothing is sent yet).
    fn new(client: Client, dir: &str) -> Result<BenchLock, warden_recipes::Error> {
        Ok(BenchLock {
            mutex: warden_recipes::Mutex::new(client, dir)?,
        })
    }

    async fn acquire_release(&self) -> Result<(), warden_recipes::Error> {
        self.mutex.acquire().await?.release().await
    }
}

/// A lock's failure as wardenctl reports it: the code and the lock's path.
fn lock_failure(e: warden_recipes::Error, dir: &str) -> Failure {
    match e {
        warden_recipes::Error::Client(e) => e.into(),
        other => warden_client::Error::api(other.code(), dir, other.to_string()).into(),
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .expect("valid histogram bounds")
}

/// Counters the progress line reads; the workers only add to them.
#[derive(Default)]
struct Progress {
    ops: AtomicU64,
    errors: AtomicU64,
    /// Set on Ctrl-C: the workers stop after their current operation.
    stop: AtomicBool,
}

impl Progress {
    /// Ends a `\r`-updated line so that what follows starts on its own.
    fn finish(&self) {
        if io::stderr().is_terminal() {
            eprintln!();
        }
    }
}

/// About once a second: phase, elapsed time, ops/s over the last second,
/// errors. On a terminal the line is rewritten in place.
async fn report_progress(
    progress: Arc<Progress>,
    start: Instant,
    warmup: Duration,
    measured: Duration,
) {
    let terminal = io::stderr().is_terminal();
    let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
    ticks.tick().await;
    let mut last_ops = 0;
    let mut last_at = Instant::now();
    loop {
        ticks.tick().await;
        let now = Instant::now();
        let ops = progress.ops.load(Ordering::Relaxed);
        let rate = (ops - last_ops) as f64 / now.duration_since(last_at).as_secs_f64();
        (last_ops, last_at) = (ops, now);
        let elapsed = now.duration_since(start);
        // The rate is of the second just gone: name its phase by its middle.
        let phase = if elapsed.saturating_sub(PROGRESS_INTERVAL / 2) < warmup {
            "warm-up"
        } else {
            "measuring"
        };
        let total = (warmup + measured).as_secs();
        let at = elapsed.as_secs_f64().round();
        let errors = progress.errors.load(Ordering::Relaxed);
        let line = format!("[{at:.0}/{total}s] {phase}  {rate:.0} ops/s  {errors} errors");
        let mut stderr = io::stderr().lock();
        // Progress is a courtesy: a closed stderr must not fail the run.
        let _ = if terminal {
            write!(stderr, "\r\x1b[2K{line}")
        } else {
            writeln!(stderr, "{line}")
        };
        let _ = stderr.flush();
    }
}

/// The result, also its JSON shape (keys in this order).
#[derive(Debug, Serialize)]
struct Report {
    workload: &'static str,
    clients: u32,
    seconds: u64,
    value_size: usize,
    ops: u64,
    ops_per_sec: f64,
    errors: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

impl Report {
    /// `window`: how long the measurement really lasted (shorter than asked
    /// if interrupted).
    fn new(plan: &Plan, latencies: &Histogram<u64>, errors: u64, window: Duration) -> Report {
        let ops = latencies.len();
        let ops_per_sec = if window.is_zero() {
            0.0
        } else {
            ops as f64 / window.as_secs_f64()
        };
        Report {
            workload: plan.workload.name(),
            clients: plan.clients,
            seconds: plan.measured.as_secs(),
            value_size: plan.value.len(),
            ops,
            ops_per_sec,
            errors,
            p50_us: latencies.value_at_quantile(0.5),
            p99_us: latencies.value_at_quantile(0.99),
            p999_us: latencies.value_at_quantile(0.999),
            max_us: latencies.max(),
        }
    }

    fn print(&self, out: &Output) -> Result<(), Failure> {
        if out.json {
            return out.json_line(self);
        }
        let mut stdout = io::stdout().lock();
        writeln!(
            stdout,
            "workload {}, {} clients, {} s, {} B values",
            self.workload, self.clients, self.seconds, self.value_size
        )?;
        writeln!(
            stdout,
            "ops      {} ({:.1} ops/s), {} errors",
            self.ops, self.ops_per_sec, self.errors
        )?;
        writeln!(
            stdout,
            "latency  p50 {}  p99 {}  p99.9 {}  max {} (µs)",
            self.p50_us, self.p99_us, self.p999_us, self.max_us
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_json_keys_in_order() {
        let mut h = new_histogram();
        for us in [100, 200, 300] {
            h.record(us).unwrap();
        }
        let plan = Plan {
            workload: Workload::CreateDelete,
            clients: 2,
            measured: Duration::from_secs(3),
            warmup: Duration::ZERO,
            value: vec![0; 64],
            root: "/bench-0".into(),
            servers: String::new(),
            options: ConnectOptions {
                session_timeout: Duration::from_secs(1),
                connect_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(1),
            },
            tls: None,
            progress: Arc::default(),
        };
        let report = Report::new(&plan, &h, 1, plan.measured);
        assert!(report.p50_us <= report.p99_us && report.p99_us <= report.max_us);
        let line = serde_json::to_string(&report).unwrap();
        assert!(
            line.starts_with(
                r#"{"workload":"create-delete","clients":2,"seconds":3,"value_size":64,"ops":3,"ops_per_sec":1.0,"errors":1,"p50_us":"#
            ),
            "{line}"
        );
        let keys: Vec<_> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&line)
                .unwrap()
                .keys()
                .cloned()
                .collect();
        assert_eq!(keys.len(), 11);
    }
}
