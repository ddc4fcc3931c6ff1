//! The `lock` workload: every client, in its own session, takes one named
//! lock (the recipes' [`Mutex`]), writes through an in-harness fenced
//! resource with the grant's fencing token, holds the lock a little, and
//! releases it.
//!
//! Each round is three operations of one process: `acquire` (ok with the
//! grant's token and session), `write` (ok if the fence accepted the token,
//! fail if it refused it as stale) and `release` (whose value says whether
//! the session was seen disconnected or expired during the hold, and
//! whether the guard reported the lock lost). After an `info` the worker
//! drops its client, opens a new session and goes on as a new process
//! (`worker + k * concurrency`), since the unknown operation may still be
//! open.
//!
//! The checker rebuilds the grants from the history and asks:
//! - are tokens unique, and do they increase in grant order?
//! - did two holds overlap in real time? Overlaps where the earlier
//!   holder's session had expired are reported apart, as notes (the holder
//!   was told it lost the lock; that is what the fence is for);
//! - did the fence ever accept a token lower than one it had accepted?
//! - was the lock granted in every long enough stretch without faults?
//!
//! Holds are taken conservatively: from the acquire's completion (when the
//! client learned it held the lock) to the release's invocation (when it
//! stopped using it), so a correct lock never shows an overlap.
//!
//! [`run_unsafe`] drives the same rounds with a client that does not wait
//! for its predecessor and a resource that does not fence; the selftest
//! relies on its history being judged invalid.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, SessionState};
use warden_recipes::{Error as RecipeError, LockLost, Mutex};

use crate::checkers::{check_liveness, check_lock, Grant, LockAnomaly};
use crate::history::{fault_periods, pair, Event, History, Invocation, Kind, Op, Process};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx};

/// The lock every worker contends for.
pub const LOCK_PATH: &str = "/jepsen/lock";
/// Where the unsafe client puts its nodes.
pub const UNSAFE_LOCK_PATH: &str = "/jepsen/unsafe-lock";

/// Longest one acquisition waits before giving up (a `fail`: the waiter's
/// node is deleted). Bounded so that a worker notices the deadline, and so
/// that waiters stuck behind a dead session retry on a fresh one.
const ACQUIRE_WAIT_MAX: Duration = Duration::from_secs(5);
/// How much longer than its own wait (plus a request timeout) an acquire
/// may take before the harness stops waiting and records `info`: the
/// recipe retries steps after connection losses.
const ACQUIRE_SLACK: Duration = Duration::from_secs(3);
/// How long a holder keeps the lock, chosen at random in this range.
const HOLD_MS_MIN: u64 = 2;
const HOLD_MS_MAX: u64 = 40;
/// Pause between attempts to open a session while none will.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How long a retired or finished client gets to close its session, on
/// top of the session timeout (a close that gets through after a fault
/// frees the lock sooner than the session's expiry would).
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Pause after retiring a session, so that a cluster refusing everything
/// at once is not flooded with new sessions.
const RETIRE_PAUSE: Duration = Duration::from_millis(200);
/// Liveness bound beyond twice the session timeout (see [`liveness_bound`]).
const LIVENESS_SLACK: Duration = Duration::from_secs(5);
/// Anomalies (and notes) reported in full per kind; the rest are counted.
const REPORTED_PER_KIND_MAX: usize = 20;
/// In the unsafe run: every this many rounds, a second write uses the
/// previous grant's token.
const UNSAFE_STALE_EVERY: u32 = 3;

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    run_mode(ctx, Mode::Safe).await
}

/// The lock workload with a deliberately unsafe client (takes the lock
/// without waiting for its predecessor, writes with stale tokens): its
/// history must be judged invalid. Used by the selftest.
///
/// The unsafe client creates its ephemeral-sequential node and proceeds at
/// once, with the node's czxid as its token; every
/// [`UNSAFE_STALE_EVERY`]th round it writes a second time with its
/// previous grant's token (a zombie writing late); and its resource trusts
/// every token, as an application without fencing would.
/// With two or more workers the holds overlap; even with one, the stale
/// writes send the accepted tokens backwards.
pub async fn run_unsafe(ctx: &RunCtx) -> Result<(), String> {
    run_mode(ctx, Mode::Unsafe).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Safe,
    Unsafe,
}

async fn run_mode(ctx: &RunCtx, mode: Mode) -> Result<(), String> {
    let fence = Arc::new(Fence::new(mode == Mode::Safe));
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..ctx.concurrency.max(1) {
        let ctx = ctx.clone();
        let fence = fence.clone();
        workers.spawn(async move { Worker::new(ctx, worker, mode, fence).run().await });
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
        Err(format!("lock workers failed: {}", failed.join("; ")))
    }
}

/// The in-harness resource the lock protects: one register that accepts a
/// write only if its token is at least the highest accepted so far (when
/// `fenced`), and numbers the writes it accepts, so that the checker sees
/// them in the resource's own order rather than the history's.
#[derive(Debug)]
pub(crate) struct Fence {
    fenced: bool,
    state: std::sync::Mutex<FenceState>,
}

#[derive(Debug, Default)]
struct FenceState {
    highest: u64,
    accepted: u64,
}

impl Fence {
    pub(crate) fn new(fenced: bool) -> Fence {
        Fence {
            fenced,
            state: std::sync::Mutex::default(),
        }
    }

    /// `Ok(seq)`: accepted as the resource's `seq`th write; `Err(highest)`:
    /// refused, `highest` having been accepted before.
    pub(crate) fn write(&self, token: u64) -> Result<u64, u64> {
        // Plain data behind the lock: a panic elsewhere leaves it usable.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.fenced && token < state.highest {
            return Err(state.highest);
        }
        state.highest = state.highest.max(token);
        state.accepted += 1;
        Ok(state.accepted)
    }
}

/// How one round ended, for the worker's loop.
enum Next {
    /// Go on with the same client and process.
    Continue,
    /// Drop the client, open a new session, move to a new process number.
    Retire,
}

/// What a holder saw of its session during a hold (set by a monitor task).
#[derive(Debug, Default)]
struct SessionSeen {
    disconnected: AtomicBool,
    expired: AtomicBool,
}

impl SessionSeen {
    fn note(&self, state: SessionState) {
        match state {
            SessionState::Connected => {}
            SessionState::Disconnected => self.disconnected.store(true, Ordering::Relaxed),
            SessionState::Expired | SessionState::Closed => {
                self.expired.store(true, Ordering::Relaxed)
            }
        }
    }
}

/// A grant as the worker holds it.
enum Held {
    Mutex(warden_recipes::MutexGuard),
    /// The unsafe client's own node.
    Node(String),
}

struct Worker {
    ctx: RunCtx,
    worker: usize,
    mode: Mode,
    fence: Arc<Fence>,
    rng: StdRng,
    /// How many sessions this worker has retired (its process is
    /// `worker + generation * concurrency`).
    generation: u64,
    /// The last token this worker was granted (the unsafe client's stale
    /// token).
    previous_token: Option<u64>,
    /// Rounds granted so far.
    rounds: u32,
}

impl Worker {
    fn new(ctx: RunCtx, worker: usize, mode: Mode, fence: Arc<Fence>) -> Worker {
        let rng = StdRng::seed_from_u64(ctx.seed ^ worker as u64);
        Worker {
            ctx,
            worker,
            mode,
            fence,
            rng,
            generation: 0,
            previous_token: None,
            rounds: 0,
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

    async fn run(mut self) {
        while !self.past_deadline() {
            let Some(client) = self.connect().await else {
                break;
            };
            let locker = match self.mode {
                Mode::Safe => match Mutex::new(client.clone(), LOCK_PATH) {
                    Ok(m) => Locker::Mutex(m),
                    Err(e) => {
                        tracing::error!(error = %e, "lock path refused");
                        return;
                    }
                },
                Mode::Unsafe => Locker::Unsafe,
            };
            loop {
                if self.past_deadline() {
                    drop(locker);
                    let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
                    return;
                }
                match self.round(&client, &locker).await {
                    Next::Continue => {}
                    Next::Retire => break,
                }
                let pause = self.ctx.worker_interval();
                if !pause.is_zero() {
                    tokio::time::sleep_until(self.ctx.deadline.min(Instant::now() + pause)).await;
                }
            }
            drop(locker);
            close_in_background(client, self.ctx.session_timeout);
            self.generation += 1;
            tokio::time::sleep(RETIRE_PAUSE).await;
        }
    }

    /// A new session, retrying until one opens or the deadline passes.
    async fn connect(&self) -> Option<Client> {
        let servers = self.ctx.servers_for(self.worker);
        let options = ConnectOptions {
            session_timeout: self.ctx.session_timeout,
            request_timeout: self.ctx.request_timeout,
            ..ConnectOptions::default()
        };
        while !self.past_deadline() {
            match Client::connect(&servers, options.clone()).await {
                Ok(client) => return Some(client),
                Err(e) => {
                    tracing::debug!(worker = self.worker, error = %e, "connect failed");
                    tokio::time::sleep(CONNECT_RETRY_PAUSE).await;
                }
            }
        }
        None
    }

    /// acquire, write, hold, release.
    async fn round(&mut self, client: &Client, locker: &Locker) -> Next {
        let process = self.process();
        let inv = self
            .history()
            .invoke(process, "acquire", json!({ "lock": locker.path() }));
        let left = self.ctx.deadline.saturating_duration_since(Instant::now());
        let wait = ACQUIRE_WAIT_MAX.min(left).max(Duration::from_millis(100));
        let bound = wait + self.ctx.request_timeout + ACQUIRE_SLACK;
        let (held, token) = match tokio::time::timeout(bound, locker.acquire(client, wait)).await {
            Err(_) => {
                let why = format!("acquire took longer than {} ms", bound.as_millis());
                self.history().info(&inv, Value::Null, why);
                return Next::Retire;
            }
            Ok(Ok(None)) => {
                let why = format!("not granted within {} ms", wait.as_millis());
                self.history().fail(&inv, Value::Null, why);
                return Next::Continue;
            }
            Ok(Err(e)) => return self.acquire_failed(client, &inv, e),
            Ok(Ok(Some(grant))) => grant,
        };
        let session = client.session_id();
        self.history()
            .ok(&inv, json!({ "token": token, "session": session }));

        // Watch the session for the whole hold; the receiver keeps the
        // latest state, and the terminal ones are never missed.
        let seen = Arc::new(SessionSeen::default());
        let monitor = {
            let seen = seen.clone();
            let mut events = client.session_events();
            tokio::spawn(async move {
                loop {
                    let state = *events.borrow_and_update();
                    seen.note(state);
                    if state.is_terminal() || events.changed().await.is_err() {
                        return;
                    }
                }
            })
        };
        let lost = match &held {
            Held::Mutex(guard) => Some(guard.lost()),
            Held::Node(_) => None,
        };

        self.rounds += 1;
        self.write(process, token, token);
        // `is_multiple_of` needs Rust 1.87; the workspace supports 1.85.
        #[allow(clippy::manual_is_multiple_of)]
        let stale_round = self.rounds % UNSAFE_STALE_EVERY == 0;
        if self.mode == Mode::Unsafe && stale_round {
            // A zombie of the previous grant, writing late.
            if let Some(previous) = self.previous_token {
                self.write(process, token, previous);
            }
        }
        self.previous_token = Some(token);

        let hold = Duration::from_millis(self.rng.random_range(HOLD_MS_MIN..=HOLD_MS_MAX));
        let lost_reason: Option<LockLost> = match lost {
            Some(lost) => tokio::select! {
                _ = tokio::time::sleep(hold) => None,
                reason = lost => Some(reason),
            },
            None => {
                tokio::time::sleep(hold).await;
                None
            }
        };

        let rel = self
            .history()
            .invoke(process, "release", json!({ "token": token }));
        let released = tokio::time::timeout(
            self.ctx.request_timeout + ACQUIRE_SLACK,
            locker.release(client, held),
        )
        .await;
        monitor.abort();
        seen.note(*client.session_events().borrow());
        let expired =
            seen.expired.load(Ordering::Relaxed) || lost_reason == Some(LockLost::SessionExpired);
        let value = json!({
            "token": token,
            "session": session,
            "expired": expired,
            "disconnected": seen.disconnected.load(Ordering::Relaxed),
            "lost": lost_reason.map(|l| l.to_string()),
        });
        match released {
            Ok(Ok(())) => {
                self.history().ok(&rel, value);
                if expired {
                    Next::Retire
                } else {
                    Next::Continue
                }
            }
            Ok(Err(e)) => {
                self.history().info(&rel, value, e);
                Next::Retire
            }
            Err(_) => {
                self.history()
                    .info(&rel, value, "release did not return in time");
                Next::Retire
            }
        }
    }

    fn acquire_failed(&self, client: &Client, inv: &Invocation, e: RecipeError) -> Next {
        let terminal = client.session_events().borrow().is_terminal();
        if definite_refusal(&e) && !terminal {
            self.history().fail(inv, Value::Null, e.to_string());
            Next::Continue
        } else {
            self.history().info(inv, Value::Null, e.to_string());
            Next::Retire
        }
    }

    /// One write through the fence with `write_token`, during the grant of
    /// `token`.
    fn write(&self, process: Process, token: u64, write_token: u64) {
        let inv = self.history().invoke(
            process,
            "write",
            json!({ "token": write_token, "grant": token }),
        );
        match self.fence.write(write_token) {
            Ok(seq) => self.history().ok(
                &inv,
                json!({ "token": write_token, "grant": token, "accepted": true, "seq": seq }),
            ),
            Err(highest) => self.history().fail(
                &inv,
                json!({ "token": write_token, "grant": token, "accepted": false, "highest": highest }),
                format!("Stale: token {write_token} is older than {highest}, already accepted"),
            ),
        }
    }
}

/// Whether an acquire error means the lock was certainly not granted and
/// the session is fine (anything else is `info`). `NotHolder` from an
/// acquire means our node vanished while we waited: the session ended.
fn definite_refusal(error: &RecipeError) -> bool {
    if matches!(error, RecipeError::NotHolder(_)) {
        return false;
    }
    !matches!(
        error.code(),
        ErrorCode::ConnectionLoss
            | ErrorCode::OperationTimeout
            | ErrorCode::SessionExpired
            | ErrorCode::NotReady
            | ErrorCode::Throttled
    )
}

/// How a worker takes and gives back the lock.
enum Locker {
    Mutex(Mutex),
    /// Creates a node and proceeds at once.
    Unsafe,
}

impl Locker {
    fn path(&self) -> &str {
        match self {
            Locker::Mutex(m) => m.path(),
            Locker::Unsafe => UNSAFE_LOCK_PATH,
        }
    }

    /// `Ok(None)`: not granted within `wait` (nothing left behind).
    async fn acquire(
        &self,
        client: &Client,
        wait: Duration,
    ) -> Result<Option<(Held, u64)>, RecipeError> {
        match self {
            Locker::Mutex(m) => Ok(m.acquire_timeout(wait).await?.map(|guard| {
                let token = guard.fencing_token();
                (Held::Mutex(guard), token)
            })),
            Locker::Unsafe => {
                let base = format!("{UNSAFE_LOCK_PATH}/n-");
                let mut created = client
                    .create(&base, b"", CreateOptions::ephemeral_sequential())
                    .await;
                if matches!(&created, Err(e) if e.code() == ErrorCode::NoNode) {
                    ensure_parents(client, UNSAFE_LOCK_PATH).await?;
                    created = client
                        .create(&base, b"", CreateOptions::ephemeral_sequential())
                        .await;
                }
                let (node, stat) = created?;
                Ok(Some((Held::Node(node), stat.czxid)))
            }
        }
    }

    async fn release(&self, client: &Client, held: Held) -> Result<(), String> {
        match held {
            Held::Mutex(guard) => guard.release().await.map_err(|e| e.to_string()),
            Held::Node(node) => match client.delete(&node, None).await {
                Ok(()) => Ok(()),
                Err(e) if e.code() == ErrorCode::NoNode => Ok(()),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

/// Creates `path` and its parents as persistent nodes (existing is fine).
async fn ensure_parents(client: &Client, path: &str) -> Result<(), warden_client::Error> {
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        match client.create(&at, b"", CreateOptions::persistent()).await {
            Ok(_) => {}
            Err(e) if e.code() == ErrorCode::NodeExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes `client`'s session without waiting for it (a session that cannot
/// be closed expires on the server).
fn close_in_background(client: Client, session_timeout: Duration) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(session_timeout + CLOSE_WAIT, client.close()).await;
    });
}

/// The liveness bound: the longest stretch without faults in which a
/// correct cluster may grant the lock to nobody.
///
/// After a fault ends, a grant may have to wait for a session that lost
/// its server during the fault: a holder, or a waiter queued ahead whose
/// client gave up on it, keeps its ephemeral node until the session
/// expires, up to one session timeout after the server last heard from it
/// — and a leader elected meanwhile restarts the expiry clocks, which can
/// cost a second session timeout. The extra 5 s cover the election itself,
/// a waiter's reconnect and re-listing, and scheduling on a loaded
/// two-core CI machine running a debug build. A healthy cluster grants the
/// lock many times a second, so a stretch this long without a grant means
/// the lock is stuck.
pub fn liveness_bound(session_timeout: Duration) -> Duration {
    session_timeout * 2 + LIVENESS_SLACK
}

/// A grant rebuilt from the history, with the operations that show it.
struct GrantOps {
    grant: Grant,
    acquire: u64,
    release: Option<u64>,
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let ops = pair(events);
    let end = events
        .iter()
        .map(|e| e.time)
        .max()
        .unwrap_or(0)
        .max(ctx.end);
    let mut by_process: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        if let Some(p) = op.invoke.process.client() {
            by_process.entry(p).or_default().push(op);
        }
    }

    let mut grants: Vec<GrantOps> = Vec::new();
    for (&process, ops) in &by_process {
        for (i, op) in ops.iter().enumerate() {
            if op.invoke.f != "acquire" || op.outcome() != Kind::Ok {
                continue;
            }
            let Some(done) = &op.complete else { continue };
            let value = &done.value;
            let (Some(token), session) = (
                value.get("token").and_then(Value::as_u64),
                value.get("session").and_then(Value::as_u64).unwrap_or(0),
            ) else {
                continue;
            };
            // The hold ends when the process invokes its release, or at its
            // next acquire (never expected), or with the history.
            let next = ops[i + 1..]
                .iter()
                .find(|o| o.invoke.f == "release" || o.invoke.f == "acquire");
            let release = next.filter(|o| o.invoke.f == "release");
            let released_ns = next.map(|o| o.invoke.time).unwrap_or(end);
            grants.push(GrantOps {
                grant: Grant {
                    process,
                    session_id: session,
                    token,
                    acquired_ns: done.time,
                    released_ns,
                    session_expired: session_ended(release.copied()),
                },
                acquire: op.invoke.index,
                release: release.map(|o| o.invoke.index),
            });
        }
    }

    // The fence's accepted writes, in its own order.
    let mut accepted: Vec<(u64, u64, u64)> = ops
        .iter()
        .filter(|o| o.invoke.f == "write" && o.outcome() == Kind::Ok)
        .filter_map(|o| {
            let v = o.value();
            Some((
                v.get("seq")
                    .and_then(Value::as_u64)
                    .unwrap_or(o.invoke.index),
                v.get("token").and_then(Value::as_u64)?,
                o.invoke.index,
            ))
        })
        .collect();
    accepted.sort_unstable();
    let fence_tokens: Vec<u64> = accepted.iter().map(|&(_, t, _)| t).collect();

    let plain: Vec<Grant> = grants.iter().map(|g| g.grant.clone()).collect();
    let mut anomalies = Vec::new();
    let mut notes = Vec::new();
    let ops_of = |g: &Grant| -> Vec<u64> {
        grants
            .iter()
            .filter(|o| o.grant == *g)
            .flat_map(|o| std::iter::once(o.acquire).chain(o.release))
            .collect()
    };
    for found in check_lock(&plain, &fence_tokens) {
        match found {
            LockAnomaly::DuplicateToken { token } => anomalies.push(Anomaly {
                kind: "duplicate-token".into(),
                message: format!("token {token} was granted more than once"),
                ops: grants
                    .iter()
                    .filter(|g| g.grant.token == token)
                    .map(|g| g.acquire)
                    .collect(),
                detail: json!({ "token": token }),
            }),
            LockAnomaly::TokenNotIncreasing { earlier, later } => anomalies.push(Anomaly {
                kind: "token-order".into(),
                message: format!(
                    "token {} was granted after token {} (grants in real-time order)",
                    later.token, earlier.token
                ),
                ops: [ops_of(&earlier), ops_of(&later)].concat(),
                detail: json!({ "earlier": grant_json(&earlier), "later": grant_json(&later) }),
            }),
            LockAnomaly::Overlap { a, b } => anomalies.push(Anomaly {
                kind: "overlap".into(),
                message: format!(
                    "process {} held the lock (token {}) while process {} did (token {}), neither session expired",
                    a.process, a.token, b.process, b.token
                ),
                ops: [ops_of(&a), ops_of(&b)].concat(),
                detail: json!({ "a": grant_json(&a), "b": grant_json(&b) }),
            }),
            LockAnomaly::OverlapAfterExpiry { a, b } => notes.push(Anomaly {
                kind: "overlap-after-expiry".into(),
                message: format!(
                    "process {} held the lock (token {}) while process {} did (token {}), after a session expired or lost touch",
                    a.process, a.token, b.process, b.token
                ),
                ops: [ops_of(&a), ops_of(&b)].concat(),
                detail: json!({ "a": grant_json(&a), "b": grant_json(&b) }),
            }),
            LockAnomaly::FenceWentBack {
                accepted_before,
                accepted_now,
            } => anomalies.push(Anomaly {
                kind: "fence-went-back".into(),
                message: format!(
                    "the fenced resource accepted token {accepted_now} after accepting {accepted_before}"
                ),
                ops: accepted
                    .iter()
                    .filter(|&&(_, t, _)| t == accepted_before || t == accepted_now)
                    .map(|&(_, _, index)| index)
                    .collect(),
                detail: json!({ "accepted_before": accepted_before, "accepted_now": accepted_now }),
            }),
        }
    }

    // Liveness, over the time clients were asking for the lock.
    let acquires: Vec<&Op> = ops.iter().filter(|o| o.invoke.f == "acquire").collect();
    let from = acquires.iter().map(|o| o.invoke.time).min().unwrap_or(0);
    let to = acquires.iter().map(|o| o.invoke.time).max().unwrap_or(0);
    // Only faults that take the majority down or apart excuse a stall: with
    // a majority up and connected, the lock must keep being granted.
    let mut faults: Vec<(u64, Option<u64>)> = ctx
        .faults
        .iter()
        .chain(fault_periods(events).iter())
        .filter(|f| !f.majority_kept())
        .map(|f| (f.start, f.end))
        .collect();
    faults.dedup();
    let bound = liveness_bound(ctx.session_timeout);
    let granted_at: Vec<u64> = plain.iter().map(|g| g.acquired_ns).collect();
    anomalies.extend(no_grant_anomalies(
        &granted_at,
        &faults,
        (from, to),
        bound,
        &acquires,
        "without a fault",
    ));

    let count = |f: &str, kind: Kind| {
        ops.iter()
            .filter(|o| o.invoke.f == f && o.outcome() == kind)
            .count()
    };
    let (anomalies, anomaly_counts) = keep_first_per_kind(anomalies);
    let (notes, note_counts) = keep_first_per_kind(notes);
    let stats = json!({
        "acquire": { "ok": count("acquire", Kind::Ok), "fail": count("acquire", Kind::Fail), "info": count("acquire", Kind::Info) },
        "write": { "accepted": count("write", Kind::Ok), "refused": count("write", Kind::Fail) },
        "release": { "ok": count("release", Kind::Ok), "info": count("release", Kind::Info) },
        "grants": plain.len(),
        "grants_session_ended": plain.iter().filter(|g| g.session_expired).count(),
        "processes": by_process.len(),
        "anomalies_by_kind": anomaly_counts,
        "notes_by_kind": note_counts,
        "liveness_bound_ms": bound.as_millis() as u64,
    });
    CheckResult::from_anomalies(anomalies, notes, stats)
}

/// Keeps the first [`REPORTED_PER_KIND_MAX`] anomalies of each kind (a
/// broken lock overlaps thousands of times; the first few tell the story)
/// and counts them all.
pub(crate) fn keep_first_per_kind(all: Vec<Anomaly>) -> (Vec<Anomaly>, BTreeMap<String, usize>) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut kept = Vec::new();
    for a in all {
        let n = counts.entry(a.kind.clone()).or_default();
        *n += 1;
        if *n <= REPORTED_PER_KIND_MAX {
            kept.push(a);
        }
    }
    (kept, counts)
}

/// Whether a grant's session may have ended during the hold, which excuses
/// an overlap: the release saw the session expire (or the lock lost to
/// expiry), or the release did not complete and the session had lost touch
/// (or the release never happened): the session may have expired without
/// the client hearing of it yet. A release that completed while the
/// session lived proves the session (and its node) outlived the hold.
fn session_ended(release: Option<&Op>) -> bool {
    let Some(release) = release else {
        return true;
    };
    let value = release.complete.as_ref().map(|c| &c.value);
    let flag = |name: &str| {
        value
            .and_then(|v| v.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let lost_to_expiry = value
        .and_then(|v| v.get("lost"))
        .and_then(Value::as_str)
        .is_some_and(|l| l == LockLost::SessionExpired.to_string());
    let unknown = value.is_none_or(|v| v.get("disconnected").is_none());
    flag("expired")
        || lost_to_expiry
        || (release.outcome() != Kind::Ok && (flag("disconnected") || unknown))
}

fn grant_json(g: &Grant) -> Value {
    json!({
        "process": g.process,
        "session": g.session_id,
        "token": g.token,
        "acquired_ns": g.acquired_ns,
        "released_ns": g.released_ns,
        "session_ended": g.session_expired,
    })
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "overlapping holds",
            Planted::new()
                .round(0, 0, 10, 1, 30)
                .round(1, 20, 12, 2, 40)
                .events(),
        ),
        (
            "duplicate token",
            Planted::new()
                .round(0, 0, 10, 1, 10)
                .round(1, 20, 10, 2, 30)
                .events(),
        ),
        (
            "token going back at the fence",
            Planted::new()
                .round(0, 0, 10, 1, 10)
                .round(1, 20, 12, 2, 30)
                // Process 0 writes again with its old token, long after
                // its release, and the resource takes it.
                .write(0, 40, 10, 3)
                .events(),
        ),
        (
            "decreasing tokens in grant order",
            // (No writes: the fence would have refused the second.)
            Planted::new()
                .round(0, 0, 12, 0, 10)
                .round(1, 20, 10, 0, 30)
                .events(),
        ),
        ("no grant in a long healthy window", {
            // One grant, then ten minutes of refusals with no fault: far
            // beyond the bound for any session timeout a run uses.
            let mut p = Planted::new().round(0, 0, 10, 1, 10);
            for k in 1..=20u64 {
                p = p.refused(k % 3, k * 30_000);
            }
            p.events()
        }),
    ]
}

/// Builds small lock histories by hand (times in milliseconds).
struct Planted {
    events: Vec<Event>,
}

const MS: u64 = 1_000_000;

impl Planted {
    fn new() -> Planted {
        Planted { events: Vec::new() }
    }

    fn push(mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) -> Planted {
        let time = at_ms * MS;
        self.events.push(Event {
            index: 0,
            process: Process::Client(process),
            kind,
            f: f.to_string(),
            value,
            time,
            mono_ns: time,
            wall_ns: 0,
            error: (kind == Kind::Fail).then(|| "refused".to_string()),
        });
        self
    }

    /// A full round by `process`: granted `token` at `from_ms`, one write
    /// (fence sequence `seq`; none if 0), released at `to_ms`.
    fn round(self, process: u64, from_ms: u64, token: u64, seq: u64, to_ms: u64) -> Planted {
        let session = 100 + process;
        let released = json!({
            "token": token, "session": session, "expired": false,
            "disconnected": false, "lost": null,
        });
        let granted = self
            .push(process, Kind::Invoke, "acquire", Value::Null, from_ms)
            .push(
                process,
                Kind::Ok,
                "acquire",
                json!({ "token": token, "session": session }),
                from_ms + 1,
            );
        let written = if seq == 0 {
            granted
        } else {
            granted.write(process, from_ms + 2, token, seq)
        };
        written
            .push(
                process,
                Kind::Invoke,
                "release",
                json!({ "token": token }),
                to_ms,
            )
            .push(process, Kind::Ok, "release", released, to_ms + 1)
    }

    /// A write the fence accepted as its `seq`th.
    fn write(self, process: u64, at_ms: u64, token: u64, seq: u64) -> Planted {
        self.push(
            process,
            Kind::Invoke,
            "write",
            json!({ "token": token }),
            at_ms,
        )
        .push(
            process,
            Kind::Ok,
            "write",
            json!({ "token": token, "accepted": true, "seq": seq }),
            at_ms,
        )
    }

    /// An acquire that was refused (its wait ran out).
    fn refused(self, process: u64, at_ms: u64) -> Planted {
        self.push(process, Kind::Invoke, "acquire", Value::Null, at_ms)
            .push(process, Kind::Fail, "acquire", Value::Null, at_ms + 5_000)
    }

    /// The events in time order, numbered.
    fn events(mut self) -> Vec<Event> {
        self.events.sort_by_key(|e| e.time);
        for (i, e) in self.events.iter_mut().enumerate() {
            e.index = i as u64;
        }
        self.events
    }
}

/// A `no-grant-while-healthy` anomaly for every stretch of `bound` or more
/// within `span` with no grant (`granted_at`) and no fault in force
/// (`faults`, see [`check_liveness`]), with the acquires invoked in it;
/// `healthy` says what the stretch was ("without a fault").
pub(crate) fn no_grant_anomalies(
    granted_at: &[u64],
    faults: &[(u64, Option<u64>)],
    (from, to): (u64, u64),
    bound: Duration,
    acquires: &[&Op],
    healthy: &str,
) -> Vec<Anomaly> {
    let bound_ns = bound.as_nanos() as u64;
    check_liveness(granted_at, faults, from, to, bound_ns)
        .into_iter()
        .map(|w| Anomaly {
            kind: "no-grant-while-healthy".into(),
            message: format!(
                "no grant for {:.1} s {healthy} (bound {:.1} s)",
                (w.end - w.start) as f64 / 1e9,
                bound.as_secs_f64()
            ),
            ops: acquires
                .iter()
                .filter(|o| o.invoke.time >= w.start && o.invoke.time <= w.end)
                .map(|o| o.invoke.index)
                .collect(),
            detail: json!({ "start_ns": w.start, "end_ns": w.end, "bound_ns": bound_ns }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;

    fn ctx() -> CheckCtx {
        CheckCtx {
            faults: Vec::new(),
            session_timeout: Duration::from_secs(10),
            end: 0,
        }
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        for (name, events) in planted_anomalies() {
            let result = check(&events, &ctx());
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result:?}");
            assert_eq!(result.anomalies.len(), 1, "{name}: {:?}", result.anomalies);
        }
    }

    #[test]
    fn planted_anomalies_are_of_the_right_kind() {
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(_, events)| check(&events, &ctx()).anomalies[0].kind.clone())
            .collect();
        assert_eq!(
            kinds,
            [
                "overlap",
                "duplicate-token",
                "fence-went-back",
                "token-order",
                "no-grant-while-healthy"
            ]
        );
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Planted::new()
            .round(0, 0, 10, 1, 10)
            .round(1, 20, 12, 2, 30)
            .round(0, 40, 15, 3, 50)
            .refused(2, 45)
            .events();
        let result = check(&events, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert!(result.notes.is_empty());
        assert_eq!(result.stats["grants"], 3);
        assert_eq!(result.stats["acquire"]["fail"], 1);
    }

    #[test]
    fn overlap_after_expiry_is_a_note() {
        let mut events = Planted::new()
            .round(0, 0, 10, 1, 30)
            .round(1, 20, 12, 2, 40)
            .events();
        // Process 0's release saw its session expire.
        let release = events
            .iter_mut()
            .find(|e| e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(0))
            .unwrap();
        release.value["expired"] = json!(true);
        let result = check(&events, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1);
        assert_eq!(result.notes[0].kind, "overlap-after-expiry");
    }

    #[test]
    fn a_release_lost_in_a_disconnect_excuses_but_a_clean_one_does_not() {
        let base = Planted::new()
            .round(0, 0, 10, 1, 30)
            .round(1, 20, 12, 2, 40)
            .events();
        let mut disconnected_ok = base.clone();
        for e in disconnected_ok.iter_mut() {
            if e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(0) {
                e.value["disconnected"] = json!(true);
            }
        }
        // Disconnected, yet the release went through: the session lived,
        // so the overlap is the lock's fault.
        assert_eq!(check(&disconnected_ok, &ctx()).valid, Validity::Invalid);
        let mut disconnected_info = disconnected_ok;
        for e in disconnected_info.iter_mut() {
            if e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(0) {
                e.kind = Kind::Info;
            }
        }
        let result = check(&disconnected_info, &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1);
    }

    #[test]
    fn a_refused_stale_write_is_fine() {
        let mut events = Planted::new()
            .round(0, 0, 10, 1, 10)
            .round(1, 20, 12, 2, 30)
            .events();
        let t = events.last().unwrap().time;
        events.push(Event {
            index: events.len() as u64,
            process: Process::Client(0),
            kind: Kind::Invoke,
            f: "write".into(),
            value: json!({ "token": 10 }),
            time: t + MS,
            mono_ns: t + MS,
            wall_ns: 0,
            error: None,
        });
        events.push(Event {
            index: events.len() as u64,
            process: Process::Client(0),
            kind: Kind::Fail,
            f: "write".into(),
            value: json!({ "token": 10, "accepted": false, "highest": 12 }),
            time: t + 2 * MS,
            mono_ns: t + 2 * MS,
            wall_ns: 0,
            error: Some("Stale".into()),
        });
        assert_eq!(check(&events, &ctx()).valid, Validity::Valid);
    }

    #[test]
    fn faults_excuse_a_long_stall() {
        // Faults that took the majority down or apart excuse it...
        let result = check(&with_kill(Value::Null), &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        let lost = json!({"nodes": [1, 2], "majority_kept": false});
        let result = check(&with_kill(lost), &ctx());
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        // ...but with a majority up and connected, the lock must be granted.
        let kept = json!({"nodes": [1], "majority_kept": true});
        let result = check(&with_kill(kept), &ctx());
        assert_eq!(result.valid, Validity::Invalid, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "no-grant-while-healthy");
    }

    /// The planted stall with a kill over it whose value is `value`.
    fn with_kill(value: Value) -> Vec<Event> {
        let mut events = planted_anomalies().pop().unwrap().1;
        // A kill from just after the grant to past the last refusal.
        let n = events.len() as u64;
        for (i, (kind, f, at_ms)) in [
            (Kind::Invoke, "kill", 20),
            (Kind::Ok, "kill", 21),
            (Kind::Invoke, "restart", 700_000),
            (Kind::Ok, "restart", 700_001),
        ]
        .into_iter()
        .enumerate()
        {
            events.push(Event {
                index: n + i as u64,
                process: Process::NEMESIS,
                kind,
                f: f.into(),
                value: if f == "kill" {
                    value.clone()
                } else {
                    Value::Null
                },
                time: at_ms * MS,
                mono_ns: at_ms * MS,
                wall_ns: 0,
                error: None,
            });
        }
        events.sort_by_key(|e| e.time);
        events
    }

    #[test]
    fn the_fence_refuses_older_tokens_unless_unfenced() {
        let fenced = Fence::new(true);
        assert_eq!(fenced.write(5), Ok(1));
        assert_eq!(fenced.write(5), Ok(2));
        assert_eq!(fenced.write(4), Err(5));
        assert_eq!(fenced.write(9), Ok(3));
        let trusting = Fence::new(false);
        assert_eq!(trusting.write(5), Ok(1));
        assert_eq!(trusting.write(4), Ok(2));
    }
}
