//! One-way cuts: a node hears no other member while its own messages still
//! go out. Peers send on connections they open themselves (one outbound
//! link per peer), so cutting every link *into* a node (black-holing the
//! connections the others opened to it) leaves the connections it opened,
//! and so its appends, votes and forwarded writes, untouched.
//!
//! The node cut is the clients' server: the one the most client
//! connections (client, ZooKeeper and HTTP ports) are open to through the
//! harness's proxies, where a workload's sessions sit; else one at random.
//! `one-way-kill` is the schedule that found writes applied twice (issue
//! 27): that cut, then the leader killed with SIGKILL while the cut node
//! still waits to learn that its forwarded writes were committed, then the
//! cut lifted.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::proxy::{Endpoint, Mode};

/// How long the clients' server is cut off before the leader is killed:
/// long enough for the leader to commit writes the cut node forwarded and
/// never hears about, short of an election timeout on the others.
pub const CUT_BEFORE_KILL: Duration = Duration::from_secs(1);

/// The node most client connections are open to, if any is.
pub fn clients_server(c: &Cluster) -> Option<u64> {
    let ids = c.ids();
    c.net
        .client_connections()
        .into_iter()
        .filter(|(id, n)| *n > 0 && ids.contains(id))
        .max_by_key(|&(id, n)| (n, std::cmp::Reverse(id)))
        .map(|(id, _)| id)
}

/// The links into `node` from every other member.
fn links_into(c: &Cluster, node: u64) -> Vec<(Endpoint, u64)> {
    c.ids()
        .into_iter()
        .filter(|&id| id != node)
        .map(|id| (Endpoint::Node(id), node))
        .collect()
}

/// Cuts every link into the clients' server (or a node at random):
/// returns the node and the history value.
pub async fn cut(c: &mut Cluster, rng: &mut StdRng) -> (u64, Value) {
    let (node, chosen) = match clients_server(c) {
        Some(n) => (n, "clients-server"),
        None => (*c.ids().choose(rng).expect("nodes"), "one"),
    };
    let links = links_into(c, node);
    c.net.set(&links, Mode::BlackHole);
    let value = json!({
        "node": node,
        "chosen": chosen,
        "hears_nobody": true,
        "majority_kept": c.ids().len() >= 3,
    });
    (node, value)
}

/// The links into `node` back to `Pass`.
pub fn heal(c: &mut Cluster, node: u64) {
    let links = links_into(c, node);
    c.net.set(&links, Mode::Pass);
}

/// Cuts the links into the clients' server (a follower: another one at
/// random if the clients sit on the leader or nowhere), waits
/// [`CUT_BEFORE_KILL`], kills the leader with SIGKILL and lifts the cut.
/// Returns the nodes killed and the history value.
pub async fn cut_then_kill_leader(c: &mut Cluster, rng: &mut StdRng) -> (Vec<u64>, Value) {
    let leader = c.leader().await;
    let followers: Vec<u64> = c
        .ids()
        .into_iter()
        .filter(|&id| Some(id) != leader)
        .collect();
    let (node, chosen) = match clients_server(c).filter(|n| Some(*n) != leader) {
        Some(n) => (n, "clients-server"),
        None => match followers.choose(rng) {
            Some(&n) => (n, "a-follower"),
            None => (*c.ids().choose(rng).expect("nodes"), "one"),
        },
    };
    let links = links_into(c, node);
    c.net.set(&links, Mode::BlackHole);
    tokio::time::sleep(CUT_BEFORE_KILL).await;
    let killed: Vec<u64> = leader.into_iter().filter(|&l| l != node).collect();
    for &id in &killed {
        c.kill(id);
    }
    c.net.set(&links, Mode::Pass);
    let value = json!({
        "cut": node,
        "chosen": chosen,
        "cut_ms": CUT_BEFORE_KILL.as_millis() as u64,
        "nodes": killed,
        "targets": "leader",
        "majority_kept": c.ids().len() >= 3,
    });
    (killed, value)
}
