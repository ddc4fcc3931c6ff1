//! `wardenctl elect NAME ID`: stand for election and hold leadership.
//!
//! Joins the election at `<root>/NAME` as candidate ID, prints
//! `leader ID token=N` once it leads, and holds leadership until Ctrl-C or
//! SIGTERM, then resigns (so the next candidate leads at once) and exits 0.
//! If leadership is lost meanwhile (the session expired, or someone deleted
//! its node), it prints the one error line and exits non-zero: whatever the
//! caller guards with this leadership must stop.
//!
//! Interrupted while still a candidate, it just exits; closing the session
//! withdraws the candidacy.

use std::future::Future;

use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use warden_client::{Client, ErrorCode};
use warden_recipes::LeaderElection;

use crate::{Failure, Output};

/// Where elections live unless `--root` says otherwise.
const ELECTION_ROOT_DEFAULT: &str = "/elections";

#[derive(Debug, clap::Args)]
pub struct ElectArgs {
    /// The election's name: candidates under ROOT/NAME.
    name: String,
    /// This candidate's id, which observers see as the leader's.
    id: String,
    /// Parent of every election's node.
    #[arg(long, default_value = ELECTION_ROOT_DEFAULT)]
    root: String,
}

/// `elect --json`: the line printed on becoming leader.
#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    leader: &'a str,
    token: u64,
    node: &'a str,
}

pub async fn run(client: &Client, args: ElectArgs, out: &Output) -> Result<(), Failure> {
    if args.name.is_empty() || args.name.contains('/') {
        return Err(warden_client::Error::BadArguments(format!(
            "election name {:?} must be non-empty and have no '/'",
            args.name
        ))
        .into());
    }
    let path = format!("{}/{}", args.root.trim_end_matches('/'), args.name);
    let election = LeaderElection::new(client.clone(), path, args.id.clone());
    let stop = stop_signal()?;
    tokio::pin!(stop);

    let leadership = tokio::select! {
        _ = &mut stop => return Ok(()),
        won = election.campaign() => won.map_err(failure)?,
    };
    let human = format!("leader {} token={}", leadership.id, leadership.token);
    out.line(&human, || LeaderJson {
        leader: &leadership.id,
        token: leadership.token,
        node: leadership.node(),
    })?;

    let lost = leadership.lost();
    tokio::select! {
        _ = &mut stop => {
            leadership.resign().await.map_err(failure)?;
            Ok(())
        }
        reason = lost => Err(failure(reason)),
    }
}

/// Resolves on the first Ctrl-C or SIGTERM.
fn stop_signal() -> Result<impl Future<Output = ()>, Failure> {
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// A recipe error as the one-line `Code: detail` wardenctl prints. A lost
/// leadership node reads `NoNode: <node>: the leader's node was deleted`.
fn failure(e: warden_recipes::Error) -> Failure {
    use warden_recipes::Error;
    let e = match e {
        Error::Client(e) => e,
        Error::NotHolder(detail) => warden_client::Error::api(ErrorCode::NoNode, detail, ""),
        Error::BadArguments(detail) => warden_client::Error::BadArguments(detail),
        other => warden_client::Error::api(other.code(), other.to_string(), ""),
    };
    Failure::Warden(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn parses_name_id_and_root() {
        let cli = crate::Cli::try_parse_from(["wardenctl", "elect", "svc", "node-1"]).unwrap();
        match cli.command {
            crate::Command::Elect(args) => {
                assert_eq!(args.name, "svc");
                assert_eq!(args.id, "node-1");
                assert_eq!(args.root, ELECTION_ROOT_DEFAULT);
            }
            other => panic!("{other:?}"),
        }
        let cli =
            crate::Cli::try_parse_from(["wardenctl", "elect", "--root", "/e", "svc", "x"]).unwrap();
        assert!(matches!(cli.command, crate::Command::Elect(ref a) if a.root == "/e"));
    }

    #[test]
    fn lost_node_reads_as_one_no_node_line() {
        let e = failure(warden_recipes::Error::NotHolder(
            "/elections/svc/c-1-0000000001: the leader's node was deleted".into(),
        ));
        assert_eq!(
            e.to_string(),
            "NoNode: /elections/svc/c-1-0000000001: the leader's node was deleted"
        );
    }
}
