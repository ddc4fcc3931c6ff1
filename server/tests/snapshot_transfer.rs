//! Snapshots streamed to a far-behind follower against real `warden`
//! processes: the file goes in many small chunks (`--snapshot-chunk-bytes`)
//! on a connection of its own, the follower checks and builds it off its
//! core, and installs it; a transfer damaged on the way
//! (`--unsafe-corrupt-snapshot-transfers`) is refused, never installed,
//! and raft sends the snapshot again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use warden_client::{Client, ConnectOptions, CreateOptions, Op};
use warden_testkit::{Cluster, ServerOptions};

/// Small chunks: the tree below takes dozens.
const CHUNK: usize = 4096;

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

fn cluster(extra: &[&str]) -> Cluster {
    let mut extra_args: Vec<String> = vec![
        // The log goes with every snapshot: a follower behind it must
        // install one.
        "--max-log-bytes".into(),
        "0".into(),
        "--snapshot-chunk-bytes".into(),
        CHUNK.to_string(),
    ];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(10),
            extra_args,
            ..ServerOptions::default()
        },
    )
}

/// Kills a follower, writes a tree of 1,000 znodes (well over a hundred
/// kilobytes encoded) through the others, restarts it: it can only catch
/// up through the leader's snapshot. Returns (leader, follower, written).
async fn follower_far_behind(cluster: &mut Cluster) -> (usize, usize, BTreeMap<String, Vec<u8>>) {
    let l = cluster.leader();
    let f = if l == 3 { 2 } else { 3 };
    cluster.kill9(f);
    let c = Client::connect(cluster.addr(l), opts()).await.unwrap();
    c.create("/big", b"", CreateOptions::default())
        .await
        .unwrap();
    let mut written = BTreeMap::new();
    for batch in 0..20 {
        let mut ops = Vec::new();
        for i in 0..50 {
            let path = format!("/big/n{batch:02}-{i:02}");
            let data = format!("{path} {}", "v".repeat(100)).into_bytes();
            ops.push(Op::create(&path, data.clone(), CreateOptions::default()));
            written.insert(path, data);
        }
        c.multi(ops).await.unwrap();
    }
    // Past the last snapshot, caught up from the log after the install.
    c.set_data("/big", b"last", None).await.unwrap();
    written.insert("/big".into(), b"last".to_vec());
    cluster.restart(f);
    (l, f, written)
}

async fn await_log(cluster: &Cluster, i: usize, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.log(i).contains(line) {
        assert!(
            Instant::now() < deadline,
            "node {i} never logged {line:?}; log:\n{}",
            cluster.log(i)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Node `f` holds exactly `written` under /big, read from its own tree.
async fn same_data(cluster: &Cluster, f: usize, written: &BTreeMap<String, Vec<u8>>) {
    let c = Client::connect(cluster.addr(f), opts()).await.unwrap();
    c.sync("/").await.unwrap();
    let (mut children, _) = c.get_children("/big").await.unwrap();
    children.sort();
    let expected: Vec<String> = written
        .keys()
        .filter_map(|p| p.strip_prefix("/big/").map(str::to_string))
        .collect();
    assert_eq!(children, expected, "node {f}'s children of /big");
    for (path, data) in written {
        let (got, _) = c.get_data(path).await.unwrap();
        assert_eq!(&got, data, "node {f}: {path}");
    }
}

/// The `bytes=N` of node `f`'s "received and built" line.
fn received_bytes(log: &str) -> u64 {
    log.lines()
        .find(|l| l.contains("leader snapshot received and built"))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("bytes=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no received snapshot in the log:\n{log}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_behind_follower_installs_a_snapshot_streamed_in_many_chunks() {
    let mut cluster = cluster(&[]);
    let (l, f, written) = follower_far_behind(&mut cluster).await;
    await_log(&cluster, f, "state machine replaced by leader snapshot").await;
    same_data(&cluster, f, &written).await;
    let log = cluster.log(f);
    assert!(
        log.contains("streamed=true"),
        "the install was not streamed; log:\n{log}"
    );
    let bytes = received_bytes(&log);
    assert!(
        bytes > 10 * CHUNK as u64,
        "{bytes} bytes is not many chunks of {CHUNK}"
    );
    await_log(&cluster, l, "snapshot transfer finished").await;
    assert!(
        !cluster.log(l).contains("snapshot transfer failed")
            && !log.contains("snapshot transfer refused"),
        "a clean transfer failed; leader log:\n{}",
        cluster.log(l)
    );
}

/// A leader that sends the whole tree in its MsgSnapshot, as earlier
/// versions did (`--inline-snapshots`): the follower installs it as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_style_snapshot_with_the_tree_inside_still_installs() {
    let mut cluster = cluster(&["--inline-snapshots"]);
    let (_, f, written) = follower_far_behind(&mut cluster).await;
    await_log(&cluster, f, "state machine replaced by leader snapshot").await;
    same_data(&cluster, f, &written).await;
    let log = cluster.log(f);
    assert!(
        log.contains("streamed=false") && !log.contains("leader snapshot received and built"),
        "the install was streamed; log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_transfer_is_refused_then_retried_and_installed() {
    // Whichever node leads damages its first transfer (one byte of one
    // chunk).
    let mut cluster = cluster(&["--unsafe-corrupt-snapshot-transfers", "1"]);
    let (l, f, written) = follower_far_behind(&mut cluster).await;
    await_log(&cluster, f, "state machine replaced by leader snapshot").await;
    let log = cluster.log(f);
    // Refused naming the problem, before anything was installed.
    let refused = log
        .find("snapshot transfer refused")
        .unwrap_or_else(|| panic!("the damaged transfer was not refused; log:\n{log}"));
    assert!(
        log[refused..]
            .lines()
            .next()
            .is_some_and(|l| l.contains("checksum mismatch")),
        "the refusal does not name the checksum; log:\n{log}"
    );
    let installed = log
        .find("state machine replaced by leader snapshot")
        .unwrap();
    assert!(
        refused < installed,
        "installed before the refusal; log:\n{log}"
    );
    // The leader heard, and raft sent it again.
    await_log(&cluster, l, "snapshot transfer finished").await;
    let leader_log = cluster.log(l);
    assert!(
        leader_log.contains("snapshot transfer refused by the follower; raft will retry"),
        "leader log:\n{leader_log}"
    );
    same_data(&cluster, f, &written).await;
}
