//! The holder process, `warden-jepsen ephemeral-holder` ([`holder_main`]),
//! and the lines it prints ([`HolderLine`]), as the run reads them.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, SessionState};

use crate::clock;
use crate::workloads::support::{connect_until, run_helper, HelperFlags, RETRY_PAUSE};

use super::{CONFIRM_INTERVAL_MAX, CREATE_BOUND};

/// One line a holder prints (see [`holder_main`]); times are
/// CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HolderLine {
    Created {
        session: u64,
        invoked: u64,
        done: u64,
    },
    CreateFailed {
        at: u64,
        error: String,
    },
    CreateUnknown {
        at: u64,
        error: String,
    },
    Confirm {
        invoked: u64,
        done: u64,
        present: bool,
    },
    ConfirmFailed {
        invoked: u64,
        done: u64,
        error: String,
    },
    Closing {
        at: u64,
    },
    Closed {
        invoked: u64,
        done: u64,
    },
    CloseFailed {
        invoked: u64,
        done: u64,
        error: String,
    },
    Ended {
        at: u64,
        state: String,
    },
}

impl HolderLine {
    /// Parses a whole line; `None` for anything malformed or cut short.
    pub(super) fn parse(line: &str) -> Option<HolderLine> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| words.get(i)?.parse::<u64>().ok();
        // Error texts are at least one word.
        let text = |i: usize| (words.len() > i).then(|| words[i..].join(" "));
        let exactly = |len: usize| (words.len() == len).then_some(());
        Some(match *words.first()? {
            "created" => {
                exactly(4)?;
                HolderLine::Created {
                    session: n(1)?,
                    invoked: n(2)?,
                    done: n(3)?,
                }
            }
            "create-failed" => HolderLine::CreateFailed {
                at: n(1)?,
                error: text(2)?,
            },
            "create-unknown" => HolderLine::CreateUnknown {
                at: n(1)?,
                error: text(2)?,
            },
            "confirm" => {
                exactly(4)?;
                HolderLine::Confirm {
                    invoked: n(1)?,
                    done: n(2)?,
                    present: match words[3] {
                        "1" => true,
                        "0" => false,
                        _ => return None,
                    },
                }
            }
            "confirm-failed" => HolderLine::ConfirmFailed {
                invoked: n(1)?,
                done: n(2)?,
                error: text(3)?,
            },
            "closing" => {
                exactly(2)?;
                HolderLine::Closing { at: n(1)? }
            }
            "closed" => {
                exactly(3)?;
                HolderLine::Closed {
                    invoked: n(1)?,
                    done: n(2)?,
                }
            }
            "close-failed" => HolderLine::CloseFailed {
                invoked: n(1)?,
                done: n(2)?,
                error: text(3)?,
            },
            "ended" => {
                exactly(3)?;
                HolderLine::Ended {
                    at: n(1)?,
                    state: words[2].to_string(),
                }
            }
            _ => return None,
        })
    }
}
/// The holder's command line.
#[derive(Debug, Clone, PartialEq)]
struct HolderArgs {
    servers: String,
    path: String,
    session_timeout: Duration,
    request_timeout: Duration,
}

fn parse_holder_args(args: &[String]) -> Result<HolderArgs, String> {
    let flags = HelperFlags::parse(
        args,
        &[
            "--servers",
            "--path",
            "--session-timeout-ms",
            "--request-timeout-ms",
        ],
    )?;
    let options = flags.connect_options()?;
    Ok(HolderArgs {
        servers: flags.required("--servers")?,
        path: flags.required("--path")?,
        session_timeout: options.session_timeout,
        request_timeout: options.request_timeout,
    })
}

/// `warden-jepsen ephemeral-holder --servers S --path P
/// [--session-timeout-ms N] [--request-timeout-ms M]`: a helper process the
/// workload starts and kills. It connects, creates the ephemeral `P`, and
/// prints one line per operation (times are CLOCK_MONOTONIC ns):
///
/// - `created SESSION INVOKED DONE`, `create-failed AT ERROR...`,
///   `create-unknown AT ERROR...` (then it exits);
/// - `confirm INVOKED DONE 1|0` (its session lives; 1 if the node is
///   there), or `confirm-failed INVOKED DONE ERROR...`;
/// - on a `close` line on stdin: `closing AT`, then `closed INVOKED DONE` or
///   `close-failed INVOKED DONE ERROR...`, and it exits;
/// - `ended AT Expired|Closed` when the session ends on its own.
///
/// When stdin closes (the run is gone) it exits at once, leaving its
/// session to expire. Returns the exit code.
pub fn holder_main(args: Vec<String>) -> i32 {
    let args = match parse_holder_args(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ephemeral-holder: {e}");
            return 2;
        }
    };
    run_helper("ephemeral-holder", hold(args))
}

async fn hold(args: HolderArgs) -> i32 {
    let options = ConnectOptions {
        session_timeout: args.session_timeout,
        request_timeout: args.request_timeout,
        ..ConnectOptions::default()
    };
    let create_until = Instant::now() + CREATE_BOUND;
    let Some(client) = connect_until(&args.servers, &options, create_until).await else {
        println!(
            "create-failed {} no server took a session",
            clock::mono_ns()
        );
        return 1;
    };
    let session = client.session_id();
    let invoked = clock::mono_ns();
    if let Err(line) = create(&client, &args.path, create_until).await {
        println!("{line}");
        return 1;
    }
    println!("created {session} {invoked} {}", clock::mono_ns());

    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut states = client.session_events();
    let interval = CONFIRM_INTERVAL_MAX.min(args.session_timeout / 4);
    loop {
        tokio::select! {
            line = stdin.next_line() => match line {
                Ok(Some(l)) if l.trim() == "close" => {
                    let invoked = clock::mono_ns();
                    println!("closing {invoked}");
                    match client.close().await {
                        Ok(()) => println!("closed {invoked} {}", clock::mono_ns()),
                        Err(e) => println!("close-failed {invoked} {} {e}", clock::mono_ns()),
                    }
                    return 0;
                }
                Ok(Some(_)) => {}
                // The run is gone: leave like a crash, without closing.
                _ => std::process::exit(3),
            },
            _ = states.changed() => {
                let state = *states.borrow_and_update();
                if state.is_terminal() {
                    let name = if state == SessionState::Expired { "Expired" } else { "Closed" };
                    println!("ended {} {name}", clock::mono_ns());
                    return 0;
                }
            }
            _ = tokio::time::sleep(interval) => {
                let invoked = clock::mono_ns();
                match client.exists_linearizable(&args.path).await {
                    Ok(stat) => println!(
                        "confirm {invoked} {} {}",
                        clock::mono_ns(),
                        u8::from(stat.is_some())
                    ),
                    Err(e) => println!("confirm-failed {invoked} {} {e}", clock::mono_ns()),
                }
            }
        }
    }
}

/// Creates the ephemeral, finding out after a lost answer whether it was
/// made (it is ours if its owner is our session). Err: the line to print.
async fn create(client: &Client, path: &str, until: Instant) -> Result<(), String> {
    let session = client.session_id();
    let mut unsure: Option<String> = None;
    while Instant::now() < until {
        match client.create(path, b"", CreateOptions::ephemeral()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == ErrorCode::NodeExists && unsure.is_some() => {
                match client.exists(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => return Ok(()),
                    Ok(_) => {
                        return Err(format!("create-failed {} {e}", clock::mono_ns()));
                    }
                    Err(e) => unsure = Some(e.to_string()),
                }
            }
            Err(e) if e.is_retryable() => unsure = Some(e.to_string()),
            Err(e) if unsure.is_some() || e.code() == ErrorCode::SessionExpired => {
                return Err(format!("create-unknown {} {e}", clock::mono_ns()));
            }
            Err(e) => return Err(format!("create-failed {} {e}", clock::mono_ns())),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    let why = unsure.unwrap_or_else(|| "no answer".into());
    Err(format!(
        "create-unknown {} gave up after {CREATE_BOUND:?}: {why}",
        clock::mono_ns()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_lines_parse_strictly() {
        assert_eq!(
            HolderLine::parse("confirm 10 20 1"),
            Some(HolderLine::Confirm {
                invoked: 10,
                done: 20,
                present: true
            })
        );
        // Cut short by a SIGKILL: not taken as "absent".
        assert_eq!(HolderLine::parse("confirm 10 20"), None);
        assert_eq!(HolderLine::parse("confirm 10 2"), None);
        assert_eq!(HolderLine::parse("created 7 1 2 3"), None);
        assert_eq!(
            HolderLine::parse("close-failed 1 2 ConnectionLoss: x"),
            Some(HolderLine::CloseFailed {
                invoked: 1,
                done: 2,
                error: "ConnectionLoss: x".into()
            })
        );
        assert_eq!(HolderLine::parse("create-unknown 5"), None);
    }

    #[test]
    fn holder_args_parse() {
        let args: Vec<String> = [
            "--servers",
            "a:1,b:2",
            "--path",
            "/e/h",
            "--session-timeout-ms",
            "4000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let parsed = parse_holder_args(&args).unwrap();
        assert_eq!(parsed.path, "/e/h");
        assert_eq!(parsed.session_timeout, Duration::from_secs(4));
        assert!(parse_holder_args(&args[..3]).is_err());
        assert!(parse_holder_args(&["--servers".to_string()]).is_err());
    }
}
