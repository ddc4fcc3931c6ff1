//! The `election` workload: leader election as its users run it. Several
//! candidates, each in its own session with a home server (spread
//! round-robin over all servers), campaign in one election (the recipes'
//! [`LeaderElection`]), lead for a while, and give up leadership by
//! resigning, by closing their session, or because a fault cut them off.
//!
//! Each candidate records what it believed:
//! - `campaign`: ok with the term's token, session and node once it leads
//!   (it believes it leads from the `ok` on); `fail` when it gave up
//!   waiting or was refused; `info` when the outcome is unknown (then the
//!   candidate retires its session and goes on as a new process,
//!   `worker + k * concurrency`);
//! - `confirm`, while leading, every 250 ms: a linearizable
//!   look-up of its own node, which reaches the Raft leader, so an `ok`
//!   is a contact of the session with the cluster (the server cannot have
//!   expired the session a timeout before it);
//! - how the term ended: `resign` (its invocation ends the belief), `close`
//!   (the session closed instead), or `step-down` with the reason: the
//!   session was seen disconnected, the node or session lost, or a
//!   confirmation failed. A leader that only *may* have lost (disconnected)
//!   stops acting as leader at once, as Curator's leader latch does on
//!   `SUSPENDED`; it then retires its session.
//!
//! The checker ([`check`](mod@check)) rebuilds the terms (campaign `ok` to the end of
//! the belief) and asks: at most one leader at a time, an overlap being
//! excused only when the earlier leader's session may have ended and the
//! later term began at least the session timeout (less
//! [`EXPIRY_SLACK`](crate::checkers::EXPIRY_SLACK)) after the earlier
//! leader's last contact (the lock checker's rule,
//! [`expiry_excuses`](crate::checkers::expiry_excuses)); tokens unique and
//! rising over every pair of terms
//! ([`token_order`](crate::checkers::token_order)); and successors taking
//! over: no stretch longer than the liveness bound without a leader while a
//! majority of nodes was up and connected.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::time::Instant;
use warden_client::{Client, SessionState};
use warden_recipes::{LeaderElection, Leadership};

use crate::history::{History, Invocation, Process};
use crate::workload::RunCtx;
use crate::workloads::lock::{close_in_background, definite_refusal};
use crate::workloads::support::{connect_options, connect_until};

mod check;
mod planted;

pub use check::check;
pub use planted::planted_anomalies;

/// The election every candidate runs in.
pub const ELECTION_PATH: &str = "/jepsen/election";
/// Longest one campaign waits before the candidate records `fail` and
/// campaigns again (its candidacy is withdrawn meanwhile).
const CAMPAIGN_WAIT_MAX: Duration = Duration::from_secs(20);
/// How much longer than its wait a campaign may take before the harness
/// records `info`: the withdrawal itself may have to wait for a server.
const CAMPAIGN_SLACK: Duration = Duration::from_secs(3);
/// How long a leader leads, chosen at random in this range.
const TERM_MS_MIN: u64 = 100;
const TERM_MS_MAX: u64 = 1500;
/// How often a leader confirms its leadership.
const CONFIRM_EVERY: Duration = Duration::from_millis(250);
/// One term in this many ends by closing the session instead of resigning.
const CLOSE_ODDS: u32 = 6;
/// Pause after retiring a session, so that a cluster refusing everything
/// is not flooded with new sessions.
const RETIRE_PAUSE: Duration = Duration::from_millis(200);

/// Drives candidates until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..ctx.concurrency.max(1) {
        let ctx = ctx.clone();
        workers.spawn(async move { Candidate::new(ctx, worker).run().await });
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
        Err(format!("election candidates failed: {}", failed.join("; ")))
    }
}

/// What to do with the session after a round.
enum Next {
    Continue,
    Retire,
}

struct Candidate {
    ctx: RunCtx,
    worker: usize,
    rng: StdRng,
    /// Sessions retired so far (the process is `worker + generation *
    /// concurrency`).
    generation: u64,
}

impl Candidate {
    fn new(ctx: RunCtx, worker: usize) -> Candidate {
        let rng = StdRng::seed_from_u64(ctx.seed ^ (0xE1EC << 16) ^ worker as u64);
        Candidate {
            ctx,
            worker,
            rng,
            generation: 0,
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
        let servers = self.ctx.servers_for(self.worker);
        let options = connect_options(&self.ctx);
        while !self.past_deadline() {
            let Some(client) = connect_until(&servers, &options, self.ctx.deadline).await else {
                break;
            };
            let id = format!("w{}", self.worker);
            let election = LeaderElection::new(client.clone(), ELECTION_PATH, id);
            loop {
                if self.past_deadline() {
                    drop(election);
                    let _ = tokio::time::timeout(self.ctx.session_timeout, client.close()).await;
                    return;
                }
                match self.round(&client, &election).await {
                    Next::Continue => {}
                    Next::Retire => break,
                }
            }
            drop(election);
            close_in_background(client, self.ctx.session_timeout);
            self.generation += 1;
            tokio::time::sleep(RETIRE_PAUSE).await;
        }
    }

    /// Campaign, lead, give up.
    async fn round(&mut self, client: &Client, election: &LeaderElection) -> Next {
        let process = self.process();
        let session = client.session_id();
        let inv = self
            .history()
            .invoke(process, "campaign", json!({ "session": session }));
        let left = self.ctx.deadline.saturating_duration_since(Instant::now());
        let wait = CAMPAIGN_WAIT_MAX.min(left);
        let leadership = match tokio::time::timeout(wait, election.campaign()).await {
            Err(_) => {
                // Not leading; the dropped campaign withdraws the candidacy.
                let why = format!("not leading within {} ms", wait.as_millis());
                self.history().fail(&inv, Value::Null, why);
                return Next::Continue;
            }
            Ok(Err(e)) => {
                let terminal = client.session_events().borrow().is_terminal();
                return if definite_refusal(&e) && !terminal {
                    self.history().fail(&inv, Value::Null, e.to_string());
                    Next::Continue
                } else {
                    self.history().info(&inv, Value::Null, e.to_string());
                    Next::Retire
                };
            }
            Ok(Ok(leadership)) => leadership,
        };
        let token = leadership.token;
        self.history().ok(
            &inv,
            json!({ "token": token, "session": session, "node": leadership.node() }),
        );
        self.lead(client, process, leadership).await
    }

    /// Leads until the term is over, confirming now and then, watching for
    /// anything that may mean the leadership is gone.
    async fn lead(&mut self, client: &Client, process: Process, leadership: Leadership) -> Next {
        let token = leadership.token;
        let term = Duration::from_millis(self.rng.random_range(TERM_MS_MIN..=TERM_MS_MAX));
        let term_end = (Instant::now() + term).min(self.ctx.deadline);
        let mut lost = Box::pin(leadership.lost());
        let mut states = client.session_events();
        let mut next_confirm = Instant::now() + CONFIRM_EVERY;
        loop {
            tokio::select! {
                reason = &mut lost => {
                    self.step_down(process, token, &format!("lost: {reason}"));
                    return Next::Retire;
                }
                state = states.wait_for(|s| *s != SessionState::Connected) => {
                    let state = state.map(|s| *s).unwrap_or(SessionState::Closed);
                    self.step_down(process, token, &format!("session {state:?}"));
                    return Next::Retire;
                }
                _ = tokio::time::sleep_until(next_confirm.min(term_end)) => {}
            }
            if Instant::now() >= term_end {
                break;
            }
            if !self.confirm(client, process, &leadership).await {
                return Next::Retire;
            }
            next_confirm = Instant::now() + CONFIRM_EVERY;
        }
        drop(lost);
        if self.rng.random_range(0..CLOSE_ODDS) == 0 {
            let inv = self
                .history()
                .invoke(process, "close", json!({ "token": token }));
            self.finish(&inv, client.close().await.map_err(|e| e.to_string()), token);
            return Next::Retire;
        }
        let inv = self
            .history()
            .invoke(process, "resign", json!({ "token": token }));
        let resigned = tokio::time::timeout(
            self.ctx.request_timeout + CAMPAIGN_SLACK,
            leadership.resign(),
        )
        .await;
        match resigned {
            Ok(Ok(())) => {
                self.history().ok(&inv, json!({ "token": token }));
                Next::Continue
            }
            Ok(Err(e)) => {
                self.history()
                    .info(&inv, json!({ "token": token }), e.to_string());
                Next::Retire
            }
            Err(_) => {
                self.history().info(
                    &inv,
                    json!({ "token": token }),
                    "resign did not return in time",
                );
                Next::Retire
            }
        }
    }

    fn finish(&self, inv: &Invocation, result: Result<(), String>, token: u64) {
        match result {
            Ok(()) => self.history().ok(inv, json!({ "token": token })),
            Err(e) => self.history().info(inv, json!({ "token": token }), e),
        }
    }

    /// A linearizable look-up of the leader's own node: `true` if it is
    /// still there (the leadership stands), else the leader steps down.
    async fn confirm(&self, client: &Client, process: Process, leadership: &Leadership) -> bool {
        let token = leadership.token;
        let inv = self
            .history()
            .invoke(process, "confirm", json!({ "token": token }));
        let found = tokio::time::timeout(
            self.ctx.request_timeout + CAMPAIGN_SLACK,
            client.exists_linearizable(leadership.node()),
        )
        .await;
        match found {
            Ok(Ok(Some(_))) => {
                self.history()
                    .ok(&inv, json!({ "token": token, "exists": true }));
                true
            }
            Ok(Ok(None)) => {
                self.history()
                    .ok(&inv, json!({ "token": token, "exists": false }));
                self.step_down(process, token, "node gone");
                false
            }
            Ok(Err(e)) => {
                self.history()
                    .info(&inv, json!({ "token": token }), e.to_string());
                self.step_down(process, token, "confirmation failed");
                false
            }
            Err(_) => {
                self.history().info(
                    &inv,
                    json!({ "token": token }),
                    "confirm did not return in time",
                );
                self.step_down(process, token, "confirmation failed");
                false
            }
        }
    }

    /// Records that this leader stopped believing it leads (an instant
    /// operation).
    fn step_down(&self, process: Process, token: u64, reason: &str) {
        let inv = self.history().invoke(
            process,
            "step-down",
            json!({ "token": token, "reason": reason }),
        );
        self.history()
            .ok(&inv, json!({ "token": token, "reason": reason }));
    }
}
