//! The `election` workload: leader election as its users run it. Several
//! candidates, each a process of its own (`warden-jepsen
//! election-candidate`, see [`candidate`]) with one session and a home
//! server (spread round-robin over all servers), campaign in one election
//! (the recipes' [`LeaderElection`](warden_recipes::LeaderElection)), lead
//! for a while, and give up leadership by resigning, by closing their
//! session, or because a fault cut them off. A candidate whose session is
//! over, or which saw an unknown outcome, exits; the run starts a new one
//! under a new process number.
//!
//! Each candidate records what it believed:
//! - `campaign`: ok with the term's token, session and node once it leads
//!   (it believes it leads from the `ok` on); `fail` when it gave up
//!   waiting or was refused; `info` when the outcome is unknown;
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
//! With `--nemesis kill-client` and/or `pause-client` the run also hits
//! the candidate that leads (as far as the lines it has read say), one
//! fault at a time, spaced by [`CLIENT_FAULT_SPACING`]: SIGKILL (a crash:
//! the session is never closed and must expire; the run starts a new
//! candidate) or SIGSTOP for twice the session timeout and more, then
//! SIGCONT (a zombie leader that wakes up believing it leads, until it
//! notices). Both are recorded, `kill-client` and `pause-client`, by the
//! [`client_faults`](crate::workloads::client_faults) shared with the
//! lock-set workload.
//!
//! The checker ([`check`](mod@check)) rebuilds the terms (campaign `ok` to the end of
//! the belief, or to the `kill-client` that killed the leader) and asks:
//! at most one leader at a time, an overlap being excused only when the
//! earlier leader's session may have ended and the later term began at
//! least the session timeout (less
//! [`EXPIRY_SLACK`](crate::checkers::EXPIRY_SLACK)) after the earlier
//! leader's last contact (the lock checker's rule,
//! [`expiry_excuses`](crate::checkers::expiry_excuses)); tokens unique and
//! rising over every pair of terms
//! ([`token_order`](crate::checkers::token_order)); after a killed or
//! paused leader, a successor leading within [`successor_bound`] (the
//! session timeout and [`ELECTION_SLACK`]) unless a nemesis fault was in
//! force meanwhile; and no stretch longer than the liveness bound without
//! a leader while a majority of nodes was up and connected.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStdout;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::history::{Kind, Process};
use crate::workload::RunCtx;
use crate::workloads::client_faults::{
    kill_client, pause_client, pause_length, ClientFault, PAUSE_EXTRA,
};
use crate::workloads::support::{
    finish_helpers, helper_args, keep_helpers, HelperEvent, HelperProc, Processes,
};

pub mod candidate;
mod check;
mod planted;

pub use check::check;
pub use planted::planted_anomalies;

/// The election every candidate runs in.
pub const ELECTION_PATH: &str = "/jepsen/election";
/// The hidden subcommand of the candidate processes.
pub const CANDIDATE_SUBCOMMAND: &str = "election-candidate";
/// How much longer than the session timeout a successor may take to lead
/// after the leader was killed or paused: the server notices the expiry
/// on its ticks and commits it, the next candidate's watch fires and it
/// looks at the queue again. 4 s: on a busy 2-core machine (CI) one run
/// measured 6.8 s with a 3 s session, candidates next in line leaving the
/// queue at their campaign limit just then.
pub const ELECTION_SLACK: Duration = Duration::from_secs(4);
/// Least quiet time from the end of one client fault to the next (a
/// killed leader's fault ends when its successor could have taken over).
pub const CLIENT_FAULT_SPACING: Duration = Duration::from_secs(3);
/// How long the run lets a leader lead before it hits it, chosen at random
/// in this range (terms last 100 ms to 1.5 s).
const STRIKE_DELAY_MS: (u64, u64) = (20, 300);
/// How long the run waits for its candidates to finish after asking them.
const FINISH_WAIT: Duration = Duration::from_secs(15);
/// Most candidate processes one run starts.
const CANDIDATES_MAX: usize = 500;

/// How soon after its leader was killed (or paused for longer than its
/// session lives) an election must have a new leader: the session timeout
/// and [`ELECTION_SLACK`].
pub fn successor_bound(session_timeout: Duration) -> Duration {
    session_timeout + ELECTION_SLACK
}

/// The candidate that leads, as the run last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Leader {
    process: Process,
    pid: u32,
    token: u64,
}

/// What the run's tasks share.
struct Shared {
    ctx: RunCtx,
    processes: Processes,
    leader: watch::Sender<Option<Leader>>,
}

/// Drives candidate processes until `ctx.deadline`, recording every
/// operation, and hits the leader with the client faults `ctx` names.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        processes: Processes::default(),
        leader: watch::Sender::new(None),
    });
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ctx.dir.join("election-candidates.log"))
        .map_err(|e| format!("candidate log in {}: {e}", ctx.dir.display()))?;
    let striker = (!ctx.client_faults.is_empty()).then(|| tokio::spawn(strike(shared.clone())));
    let (mut candidates, result) =
        keep_helpers(ctx.deadline, ctx.concurrency.max(2), CANDIDATES_MAX, |n| {
            spawn_candidate(&shared, n, &log)
        })
        .await;
    if let Some(s) = striker {
        if result.is_err() {
            // No candidates to hit; one left stopped is resumed below.
            s.abort();
        }
        let _ = s.await;
    }
    finish_helpers(&mut candidates, Instant::now() + FINISH_WAIT).await;
    result
}

/// Starts candidate `n` and the task that records what it prints.
fn spawn_candidate(
    shared: &Arc<Shared>,
    n: usize,
    log: &std::fs::File,
) -> Result<HelperProc, String> {
    let ctx = &shared.ctx;
    let mut args = helper_args(ctx, &ctx.servers_for(n));
    args.extend([
        "--election".to_string(),
        ELECTION_PATH.to_string(),
        "--id".to_string(),
        format!("w{n}"),
        "--seed".to_string(),
        (ctx.seed ^ 0xE1EC_0000 ^ (n as u64).wrapping_mul(0x9e37_79b9)).to_string(),
    ]);
    let process = shared.processes.fresh();
    let shared = shared.clone();
    HelperProc::start(
        ctx,
        CANDIDATE_SUBCOMMAND,
        &args,
        log,
        move |pid, stdout, _stdin| serve(shared, process, pid, stdout),
    )
}

/// Records what one candidate prints and follows who leads.
async fn serve(shared: Arc<Shared>, process: Process, pid: Option<u32>, stdout: ChildStdout) {
    let history = shared.ctx.history.clone();
    let mut lines = BufReader::new(stdout).lines();
    // The operation the candidate has open (its `f`).
    let mut open: Option<String> = None;
    let not_leading = |leader: &mut Option<Leader>| {
        if leader.is_some_and(|l| l.process == process) {
            *leader = None;
            true
        } else {
            false
        }
    };
    while let Ok(Some(line)) = lines.next_line().await {
        let e = match HelperEvent::parse(&line) {
            Ok(e) => e,
            Err(error) => {
                tracing::warn!(%error, "election candidate");
                continue;
            }
        };
        open = (e.kind == Kind::Invoke).then(|| e.f.clone());
        match (e.f.as_str(), e.kind) {
            ("campaign", Kind::Ok) => {
                if let (Some(pid), Some(token)) = (pid, e.value["token"].as_u64()) {
                    shared.leader.send_replace(Some(Leader {
                        process,
                        pid,
                        token,
                    }));
                }
            }
            ("step-down" | "resign" | "close", Kind::Invoke) => {
                shared.leader.send_if_modified(not_leading);
            }
            _ => {}
        }
        e.record(&history, process);
    }
    shared.leader.send_if_modified(not_leading);
    // The process is gone with an operation open: unknown.
    if let Some(f) = open {
        history.record_at(
            process,
            Kind::Info,
            &f,
            Value::Null,
            Some("the candidate exited before answering".to_string()),
            crate::clock::mono_ns(),
        );
    }
}

/// Hits the leader with the run's client faults, one at a time, until the
/// deadline leaves no room for the next one to be judged.
async fn strike(shared: Arc<Shared>) {
    let ctx = &shared.ctx;
    let history = &ctx.history;
    let mut rng = StdRng::seed_from_u64(ctx.seed ^ 0x5717_3e00);
    let mut by = shared.processes.fresh();
    let mut leaders = shared.leader.subscribe();
    loop {
        if tokio::time::timeout_at(ctx.deadline, tokio::time::sleep(CLIENT_FAULT_SPACING))
            .await
            .is_err()
        {
            return;
        }
        let Ok(leader) =
            tokio::time::timeout_at(ctx.deadline, leaders.wait_for(|l| l.is_some())).await
        else {
            return;
        };
        let Some(leader) = *leader.expect("the sender lives in `shared`") else {
            continue;
        };
        let delay = rng.random_range(STRIKE_DELAY_MS.0..=STRIKE_DELAY_MS.1);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        if *leaders.borrow() != Some(leader) {
            continue; // it stepped down meanwhile: wait for the next one
        }
        let fault = *ctx
            .client_faults
            .choose(&mut rng)
            .expect("client faults not empty");
        let lasts = match fault {
            ClientFault::Kill => successor_bound(ctx.session_timeout),
            ClientFault::Pause => pause_length(ctx.session_timeout),
        };
        if Instant::now() + lasts + PAUSE_EXTRA > ctx.deadline {
            return;
        }
        let extra = json!({ "token": leader.token });
        let done = match fault {
            ClientFault::Kill => {
                let done = kill_client(history, by, leader.process, leader.pid, extra);
                // Quiet while the successor should take over.
                tokio::time::sleep(lasts).await;
                done
            }
            ClientFault::Pause => {
                pause_client(history, by, leader.process, leader.pid, lasts, extra).await
            }
        };
        if !done {
            by = shared.processes.fresh();
        }
    }
}
