//! The `session-order` workload: ZooKeeper's session guarantees, checked
//! across server moves. Each worker has one session and alternates a batch
//! of pipelined writes (`set_data` on a few shared keys, all sent at once
//! on the session's connection, each with a value no other write uses)
//! with plain reads (`get_data`, served from whichever server the session
//! is connected to, not linearizable).
//!
//! Sessions move between servers: the nemesis kills, pauses and cuts
//! servers off, and a mover task now and then forces one worker's session
//! onto another server by dropping, for [`MOVE_HOLD`], the worker's links
//! to every server but one. For that each worker reaches the cluster
//! through its own relay (the harness's [`proxy::Net`](crate::proxy::Net), one listener per
//! server), so that a move touches one session only.
//!
//! The checker ([`check`](mod@check)) demands what ZooKeeper promises a session:
//! a read never returns older state than the session has already seen
//! (its own writes, its earlier reads: a read of a key must reflect every
//! write to it whose zxid is at most the highest zxid the session saw
//! before), and the writes of one session apply in the order it sent them
//! (zxids increase in send order, including writes whose answer was lost
//! and which a read later shows applied).

pub mod check;

use std::net::SocketAddr;
use std::time::Duration;

use futures::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;
use warden_client::{Client, CreateOptions, ErrorCode};

use crate::history::{History, Kind, Process};
use crate::proxy::{Endpoint, Mode, Net};
use crate::workload::RunCtx;
use crate::workloads::support::{
    connect_options, connect_until, ensure_path, run_tag, write_outcome, Processes, ERROR_PAUSE,
    RETRY_PAUSE, SETUP_BOUND,
};

pub use check::{check, planted_anomalies};

/// Where each run makes its keys.
pub const ROOT: &str = "/jepsen/session-order";
/// Keys every worker writes and reads.
pub const KEYS: usize = 3;
/// Most writes in one pipelined batch.
const BATCH_MAX: usize = 6;
/// Most plain reads after a batch.
const READS_MAX: usize = 4;
/// How long a move keeps a worker's links to all servers but one down.
pub const MOVE_HOLD: Duration = Duration::from_millis(1500);
/// Pause between moves, chosen at random in this range.
const MOVE_INTERVAL_MS: (u64, u64) = (300, 1500);

/// Drives the workers and the mover until `ctx.deadline`.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let parent = format!("{ROOT}/{}", run_tag(ctx));
    ensure_path(ctx, &parent).await?;
    let keys: Vec<String> = (0..KEYS).map(|k| format!("{parent}/k{k}")).collect();
    make_keys(ctx, &keys).await?;
    let upstreams: Vec<SocketAddr> = ctx
        .servers
        .iter()
        .map(|s| s.parse().map_err(|e| format!("server address {s}: {e}")))
        .collect::<Result<_, String>>()?;
    let processes = Processes::default();
    let mut relays = Vec::new();
    for _ in 0..ctx.concurrency.max(1) {
        relays.push(Relay::start(&upstreams).await?);
    }
    let mut workers = tokio::task::JoinSet::new();
    for (w, relay) in relays.iter().enumerate() {
        let worker = Worker {
            ctx: ctx.clone(),
            keys: keys.clone(),
            servers: relay.servers_from(w),
            processes: processes.clone(),
            rng: StdRng::seed_from_u64(ctx.seed ^ (0x5e55 + w as u64)),
        };
        workers.spawn(worker.run());
    }
    let mover = tokio::spawn(move_sessions(ctx.clone(), relays, processes.fresh()));
    let mut failed = Vec::new();
    while let Some(done) = workers.join_next().await {
        if let Err(e) = done {
            failed.push(e.to_string());
        }
    }
    let relays = mover.await.map_err(|e| format!("mover: {e}"))?;
    for r in relays {
        r.net.shutdown();
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "session-order workers failed: {}",
            failed.join("; ")
        ))
    }
}

/// Creates the keys (empty), retrying until [`SETUP_BOUND`].
async fn make_keys(ctx: &RunCtx, keys: &[String]) -> Result<(), String> {
    let until = Instant::now() + SETUP_BOUND;
    let options = connect_options(ctx);
    let mut left: Vec<&String> = keys.iter().collect();
    while !left.is_empty() {
        let Some(client) = connect_until(&ctx.servers_for(0), &options, until).await else {
            return Err(format!("could not create the keys within {SETUP_BOUND:?}"));
        };
        while let Some(k) = left.last() {
            match client.create(k, b"", CreateOptions::persistent()).await {
                Ok(_) => {}
                Err(e) if e.code() == ErrorCode::NodeExists => {}
                Err(e) if Instant::now() < until => {
                    tracing::debug!(error = %e, "creating a key; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    break;
                }
                Err(e) => return Err(format!("creating {k}: {e}")),
            }
            left.pop();
        }
        let _ = client.close().await;
    }
    Ok(())
}

/// One worker's own way to the cluster: a listener per server, forwarding
/// to the harness's client proxy of that server.
struct Relay {
    net: Net,
    addrs: Vec<SocketAddr>,
}

impl Relay {
    async fn start(upstreams: &[SocketAddr]) -> Result<Relay, String> {
        let net = Net::new();
        let mut addrs = Vec::new();
        for (i, &up) in upstreams.iter().enumerate() {
            let listen: SocketAddr = "127.0.0.1:0".parse().expect("loopback");
            let addr = net
                .listen(i as u64 + 1, false, up, listen)
                .await
                .map_err(|e| format!("relay to {up}: {e}"))?;
            addrs.push(addr);
        }
        Ok(Relay { net, addrs })
    }

    /// The servers string, starting at `home`.
    fn servers_from(&self, home: usize) -> String {
        let n = self.addrs.len();
        (0..n)
            .map(|i| self.addrs[(home + i) % n].to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Every so often, moves one worker's session: its links to every server
/// but a random one are dropped for [`MOVE_HOLD`], then healed. Returns
/// the relays (for shutdown).
async fn move_sessions(ctx: RunCtx, relays: Vec<Relay>, process: Process) -> Vec<Relay> {
    let mut rng = StdRng::seed_from_u64(ctx.seed ^ 0x307e);
    let nodes = ctx.servers.len() as u64;
    if nodes < 2 {
        return relays;
    }
    loop {
        let pause =
            Duration::from_millis(rng.random_range(MOVE_INTERVAL_MS.0..=MOVE_INTERVAL_MS.1));
        if Instant::now() + pause + MOVE_HOLD >= ctx.deadline {
            break;
        }
        tokio::time::sleep(pause).await;
        let w = rng.random_range(0..relays.len());
        let to = rng.random_range(1..=nodes);
        let cut: Vec<(Endpoint, u64)> = (1..=nodes)
            .filter(|&n| n != to)
            .map(|n| (Endpoint::Client, n))
            .collect();
        let value = json!({ "worker": w, "to": to });
        let inv = ctx.history.invoke(process, "move", value.clone());
        relays[w].net.set(&cut, Mode::Drop);
        tokio::time::sleep(MOVE_HOLD).await;
        relays[w].net.heal();
        ctx.history.ok(&inv, value);
    }
    relays
}

struct Worker {
    ctx: RunCtx,
    keys: Vec<String>,
    servers: String,
    processes: Processes,
    rng: StdRng,
}

impl Worker {
    fn history(&self) -> &History {
        &self.ctx.history
    }

    async fn run(mut self) {
        let options = connect_options(&self.ctx);
        let mut written = 0u64;
        while Instant::now() < self.ctx.deadline {
            let Some(client) = connect_until(&self.servers, &options, self.ctx.deadline).await
            else {
                return;
            };
            let session = client.session_id();
            let mut process = self.processes.fresh();
            while Instant::now() < self.ctx.deadline {
                if client.session_events().borrow().is_terminal() {
                    break;
                }
                let n = self.rng.random_range(1..=BATCH_MAX);
                let batch: Vec<(String, String)> = (0..n)
                    .map(|_| {
                        written += 1;
                        let key = self.keys[self.rng.random_range(0..self.keys.len())].clone();
                        (key, format!("{session:x}-{written}"))
                    })
                    .collect();
                if !self.write_batch(&client, session, process, &batch).await {
                    // Unknown outcome: go on as a new process, same session.
                    process = self.processes.fresh();
                }
                self.pace().await;
                for _ in 0..self.rng.random_range(1..=READS_MAX) {
                    let key = self.keys[self.rng.random_range(0..self.keys.len())].clone();
                    self.read(&client, session, process, &key).await;
                    self.pace().await;
                }
            }
            let _ = tokio::time::timeout(self.ctx.session_timeout, client.close()).await;
        }
    }

    async fn pace(&self) {
        let pause = self.ctx.worker_interval();
        if !pause.is_zero() {
            tokio::time::sleep_until(self.ctx.deadline.min(Instant::now() + pause)).await;
        }
    }

    /// Sends every write of `batch` at once (pipelined, in order: each
    /// call is queued on the connection at its first poll, and `join_all`
    /// polls them in order). Records one `write` operation with every
    /// write's outcome; false if any outcome is unknown.
    async fn write_batch(
        &self,
        client: &Client,
        session: u64,
        process: Process,
        batch: &[(String, String)],
    ) -> bool {
        let writes: Vec<Value> = batch
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v }))
            .collect();
        let inv = self.history().invoke(
            process,
            "write",
            json!({ "session": session, "writes": writes }),
        );
        let results = join_all(
            batch
                .iter()
                .map(|(k, v)| client.set_data(k, v.as_bytes(), None)),
        )
        .await;
        let mut kinds = Vec::new();
        let mut done = Vec::new();
        let mut errors = Vec::new();
        for ((k, v), r) in batch.iter().zip(results) {
            match r {
                Ok(stat) => {
                    kinds.push(Kind::Ok);
                    done.push(json!({ "key": k, "value": v, "outcome": "ok", "zxid": stat.mzxid, "version": stat.version }));
                }
                Err(e) => {
                    let kind = write_outcome(&e);
                    kinds.push(kind);
                    let outcome = if kind == Kind::Fail { "fail" } else { "info" };
                    done.push(
                        json!({ "key": k, "value": v, "outcome": outcome, "error": e.to_string() }),
                    );
                    errors.push(e.to_string());
                }
            }
        }
        let value = json!({ "session": session, "writes": done });
        let known = !kinds.contains(&Kind::Info);
        if kinds.iter().all(|&k| k == Kind::Ok) {
            self.history().ok(&inv, value);
        } else if kinds.iter().all(|&k| k == Kind::Fail) {
            self.history().fail(&inv, value, errors.join("; "));
        } else {
            self.history().info(&inv, value, errors.join("; "));
        }
        if !errors.is_empty() {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
        known
    }

    /// One plain read; any error is a `fail` (a read changes nothing).
    async fn read(&self, client: &Client, session: u64, process: Process, key: &str) {
        let inv = self
            .history()
            .invoke(process, "read", json!({ "session": session, "key": key }));
        match client.get_data(key).await {
            Ok((data, stat)) => self.history().ok(
                &inv,
                json!({
                    "session": session,
                    "key": key,
                    "value": String::from_utf8_lossy(&data),
                    "zxid": stat.mzxid,
                    "version": stat.version,
                }),
            ),
            Err(e) => {
                self.history().fail(
                    &inv,
                    json!({ "session": session, "key": key }),
                    e.to_string(),
                );
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}
