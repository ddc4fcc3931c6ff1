//! Log retention against real `warden` processes: the log outlives the
//! snapshots, so a follower that fell behind — paused, or restarted —
//! catches up from the log and never needs the leader's snapshot (which
//! would close its clients' connections).

use std::time::{Duration, Instant};

use warden_client::{Client, ConnectOptions, CreateOptions};

mod common;
use warden_testkit::{Cluster, ServerOptions};

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid of a child this test started.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// Waits until a client of node `i` reads `want` at `/w` (after a sync, so
/// from node `i`'s own tree once it caught up).
async fn await_value(cluster: &Cluster, i: usize, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(c) = Client::connect(cluster.addr(i), opts()).await {
            if c.sync("/").await.is_ok() {
                if let Ok((data, _)) = c.get_data("/w").await {
                    if data == want {
                        return;
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {i} never read {:?}; log:\n{}",
            String::from_utf8_lossy(want),
            cluster.log(i)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_many_snapshots_catches_up_from_the_log() {
    const WRITES: usize = 300;
    // A snapshot every 20 entries: the follower falls many snapshots behind.
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(20),
            ..ServerOptions::default()
        },
    );
    let l = cluster.leader();
    let f = if l == 3 { 2 } else { 3 };
    let writer = Client::connect(cluster.addr(l), opts()).await.unwrap();
    writer
        .create("/w", b"0", CreateOptions::default())
        .await
        .unwrap();
    await_value(&cluster, f, b"0").await;

    // Frozen while the others write and snapshot, over and over.
    let pid = cluster.pid(f).expect("running");
    signal(pid, libc::SIGSTOP);
    for i in 1..=WRITES {
        writer
            .set_data("/w", format!("{i}").as_bytes(), None)
            .await
            .unwrap();
    }
    signal(pid, libc::SIGCONT);
    let last = format!("{WRITES}");
    await_value(&cluster, f, last.as_bytes()).await;
    assert!(
        cluster.log(l).contains("snapshot taken"),
        "the leader took no snapshot; log:\n{}",
        cluster.log(l)
    );
    assert!(
        !cluster
            .log(f)
            .contains("state machine replaced by leader snapshot"),
        "node {f} needed a snapshot to catch up; log:\n{}",
        cluster.log(f)
    );

    // Killed and restarted: its log starts before its latest snapshot, and
    // it comes back from both, then catches up from the leader's log.
    cluster.kill9(f);
    for i in WRITES + 1..=WRITES + 100 {
        writer
            .set_data("/w", format!("{i}").as_bytes(), None)
            .await
            .unwrap();
    }
    cluster.restart(f);
    let last = format!("{}", WRITES + 100);
    await_value(&cluster, f, last.as_bytes()).await;
    assert!(
        !cluster
            .log(f)
            .contains("state machine replaced by leader snapshot"),
        "node {f} needed a snapshot after its restart; log:\n{}",
        cluster.log(f)
    );
}

/// A follower that does install a snapshot (the log goes with every
/// snapshot here) keeps its clients' connections: a one-shot watch whose
/// node changed in what the snapshot skipped fires, the client is never
/// disconnected, and its session goes on on the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_install_keeps_connections_and_fires_skipped_watches() {
    let cluster = Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(20),
            extra_args: vec!["--max-log-bytes".into(), "0".into()],
            ..ServerOptions::default()
        },
    );
    let l = cluster.leader();
    let f = if l == 3 { 2 } else { 3 };
    let writer = Client::connect(cluster.addr(l), opts()).await.unwrap();
    for p in ["/w", "/z"] {
        writer
            .create(p, b"0", CreateOptions::default())
            .await
            .unwrap();
    }
    let watcher = Client::connect(cluster.addr(f), opts()).await.unwrap();
    watcher.sync("/").await.unwrap();
    let (_, _, fired) = watcher.get_data_watch("/z").await.unwrap();
    let mut states = watcher.session_events();
    states.borrow_and_update();

    // First more than raft keeps in flight to one follower (16 appends of
    // at most 64 KiB), which the paused follower may find in its socket
    // buffer; then the change to /z, which it can only learn from the
    // leader's snapshot; then enough for a snapshot past it.
    let pid = cluster.pid(f).expect("running");
    signal(pid, libc::SIGSTOP);
    let filler = "x".repeat(4096);
    for _ in 0..400 {
        writer
            .set_data("/w", filler.as_bytes(), None)
            .await
            .unwrap();
    }
    let changed = writer.set_data("/z", b"changed", None).await.unwrap();
    for _ in 0..40 {
        writer.set_data("/w", b"after", None).await.unwrap();
    }
    signal(pid, libc::SIGCONT);

    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster
        .log(f)
        .contains("state machine replaced by leader snapshot")
    {
        assert!(
            Instant::now() < deadline,
            "node {f} caught up without a snapshot; log:\n{}",
            cluster.log(f)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Counted for operators (`warden_snapshot_installs_total`).
    let (_, metrics) = common::http::request(cluster.http_addr(f), "GET", "/metrics", None);
    let installs = metrics
        .lines()
        .find_map(|l| l.strip_prefix("warden_snapshot_installs_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(installs >= Some(1.0), "installs: {installs:?}");
    let event = tokio::time::timeout(Duration::from_secs(30), fired)
        .await
        .expect("the skipped change fired the watch")
        .expect("a watch event");
    assert_eq!(event.path, "/z");
    assert_eq!(event.event_type, warden_client::EventType::NodeDataChanged);
    assert!(event.zxid >= changed.mzxid);
    // Read on the same connection: the new state, no disconnect between.
    let (data, _) = watcher.get_data("/z").await.unwrap();
    assert_eq!(data, b"changed");
    assert!(
        !states.has_changed().unwrap(),
        "the client saw {:?}; node {f} log:\n{}",
        *states.borrow(),
        cluster.log(f)
    );
}
