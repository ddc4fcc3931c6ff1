//! The `lease` workload: the HTTP lease-lock API (`POST
//! /api/v1/locks/{name}/acquire|renew|release` on `--http-listen`), the
//! way its users run it. Clients spread over every server; each loops:
//! acquire one shared lock (TTL = the run's session timeout, a few seconds
//! of wait), write through an in-harness fenced resource with the fencing
//! token, sometimes renew and write again, release.
//!
//! A round has its own client id (`w<worker>-r<round>`), and every retry of
//! the round's acquire, renew or release reuses it, as the API asks of a
//! caller after a timeout, a dropped connection or a 503: an acquire by a
//! client id that holds the lease answers that grant again, one that waits
//! takes up its place. Workers have home servers round-robin, where each
//! round starts; a retry goes to the next server. Every HTTP request
//! is one operation: `ok` (a 200), `fail` (an answer saying it did not
//! happen: a 409, a 400, or a connection refused before anything was sent)
//! or `info` (a 503, a 5xx, a timeout or a connection that closed without
//! a complete answer: it may have happened). After an `info` the worker
//! goes on as a new process (`worker + k * concurrency`), as in Jepsen.
//!
//! Now and then (at most one at a time, [`ZOMBIE_SPACING`] apart) a holder
//! stalls past its TTL before writing, renewing and releasing: a zombie,
//! whose lease lapses and is granted to the next client. Its late write
//! must be refused by the fence once the next holder wrote, its renew and
//! release refused; and the overlap of its hold with the next grant is a
//! note, not an anomaly, because the next grant came a TTL after its last
//! successful acquire. Every other such holder (the first one included)
//! is gone instead: a crashed client that never writes, renews or
//! releases again (its worker goes on as a new process), so only the
//! server's TTL expiry frees the lease, which is what `lease-outlived-ttl`
//! judges (a zombie that comes back releases its lease itself, often
//! before the server's expiry would).
//!
//! With `--unsafe-resource` the resource does not fence: it accepts every
//! write, so the order of the tokens it accepted is the order the server's
//! grants and the clients' writes made, unfiltered, and the checker judges
//! it (a safe fence refuses a lower token, so it can never go back).
//!
//! The checker ([`check`](mod@check), on [`check_lease`]) rebuilds the grants (one per
//! client id and token) and asks: tokens unique; tokens increasing in grant
//! order over every pair of grants; holds (from the acquire's `ok` to the
//! release's invocation) never overlapping unless the later grant came at
//! least the TTL after the earlier holder's last successful acquire or
//! renewal (then a note); the resource never accepting a lower token after
//! a higher one from a write made within the writer's lease (one made past
//! it, a zombie's, is a note: only a fence stops that); a lease held by
//! nobody entitled to it no longer than [`EXPIRY_BOUND`] past its holder's
//! last confirmation, across leader changes ([`lease_outlived`]); a grant
//! in every long enough stretch in which a majority of nodes was up and
//! connected.
//!
//! [`lease_outlived`]: crate::checkers::lease_outlived

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::checkers::{check_lease, lease_free_by, lease_outlived, LeaseAnomaly, LeaseGrant};
use crate::history::{
    count_ops, outcome_counts, pair, Event, History, Invocation, Kind, Op, Process,
};
use crate::http::{post_json, Reply};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx};
use crate::workloads::lock::{fence_accepted, keep_first_per_kind, no_grant_anomalies, Fence};

/// The lock every client contends for.
pub const LEASE_NAME: &str = "jepsen-lease";
/// How long an acquire waits for the lock (`wait_timeout_ms`).
pub const WAIT: Duration = Duration::from_secs(3);
/// How much longer than the wait (plus a request timeout) an acquire may
/// take before the harness stops waiting and records `info`.
const ACQUIRE_SLACK: Duration = Duration::from_secs(2);
/// How long a holder keeps the lock, chosen at random in this range.
const HOLD_MS_MIN: u64 = 2;
const HOLD_MS_MAX: u64 = 40;
/// One round in this many renews its lease during the hold.
const RENEW_ODDS: u32 = 4;
/// One grant in this many becomes a zombie, when none has been for
/// [`ZOMBIE_SPACING`].
const ZOMBIE_ODDS: u32 = 20;
/// Least time from one zombie's end to the next zombie: each one stalls
/// the lock for its TTL.
const ZOMBIE_SPACING: Duration = Duration::from_secs(15);
/// When the first zombie starts (the first grant from then on): early
/// enough that a 30-second run has one or two.
const ZOMBIE_FIRST: Duration = Duration::from_secs(5);
/// How far past its TTL a zombie stalls, chosen at random in this range.
const ZOMBIE_LATE_MS_MIN: u64 = 300;
const ZOMBIE_LATE_MS_MAX: u64 = 1500;
/// Most attempts at one release (each after a lost answer); the lease
/// lapses by itself anyway.
const RELEASE_ATTEMPTS_MAX: u32 = 5;
/// Pause after an answer that asks for a retry (503, lost), so that a
/// cluster refusing everything is not flooded.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Liveness bound beyond twice the TTL plus the wait (see [`liveness_bound`]).
const LIVENESS_SLACK: Duration = Duration::from_secs(5);

/// Drives clients until `ctx.deadline`, recording every operation; with
/// `unfenced` (`--unsafe-resource`) the resource accepts every write.
pub async fn run(ctx: &RunCtx, unfenced: bool) -> Result<(), String> {
    if ctx.http_servers.is_empty() {
        return Err("no HTTP addresses for the lease workload".into());
    }
    let shared = Arc::new(Shared {
        fence: Fence::new(!unfenced),
        next_zombie: std::sync::Mutex::new(Instant::now() + ZOMBIE_FIRST),
        zombies: std::sync::atomic::AtomicU64::new(0),
    });
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..ctx.concurrency.max(1) {
        let ctx = ctx.clone();
        let shared = shared.clone();
        workers.spawn(async move { Worker::new(ctx, worker, shared).run().await });
    }
    let mut failed = Vec::new();
    while let Some(done) = workers.join_next().await {
        if let Err(e) = done {
            failed.push(e.to_string());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("lease workers failed: {}", failed.join("; ")))
    }
}

/// What the workers share: the fenced resource, and when the next zombie
/// may start.
struct Shared {
    fence: Fence,
    next_zombie: std::sync::Mutex<Instant>,
    /// Stalled holders so far: the even-numbered ones are gone for good.
    zombies: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// Whether this grant may become a zombie (then none may for a while).
    fn zombie_turn(&self, ttl: Duration) -> bool {
        let mut next = self.next_zombie.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now < *next {
            return false;
        }
        *next = now + ttl + Duration::from_millis(ZOMBIE_LATE_MS_MAX) + ZOMBIE_SPACING;
        true
    }

    /// Whether the stalled holder whose turn it is never comes back.
    fn gone_turn(&self) -> bool {
        self.zombies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(2)
    }
}

/// How one HTTP request ended, for the history.
enum Answer {
    /// 200, with the body.
    Ok(Value),
    /// Certainly not done: the value to record and why.
    Fail(Value, String),
    /// Perhaps done.
    Info(Value, String),
}

struct Worker {
    ctx: RunCtx,
    worker: usize,
    shared: Arc<Shared>,
    rng: StdRng,
    /// Processes this worker has moved on from (after an `info`).
    generation: u64,
    /// Rounds begun (each with its own client id).
    round: u64,
    /// Index into `ctx.http_servers` of the server the next request goes to.
    server: usize,
    ttl: Duration,
}

impl Worker {
    fn new(ctx: RunCtx, worker: usize, shared: Arc<Shared>) -> Worker {
        let rng = StdRng::seed_from_u64(ctx.seed ^ 0x6c65_6173_6500_0000 ^ worker as u64);
        let server = worker % ctx.http_servers.len();
        // The lease's TTL: the session timeout a run's clients ask for,
        // whole milliseconds.
        let ttl = Duration::from_millis(ctx.session_timeout.as_millis().max(1) as u64);
        Worker {
            ctx,
            worker,
            shared,
            rng,
            generation: 0,
            round: 0,
            server,
            ttl,
        }
    }

    fn history(&self) -> &History {
        &self.ctx.history
    }

    fn process(&self) -> Process {
        let n = self.ctx.concurrency.max(1) as u64;
        Process::Client(self.worker as u64 + self.generation * n)
    }

    fn past_deadline(&self) -> bool {
        Instant::now() >= self.ctx.deadline
    }

    /// Node id of the server the next request goes to.
    fn node(&self) -> u64 {
        self.server as u64 + 1
    }

    /// After an answer that may hide a done request: a new process, and the
    /// next server.
    fn moved_on(&mut self) {
        self.generation += 1;
        self.server = (self.server + 1) % self.ctx.http_servers.len();
    }

    async fn run(mut self) {
        while !self.past_deadline() {
            self.round += 1;
            let client_id = format!("w{}-r{}", self.worker, self.round);
            // Every round starts at the worker's home server, so that the
            // clients stay spread over all of them (retries move on).
            self.server = self.worker % self.ctx.http_servers.len();
            let Some(token) = self.acquire(&client_id).await else {
                break;
            };
            self.hold(&client_id, token).await;
            let pause = self.ctx.worker_interval();
            if !pause.is_zero() {
                tokio::time::sleep_until(self.ctx.deadline.min(Instant::now() + pause)).await;
            }
        }
    }

    /// Acquires until granted (`Some(token)`) or past the deadline, every
    /// attempt with `client_id`.
    async fn acquire(&mut self, client_id: &str) -> Option<u64> {
        while !self.past_deadline() {
            let left = self.ctx.deadline.saturating_duration_since(Instant::now());
            let wait = WAIT.min(left).max(Duration::from_millis(100));
            let node = self.node();
            let inv = self.history().invoke(
                self.process(),
                "acquire",
                json!({
                    "lock": LEASE_NAME, "client_id": client_id, "node": node,
                    "ttl_ms": self.ttl.as_millis() as u64, "wait_timeout_ms": wait.as_millis() as u64,
                }),
            );
            let body = json!({
                "client_id": client_id,
                "ttl_ms": self.ttl.as_millis() as u64,
                "wait_timeout_ms": wait.as_millis() as u64,
            });
            let bound = wait + self.ctx.request_timeout + ACQUIRE_SLACK;
            let reply = self.post("acquire", &body, bound).await;
            let base = json!({ "client_id": client_id, "node": node });
            match judge(reply, base) {
                Answer::Ok(v) => {
                    let token = v.get("fencing_token").and_then(Value::as_u64);
                    let granted = v.get("acquired").and_then(Value::as_bool) == Some(true);
                    match token.filter(|_| granted) {
                        Some(token) => {
                            let value = json!({
                                "client_id": client_id, "node": node, "token": token,
                                "expires_at_ms": v.get("expires_at_ms"),
                            });
                            self.history().ok(&inv, value);
                            return Some(token);
                        }
                        None => {
                            let why = format!("200 without a grant: {v}");
                            self.history().info(
                                &inv,
                                json!({ "client_id": client_id, "node": node }),
                                why,
                            );
                            self.moved_on();
                        }
                    }
                }
                Answer::Fail(v, why) => {
                    let refused = v.get("status").and_then(Value::as_u64) == Some(409)
                        && v.get("acquired").and_then(Value::as_bool) == Some(false);
                    if refused {
                        // Not granted within the wait: ask again, same
                        // client id, same server.
                        self.history().fail(&inv, v, why);
                    } else if v.get("status").is_some() {
                        // A 409 that is not a refusal, a 400: not expected
                        // of an acquire; unknown, to be safe.
                        tracing::warn!(client_id, error = %why, "unexpected acquire answer");
                        self.history().info(&inv, v, why);
                        self.moved_on();
                        tokio::time::sleep(RETRY_PAUSE).await;
                    } else {
                        self.history().fail(&inv, v, why);
                        self.server = (self.server + 1) % self.ctx.http_servers.len();
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
                Answer::Info(v, why) => {
                    self.history().info(&inv, v, why);
                    self.moved_on();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
        None
    }

    /// Write, hold (maybe renew and write again, or stall as a zombie),
    /// release.
    async fn hold(&mut self, client_id: &str, token: u64) {
        // The first grant past [`ZOMBIE_FIRST`] stalls for certain; later
        // ones by the odds.
        let odds = self
            .shared
            .zombies
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
            || self.rng.random_ratio(1, ZOMBIE_ODDS);
        let zombie = odds && self.shared.zombie_turn(self.ttl);
        if zombie && self.shared.gone_turn() {
            // Gone (a crashed client): the lease is the server's to
            // expire; this worker carries on as a new process.
            tracing::debug!(client_id, token, "holder gone for good");
            self.moved_on();
            return;
        }
        if zombie {
            // Stalled past the TTL (a GC pause, a swapped-out process):
            // the lease lapses under it, and it carries on regardless.
            let late = self
                .rng
                .random_range(ZOMBIE_LATE_MS_MIN..=ZOMBIE_LATE_MS_MAX);
            tokio::time::sleep(self.ttl + Duration::from_millis(late)).await;
            self.write(client_id, token, true);
            self.renew(client_id, token).await;
            self.write(client_id, token, true);
        } else {
            self.write(client_id, token, false);
            let hold = self.rng.random_range(HOLD_MS_MIN..=HOLD_MS_MAX);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            if self.rng.random_ratio(1, RENEW_ODDS) {
                self.renew(client_id, token).await;
                self.write(client_id, token, false);
            }
        }
        self.release(client_id, token).await;
    }

    /// One write through the fence.
    fn write(&self, client_id: &str, token: u64, zombie: bool) {
        let mut invoke = json!({ "client_id": client_id, "token": token });
        if zombie {
            invoke["zombie"] = json!(true);
        }
        let inv = self.history().invoke(self.process(), "write", invoke);
        match self.shared.fence.write(token) {
            Ok(seq) => self.history().ok(
                &inv,
                json!({ "client_id": client_id, "token": token, "accepted": true, "seq": seq }),
            ),
            Err(highest) => self.history().fail(
                &inv,
                json!({ "client_id": client_id, "token": token, "accepted": false, "highest": highest }),
                format!("Stale: token {token} is older than {highest}, already accepted"),
            ),
        }
    }

    /// One renewal (not retried: the hold goes on either way).
    async fn renew(&mut self, client_id: &str, token: u64) {
        let node = self.node();
        let ttl_ms = self.ttl.as_millis() as u64;
        let inv = self.history().invoke(
            self.process(),
            "renew",
            json!({ "client_id": client_id, "token": token, "node": node, "ttl_ms": ttl_ms }),
        );
        let body = json!({ "client_id": client_id, "fencing_token": token, "ttl_ms": ttl_ms });
        let reply = self.post("renew", &body, self.ctx.request_timeout).await;
        let base = json!({ "client_id": client_id, "token": token, "node": node });
        self.record(&inv, reply, base, |v| {
            (v.get("renewed").and_then(Value::as_bool) == Some(true)
                && v.get("fencing_token").and_then(Value::as_u64) == Some(token))
            .then(|| json!({ "expires_at_ms": v.get("expires_at_ms") }))
        });
    }

    /// Releases, retrying (same client id and token, next server) while
    /// answers are lost.
    async fn release(&mut self, client_id: &str, token: u64) {
        for _ in 0..RELEASE_ATTEMPTS_MAX {
            let node = self.node();
            let inv = self.history().invoke(
                self.process(),
                "release",
                json!({ "client_id": client_id, "token": token, "node": node }),
            );
            let body = json!({ "client_id": client_id, "fencing_token": token });
            let reply = self.post("release", &body, self.ctx.request_timeout).await;
            let base = json!({ "client_id": client_id, "token": token, "node": node });
            let done = self.record(&inv, reply, base, |v| {
                (v.get("released").and_then(Value::as_bool) == Some(true)).then(|| json!({}))
            });
            if done {
                return;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Records a renew's or release's answer (`ok` when `accept` finds the
    /// 200's body right); true unless the outcome is unknown.
    fn record(
        &mut self,
        inv: &Invocation,
        reply: Reply,
        base: Value,
        accept: impl Fn(&Value) -> Option<Value>,
    ) -> bool {
        match judge(reply, base.clone()) {
            Answer::Ok(v) => match accept(&v) {
                Some(extra) => {
                    let mut value = base;
                    if let (Some(to), Some(from)) = (value.as_object_mut(), extra.as_object()) {
                        to.extend(from.clone());
                    }
                    self.history().ok(inv, value);
                    true
                }
                None => {
                    self.history()
                        .info(inv, base, format!("unexpected 200 answer: {v}"));
                    self.moved_on();
                    false
                }
            },
            Answer::Fail(v, why) => {
                self.history().fail(inv, v, why);
                true
            }
            Answer::Info(v, why) => {
                self.history().info(inv, v, why);
                self.moved_on();
                false
            }
        }
    }

    async fn post(&self, op: &str, body: &Value, bound: Duration) -> Reply {
        let addr = &self.ctx.http_servers[self.server];
        let path = format!("/api/v1/locks/{LEASE_NAME}/{op}");
        post_json(addr, &path, body, bound).await
    }
}

/// What an HTTP reply means for the history. `base` (an object) is the
/// value recorded, with the status and the answer's fields added.
fn judge(reply: Reply, base: Value) -> Answer {
    let with = |status: Option<u16>, body: &Value| {
        let mut v = base.clone();
        if let Some(map) = v.as_object_mut() {
            if let Some(s) = status {
                map.insert("status".into(), json!(s));
            }
            for key in ["acquired", "holder"] {
                if let Some(x) = body.get(key) {
                    map.insert(key.into(), x.clone());
                }
            }
        }
        v
    };
    match reply {
        Reply::Answer { status: 200, body } => Answer::Ok(body),
        Reply::Answer { status, body } => {
            let why = format!(
                "{status}: {}",
                body.get("error").and_then(Value::as_str).unwrap_or("")
            );
            let value = with(Some(status), &body);
            match status {
                // Refused by the lock's rules or the arguments: not done.
                400 | 409 => Answer::Fail(value, why),
                // 503 (no quorum, the gateway's session lost) and anything
                // else: the request may have been applied.
                _ => Answer::Info(value, why),
            }
        }
        Reply::NotSent(why) => Answer::Fail(with(None, &Value::Null), why),
        Reply::Lost(why) => Answer::Info(with(None, &Value::Null), why),
    }
}

mod check;
mod planted;
pub use check::{check, liveness_bound, EXPIRY_BOUND};
pub use planted::planted_anomalies;
