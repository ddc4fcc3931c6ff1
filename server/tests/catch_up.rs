//! A follower far behind the leader (megabytes of log, not compacted)
//! rejoins a cluster under write load, against real `warden` processes.
//!
//! Catching it up must not cost the leader its core: before the leader
//! bounded what it reads and queues per peer, the first acknowledgement of
//! the rejoined follower made it read, decode and re-encode the whole gap
//! in one step (up to 256 messages of 1 MiB), and every heartbeat answer
//! of a probed follower another MiB. A debug build then stalled for longer
//! than an election timeout: the other follower elected itself, and a
//! leader whose inbox had fallen behind kept believing it led for minutes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_client::{Client, ClusterStatus, ConnectOptions, CreateOptions, ErrorCode};
use warden_testkit::{Cluster, ServerOptions};

/// Writes while the follower is down: enough that the gap is several MiB
/// of small entries, which is what made one catch-up step expensive.
const GAP_WRITES: usize = 12_000;
const VALUE_BYTES: usize = 1024;
const WRITERS: usize = 16;

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

async fn status(cluster: &Cluster, i: usize) -> Option<ClusterStatus> {
    let c = Client::connect(cluster.addr(i), opts()).await.ok()?;
    let s = c.cluster_status().await.ok();
    let _ = c.close().await;
    s
}

/// (leader, term) as the given nodes agree on it; waits for agreement.
async fn agreed_leader(cluster: &Cluster, nodes: &[usize]) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = Vec::new();
        for &i in nodes {
            if let Some(s) = status(cluster, i).await {
                let term = s
                    .members
                    .iter()
                    .find(|m| m.id == i as u64)
                    .map(|m| m.term)
                    .unwrap_or(0);
                seen.push((s.leader_id, term));
            }
        }
        if seen.len() == nodes.len() && seen[0].0 != 0 && seen.iter().all(|s| *s == seen[0]) {
            return seen[0];
        }
        assert!(
            Instant::now() < deadline,
            "nodes {nodes:?} do not agree on a leader: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sets `/gap/w{writer}` over and over until `stop`, counting acks.
fn spawn_writers(
    servers: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    limit: Option<u64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WRITERS)
        .map(|w| {
            let servers = servers.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            tokio::spawn(async move {
                let c = Client::connect(&servers, opts()).await.expect("connect");
                let path = format!("/gap/w{w}");
                let value = vec![b'a' + (w % 26) as u8; VALUE_BYTES];
                match c.create(&path, &value, CreateOptions::default()).await {
                    Ok(_) => {}
                    Err(e) if e.code() == ErrorCode::NodeExists => {}
                    Err(e) => panic!("{path}: {e}"),
                }
                while !stop.load(Ordering::Relaxed) {
                    if limit.is_some_and(|l| acked.load(Ordering::Relaxed) >= l) {
                        break;
                    }
                    match c.set_data(&path, &value, None).await {
                        Ok(_) => {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        // A leader change is what the test looks for, not
                        // a reason to stop writing; back off a little.
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                let _ = c.close().await;
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_behind_follower_catches_up_under_load_without_a_leader_change() {
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            // The gap must stay in the log: no snapshot to send instead.
            snapshot_entries: Some(1_000_000),
            // Elections after 5 ticks of 50 ms without a heartbeat (0.25 to
            // 0.5 s), as in every cluster test: a leader whose core stalls
            // that long while catching the follower up loses its term.
            ..ServerOptions::default()
        },
    );
    let all = cluster.node_ids();
    let (leader, _) = agreed_leader(&cluster, &all).await;
    let leader = leader as usize;
    let lagging = if leader == 3 { 2 } else { 3 };
    let up: Vec<usize> = all.iter().copied().filter(|&i| i != lagging).collect();
    let up_servers = up
        .iter()
        .map(|&i| cluster.addr(i))
        .collect::<Vec<_>>()
        .join(",");
    let c = Client::connect(&up_servers, opts()).await.expect("connect");
    c.create("/gap", b"", CreateOptions::default())
        .await
        .unwrap();

    cluster.kill9(lagging);
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    for w in spawn_writers(
        up_servers.clone(),
        stop.clone(),
        acked.clone(),
        Some(GAP_WRITES as u64),
    ) {
        w.await.unwrap();
    }
    let (leader_before, term_before) = agreed_leader(&cluster, &up).await;
    assert_eq!(
        leader_before, leader as u64,
        "the leader changed while the follower was down"
    );
    let commit_before = status(&cluster, leader)
        .await
        .expect("leader status")
        .members
        .iter()
        .find(|m| m.id == leader as u64)
        .expect("leader member")
        .commit_index;

    // Back it comes, while the writers go on.
    let written_before = acked.load(Ordering::Relaxed);
    let writers = spawn_writers(up_servers.clone(), stop.clone(), acked.clone(), None);
    tokio::task::block_in_place(|| cluster.restart(lagging));

    // It catches up with everything committed before it came back...
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = status(&cluster, lagging).await {
            let me = s.members.iter().find(|m| m.id == lagging as u64);
            if me.is_some_and(|m| m.applied_index >= commit_before) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {lagging} did not catch up to {commit_before}; its log:\n{}",
            cluster.log(lagging)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and the cluster kept serving writes meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::Relaxed) < written_before + 100 {
        assert!(
            Instant::now() < deadline,
            "writes stalled after node {lagging} rejoined"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    // The leader never lost its term: its core kept ticking and answering
    // while it caught the follower up.
    let (leader_after, term_after) = agreed_leader(&cluster, &all).await;
    assert_eq!(
        (leader_after, term_after),
        (leader_before, term_before),
        "leadership changed while node {lagging} caught up; leader's log:\n{}",
        cluster.log(leader)
    );
}
