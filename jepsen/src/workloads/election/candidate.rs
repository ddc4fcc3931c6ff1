//! The election candidate: `warden-jepsen election-candidate`, a helper
//! process per candidate, so that the run can kill it with SIGKILL (its
//! session is never closed and must expire before a successor leads) or
//! stop it with SIGSTOP (a zombie leader, which wakes up believing it
//! still leads) — see [`client_faults`](crate::workloads::client_faults).
//!
//! It opens one session and campaigns in the election (the recipes'
//! [`LeaderElection`]), leads for a while confirming its leadership, and
//! gives it up, round after round, until its session is over, an outcome
//! is unknown (it retires: the run starts a new candidate under a new
//! process number) or the run says `stop` on stdin (it resigns, closes its
//! session and exits; a closed stdin ends it at once, like a crash). What
//! it does it reports on stdout as [`HelperEvent`]s, with the operations
//! the workload's module docs list.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use warden_client::{Client, SessionState};
use warden_recipes::{LeaderElection, Leadership};

use crate::history::Kind;
use crate::workloads::lock::definite_refusal;
use crate::workloads::support::{connect_until, run_helper, HelperEvent, HelperFlags};

/// Longest one campaign waits before the candidate records `fail` and
/// campaigns again (its candidacy is withdrawn meanwhile).
const CAMPAIGN_WAIT_MAX: Duration = Duration::from_secs(20);
/// How much longer than its wait a campaign may take before the candidate
/// records `info`: the withdrawal itself may have to wait for a server.
const CAMPAIGN_SLACK: Duration = Duration::from_secs(3);
/// How long a leader leads, chosen at random in this range.
const TERM_MS_MIN: u64 = 100;
const TERM_MS_MAX: u64 = 1500;
/// How often a leader confirms its leadership.
const CONFIRM_EVERY: Duration = Duration::from_millis(250);
/// One term in this many ends by closing the session instead of resigning.
const CLOSE_ODDS: u32 = 6;
/// How long a new candidate tries to open its session.
const CONNECT_BOUND: Duration = Duration::from_secs(20);
/// How long a finishing candidate waits for its session to close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The candidate's command line.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateArgs {
    pub servers: String,
    pub election: String,
    pub id: String,
    pub seed: u64,
    pub options: warden_client::ConnectOptions,
}

pub fn parse_args(args: &[String]) -> Result<CandidateArgs, String> {
    let flags = HelperFlags::parse(
        args,
        &[
            "--servers",
            "--election",
            "--id",
            "--seed",
            "--session-timeout-ms",
            "--request-timeout-ms",
        ],
    )?;
    let seed = flags.required("--seed")?;
    Ok(CandidateArgs {
        servers: flags.required("--servers")?,
        election: flags.required("--election")?,
        id: flags.required("--id")?,
        seed: seed.parse().map_err(|e| format!("--seed {seed}: {e}"))?,
        options: flags.connect_options()?,
    })
}

/// `warden-jepsen election-candidate --servers S --election PATH --id ID
/// --seed N [--session-timeout-ms N] [--request-timeout-ms M]`; returns
/// the exit code.
pub fn candidate_main(args: Vec<String>) -> i32 {
    match parse_args(&args) {
        Ok(a) => run_helper("election-candidate", Candidate::new(a).run()),
        Err(e) => {
            eprintln!("election-candidate: {e}");
            2
        }
    }
}

/// `true` once the run said `stop`; a closed stdin exits at once.
fn read_stdin() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        loop {
            match lines.next_line().await {
                Ok(Some(l)) if l.trim() == "stop" => {
                    let _ = tx.send(true);
                }
                Ok(Some(_)) => {}
                // The run is gone: leave like a crash.
                _ => std::process::exit(3),
            }
        }
    });
    rx
}

fn invoke(f: &str, value: Value) {
    HelperEvent::report(Kind::Invoke, f, value, None);
}

fn ok(f: &str, value: Value) {
    HelperEvent::report(Kind::Ok, f, value, None);
}

fn fail(f: &str, value: Value, error: impl Into<String>) {
    HelperEvent::report(Kind::Fail, f, value, Some(error.into()));
}

fn info(f: &str, value: Value, error: impl Into<String>) {
    HelperEvent::report(Kind::Info, f, value, Some(error.into()));
}

/// What to do with the session after a round.
enum Next {
    Continue,
    Retire,
}

struct Candidate {
    args: CandidateArgs,
    rng: StdRng,
    stop: watch::Receiver<bool>,
}

impl Candidate {
    fn new(args: CandidateArgs) -> Candidate {
        let rng = StdRng::seed_from_u64(args.seed);
        Candidate {
            args,
            rng,
            // Replaced by the reader of stdin once the runtime runs.
            stop: watch::channel(false).1,
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    async fn run(mut self) -> i32 {
        self.stop = read_stdin();
        let until = tokio::time::Instant::now() + CONNECT_BOUND;
        let Some(client) = connect_until(&self.args.servers, &self.args.options, until).await
        else {
            eprintln!("election-candidate: no session within {CONNECT_BOUND:?}");
            return 1;
        };
        let election =
            LeaderElection::new(client.clone(), &self.args.election, self.args.id.clone());
        while !self.stopped() && !client.session_events().borrow().is_terminal() {
            if let Next::Retire = self.round(&client, &election).await {
                break;
            }
        }
        drop(election);
        let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
        0
    }

    fn request_bound(&self) -> Duration {
        self.args.options.request_timeout + CAMPAIGN_SLACK
    }

    /// Campaign, lead, give up.
    async fn round(&mut self, client: &Client, election: &LeaderElection) -> Next {
        let session = client.session_id();
        invoke("campaign", json!({ "session": session }));
        let mut stop = self.stop.clone();
        let campaign = tokio::select! {
            c = tokio::time::timeout(CAMPAIGN_WAIT_MAX, election.campaign()) => c,
            _ = stop.wait_for(|s| *s) => {
                // The dropped campaign withdraws the candidacy.
                fail("campaign", Value::Null, "the run stopped");
                return Next::Retire;
            }
        };
        let leadership = match campaign {
            Err(_) => {
                let why = format!("not leading within {} ms", CAMPAIGN_WAIT_MAX.as_millis());
                fail("campaign", Value::Null, why);
                return Next::Continue;
            }
            Ok(Err(e)) => {
                let terminal = client.session_events().borrow().is_terminal();
                return if definite_refusal(&e) && !terminal {
                    fail("campaign", Value::Null, e.to_string());
                    Next::Continue
                } else {
                    info("campaign", Value::Null, e.to_string());
                    Next::Retire
                };
            }
            Ok(Ok(leadership)) => leadership,
        };
        let token = leadership.token;
        ok(
            "campaign",
            json!({ "token": token, "session": session, "node": leadership.node() }),
        );
        self.lead(client, leadership).await
    }

    /// Leads until the term is over, confirming now and then, watching for
    /// anything that may mean the leadership is gone.
    async fn lead(&mut self, client: &Client, leadership: Leadership) -> Next {
        let token = leadership.token;
        let term = Duration::from_millis(self.rng.random_range(TERM_MS_MIN..=TERM_MS_MAX));
        let term_end = tokio::time::Instant::now() + term;
        let mut lost = Box::pin(leadership.lost());
        let mut states = client.session_events();
        let mut stop = self.stop.clone();
        let mut next_confirm = tokio::time::Instant::now() + CONFIRM_EVERY;
        loop {
            tokio::select! {
                reason = &mut lost => {
                    step_down(token, &format!("lost: {reason}"));
                    return Next::Retire;
                }
                state = states.wait_for(|s| *s != SessionState::Connected) => {
                    let state = state.map(|s| *s).unwrap_or(SessionState::Closed);
                    step_down(token, &format!("session {state:?}"));
                    return Next::Retire;
                }
                _ = stop.wait_for(|s| *s) => break,
                _ = tokio::time::sleep_until(next_confirm.min(term_end)) => {}
            }
            if tokio::time::Instant::now() >= term_end {
                break;
            }
            if !self.confirm(client, &leadership).await {
                return Next::Retire;
            }
            next_confirm = tokio::time::Instant::now() + CONFIRM_EVERY;
        }
        drop(lost);
        if !self.stopped() && self.rng.random_range(0..CLOSE_ODDS) == 0 {
            invoke("close", json!({ "token": token }));
            match client.close().await {
                Ok(()) => ok("close", json!({ "token": token })),
                Err(e) => info("close", json!({ "token": token }), e.to_string()),
            }
            return Next::Retire;
        }
        invoke("resign", json!({ "token": token }));
        match tokio::time::timeout(self.request_bound(), leadership.resign()).await {
            Ok(Ok(())) => {
                ok("resign", json!({ "token": token }));
                Next::Continue
            }
            Ok(Err(e)) => {
                info("resign", json!({ "token": token }), e.to_string());
                Next::Retire
            }
            Err(_) => {
                info(
                    "resign",
                    json!({ "token": token }),
                    "resign did not return in time",
                );
                Next::Retire
            }
        }
    }

    /// A linearizable look-up of the leader's own node: `true` if it is
    /// still there (the leadership stands), else the leader steps down.
    async fn confirm(&self, client: &Client, leadership: &Leadership) -> bool {
        let token = leadership.token;
        invoke("confirm", json!({ "token": token }));
        let found = tokio::time::timeout(
            self.request_bound(),
            client.exists_linearizable(leadership.node()),
        )
        .await;
        let why = match found {
            Ok(Ok(Some(_))) => {
                ok("confirm", json!({ "token": token, "exists": true }));
                return true;
            }
            Ok(Ok(None)) => {
                ok("confirm", json!({ "token": token, "exists": false }));
                "node gone"
            }
            Ok(Err(e)) => {
                info("confirm", json!({ "token": token }), e.to_string());
                "confirmation failed"
            }
            Err(_) => {
                info(
                    "confirm",
                    json!({ "token": token }),
                    "confirm did not return in time",
                );
                "confirmation failed"
            }
        };
        step_down(token, why);
        false
    }
}

/// Records that this leader stopped believing it leads (an instant
/// operation).
fn step_down(token: u64, reason: &str) {
    let value = json!({ "token": token, "reason": reason });
    invoke("step-down", value.clone());
    ok("step-down", value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parse() {
        let args: Vec<String> = [
            "--servers",
            "a:1",
            "--election",
            "/e",
            "--id",
            "w3",
            "--seed",
            "7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let a = parse_args(&args).unwrap();
        assert_eq!(
            (a.election.as_str(), a.id.as_str(), a.seed),
            ("/e", "w3", 7)
        );
        assert!(parse_args(&args[..6]).unwrap_err().contains("--seed"));
        let mut bad = args.clone();
        bad[7] = "x".into();
        assert!(parse_args(&bad).unwrap_err().contains("--seed"));
    }
}
