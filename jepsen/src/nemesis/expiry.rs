//! `isolate-after-expiry`: the leader cut off from every other member just
//! after it proposed the removal of an expired TTL node (a lease) or an
//! empty container, so that the proposal may be lost with its leadership;
//! then, when it was lost, leadership moved around until that server leads
//! again. A lease must still lapse within its TTL and an election of the
//! next leader (the lease workload's `lease-outlived-ttl` check), also when
//! the server that lost its removal leads once more: a server that
//! remembered its removal as "in flight" across the role change
//! (`--unsafe-keep-removals-across-roles`) never proposes it again, and the
//! lease stays until the next leader change.
//!
//! The moment is read from the leader's own log: the server logs
//! `proposing removal of empty container / expired TTL node` (debug level,
//! which the harness's nodes run at) when it proposes one. Undisturbed, the
//! proposal reaches a follower within milliseconds, before the cut (and a
//! follower that has it passes it on to the next leader); so while the
//! nemesis watches, everything the leader sends to the other members
//! arrives [`WATCH_DELAY`] late (less than an election timeout: nobody
//! stands for election, commits just take longer), and the cut loses what
//! was still on its way. Whether the removal was lost is read when the old
//! leader leads again (the node still there: `removal_lost` in the fault's
//! history value). The watch is recorded as a `watch-expiry` operation; the
//! fault itself starts (its invocation) at the cut.
//! Leadership and catch-up are read from the nodes' `GET /status` (no
//! session, no proposal), so that the moves are quick.
//!
//! Moves: the old leader's links are lifted; while another node leads, the
//! old leader is let catch up with it, and then the leader is cut off in
//! turn until someone else leads, and its links lifted. Each round gives
//! the old leader about even odds against the third node (their logs
//! equal); a new leader re-arms every TTL with its full length, so a round
//! shorter than the TTL removes nothing.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::history::{History, Invocation, Process};
use crate::http::Reply;
use crate::proxy::{Endpoint, Mode};

/// The server's log line for a proposed TTL or container removal.
pub const REMOVAL_PROPOSED: &str = "proposing removal of empty container / expired TTL node";
/// How long the nemesis watches the leader's log for a removal before it
/// isolates the leader anyway (leases expire only after a holder stalls).
pub const EXPIRY_WATCH: Duration = Duration::from_secs(20);
/// How often the log is read while watching: the cut has to come before
/// the proposal leaves the delayed links.
const POLL: Duration = Duration::from_millis(1);
/// How late the leader's messages arrive while the nemesis watches: less
/// than the election timeout (500 ms at the harness's 100 ms tick), so no
/// member stands for election.
pub const WATCH_DELAY: Duration = Duration::from_millis(200);
/// How long the cut-off members may take to elect a leader among
/// themselves (an election is 0.5-1 s of ticks; seconds on a loaded
/// two-core machine).
const ELECTION_BOUND: Duration = Duration::from_secs(10);
/// How long the old leader may take to catch up with the current one.
const CATCH_UP_BOUND: Duration = Duration::from_secs(5);
/// Most leadership moves before the nemesis gives up on the old leader
/// leading again (each has about even odds).
const MOVES_MAX: u32 = 8;
/// How often leadership and catch-up are polled.
const STATUS_POLL: Duration = Duration::from_millis(20);
/// Bound on one `GET /status`.
const STATUS_BOUND: Duration = Duration::from_secs(1);

/// Delays the leader's links to the others and waits (at most
/// [`EXPIRY_WATCH`], and not past `deadline`) for it to log a removal
/// proposal, then black-holes every link to and from it; when it logged
/// one, moves leadership until that server leads again. Records the
/// fault's invocation in `history`; returns it and the history value.
pub async fn isolate_after_expiry(
    c: &mut Cluster,
    history: &History,
    deadline: Instant,
) -> (Invocation, Value) {
    let Some(leader) = c.leader().await else {
        let inv = history.invoke(Process::NEMESIS, "isolate-after-expiry", Value::Null);
        return (
            inv,
            json!({ "leader": null, "majority_kept": true, "isolated": false }),
        );
    };
    // Not a fault period of its own: a delay shorter than an election
    // timeout keeps every member up and connected, and only slows commits.
    let delay_ms = WATCH_DELAY.as_millis() as u64;
    let watch = history.invoke(
        Process::NEMESIS,
        "watch-expiry",
        json!({ "leader": leader, "delay_ms": delay_ms }),
    );
    history.ok(&watch, json!({ "leader": leader, "delay_ms": delay_ms }));
    let outbound: Vec<(Endpoint, u64)> = c
        .ids()
        .into_iter()
        .filter(|&o| o != leader)
        .map(|o| (Endpoint::Node(leader), o))
        .collect();
    c.net.set(&outbound, Mode::Delay(delay_ms));
    let log = c.node(leader).log_path.clone();
    let mut from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let until = (Instant::now() + EXPIRY_WATCH).min(deadline);
    let mut path = None;
    while path.is_none() && Instant::now() < until {
        tokio::time::sleep(POLL).await;
        let (found, to) = scan(&log, from);
        path = found;
        from = to;
    }
    isolate(c, leader);
    let inv = history.invoke(
        Process::NEMESIS,
        "isolate-after-expiry",
        json!({ "leader": leader, "path": path }),
    );
    let mut value = json!({
        "leader": leader,
        "path": path,
        "after_removal_proposed": path.is_some(),
        "isolated": true,
        "majority_kept": c.ids().len() >= 3,
    });
    let others: Vec<u64> = c.ids().into_iter().filter(|&id| id != leader).collect();
    let Some(next) = leader_among(c, &others, leader).await else {
        value["error"] = json!("no leader among the others");
        return (inv, value);
    };
    value["next_leader"] = json!(next);
    let Some(path) = path else {
        return (inv, value);
    };
    // At once: the new leader proposes the removal itself a TTL after it
    // took over, and the moves have to come first.
    let (led_again, moves) = lead_again(c, leader).await;
    value["led_again"] = json!(led_again);
    value["moves"] = json!(moves);
    if moves > 0 {
        // Leadership moved on purpose, each leader cut off before a TTL
        // had passed under it: a correct cluster may grant nothing
        // meanwhile (every new leader re-arms every TTL in full), so the
        // liveness checks excuse this fault as they excuse a lost majority.
        value["majority_kept"] = json!(false);
    }
    // Still there when the old leader leads again: its proposal was lost.
    let lost = match led_again {
        true => c.exists_on(leader, &path).await.ok(),
        false => None,
    };
    value["removal_lost"] = json!(lost);
    (inv, value)
}

/// Black-holes every link between `id` and the other nodes.
fn isolate(c: &Cluster, id: u64) {
    c.net.set(&links_of(c, id), Mode::BlackHole);
}

fn links_of(c: &Cluster, id: u64) -> Vec<(Endpoint, u64)> {
    let mut links = Vec::new();
    for o in c.ids().into_iter().filter(|&o| o != id) {
        links.push((Endpoint::Node(o), id));
        links.push((Endpoint::Node(id), o));
    }
    links
}

/// Node `id`'s view of the cluster (`GET /status` on its HTTP port: no
/// session, no proposal).
async fn status(c: &Cluster, id: u64) -> Option<Value> {
    let addr = c.node(id).http_proxy.to_string();
    match crate::http::get_json(&addr, "/status", STATUS_BOUND).await {
        Reply::Answer { status: 200, body } => Some(body),
        _ => None,
    }
}

/// A leader other than `not` that the nodes of `among` report, within
/// [`ELECTION_BOUND`]: of their claims, the one with the highest term (a
/// leader that was cut off may still claim its old term for an election
/// timeout).
async fn leader_among(c: &Cluster, among: &[u64], not: u64) -> Option<u64> {
    let until = Instant::now() + ELECTION_BOUND;
    while Instant::now() < until {
        let mut best: Option<(u64, u64)> = None;
        for &id in among {
            if let Some(s) = status(c, id).await {
                let l = s["leader_id"].as_u64().unwrap_or(0);
                let term = own(&s, "term").unwrap_or(0);
                if l != 0 && among.contains(&l) && best.is_none_or(|(t, _)| term > t) {
                    best = Some((term, l));
                }
            }
        }
        match best {
            Some((_, l)) if l != not => return Some(l),
            _ => tokio::time::sleep(STATUS_POLL).await,
        }
    }
    None
}

/// A field of the answering node's own entry in its `/status`.
fn own(s: &Value, key: &str) -> Option<u64> {
    s["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["id"] == s["server_id"]))
        .and_then(|m| m[key].as_u64())
}

/// Lifts `old`'s cut and moves leadership until `old` leads: while another
/// node leads, waits for `old` to catch up with it, then cuts that leader
/// off until a new one is elected, and lifts its cut. Returns whether `old`
/// leads at the end, and the moves made.
async fn lead_again(c: &mut Cluster, old: u64) -> (bool, u32) {
    c.net.set(&links_of(c, old), Mode::Pass);
    let mut moves = 0;
    loop {
        let Some(current) = leader_among(c, &c.ids(), 0).await else {
            return (false, moves);
        };
        if current == old {
            return (true, moves);
        }
        if moves == MOVES_MAX {
            return (false, moves);
        }
        caught_up(c, current, old).await;
        isolate(c, current);
        let rest: Vec<u64> = c.ids().into_iter().filter(|&id| id != current).collect();
        let next = leader_among(c, &rest, current).await;
        c.net.set(&links_of(c, current), Mode::Pass);
        moves += 1;
        if next.is_none() {
            return (false, moves);
        }
    }
}

/// Waits (at most [`CATCH_UP_BOUND`]) until node `id` has applied what
/// `leader` had committed when the wait began.
async fn caught_up(c: &Cluster, leader: u64, id: u64) {
    let until = Instant::now() + CATCH_UP_BOUND;
    let mut commit = None;
    while commit.is_none() && Instant::now() < until {
        commit = status(c, leader)
            .await
            .and_then(|s| own(&s, "commit_index"));
    }
    let Some(commit) = commit else { return };
    while Instant::now() < until {
        if let Some(applied) = status(c, id).await.and_then(|s| own(&s, "applied_index")) {
            if applied >= commit {
                return;
            }
        }
        tokio::time::sleep(STATUS_POLL).await;
    }
}

/// The path of the first removal proposal in the log from byte `from`
/// on, and where the log now ends.
fn scan(log: &std::path::Path, from: u64) -> (Option<String>, u64) {
    let Ok(mut f) = std::fs::File::open(log) else {
        return (None, from);
    };
    if f.seek(SeekFrom::Start(from)).is_err() {
        return (None, from);
    }
    let mut text = String::new();
    let read = f.read_to_string(&mut text).unwrap_or(0) as u64;
    let found = text
        .lines()
        .find(|l| l.contains(REMOVAL_PROPOSED))
        .map(|l| removal_path(l).unwrap_or_default().to_string());
    (found, from + read)
}

/// The `path=` field of a removal's log line.
fn removal_path(line: &str) -> Option<&str> {
    let at = line.find("path=")? + "path=".len();
    line[at..].split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_line_is_found_past_the_offset_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("node.log");
        std::fs::write(&log, format!("x {REMOVAL_PROPOSED} path=/a\n")).unwrap();
        let len = std::fs::metadata(&log).unwrap().len();
        assert_eq!(scan(&log, 0), (Some("/a".to_string()), len));
        assert_eq!(scan(&log, len), (None, len));
    }
}
