//! Node times come from the leader's clock only: a follower whose clock is
//! an hour ahead neither stamps the nodes written through it with its own
//! time nor keeps a TTL node alive for an extra hour.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_testkit::{Cluster, ServerOptions};

const HOUR_MS: i64 = 3_600_000;

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

/// The leader as node `i` sees it, once it knows one.
async fn leader_seen_by(cluster: &Cluster, i: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(c) = Client::connect(cluster.addr(i), opts()).await {
            if let Ok(s) = c.cluster_status().await {
                if s.leader_id != 0 {
                    return s.leader_id as usize;
                }
            }
        }
        assert!(Instant::now() < deadline, "node {i} knows no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_with_a_wrong_clock_moves_no_node_time() {
    let mut cluster = Cluster::start_with(3, ServerOptions::default());
    let leader = leader_seen_by(&cluster, 1).await;
    let f = if leader == 3 { 2 } else { 3 };
    cluster.stop(f);
    cluster.set_extra_args(f, vec!["--clock-offset-ms".into(), HOUR_MS.to_string()]);
    cluster.restart(f);
    assert_ne!(
        leader_seen_by(&cluster, f).await,
        f,
        "the skewed node leads"
    );

    let c = Client::connect(cluster.addr(f), opts()).await.unwrap();
    let before = wall_ms();
    let (_, stat) = c
        .create(
            "/ttl",
            b"x",
            CreateOptions {
                ttl: Some(Duration::from_millis(1000)),
                ..CreateOptions::default()
            },
        )
        .await
        .unwrap();
    let after = wall_ms();
    assert!(
        (before - 60_000..=after + 60_000).contains(&stat.mtime_ms),
        "mtime {} is not the leader's time ({before}..{after}): the follower's clock stamped it",
        stat.mtime_ms
    );
    // Removed a TTL after its last change on the leader's clock, not an
    // hour later.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.exists("/ttl").await {
            Ok(None) => break,
            Ok(Some(_)) => {}
            Err(e) => assert_eq!(e.code(), ErrorCode::ConnectionLoss, "{e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the TTL node outlived its TTL by 30 s; leader log:\n{}",
            cluster.log(leader)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
