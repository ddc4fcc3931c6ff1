//! The replicated cluster against real `warden` processes: writes through
//! every server, failover with no acknowledged write lost, quorum loss with
//! a clear error, catch-up (also through a snapshot), sessions that move
//! between servers, idempotent retries.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use warden_client::{Client, ConnectOptions, CreateOptions, Error, ErrorCode, EventType};
use warden_testkit::{Cluster, ServerOptions};

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

async fn connect(servers: &str) -> Client {
    Client::connect(servers, opts()).await.expect("connect")
}

/// Retries a create through errors that leave its outcome unknown; a
/// NodeExists after such an error means the first attempt was applied.
async fn create_acked(c: &Client, path: &str, data: &[u8]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut uncertain = false;
    loop {
        match c.create(path, data, CreateOptions::default()).await {
            Ok(_) => return true,
            Err(e) if e.code() == ErrorCode::NodeExists && uncertain => return true,
            // Overtaken by a later write of the same session (several were
            // in flight across the failover): definitely not applied.
            Err(e) if e.code() == ErrorCode::SessionMoved => {
                if Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.code(),
                        ErrorCode::ConnectionLoss
                            | ErrorCode::NotReady
                            | ErrorCode::OperationTimeout
                    ),
                    "{path}: unexpected error {e}"
                );
                uncertain = true;
                if Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn writes_and_reads_through_every_server(nodes: usize) {
    let cluster = Cluster::start(nodes);
    let mut clients = Vec::new();
    for i in cluster.node_ids() {
        clients.push(connect(cluster.addr(i)).await);
    }
    for (i, c) in clients.iter().enumerate() {
        let path = format!("/via-{}", i + 1);
        c.create(&path, path.as_bytes(), CreateOptions::default())
            .await
            .unwrap();
        // A session reads its own write at once, on whatever server it is.
        assert_eq!(c.get_data(&path).await.unwrap().0, path.as_bytes());
    }
    for c in &clients {
        c.sync("/").await.unwrap();
        for i in 1..=nodes {
            let path = format!("/via-{i}");
            assert_eq!(c.get_data(&path).await.unwrap().0, path.as_bytes());
        }
        assert_eq!(c.get_children("/").await.unwrap().0.len(), nodes);
    }
    // Linearizable reads through a follower see a write made elsewhere.
    clients[0].set_data("/via-1", b"new", None).await.unwrap();
    for c in &clients {
        assert_eq!(c.get_data_linearizable("/via-1").await.unwrap().0, b"new");
    }
}

#[tokio::test]
async fn three_nodes_write_and_read_through_every_server() {
    writes_and_reads_through_every_server(3).await;
}

#[tokio::test]
async fn five_nodes_write_and_read_through_every_server() {
    writes_and_reads_through_every_server(5).await;
}

async fn leader_kill_under_load(nodes: usize) {
    let mut cluster = Cluster::start(nodes);
    let servers = cluster.servers();
    let c = connect(&servers).await;
    let session = c.session_id();
    c.create("/load", b"", CreateOptions::default())
        .await
        .unwrap();
    let old_leader = cluster.leader();

    let progress = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let c = c.clone();
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..60 {
                    let path = format!("/load/w{w}-{i}");
                    if create_acked(&c, &path, b"x").await {
                        acked.push(path);
                        progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                acked
            })
        })
        .collect();
    // Kill the leader while the writers run: once some writes are in.
    let deadline = Instant::now() + Duration::from_secs(20);
    while progress.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        assert!(Instant::now() < deadline, "the writers made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.kill9(old_leader);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert_eq!(acked.len(), 240, "every write was eventually acknowledged");
    let up: Vec<usize> = cluster
        .node_ids()
        .into_iter()
        .filter(|&i| i != old_leader)
        .collect();
    let new_leader = cluster.leader_among(&up);
    assert_ne!(new_leader, old_leader);
    // Same session throughout.
    assert_eq!(c.session_id(), session);
    assert_eq!(
        *c.session_events().borrow(),
        warden_client::SessionState::Connected
    );

    // Every acknowledged write is there, read through every live server.
    for &i in &up {
        let r = connect(cluster.addr(i)).await;
        r.sync("/load").await.unwrap();
        let (children, _) = r.get_children("/load").await.unwrap();
        for p in &acked {
            let name = p.rsplit('/').next().unwrap();
            assert!(children.iter().any(|c| c == name), "{p} lost on node {i}");
        }
    }
    // The old leader comes back and catches up.
    cluster.restart(old_leader);
    let r = connect(cluster.addr(old_leader)).await;
    r.sync("/load").await.unwrap();
    assert_eq!(r.get_children("/load").await.unwrap().0.len(), acked.len());
}

#[tokio::test]
async fn three_nodes_leader_kill9_under_load_loses_nothing() {
    leader_kill_under_load(3).await;
}

#[tokio::test]
async fn five_nodes_leader_kill9_under_load_loses_nothing() {
    leader_kill_under_load(5).await;
}

#[tokio::test]
async fn five_nodes_serve_with_two_down_and_refuse_with_three_down() {
    let mut cluster = Cluster::start(5);
    let first = cluster.leader();
    // Take down the leader and one follower.
    let second = if first == 1 { 2 } else { 1 };
    cluster.kill9(first);
    cluster.kill9(second);
    let up: Vec<usize> = cluster
        .node_ids()
        .into_iter()
        .filter(|i| ![first, second].contains(i))
        .collect();
    let c = connect(
        &up.iter()
            .map(|&i| cluster.addr(i))
            .collect::<Vec<_>>()
            .join(","),
    )
    .await;
    assert!(create_acked(&c, "/two-down", b"ok").await);
    assert_eq!(c.get_data("/two-down").await.unwrap().0, b"ok");

    // A third node down: no quorum. Writes fail with a clear error, in
    // bounded time, never hang.
    // (A new session needs a quorum too: open it first.)
    let survivor = connect_any(&cluster, &up[1..]).await;
    cluster.kill9(up[0]);
    let mut saw_refusal = false;
    for i in 0..3 {
        let started = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            survivor.create(&format!("/no-quorum-{i}"), b"", CreateOptions::default()),
        )
        .await
        .expect("a write without quorum must fail, not hang");
        let err = result.expect_err("no quorum, yet the write succeeded");
        assert!(
            matches!(
                err.code(),
                ErrorCode::NotReady | ErrorCode::OperationTimeout | ErrorCode::ConnectionLoss
            ),
            "unclear error without quorum: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        saw_refusal |= err.code() == ErrorCode::NotReady;
        if saw_refusal {
            break;
        }
    }
    assert!(
        saw_refusal,
        "once no leader is left, writes are refused with NotReady"
    );
}

/// A client on whichever of `ids` accepts a session.
async fn connect_any(cluster: &Cluster, ids: &[usize]) -> Client {
    let servers = ids
        .iter()
        .map(|&i| cluster.addr(i))
        .collect::<Vec<_>>()
        .join(",");
    match Client::connect(&servers, opts()).await {
        Ok(c) => c,
        Err(e) => panic!("connect to {servers}: {e}"),
    }
}

#[tokio::test]
async fn restarted_node_catches_up_through_a_snapshot() {
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(20),
            // The log goes with every snapshot: a follower behind it must
            // install one.
            extra_args: vec!["--max-log-bytes".into(), "0".into()],
            ..ServerOptions::default()
        },
    );
    let l = cluster.leader();
    let lagging = if l == 3 { 2 } else { 3 };
    cluster.kill9(lagging);
    let up: Vec<usize> = cluster
        .node_ids()
        .into_iter()
        .filter(|&i| i != lagging)
        .collect();
    let c = connect(
        &up.iter()
            .map(|&i| cluster.addr(i))
            .collect::<Vec<_>>()
            .join(","),
    )
    .await;
    c.create("/catch", b"", CreateOptions::default())
        .await
        .unwrap();
    let mut written = BTreeMap::new();
    for i in 0..120 {
        let path = format!("/catch/n{i}");
        c.create(&path, format!("{i}").as_bytes(), CreateOptions::default())
            .await
            .unwrap();
        written.insert(path, format!("{i}"));
    }
    // The log behind the snapshots is gone on the others: the restarted
    // node can only catch up through a snapshot.
    cluster.restart(lagging);
    let r = connect(cluster.addr(lagging)).await;
    r.sync("/").await.unwrap();
    for (p, d) in &written {
        assert_eq!(String::from_utf8_lossy(&r.get_data(p).await.unwrap().0), *d);
    }
    assert!(
        cluster
            .log(lagging)
            .contains("state machine replaced by leader snapshot"),
        "the node caught up without a snapshot; log:\n{}",
        cluster.log(lagging)
    );
}

#[tokio::test]
async fn session_moves_to_another_server_with_its_ephemerals_and_missed_events() {
    let cluster = Cluster::start(3);
    let l = cluster.leader();
    // The client's first server is a follower; the next one in its list
    // is the other follower.
    let followers: Vec<usize> = cluster.node_ids().into_iter().filter(|&i| i != l).collect();
    let (first, second) = (followers[0], followers[1]);
    let servers = format!("{},{}", cluster.addr(first), cluster.addr(second));
    let c = Client::connect(
        &servers,
        ConnectOptions {
            session_timeout: Duration::from_secs(6),
            ..opts()
        },
    )
    .await
    .unwrap();
    let other = connect(cluster.addr(l)).await;
    other
        .create("/watched", b"0", CreateOptions::default())
        .await
        .unwrap();
    c.sync("/").await.unwrap();
    c.create("/mine", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let (_, _, data_watch) = c.get_data_watch("/watched").await.unwrap();
    let (_, _, child_watch) = c.get_children_watch("/watched").await.unwrap();

    // Freeze the client's server: its connection stays open but silent,
    // so the changes below can only reach the client after it has moved.
    let pid = cluster.pid(first).expect("running");
    signal(pid, libc::SIGSTOP);
    let changed = other.set_data("/watched", b"1", None).await.unwrap();
    other
        .create("/watched/kid", b"", CreateOptions::default())
        .await
        .unwrap();

    let e = tokio::time::timeout(Duration::from_secs(20), data_watch)
        .await
        .expect("missed data event delivered after the move")
        .unwrap();
    assert_eq!(e.event_type, EventType::NodeDataChanged);
    assert!(e.zxid >= changed.mzxid);
    let e = tokio::time::timeout(Duration::from_secs(20), child_watch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event_type, EventType::NodeChildrenChanged);

    // Same session, ephemeral kept, and it reads what it was told about.
    let stat = c
        .exists("/mine")
        .await
        .unwrap()
        .expect("ephemeral kept across the move");
    assert_eq!(stat.ephemeral_owner, c.session_id());
    assert_eq!(c.get_data("/watched").await.unwrap().0, b"1");
    signal(pid, libc::SIGCONT);
}

/// A follower that catches up by installing the leader's snapshot must not
/// leave its clients' watches armed against the tree it threw away: the
/// changes folded into the snapshot fire nothing. The server closes its
/// client connections instead, and each client reconnects and re-arms its
/// watches (found by the Jepsen watch workload under partition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_on_a_follower_that_installs_a_snapshot_miss_nothing_silently() {
    use futures::StreamExt;
    const WRITES: usize = 120;
    let cluster = Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(20),
            // The log goes with every snapshot: a follower behind it must
            // install one.
            extra_args: vec!["--max-log-bytes".into(), "0".into()],
            ..ServerOptions::default()
        },
    );
    let l = cluster.leader();
    let f = if l == 3 { 2 } else { 3 };
    let writer = connect(cluster.addr(l)).await;
    writer
        .create("/w", b"0", CreateOptions::default())
        .await
        .unwrap();
    // A long session: the short pause below must not make the client
    // give up on its server by itself.
    let watcher = Client::connect(
        cluster.addr(f),
        ConnectOptions {
            session_timeout: Duration::from_secs(30),
            ..opts()
        },
    )
    .await
    .unwrap();
    watcher.sync("/").await.unwrap();
    let mut watch = watcher.watch("/w", false).await.unwrap();
    let mut states = watcher.session_events();
    states.borrow_and_update();

    // Freeze the follower while the leader writes past several snapshots
    // and compacts its log: the follower can only catch up by snapshot.
    let pid = cluster.pid(f).expect("running");
    signal(pid, libc::SIGSTOP);
    let mut written = Vec::new();
    for i in 1..=WRITES {
        let stat = writer
            .set_data("/w", format!("{i}").as_bytes(), None)
            .await
            .unwrap();
        written.push(stat.mzxid);
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

    // Every change reaches the watcher, or it is told it was disconnected
    // (and may have missed some): never a silent gap.
    let mut seen = std::collections::BTreeSet::new();
    let mut disconnected = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !disconnected && !written.iter().all(|z| seen.contains(z)) {
        tokio::select! {
            e = watch.next() => {
                let e = e.expect("watch open").expect("watch event");
                assert_eq!(e.event_type, EventType::NodeDataChanged);
                seen.insert(e.zxid);
            }
            r = states.changed() => {
                r.unwrap();
                disconnected = true;
            }
            _ = tokio::time::sleep_until(deadline) => panic!(
                "the watcher on node {f} got {} of {WRITES} changes and no disconnect; log:\n{}",
                seen.iter().filter(|z| written.contains(z)).count(),
                cluster.log(f)
            ),
        }
    }

    // The same watch is armed again on the new state: a later change
    // reaches it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = loop {
        match writer.set_data("/w", b"after", None).await {
            Ok(stat) => break stat.mzxid,
            Err(e) => assert!(Instant::now() < deadline, "write after: {e}"),
        }
    };
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("the watch fires again after the snapshot")
            .expect("watch open")
            .expect("watch event");
        if e.zxid >= last {
            break;
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: signalling a child process the cluster helper owns.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

#[tokio::test]
async fn errors_name_the_problem() {
    let cluster = Cluster::start(3);
    let c = connect(&cluster.servers()).await;
    let err = c.add_member(0, "127.0.0.1:1", false).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments);
    let err = c.add_member(9, "no-port", false).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments);
    assert!(
        matches!(err, Error::Api { ref message, .. } if message.contains("HOST:PORT")),
        "{err:?}"
    );
}

#[tokio::test]
async fn membership_changes_under_load_lose_nothing() {
    let mut cluster = Cluster::start_with_spares(3, 2, ServerOptions::default());
    let members: Vec<usize> = vec![1, 2, 3];
    let servers = members
        .iter()
        .map(|&i| cluster.addr(i))
        .collect::<Vec<_>>()
        .join(",");
    let c = connect(&servers).await;
    c.create("/m", b"", CreateOptions::default()).await.unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let c = c.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let path = format!("/m/w{w}-{i}");
                    if create_acked(&c, &path, b"x").await {
                        acked.push(path);
                    }
                    i += 1;
                }
                acked
            })
        })
        .collect();

    // Node 4 joins as a learner, catches up, and is promoted.
    cluster.launch_spare(4);
    let peer4 = cluster.peer_addr(4).to_string();
    c.add_member(4, &peer4, true).await.unwrap();
    cluster.await_ready(4);
    let status = c.cluster_status().await.unwrap();
    let m4 = status
        .members
        .iter()
        .find(|m| m.id == 4)
        .expect("node 4 listed");
    assert!(!m4.voter);
    c.add_member(4, &peer4, false).await.unwrap();
    // Node 5 joins as a voter straight away.
    cluster.launch_spare(5);
    let peer5 = cluster.peer_addr(5).to_string();
    c.add_member(5, &peer5, false).await.unwrap();
    cluster.await_ready(5);
    // A follower of the original three leaves; the request goes through
    // another member (a server cannot remove itself).
    let l = cluster.leader_among(&[1, 2, 3, 4, 5]);
    let leaving = [1, 2, 3].into_iter().find(|&i| i != l).unwrap();
    let admin = connect(cluster.addr(l)).await;
    let err = connect(cluster.addr(leaving))
        .await
        .remove_member(leaving as u64)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    admin.remove_member(leaving as u64).await.unwrap();
    cluster.stop(leaving);

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(!acked.is_empty());

    // The client may have been on the server that left: its next call
    // fails with ConnectionLoss while it moves to another, as for any
    // client of a stopped server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        match c.cluster_status().await {
            Ok(s) => break s,
            Err(e)
                if e.code() == ErrorCode::ConnectionLoss
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cluster status: {e}"),
        }
    };
    let mut ids: Vec<u64> = status.members.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    let mut expected: Vec<u64> = [1, 2, 3, 4, 5]
        .into_iter()
        .filter(|&i| i != leaving as u64)
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert!(status.members.iter().all(|m| m.voter));

    for i in [4usize, 5] {
        let r = connect(cluster.addr(i)).await;
        r.sync("/m").await.unwrap();
        let (children, _) = r.get_children("/m").await.unwrap();
        for p in &acked {
            let name = p.rsplit('/').next().unwrap();
            assert!(
                children.iter().any(|c| c == name),
                "{p} missing on node {i}"
            );
        }
    }
}

#[tokio::test]
async fn wardenctl_cluster_status_lists_every_member() {
    let cluster = Cluster::start(3);
    let c = connect(&cluster.servers()).await;
    c.create("/s", b"", CreateOptions::default()).await.unwrap();
    // Every member reports in within a few status rounds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let out = std::process::Command::new(warden_testkit::binary("wardenctl"))
            .args(["--servers", cluster.addr(2), "--json", "cluster", "status"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines
            .iter()
            .all(|m| m["reachable"] == true && m["applied_index"].as_u64() > Some(0))
        {
            break lines;
        }
        assert!(
            Instant::now() < deadline,
            "members never all reported: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lines.len(), 3);
    let roles: Vec<&str> = lines.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "leader").count(),
        1,
        "{roles:?}"
    );
    assert_eq!(
        roles.iter().filter(|r| **r == "follower").count(),
        2,
        "{roles:?}"
    );
    for (i, m) in lines.iter().enumerate() {
        assert_eq!(m["id"].as_u64(), Some(i as u64 + 1));
        for field in ["addr", "term", "commit_index", "applied_index"] {
            assert!(!m[field].is_null(), "{field} missing in {m}");
        }
    }
}

#[tokio::test]
async fn a_follower_forwards_heartbeats_so_its_sessions_live() {
    let cluster = Cluster::start(3);
    let l = cluster.leader();
    let follower = cluster.node_ids().into_iter().find(|&i| i != l).unwrap();
    // Only the leader decides expiry; this session's pings reach only a
    // follower, which must forward them.
    let owner = Client::connect(
        cluster.addr(follower),
        ConnectOptions {
            session_timeout: Duration::from_millis(1000),
            ..opts()
        },
    )
    .await
    .unwrap();
    owner
        .create("/held", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let observer = connect(cluster.addr(l)).await;
    observer.sync("/").await.unwrap();
    let (_, deleted) = observer.exists_watch("/held").await.unwrap();
    // Three session timeouts of idleness: the ephemeral must stay.
    let fired = tokio::time::timeout(Duration::from_secs(3), deleted).await;
    assert!(
        fired.is_err(),
        "a live session on a follower was expired: {fired:?}"
    );
    // And once the owner is gone (its client closes the session), so is it.
    let (_, deleted) = observer.exists_watch("/held").await.unwrap();
    drop(owner);
    let e = tokio::time::timeout(Duration::from_secs(20), deleted)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event_type, EventType::NodeDeleted);
}

#[test]
fn a_server_behind_the_client_refuses_with_a_clear_error() {
    let cluster = Cluster::start(3);
    let c = warden_testkit::raw::RawConn::connect(cluster.addr(2)).connect_request(
        warden_protocol::pb::ConnectRequest {
            protocol_version: 1,
            timeout_ms: 5000,
            last_zxid_seen: 1_000_000_000,
            ..Default::default()
        },
    );
    assert_eq!(c.error, ErrorCode::ServerBehind as i32);
    assert!(c.message.contains("has seen 1000000000"), "{}", c.message);
}
