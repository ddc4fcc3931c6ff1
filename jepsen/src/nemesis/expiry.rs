//! `isolate-after-expiry`: the leader cut off from every other member just
//! after it proposed the removal of an expired TTL node (a lease) or an
//! empty container, so that the proposal is lost with its leadership. A
//! lease must still lapse within its TTL and an election of the next
//! leader (the lease workload's `lease-outlived-ttl` check).
//!
//! The moment is read from the leader's own log: the server logs
//! `proposing removal of empty container / expired TTL node` (debug level,
//! which the harness's nodes run at) when it proposes one.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::proxy::{Endpoint, Mode};

/// The server's log line for a proposed TTL or container removal.
pub const REMOVAL_PROPOSED: &str = "proposing removal of empty container / expired TTL node";
/// How long the nemesis watches the leader's log for a removal before it
/// isolates the leader anyway (leases expire only after a holder stalls).
pub const EXPIRY_WATCH: Duration = Duration::from_secs(20);
/// How often the log is read while watching.
const POLL: Duration = Duration::from_millis(10);

/// Waits (at most [`EXPIRY_WATCH`]) for the leader to log a removal
/// proposal, then black-holes every link to and from it. Returns the
/// history value.
pub async fn isolate_after_expiry(c: &mut Cluster) -> Value {
    let Some(leader) = c.leader().await else {
        return json!({ "leader": null, "majority_kept": true, "isolated": false });
    };
    let log = c.node(leader).log_path.clone();
    let mut from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let until = Instant::now() + EXPIRY_WATCH;
    let mut seen = false;
    while !seen && Instant::now() < until {
        tokio::time::sleep(POLL).await;
        let (found, to) = scan(&log, from);
        seen = found;
        from = to;
    }
    let others: Vec<u64> = c.ids().into_iter().filter(|&id| id != leader).collect();
    let mut links = Vec::new();
    for &o in &others {
        links.push((Endpoint::Node(o), leader));
        links.push((Endpoint::Node(leader), o));
    }
    c.net.set(&links, Mode::BlackHole);
    json!({
        "leader": leader,
        "after_removal_proposed": seen,
        "isolated": true,
        "majority_kept": c.ids().len() >= 3,
    })
}

/// Whether the log from byte `from` on holds a removal proposal, and where
/// it now ends.
fn scan(log: &std::path::Path, from: u64) -> (bool, u64) {
    let Ok(mut f) = std::fs::File::open(log) else {
        return (false, from);
    };
    if f.seek(SeekFrom::Start(from)).is_err() {
        return (false, from);
    }
    let mut text = String::new();
    let read = f.read_to_string(&mut text).unwrap_or(0) as u64;
    (text.contains(REMOVAL_PROPOSED), from + read)
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
        assert_eq!(scan(&log, 0), (true, len));
        assert_eq!(scan(&log, len), (false, len));
    }
}
