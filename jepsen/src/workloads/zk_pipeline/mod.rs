//! The `zk-pipeline` workload: ZooKeeper-port sessions (the
//! `zookeeper-client` crate, as an application would use it) pipelining
//! hundreds of writes each through a follower, where a write that a leader
//! change makes the follower propose again can apply twice.
//!
//! Every worker has one session at a time, on the clients' server: the
//! lowest-numbered follower when the session opens (every worker the
//! same one, so that a fault of that node, or the `one-way-kill` schedule,
//! hits them all). It sends [`PIPELINE`] writes back to back without
//! waiting (the client puts each request on the wire when it is made, in
//! order), then waits for every answer (each bounded by the request
//! timeout), and goes on with the next batch. A batch mixes:
//! - sequential creates under the worker's parent, each with its own
//!   payload `<session>:<index>` (the index counts the session's writes);
//! - conditional sets of the worker's register (`set_data` with the version
//!   the previous set of the pipeline will have made; after any set that
//!   did not succeed, the worker reads the version again before the next);
//! - deletes of sequential nodes whose creates it saw acknowledged.
//!
//! Each batch is one `batch` operation whose completion lists every
//! write's outcome: `ok`, `fail` (a refusal the server decided: no node,
//! node exists, bad version) or `info` (connection lost, session expired,
//! no answer within the request timeout: it may have been applied). After
//! the nemesis has healed the cluster (its `heal-all`), a `read` per
//! worker records the final tree: every child of its parent with its data,
//! and the register's version and data, read linearizably through the
//! native client.
//!
//! The checker ([`check`](mod@check)) asks: every acknowledged create
//! applied exactly once, unless a delete of it succeeded (then not at all);
//! an unacknowledged one at most once; a refused one never; a refused
//! delete never applied; the register's version within the sets
//! acknowledged and those unknown, its value one of them and not older
//! than the last acknowledged; per session, sequence numbers in the order
//! the writes were sent.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::history::Kind;
use crate::workload::RunCtx;
use crate::workloads::support::{
    connect_options, connect_until, ensure_path, run_tag, Processes, RETRY_PAUSE,
};

mod check;
pub use check::{check, planted_anomalies};

/// Writes one session sends before it waits for their answers: well past
/// the 64 answers a server remembered per session (issue 27).
pub const PIPELINE: usize = 200;
/// One write in this many is a conditional set of the register.
const SET_ODDS: u32 = 6;
/// One write in this many is a delete (when an acknowledged node is there
/// to delete).
const DELETE_ODDS: u32 = 10;
/// Acknowledged nodes a worker remembers as delete candidates.
const DELETE_CANDIDATES_MAX: usize = 2_000;
/// How long a worker tries to open a session before it looks again for
/// the clients' server.
const CONNECT_BOUND: Duration = Duration::from_secs(10);
/// How long the final reads wait for the nemesis to heal the cluster.
const HEAL_WAIT_BOUND: Duration = Duration::from_secs(180);
/// How long the final reads of one worker may take, new sessions included.
const FINAL_READ_BOUND: Duration = Duration::from_secs(60);
/// Children read per round trip in the final read.
const READ_BATCH: usize = 500;

/// The client's connection timeout: how long a session's connection may
/// stay silent (no answer, no ping reply) before the client drops it and
/// every write still waiting on it ends unknown. The `zookeeper-client`
/// crate takes at most 3/5 of the session timeout (so that a client can
/// reconnect before the session expires) and silently uses 2/5 instead of
/// anything longer: the request timeout (6 s) that this workload passed
/// before became 1.2 s on a 3 s session. A server answers a session's
/// requests in order, a ping after the 200 writes sent before it, so on a
/// saturated two-core machine a connection often stayed silent that long
/// with nothing wrong (a 60 s run under `kill,partition,pause`: 16,200 of
/// 38,770 writes unknown, 81 of 224 batches cut by it). 3/5 is the
/// longest the crate allows, and close to ZooKeeper's own client (2/3).
fn connection_timeout(session_timeout: Duration) -> Duration {
    session_timeout * 3 / 5
}

/// Where a run's nodes go: `<root>/w<worker>` (the sequential nodes) and
/// `<root>/reg-w<worker>` (the register).
fn root(ctx: &RunCtx) -> String {
    format!("/jepsen-zk-pipeline/{}", run_tag(ctx))
}

/// Drives the workers until `ctx.deadline`, then reads the final tree
/// once the nemesis has healed the cluster.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    if ctx.zk_servers.is_empty() {
        return Err("no ZooKeeper-port addresses for the zk-pipeline workload".into());
    }
    let root = root(ctx);
    let workers = ctx.concurrency.max(1);
    for w in 0..workers {
        ensure_path(ctx, &format!("{root}/w{w}")).await?;
        ensure_path(ctx, &format!("{root}/reg-w{w}")).await?;
    }
    let processes = Processes::default();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let worker = Worker::new(ctx.clone(), w, &root, processes.clone());
        tasks.spawn(worker.run());
    }
    let mut failed = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            failed.push(e.to_string());
        }
    }
    // The final tree, after every fault has ended (writes still waiting on
    // a cut-off or restarted server apply by then, or never).
    let until = Instant::now() + HEAL_WAIT_BOUND;
    while !ctx.history.completed("heal-all") && Instant::now() < until {
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    for w in 0..workers {
        final_read(ctx, &root, w, &processes).await;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("zk-pipeline workers failed: {}", failed.join("; ")))
    }
}

/// One write of a batch, as sent.
#[derive(Debug, Clone)]
enum Write {
    Create { i: u64, data: String },
    Set { i: u64, data: String, version: i32 },
    Delete { i: u64, path: String },
}

impl Write {
    fn invoke_value(&self) -> Value {
        match self {
            Write::Create { i, data } => json!({ "i": i, "f": "create", "data": data }),
            Write::Set { i, data, version } => {
                json!({ "i": i, "f": "set", "data": data, "version": version })
            }
            Write::Delete { i, path } => json!({ "i": i, "f": "delete", "path": path }),
        }
    }
}

/// What a write's answer was.
enum Answer {
    Created(i64),
    Set(i32),
    Deleted,
    Failed(zk::Error),
    TimedOut,
}

/// How an error becomes an outcome: `fail` for refusals the server decided
/// (the write did not and will not happen), else `info`.
fn outcome_of(e: &zk::Error) -> Kind {
    match e {
        zk::Error::NoNode
        | zk::Error::NodeExists
        | zk::Error::BadVersion
        | zk::Error::NotEmpty
        | zk::Error::NoChildrenForEphemerals
        | zk::Error::BadArguments(_)
        | zk::Error::NoAuth
        | zk::Error::InvalidAcl => Kind::Fail,
        _ => Kind::Info,
    }
}

struct Worker {
    ctx: RunCtx,
    worker: usize,
    parent: String,
    register: String,
    processes: Processes,
    rng: StdRng,
    /// Sessions opened so far (each one's writes are numbered from 0).
    sessions: u64,
    /// Acknowledged sequential nodes not yet chosen for a delete.
    deletable: VecDeque<String>,
}

impl Worker {
    fn new(ctx: RunCtx, worker: usize, root: &str, processes: Processes) -> Worker {
        let rng = StdRng::seed_from_u64(ctx.seed ^ 0x7a6b_7069_7065_0000 ^ worker as u64);
        Worker {
            parent: format!("{root}/w{worker}"),
            register: format!("{root}/reg-w{worker}"),
            ctx,
            worker,
            processes,
            rng,
            sessions: 0,
            deletable: VecDeque::new(),
        }
    }

    async fn run(mut self) {
        while Instant::now() < self.ctx.deadline {
            let Some((client, node)) = self.open().await else {
                continue;
            };
            let session = format!("w{}s{}", self.worker, self.sessions);
            self.sessions += 1;
            self.session(&client, node, &session).await;
        }
    }

    /// Opens a session on the clients' server; `None` (after a pause) if
    /// none could be had in time.
    async fn open(&mut self) -> Option<(zk::Client, u64)> {
        let node = clients_server(&self.ctx).await;
        let addr = self.ctx.zk_servers[(node - 1) as usize].clone();
        let bound = CONNECT_BOUND.min(self.ctx.deadline.saturating_duration_since(Instant::now()));
        let connecting = zk::Client::connector()
            .with_session_timeout(self.ctx.session_timeout)
            .with_connection_timeout(connection_timeout(self.ctx.session_timeout))
            .connect(&addr);
        match tokio::time::timeout(bound, connecting).await {
            Ok(Ok(c)) => Some((c, node)),
            Ok(Err(e)) => {
                tracing::debug!(worker = self.worker, node, error = %e, "zk connect failed");
                tokio::time::sleep(RETRY_PAUSE).await;
                None
            }
            Err(_) => None,
        }
    }

    /// Batches on one session until the deadline or the session's end.
    async fn session(&mut self, client: &zk::Client, node: u64, session: &str) {
        let mut next_i: u64 = 0;
        // The version the next set expects; `None`: read it first.
        let mut version: Option<i32> = None;
        let mut process = self.processes.fresh();
        while Instant::now() < self.ctx.deadline {
            if version.is_none() {
                match tokio::time::timeout(
                    self.ctx.request_timeout,
                    client.get_data(&self.register),
                )
                .await
                {
                    Ok(Ok((_, stat))) => version = Some(stat.version),
                    Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => return,
                    _ => {}
                }
            }
            let batch = self.batch(session, &mut next_i, &mut version);
            let inv = self.ctx.history.invoke(
                process,
                "batch",
                json!({
                    "worker": self.worker, "session": session, "node": node,
                    "writes": batch.iter().map(Write::invoke_value).collect::<Vec<_>>(),
                }),
            );
            let answers = self.send(client, &batch).await;
            let mut outcomes = Vec::with_capacity(batch.len());
            let mut kinds = Vec::with_capacity(batch.len());
            let mut expired = false;
            for (w, a) in batch.iter().zip(answers) {
                let i = match w {
                    Write::Create { i, .. } | Write::Set { i, .. } | Write::Delete { i, .. } => *i,
                };
                let (kind, extra) = match a {
                    Answer::Created(seq) => {
                        self.deletable
                            .push_back(format!("{}/s-{seq:010}", self.parent));
                        if self.deletable.len() > DELETE_CANDIDATES_MAX {
                            self.deletable.pop_front();
                        }
                        (Kind::Ok, json!({ "seq": seq }))
                    }
                    Answer::Set(v) => (Kind::Ok, json!({ "version": v })),
                    Answer::Deleted => (Kind::Ok, json!({})),
                    Answer::Failed(e) => {
                        expired |= matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed);
                        (outcome_of(&e), json!({ "error": e.to_string() }))
                    }
                    Answer::TimedOut => (Kind::Info, json!({ "error": "no answer in time" })),
                };
                if matches!(w, Write::Set { .. }) && kind != Kind::Ok {
                    version = None;
                }
                let mut o = json!({ "i": i, "outcome": kind_name(kind) });
                if let (Some(o), Some(extra)) = (o.as_object_mut(), extra.as_object()) {
                    o.extend(extra.clone());
                }
                outcomes.push(o);
                kinds.push(kind);
            }
            let value = json!({ "worker": self.worker, "session": session, "node": node, "writes": outcomes });
            if kinds.iter().all(|&k| k == Kind::Ok) {
                self.ctx.history.ok(&inv, value);
            } else if kinds.iter().all(|&k| k == Kind::Fail) {
                self.ctx.history.fail(&inv, value, "every write refused");
            } else {
                self.ctx
                    .history
                    .info(&inv, value, "some writes not acknowledged");
                process = self.processes.fresh();
            }
            if expired {
                return;
            }
            if kinds.iter().any(|&k| k != Kind::Ok) {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            let pause = self.ctx.worker_interval() * PIPELINE as u32;
            if !pause.is_zero() {
                tokio::time::sleep_until(self.ctx.deadline.min(Instant::now() + pause)).await;
            }
        }
        // The session closes when its last client handle drops.
    }

    /// The next batch of writes.
    fn batch(&mut self, session: &str, next_i: &mut u64, version: &mut Option<i32>) -> Vec<Write> {
        let mut out = Vec::with_capacity(PIPELINE);
        for _ in 0..PIPELINE {
            let i = *next_i;
            *next_i += 1;
            let data = format!("{session}:{i}");
            if let Some(v) = version
                .as_mut()
                .filter(|_| self.rng.random_ratio(1, SET_ODDS))
            {
                out.push(Write::Set {
                    i,
                    data,
                    version: *v,
                });
                *v += 1;
                continue;
            }
            if self.rng.random_ratio(1, DELETE_ODDS) {
                if let Some(path) = self.deletable.pop_front() {
                    out.push(Write::Delete { i, path });
                    continue;
                }
            }
            out.push(Write::Create { i, data });
        }
        out
    }

    /// Sends every write of `batch` at once (in order) and waits for every
    /// answer, each for at most the request timeout.
    async fn send(&self, client: &zk::Client, batch: &[Write]) -> Vec<Answer> {
        let prefix = format!("{}/s-", self.parent);
        let options = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let timeout = self.ctx.request_timeout;
        type Pending<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;
        let pending: Vec<Pending<'_>> = batch
            .iter()
            .map(|w| -> Pending<'_> {
                match w {
                    Write::Create { data, .. } => {
                        let f = client.create(&prefix, data.as_bytes(), &options);
                        Box::pin(async move {
                            match tokio::time::timeout(timeout, f).await {
                                Ok(Ok((_, seq))) => Answer::Created(seq.into_i64()),
                                Ok(Err(e)) => Answer::Failed(e),
                                Err(_) => Answer::TimedOut,
                            }
                        })
                    }
                    Write::Set { data, version, .. } => {
                        let f = client.set_data(&self.register, data.as_bytes(), Some(*version));
                        Box::pin(async move {
                            match tokio::time::timeout(timeout, f).await {
                                Ok(Ok(stat)) => Answer::Set(stat.version),
                                Ok(Err(e)) => Answer::Failed(e),
                                Err(_) => Answer::TimedOut,
                            }
                        })
                    }
                    Write::Delete { path, .. } => {
                        let f = client.delete(path, None);
                        Box::pin(async move {
                            match tokio::time::timeout(timeout, f).await {
                                Ok(Ok(())) => Answer::Deleted,
                                Ok(Err(e)) => Answer::Failed(e),
                                Err(_) => Answer::TimedOut,
                            }
                        })
                    }
                }
            })
            .collect();
        join_all(pending).await
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Ok => "ok",
        Kind::Fail => "fail",
        _ => "info",
    }
}

/// The clients' server: the lowest-numbered follower, as the cluster
/// reports its leader (node 1 if no answer, or on a one-node cluster).
async fn clients_server(ctx: &RunCtx) -> u64 {
    let options = connect_options(ctx);
    let until = Instant::now() + Duration::from_secs(5);
    let n = ctx.zk_servers.len() as u64;
    let leader = match connect_until(&ctx.servers_for(0), &options, until).await {
        Some(admin) => {
            let status = tokio::time::timeout(Duration::from_secs(5), admin.cluster_status()).await;
            let _ = admin.close().await;
            match status {
                Ok(Ok(s)) => s.leader_id,
                _ => 0,
            }
        }
        None => 0,
    };
    (1..=n).find(|&id| id != leader).unwrap_or(1)
}

/// One `read` operation for worker `w`: its parent's children with their
/// data, and its register, read linearizably (new sessions as needed)
/// until it succeeds or [`FINAL_READ_BOUND`] passes.
async fn final_read(ctx: &RunCtx, root: &str, w: usize, processes: &Processes) {
    let parent = format!("{root}/w{w}");
    let register = format!("{root}/reg-w{w}");
    let until = Instant::now() + FINAL_READ_BOUND;
    let options = connect_options(ctx);
    let inv = ctx
        .history
        .invoke(processes.fresh(), "read", json!({ "worker": w }));
    let mut last = String::from("no server took a session");
    let mut attempt = 0;
    while Instant::now() < until {
        let Some(client) = connect_until(&ctx.servers_for(attempt), &options, until).await else {
            break;
        };
        attempt += 1;
        let read = async {
            let (reg, stat) = client.get_data_linearizable(&register).await?;
            let (names, _) = client.get_children_linearizable(&parent).await?;
            let mut children = Vec::with_capacity(names.len());
            for chunk in names.chunks(READ_BATCH) {
                let paths: Vec<String> = chunk.iter().map(|n| format!("{parent}/{n}")).collect();
                let datas = join_all(paths.iter().map(|p| client.get_data(p))).await;
                for (name, d) in chunk.iter().zip(datas) {
                    let (data, _) = d?;
                    children.push(json!([name, String::from_utf8_lossy(&data)]));
                }
            }
            Ok::<_, warden_client::Error>(json!({
                "worker": w,
                "children": children,
                "register": { "version": stat.version, "data": String::from_utf8_lossy(&reg) },
            }))
        };
        match tokio::time::timeout_at(until, read).await {
            Ok(Ok(value)) => {
                let _ = client.close().await;
                ctx.history.ok(&inv, value);
                return;
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "final read bound passed".into(),
        }
        let _ = client.close().await;
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    // A read changes nothing: one that never answered is a `fail`.
    ctx.history.fail(
        &inv,
        json!({ "worker": w }),
        format!("no final read within {FINAL_READ_BOUND:?}: {last}"),
    );
}
