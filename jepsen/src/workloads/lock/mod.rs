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
//! - are tokens unique, and do they increase in grant order over every
//!   pair of grants (one known to its holder before the other's acquire
//!   was invoked)?
//! - did two holds overlap in real time? An overlap is reported apart, as
//!   a note, only when the earlier holder's session may have ended *and*
//!   the later grant came at least the session timeout less 1 s after the
//!   earlier holder's acquire (no server expires a session sooner; see
//!   [`expiry_excuses`](crate::checkers::expiry_excuses)): the holder was
//!   told it lost the lock, and that is what the fence is for;
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
use crate::history::{count_ops, pair, Event, History, Invocation, Kind, Op, Process};
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
pub(crate) fn definite_refusal(error: &RecipeError) -> bool {
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
pub(crate) fn close_in_background(client: Client, session_timeout: Duration) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(session_timeout + CLOSE_WAIT, client.close()).await;
    });
}

mod check;
mod planted;

pub use check::{check, liveness_bound};
pub(crate) use check::{fence_accepted, keep_first_per_kind, no_grant_anomalies};
pub use planted::planted_anomalies;

#[cfg(test)]
mod tests {
    use super::*;

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
