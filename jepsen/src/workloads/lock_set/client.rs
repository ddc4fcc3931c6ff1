//! The lock-set client: `warden-jepsen lock-set-client`, a helper process
//! per client, so that the run can SIGSTOP it like a stalled application
//! (a GC pause, a stopped VM) and make a zombie holder.
//!
//! It opens one session and loops: take the lock (the recipes' [`Mutex`],
//! waiting at most [`ACQUIRE_WAIT`]), read the resource with the grant's
//! token, wait a little, write the value read plus one with the token,
//! release. The resource lives in the run: the client asks for a read or
//! a write with a line on stdout and gets the answer on stdin. It prints
//! (times are CLOCK_MONOTONIC ns, comparable with the run's):
//!
//! - `acquiring AT`, then `granted AT TOKEN SESSION`, `not-granted AT` or
//!   `acquire-unknown AT ERROR...` (then it closes its session and exits:
//!   the lock may have been granted);
//! - `read TOKEN` (answered `value VERSION VALUE` or `refused HIGHEST`);
//! - `write TOKEN BASED_ON VALUE` (answered `accepted SEQ` or `refused
//!   HIGHEST`);
//! - `releasing AT`, then `released AT` or `release-failed AT ERROR...`;
//! - `ended AT STATE` when its session is over (then it exits).
//!
//! A `stop` line on stdin ends it after the round in hand (closing its
//! session); a closed stdin (the run is gone) ends it at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;
use warden_client::{Client, SessionState};
use warden_recipes::Mutex;

use crate::clock;
use crate::workloads::support::{connect_until, run_helper, HelperFlags};

/// Longest one acquisition waits (then `not-granted`, and it tries again).
pub const ACQUIRE_WAIT: Duration = Duration::from_secs(3);
/// How long the read-modify-write waits between its read and its write,
/// chosen at random in this range: the window a pause turns into a zombie.
const RMW_DELAY_MS: (u64, u64) = (20, 120);
/// How long a new client tries to open its session.
const CONNECT_BOUND: Duration = Duration::from_secs(20);
/// How long a finishing client waits for its session to close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The client's command line.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientArgs {
    pub servers: String,
    pub lock: String,
    pub seed: u64,
    pub options: warden_client::ConnectOptions,
}

pub fn parse_args(args: &[String]) -> Result<ClientArgs, String> {
    let flags = HelperFlags::parse(
        args,
        &[
            "--servers",
            "--lock",
            "--seed",
            "--session-timeout-ms",
            "--request-timeout-ms",
        ],
    )?;
    let seed = flags.required("--seed")?;
    Ok(ClientArgs {
        servers: flags.required("--servers")?,
        lock: flags.required("--lock")?,
        seed: seed.parse().map_err(|e| format!("--seed {seed}: {e}"))?,
        options: flags.connect_options()?,
    })
}

/// `warden-jepsen lock-set-client --servers S --lock PATH --seed N
/// [--session-timeout-ms N] [--request-timeout-ms M]`; returns the exit
/// code.
pub fn client_main(args: Vec<String>) -> i32 {
    match parse_args(&args) {
        Ok(a) => run_helper("lock-set-client", rounds(a)),
        Err(e) => {
            eprintln!("lock-set-client: {e}");
            2
        }
    }
}

/// Lines from the run: answers go to `replies`; `stop` sets the flag.
fn read_stdin(stop: Arc<AtomicBool>) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        loop {
            match lines.next_line().await {
                Ok(Some(l)) if l.trim() == "stop" => stop.store(true, Ordering::Relaxed),
                Ok(Some(l)) => {
                    let _ = tx.send(l);
                }
                // The run is gone: leave like a crash.
                _ => std::process::exit(3),
            }
        }
    });
    rx
}

async fn rounds(args: ClientArgs) -> i32 {
    let stop = Arc::new(AtomicBool::new(false));
    let mut replies = read_stdin(stop.clone());
    let until = Instant::now() + CONNECT_BOUND;
    let Some(client) = connect_until(&args.servers, &args.options, until).await else {
        println!("ended {} NoSession", clock::mono_ns());
        return 1;
    };
    let mutex = match Mutex::new(client.clone(), args.lock.clone()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lock-set-client: {e}");
            return 2;
        }
    };
    let mut rng = StdRng::seed_from_u64(args.seed);
    let session = client.session_id();
    // Bound on one acquire: its wait, a request timeout for each step the
    // recipe may retry, and some slack.
    let bound = ACQUIRE_WAIT + args.options.request_timeout * 2 + Duration::from_secs(2);
    while !stop.load(Ordering::Relaxed) {
        let state = *client.session_events().borrow();
        if state.is_terminal() {
            println!("ended {} {}", clock::mono_ns(), state_name(state));
            return 0;
        }
        println!("acquiring {}", clock::mono_ns());
        let guard = match tokio::time::timeout(bound, mutex.acquire_timeout(ACQUIRE_WAIT)).await {
            Ok(Ok(Some(guard))) => guard,
            Ok(Ok(None)) => {
                println!("not-granted {}", clock::mono_ns());
                continue;
            }
            Ok(Err(e)) => return unknown(&client, &e.to_string()).await,
            Err(_) => return unknown(&client, "acquire did not return in time").await,
        };
        let token = guard.fencing_token();
        println!("granted {} {token} {session}", clock::mono_ns());

        println!("read {token}");
        let Some(answer) = replies.recv().await else {
            return 3;
        };
        let words: Vec<&str> = answer.split_whitespace().collect();
        if let ["value", version, value] = words[..] {
            let (Ok(version), Ok(value)) = (version.parse::<u64>(), value.parse::<u64>()) else {
                eprintln!("lock-set-client: bad answer {answer:?}");
                return 2;
            };
            let delay = rng.random_range(RMW_DELAY_MS.0..=RMW_DELAY_MS.1);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            // No check of the session here: a zombie writes regardless.
            println!("write {token} {version} {}", value + 1);
            if replies.recv().await.is_none() {
                return 3;
            }
        }

        println!("releasing {}", clock::mono_ns());
        match tokio::time::timeout(bound, guard.release()).await {
            Ok(Ok(())) => println!("released {}", clock::mono_ns()),
            Ok(Err(e)) => println!("release-failed {} {e}", clock::mono_ns()),
            Err(_) => println!(
                "release-failed {} release did not return in time",
                clock::mono_ns()
            ),
        }
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
    println!("ended {} Closed", clock::mono_ns());
    0
}

/// An acquire whose outcome is unknown: say so, close, exit.
async fn unknown(client: &Client, error: &str) -> i32 {
    println!("acquire-unknown {} {error}", clock::mono_ns());
    let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
    1
}

fn state_name(state: SessionState) -> &'static str {
    if state == SessionState::Expired {
        "Expired"
    } else {
        "Closed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parse() {
        let args: Vec<String> = ["--servers", "a:1", "--lock", "/l", "--seed", "7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = parse_args(&args).unwrap();
        assert_eq!((a.lock.as_str(), a.seed), ("/l", 7));
        assert!(parse_args(&args[..4]).is_err());
        let mut bad = args.clone();
        bad[5] = "x".into();
        assert!(parse_args(&bad).unwrap_err().contains("--seed"));
    }
}
