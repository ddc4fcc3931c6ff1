//! Nemeses: faults injected on a schedule. Each cycle waits `interval`,
//! picks one of the enabled faults (seeded), puts it in force for
//! `duration`, then ends it. Every action is an operation of the
//! `nemesis` process in the history: `kill`/`restart`, `pause`/`resume`,
//! `partition`/`heal` (between nodes), `client-partition`/`client-heal`
//! (clients cut from some nodes, which still hear each other),
//! `remove`/`add` (membership), `stop-all`/`start-all` (restart-all),
//! `corrupt`/`recover` (one node killed, one of its files damaged — see
//! [`crate::disk`] — and started again: it either serves or refuses to
//! start; a refused node is recovered as an operator would, removed from
//! the group, wiped and added back), `clock-jump`/`clock-reset` (a node's
//! wall clock, usually the leader's, jumps minutes to an hour forward or
//! back while it runs, then returns; TTL leases must expire neither early
//! nor late), `lose-unsynced`/`rejoin` (nodes — the leader, one, a
//! minority or all of them — killed with SIGKILL as a power failure would,
//! every write they did not fsync dropped by the [`crate::faultfs`] layer
//! their data dirs are on, then started again: each must serve or refuse
//! with a clear message; a refused node is removed, wiped and added back
//! as after `corrupt`; a durability marker acknowledged just before the
//! kill must still be there at `rejoin`).
//!
//! `one-way-cut`/`one-way-heal`: the clients' server (the node most
//! client connections are open to) hears no other member while its own
//! messages still go out (see [`one_way`]); `one-way-kill`/`one-way-restart`:
//! that cut, then after [`one_way::CUT_BEFORE_KILL`] the leader killed and
//! the cut lifted, the leader restarted at the fault's end.
//!
//! With `overlap`, process faults (kill, pause, membership, restart-all)
//! and network faults (partition, client-partition) run in two lanes at
//! once, the network lane half an interval behind, so faults of the two
//! kinds are in force together: a node killed during a partition, a
//! leader paused while clients are cut from the majority.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::history::{History, Process};
use crate::proxy::Mode;
use crate::workloads::client_faults::ClientFault;

pub mod expiry;
mod grudges;
pub mod one_way;

use grudges::partition;
pub use grudges::{cuts, GRUDGES};

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    Kill,
    Pause,
    Partition,
    Membership,
    RestartAll,
    ClientPartition,
    Corrupt,
    Clock,
    LoseUnsynced,
    OneWayCut,
    OneWayKill,
    IsolateAfterExpiry,
}

impl Fault {
    pub const ALL: [Fault; 12] = [
        Fault::Kill,
        Fault::Pause,
        Fault::Partition,
        Fault::Membership,
        Fault::RestartAll,
        Fault::ClientPartition,
        Fault::Corrupt,
        Fault::Clock,
        Fault::LoseUnsynced,
        Fault::OneWayCut,
        Fault::OneWayKill,
        Fault::IsolateAfterExpiry,
    ];

    /// A fault of the network (the overlap's second lane), not of processes.
    pub fn is_network(self) -> bool {
        matches!(
            self,
            Fault::Partition
                | Fault::ClientPartition
                | Fault::OneWayCut
                | Fault::IsolateAfterExpiry
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Partition => "partition",
            Fault::Membership => "membership",
            Fault::RestartAll => "restart-all",
            Fault::ClientPartition => "client-partition",
            Fault::Corrupt => "corrupt",
            Fault::Clock => "clock",
            Fault::LoseUnsynced => "lose-unsynced",
            Fault::OneWayCut => "one-way-cut",
            Fault::OneWayKill => "one-way-kill",
            Fault::IsolateAfterExpiry => "isolate-after-expiry",
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown nemesis {s:?}: expected one of {}",
                    Fault::ALL.map(Fault::name).join(", ")
                )
            })
    }
}

/// Parses `kill,pause,partition` (`none` or empty: no faults).
pub fn parse_faults(s: &str) -> Result<Vec<Fault>, String> {
    let (faults, client) = parse_nemesis(s)?;
    match client.first() {
        Some(f) => Err(format!("{} is a fault of client processes", f.name())),
        None => Ok(faults),
    }
}

/// Parses `--nemesis`: the cluster's faults, and the faults of client
/// processes (`kill-client`, `pause-client`: see
/// [`client_faults`](crate::workloads::client_faults)), which the
/// workload deals rather than the schedule.
pub fn parse_nemesis(s: &str) -> Result<(Vec<Fault>, Vec<ClientFault>), String> {
    let mut out = Vec::new();
    let mut client = Vec::new();
    if s.is_empty() || s == "none" {
        return Ok((out, client));
    }
    for part in s.split(',') {
        let part = part.trim();
        if let Ok(f) = part.parse::<ClientFault>() {
            if !client.contains(&f) {
                client.push(f);
            }
            continue;
        }
        let f: Fault = part.parse().map_err(|e: String| {
            format!(
                "{e}, {}",
                ClientFault::ALL.map(ClientFault::name).join(", ")
            )
        })?;
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok((out, client))
}

/// The schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub faults: Vec<Fault>,
    /// Quiet time before each fault.
    pub interval: Duration,
    /// How long each fault stays in force.
    pub duration: Duration,
    /// Process and network faults in two lanes at once (see the module
    /// docs).
    pub overlap: bool,
}

impl Schedule {
    /// The lanes: one with every fault, or with `overlap` the process
    /// faults and the network faults apart.
    fn lanes(&self) -> Vec<Vec<Fault>> {
        let (network, process): (Vec<Fault>, Vec<Fault>) =
            self.faults.iter().partition(|f| f.is_network());
        if self.overlap && !network.is_empty() && !process.is_empty() {
            vec![process, network]
        } else if self.faults.is_empty() {
            Vec::new()
        } else {
            vec![self.faults.clone()]
        }
    }
}

/// What a run's nemesis did, for results.json.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub started: u64,
    pub by_kind: std::collections::BTreeMap<String, u64>,
    pub errors: Vec<String>,
}

/// Runs the schedule until `deadline`, then ends every fault (restarts,
/// resumes, heals, re-adds) so that the workload's final reads can work.
pub async fn run(
    cluster: Arc<Mutex<Cluster>>,
    history: History,
    schedule: Schedule,
    seed: u64,
    deadline: Instant,
) -> Tally {
    let lanes = schedule.lanes();
    let runs = lanes.into_iter().enumerate().map(|(i, faults)| {
        let rng = StdRng::seed_from_u64(seed ^ 0x6e656d65_73697321 ^ (i as u64) << 32);
        // The second lane starts half an interval late, so its faults
        // begin and end while the first lane's are in force.
        let offset = schedule.interval / 2 * i as u32;
        lane(
            cluster.clone(),
            history.clone(),
            faults,
            schedule.clone(),
            rng,
            deadline,
            offset,
        )
    });
    let mut tally = Tally::default();
    let mut removed = Vec::new();
    for (t, r) in futures::future::join_all(runs).await {
        tally.started += t.started;
        for (k, n) in t.by_kind {
            *tally.by_kind.entry(k).or_default() += n;
        }
        tally.errors.extend(t.errors);
        removed.extend(r);
    }
    let mut c = cluster.lock().await;
    for undo in removed {
        stop(&mut c, &history, undo, &mut tally).await;
    }
    let inv = history.invoke(Process::NEMESIS, "heal-all", Value::Null);
    let healed = match c.heal_all().await {
        Ok(()) => c.await_healthy(crate::cluster::CLUSTER_READY_TIMEOUT).await,
        Err(e) => Err(e),
    };
    match healed {
        Ok(()) => history.ok(&inv, Value::Null),
        Err(e) => {
            tally.errors.push(e.to_string());
            history.info(&inv, Value::Null, e.to_string());
        }
    }
    tally
}

/// One lane of the schedule: its faults one at a time until `deadline`.
/// Returns what it did and the re-add of a member that failed (for the
/// final heal to retry).
async fn lane(
    cluster: Arc<Mutex<Cluster>>,
    history: History,
    faults: Vec<Fault>,
    schedule: Schedule,
    mut rng: StdRng,
    deadline: Instant,
    offset: Duration,
) -> (Tally, Option<Undo>) {
    let mut tally = Tally::default();
    let mut removed = None;
    tokio::time::sleep(offset).await;
    loop {
        if Instant::now() + schedule.interval + schedule.duration > deadline {
            break;
        }
        tokio::time::sleep(schedule.interval).await;
        let fault = *faults.choose(&mut rng).expect("faults not empty");
        tally.started += 1;
        *tally.by_kind.entry(fault.name().into()).or_default() += 1;
        let mut c = cluster.lock().await;
        let undo = start(&mut c, &history, fault, &mut rng, &mut tally, deadline).await;
        drop(c);
        tokio::time::sleep(schedule.duration).await;
        let mut c = cluster.lock().await;
        let retry = matches!(
            undo,
            Undo::Membership(_) | Undo::Recover { refused: true, .. }
        ) || matches!(undo, Undo::Rejoin(s, _) if !s.ids().is_empty());
        if !stop(&mut c, &history, undo, &mut tally).await && retry {
            // Retried by the final heal.
            removed = Some(undo);
        }
    }
    (tally, removed)
}

/// How to end a fault.
#[derive(Debug, Clone, Copy)]
enum Undo {
    Nothing,
    Restart(NodeSet),
    Resume(NodeSet),
    Heal,
    /// Client links to these nodes back to `Pass`.
    ClientHeal(NodeSet),
    Membership(u64),
    StartAll,
    /// After `corrupt`: re-add the node if it refused to start.
    Recover {
        id: u64,
        refused: bool,
    },
    /// Clocks of these nodes back to the real time.
    ClockReset(NodeSet),
    /// After `lose-unsynced`: re-add these nodes (they refused to start),
    /// then look for the durability marker written before the kill (named
    /// by the fault's history index; `None`: none was acknowledged).
    Rejoin(NodeSet, Option<u64>),
    /// After `isolate-after-expiry`: every node-to-node link back to `Pass`.
    ExpiryHeal,
    /// After `one-way-cut`: the links into this node back to `Pass`.
    OneWayHeal(u64),
    /// After `one-way-kill`: restart these nodes (the cut is already
    /// lifted).
    OneWayRestart(NodeSet),
}

/// A small set of node ids (bit i = node i).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeSet(u64);

impl NodeSet {
    pub(crate) fn of(ids: &[u64]) -> Self {
        NodeSet(ids.iter().fold(0, |acc, id| acc | (1 << id)))
    }

    fn ids(self) -> Vec<u64> {
        (1..64).filter(|i| self.0 & (1 << i) != 0).collect()
    }
}

/// Picks the nodes a kill or pause hits: one at random, the leader, or a
/// random minority.
async fn targets(c: &mut Cluster, rng: &mut StdRng) -> (String, Vec<u64>) {
    let ids = c.ids();
    let n = ids.len();
    match rng.random_range(0..3) {
        0 => ("one".into(), vec![*ids.choose(rng).expect("nodes")]),
        1 => match c.leader().await {
            Some(l) => ("leader".into(), vec![l]),
            None => ("one".into(), vec![*ids.choose(rng).expect("nodes")]),
        },
        _ => {
            let mut v = ids.clone();
            v.shuffle(rng);
            v.truncate(((n - 1) / 2).max(1));
            v.sort();
            ("minority".into(), v)
        }
    }
}

/// Whether `nodes` leave a majority of the cluster untouched.
fn minority(nodes: &[u64], c: &Cluster) -> bool {
    nodes.len() <= (c.ids().len() - 1) / 2
}

/// Puts `fault` in force; `deadline` is the run's end (a fault that waits
/// for its moment waits no longer).
async fn start(
    c: &mut Cluster,
    history: &History,
    fault: Fault,
    rng: &mut StdRng,
    tally: &mut Tally,
    deadline: Instant,
) -> Undo {
    match fault {
        Fault::Kill => {
            let (how, nodes) = targets(c, rng).await;
            let value =
                json!({"targets": how, "nodes": nodes, "majority_kept": minority(&nodes, c)});
            let inv = history.invoke(Process::NEMESIS, "kill", value.clone());
            for &id in &nodes {
                c.kill(id);
            }
            history.ok(&inv, value);
            Undo::Restart(NodeSet::of(&nodes))
        }
        Fault::Pause => {
            let (how, nodes) = targets(c, rng).await;
            let value =
                json!({"targets": how, "nodes": nodes, "majority_kept": minority(&nodes, c)});
            let inv = history.invoke(Process::NEMESIS, "pause", value.clone());
            for &id in &nodes {
                c.pause(id);
            }
            history.ok(&inv, value);
            Undo::Resume(NodeSet::of(&nodes))
        }
        Fault::Partition => {
            let mode = if rng.random_bool(0.5) {
                Mode::Drop
            } else {
                Mode::BlackHole
            };
            let (grudge, cuts) = partition(c, rng).await;
            // Halves, an isolated leader and a bridge (the bridging node
            // plus the larger half) leave a connected majority; in a
            // majorities ring no majority hears itself both ways.
            let kept = c.ids().len() >= 3 && grudge != "majorities-ring";
            let value =
                json!({"grudge": grudge, "mode": mode, "cuts": cuts, "majority_kept": kept});
            let inv = history.invoke(Process::NEMESIS, "partition", value.clone());
            let links: Vec<_> = cuts
                .iter()
                .map(|&(from, to)| (crate::proxy::Endpoint::Node(from), to))
                .collect();
            c.net.set(&links, mode);
            history.ok(&inv, value);
            Undo::Heal
        }
        Fault::ClientPartition => {
            // Clients lose some nodes, never all: one node, the leader, or
            // a majority (then only a minority serves them, and it cannot
            // commit a write without the others, which it still hears).
            let ids = c.ids();
            let (how, nodes) = match rng.random_range(0..3) {
                0 => ("one".to_string(), vec![*ids.choose(rng).expect("nodes")]),
                1 => match c.leader().await {
                    Some(l) => ("leader".to_string(), vec![l]),
                    None => ("one".to_string(), vec![*ids.choose(rng).expect("nodes")]),
                },
                _ => {
                    let mut v = ids.clone();
                    v.shuffle(rng);
                    v.truncate((ids.len() / 2 + 1).min(ids.len() - 1).max(1));
                    v.sort();
                    ("majority".to_string(), v)
                }
            };
            let mode = if rng.random_bool(0.5) {
                Mode::Drop
            } else {
                Mode::BlackHole
            };
            let value =
                json!({"targets": how, "nodes": nodes, "mode": mode, "majority_kept": true});
            let inv = history.invoke(Process::NEMESIS, "client-partition", value.clone());
            let links: Vec<_> = nodes
                .iter()
                .map(|&id| (crate::proxy::Endpoint::Client, id))
                .collect();
            c.net.set(&links, mode);
            history.ok(&inv, value);
            Undo::ClientHeal(NodeSet::of(&nodes))
        }
        Fault::Corrupt => {
            let ids = c.ids();
            let id = *ids.choose(rng).expect("nodes");
            let inv = history.invoke(Process::NEMESIS, "corrupt", json!({"node": id}));
            c.kill(id);
            let data_dir = c.node(id).data_dir.clone();
            let damage = match crate::disk::damage(&data_dir, rng) {
                Ok(d) => d,
                Err(e) => {
                    tally.errors.push(e.clone());
                    let _ = c.restart(id).await;
                    history.fail(&inv, json!({"node": id}), e);
                    return Undo::Nothing;
                }
            };
            let (outcome, refused) = match c.try_restart(id).await {
                Ok(()) => ("started".to_string(), false),
                Err(why) => (format!("refused: {why}"), true),
            };
            // A snapshot carries a checksum: starting on a flipped one is
            // a storage bug (flagged for the checker in run.rs).
            let accepted_damaged_snapshot = !refused && damage.kind == "snapshot-flip";
            let value = json!({
                "node": id,
                "damage": damage,
                "outcome": outcome,
                "refused": refused,
                "accepted_damaged_snapshot": accepted_damaged_snapshot,
                "majority_kept": c.ids().len() >= 3,
            });
            history.ok(&inv, value);
            Undo::Recover { id, refused }
        }
        Fault::LoseUnsynced => {
            // A third of the time every node at once (a power failure of
            // the whole cluster: where a server that acknowledges before
            // fsync loses committed writes), else the leader, one node or
            // a minority (a follower that lost what it acknowledged).
            let (how, nodes) = if rng.random_bool(1.0 / 3.0) {
                ("all".to_string(), c.ids())
            } else {
                targets(c, rng).await
            };
            let majority_kept = minority(&nodes, c);
            let inv = history.invoke(
                Process::NEMESIS,
                "lose-unsynced",
                json!({"targets": how, "nodes": nodes, "majority_kept": majority_kept}),
            );
            // A write acknowledged just before the power failure: it is in
            // every node's unsynced tail unless the server fsyncs before it
            // answers, and must be there after the restart (see `stop`).
            let marker = match c.write_marker(&format!("m-{}", inv.index)).await {
                Ok(_) => Some(inv.index),
                Err(e) => {
                    tally.errors.push(e.to_string());
                    None
                }
            };
            let mut lost = Vec::new();
            for &id in &nodes {
                c.kill(id);
            }
            for &id in &nodes {
                match c.lose_unsynced(id) {
                    Ok(l) => lost.push(
                        json!({"node": id, "files": l.files, "bytes": l.bytes, "by_file": l.by_file}),
                    ),
                    Err(e) => tally
                        .errors
                        .push(format!("lose-unsynced on node {id}: {e}")),
                }
            }
            let mut outcomes = Vec::new();
            let mut refused = Vec::new();
            for (id, r) in c.try_restart_all(&nodes).await {
                match r {
                    Ok(()) => outcomes.push(json!({"node": id, "outcome": "started"})),
                    Err(why) => {
                        outcomes.push(json!({"node": id, "outcome": format!("refused: {why}")}));
                        refused.push(id);
                    }
                }
            }
            let value = json!({
                "targets": how,
                "nodes": nodes,
                "lost": lost,
                "outcomes": outcomes,
                "refused": refused,
                "majority_kept": majority_kept,
            });
            history.ok(&inv, value);
            Undo::Rejoin(NodeSet::of(&refused), marker)
        }
        Fault::Membership => {
            let ids = c.ids();
            let id = *ids.choose(rng).expect("nodes");
            let value = json!({"node": id, "majority_kept": c.ids().len() >= 3});
            let inv = history.invoke(Process::NEMESIS, "remove", value.clone());
            match c.remove_member(id).await {
                Ok(()) => {
                    history.ok(&inv, value);
                    Undo::Membership(id)
                }
                Err(e) => {
                    tally.errors.push(e.to_string());
                    history.fail(&inv, json!({"node": id}), e.to_string());
                    Undo::Nothing
                }
            }
        }
        Fault::Clock => {
            // Mostly the leader (whose clock would decide TTL expiry), and
            // mostly forward (a forward jump is what could expire a lease
            // early; a backward one what could keep it late).
            let leader = if rng.random_bool(2.0 / 3.0) {
                c.leader().await
            } else {
                None
            };
            let (how, nodes) = match leader {
                Some(l) => ("leader", vec![l]),
                None => ("one", vec![*c.ids().choose(rng).expect("nodes")]),
            };
            let minutes = rng.random_range(1..=60i64);
            let offset_ms = if rng.random_bool(2.0 / 3.0) { 1 } else { -1 } * minutes * 60_000;
            let value = json!({"targets": how, "nodes": nodes, "offset_ms": offset_ms, "majority_kept": true});
            let inv = history.invoke(Process::NEMESIS, "clock-jump", value.clone());
            let mut jumped = Vec::new();
            for &id in &nodes {
                match c.set_clock_offset(id, offset_ms) {
                    Ok(()) => jumped.push(id),
                    Err(e) => tally.errors.push(format!("clock of node {id}: {e}")),
                }
            }
            history.ok(&inv, value);
            Undo::ClockReset(NodeSet::of(&jumped))
        }
        Fault::IsolateAfterExpiry => {
            let (inv, value) = expiry::isolate_after_expiry(c, history, deadline).await;
            history.ok(&inv, value);
            Undo::ExpiryHeal
        }
        Fault::OneWayCut => {
            let (node, value) = one_way::cut(c, rng).await;
            let inv = history.invoke(Process::NEMESIS, "one-way-cut", value.clone());
            history.ok(&inv, value);
            Undo::OneWayHeal(node)
        }
        Fault::OneWayKill => {
            let inv = history.invoke(Process::NEMESIS, "one-way-kill", Value::Null);
            let (killed, value) = one_way::cut_then_kill_leader(c, rng).await;
            history.ok(&inv, value);
            Undo::OneWayRestart(NodeSet::of(&killed))
        }
        Fault::RestartAll => {
            let ids = c.ids();
            let value = json!({"nodes": ids, "majority_kept": false});
            let inv = history.invoke(Process::NEMESIS, "stop-all", value.clone());
            for &id in &ids {
                c.kill(id);
            }
            history.ok(&inv, value);
            Undo::StartAll
        }
    }
}

/// Ends a fault; false if that failed.
async fn stop(c: &mut Cluster, history: &History, undo: Undo, tally: &mut Tally) -> bool {
    let (f, mut value) = match undo {
        Undo::Nothing => return true,
        Undo::Restart(s) => ("restart", json!({"nodes": s.ids()})),
        Undo::Resume(s) => ("resume", json!({"nodes": s.ids()})),
        Undo::Heal => ("heal", Value::Null),
        Undo::ExpiryHeal => ("expiry-heal", Value::Null),
        Undo::ClientHeal(s) => ("client-heal", json!({"nodes": s.ids()})),
        Undo::Membership(id) => ("add", json!({"node": id})),
        Undo::StartAll => ("start-all", json!({"nodes": c.ids()})),
        Undo::Recover { id, refused } => ("recover", json!({"node": id, "rejoin": refused})),
        Undo::ClockReset(s) => ("clock-reset", json!({"nodes": s.ids()})),
        Undo::Rejoin(s, marker) => (
            "rejoin",
            json!({"nodes": s.ids(), "marker": marker.map(marker_path)}),
        ),
        Undo::OneWayHeal(id) => ("one-way-heal", json!({"node": id})),
        Undo::OneWayRestart(s) => ("one-way-restart", json!({"nodes": s.ids()})),
    };
    let inv = history.invoke(Process::NEMESIS, f, value.clone());
    let result = match undo {
        Undo::Nothing => Ok(()),
        Undo::Restart(s) | Undo::OneWayRestart(s) => {
            let mut r = Ok(());
            for id in s.ids() {
                r = r.and(c.restart(id).await);
            }
            r
        }
        Undo::OneWayHeal(id) => {
            one_way::heal(c, id);
            Ok(())
        }
        Undo::Resume(s) => {
            for id in s.ids() {
                c.resume(id);
            }
            Ok(())
        }
        Undo::Heal | Undo::ExpiryHeal => {
            // The node-to-node links only: a client partition of the other
            // lane stays in force.
            let links: Vec<_> = c
                .net
                .faults()
                .into_iter()
                .map(|(link, _)| link)
                .filter(|(from, _)| matches!(from, crate::proxy::Endpoint::Node(_)))
                .collect();
            c.net.set(&links, Mode::Pass);
            Ok(())
        }
        Undo::ClientHeal(s) => {
            let links: Vec<_> = s
                .ids()
                .into_iter()
                .map(|id| (crate::proxy::Endpoint::Client, id))
                .collect();
            c.net.set(&links, Mode::Pass);
            Ok(())
        }
        Undo::Membership(id) => c.add_member(id).await,
        Undo::StartAll => {
            let mut r = Ok(());
            for id in c.ids() {
                r = r.and(c.restart(id).await);
            }
            r
        }
        Undo::Recover { refused: false, .. } => Ok(()),
        // What the docs tell an operator: remove the member, wipe it, add
        // it back (it catches up from the others).
        Undo::Recover { id, refused: true } => match c.remove_member(id).await {
            Ok(()) => c.add_member(id).await,
            Err(e) => Err(e),
        },
        Undo::ClockReset(s) => s
            .ids()
            .into_iter()
            .try_for_each(|id| c.set_clock_offset(id, 0)),
        // As after `corrupt`: remove, wipe, add back.
        Undo::Rejoin(s, marker) => {
            let mut r = Ok(());
            for id in s.ids() {
                r = r.and(match c.remove_member(id).await {
                    Ok(()) => c.add_member(id).await,
                    Err(e) => Err(e),
                });
            }
            // The marker acknowledged before the power failure must have
            // survived it (run.rs: `acknowledged-write-lost`).
            if let Some(m) = marker {
                match c
                    .marker_exists(&marker_path(m), crate::cluster::CLUSTER_READY_TIMEOUT)
                    .await
                {
                    Ok(found) => value["marker_found"] = json!(found),
                    Err(e) => tally.errors.push(e.to_string()),
                }
            }
            r
        }
    };
    match result {
        Ok(()) => {
            history.ok(&inv, value);
            true
        }
        Err(e) => {
            tally.errors.push(e.to_string());
            history.info(&inv, value, e.to_string());
            false
        }
    }
}

/// The znode of durability marker `n` (see `Fault::LoseUnsynced`).
fn marker_path(n: u64) -> String {
    format!("{}/m-{n}", crate::cluster::MARKER_ROOT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_splits_process_and_network_faults_into_two_lanes() {
        let s = |faults: &str, overlap| Schedule {
            faults: parse_faults(faults).unwrap(),
            interval: Duration::from_secs(1),
            duration: Duration::from_secs(1),
            overlap,
        };
        assert_eq!(
            s("kill,partition,pause,client-partition", true).lanes(),
            vec![
                vec![Fault::Kill, Fault::Pause],
                vec![Fault::Partition, Fault::ClientPartition]
            ]
        );
        assert_eq!(
            s("kill,partition", false).lanes(),
            vec![vec![Fault::Kill, Fault::Partition]]
        );
        // Nothing to overlap with: one lane.
        assert_eq!(
            s("kill,pause", true).lanes(),
            vec![vec![Fault::Kill, Fault::Pause]]
        );
        assert!(s("none", true).lanes().is_empty());
    }

    #[test]
    fn nemesis_names_parse() {
        assert_eq!(
            parse_faults("kill,partition,kill").unwrap(),
            vec![Fault::Kill, Fault::Partition]
        );
        assert!(parse_faults("none").unwrap().is_empty());
        assert_eq!(
            parse_faults("one-way-cut,one-way-kill").unwrap(),
            vec![Fault::OneWayCut, Fault::OneWayKill]
        );
        assert!(Fault::OneWayCut.is_network() && !Fault::OneWayKill.is_network());
        assert!(parse_faults("kill,flood").unwrap_err().contains("flood"));
        assert_eq!(
            parse_nemesis("kill,kill-client,pause-client,kill-client").unwrap(),
            (
                vec![Fault::Kill],
                vec![ClientFault::Kill, ClientFault::Pause]
            )
        );
        assert!(parse_faults("kill-client").is_err());
        assert!(parse_nemesis("flood").unwrap_err().contains("pause-client"));
    }
}
