//! The [`Mutex`] recipe against real `warden` processes: mutual exclusion,
//! increasing fencing tokens, no herd effect, timeouts and cancellation
//! that leave nothing behind, re-entrancy, and losing the lock (node
//! deleted, holder's session closed, holder SIGKILLed, holder partitioned).
//! Two tests put a small TCP proxy (`common::lossy::LossyProxy`) between a client and
//! the server, to lose one answer or to cut the client off.
//!
//! Every contender has its own [`Client`] (its own session), as separate
//! processes would.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::lossy::LossyProxy;

use tokio::time::{timeout, Instant};
use warden_client::{Client, ConnectOptions, ErrorCode};
use warden_recipes::{FencedResource, LockLost, Mutex};
use warden_testkit::{Cluster, Server};

/// Longest wait for anything that must happen (a grant, a deletion).
const WAIT: Duration = Duration::from_secs(20);
/// How often a condition is re-checked.
const POLL: Duration = Duration::from_millis(20);
/// Contenders in the mutual-exclusion test.
const CONTENDERS: usize = 8;
/// Acquire/release rounds per contender.
const ROUNDS: usize = 4;

async fn connect(servers: &str) -> Client {
    Client::connect(servers, ConnectOptions::default())
        .await
        .expect("connect")
}

/// Waits until `cond` holds, failing the test after [`WAIT`].
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(POLL).await;
    }
}

async fn children(client: &Client, path: &str) -> Vec<String> {
    match client.get_children(path).await {
        Ok((c, _)) => c,
        Err(e) if e.code() == ErrorCode::NoNode => Vec::new(),
        Err(e) => panic!("get_children {path}: {e}"),
    }
}

/// `CONTENDERS` sessions × `ROUNDS` grants each, every grant writing
/// through one [`FencedResource`]: never two holders at once, and tokens
/// strictly increase in grant order.
async fn exclusion_on(servers: Vec<String>, lock: &str) {
    let resource = Arc::new(FencedResource::new());
    let inside = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CONTENDERS {
        let servers = servers[i % servers.len()].clone();
        let (resource, inside, grants) = (resource.clone(), inside.clone(), grants.clone());
        let lock = lock.to_string();
        tasks.push(tokio::spawn(async move {
            let client = connect(&servers).await;
            let mutex = Mutex::new(client.clone(), lock).unwrap();
            for _ in 0..ROUNDS {
                let guard = timeout(WAIT, mutex.acquire())
                    .await
                    .expect("granted in time")
                    .expect("acquire");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                grants.lock().unwrap().push(guard.fencing_token());
                resource
                    .check_and_record("shared", guard.fencing_token())
                    .expect("a grant's token is never stale");
                // Let the others pile up behind us.
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
            client.close().await.expect("close");
        }));
    }
    for task in tasks {
        task.await.expect("contender task");
    }
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), CONTENDERS * ROUNDS);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase across grants: {grants:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_with_increasing_tokens() {
    let server = Server::start();
    exclusion_on(vec![server.addr().to_string()], "/locks/excl").await;
    let c = connect(server.addr()).await;
    eventually("the lock's nodes are gone", || async {
        children(&c, "/locks/excl").await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_on_a_three_node_cluster() {
    let cluster = Cluster::start(3);
    let servers = cluster
        .node_ids()
        .into_iter()
        .map(|i| cluster.addr(i).to_string())
        .collect();
    exclusion_on(servers, "/locks/cluster").await;
}

/// Waiters queue up in a known order; each release must wake exactly the
/// next waiter and nobody behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_wakes_only_the_next_waiter() {
    const WAITERS: usize = 5;
    let server = Server::start();
    let lock = "/locks/herd";
    let observer = connect(server.addr()).await;
    let holder_client = connect(server.addr()).await;
    let holder = Mutex::new(holder_client, lock).unwrap();
    let first = holder.acquire().await.unwrap();

    let mut waiters = Vec::new();
    let mut granted = Vec::new();
    for i in 0..WAITERS {
        let mutex = Arc::new(Mutex::new(connect(server.addr()).await, lock).unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let m = mutex.clone();
        tokio::spawn(async move {
            let guard = m.acquire().await.expect("acquire");
            let _ = tx.send(guard);
        });
        // Queue in order: the next waiter starts once this one is in line.
        eventually("the waiter is in line", || async {
            children(&observer, lock).await.len() == i + 2
        })
        .await;
        waiters.push(mutex);
        granted.push(rx);
    }
    let mut current = first;
    for (i, rx) in granted.into_iter().enumerate() {
        current.release().await.unwrap();
        current = timeout(WAIT, rx)
            .await
            .expect("the next waiter is granted")
            .expect("the waiter sends its guard");
        for (j, w) in waiters.iter().enumerate().skip(i + 1) {
            assert_eq!(
                w.waits_woken(),
                0,
                "release {i} woke waiter {j}, which is not next in line"
            );
        }
        assert!(
            waiters[i].waits_woken() <= 1,
            "waiter {i} was woken more than once"
        );
    }
    let total: u64 = waiters.iter().map(|w| w.waits_woken()).sum();
    assert!(
        total <= WAITERS as u64,
        "{total} wake-ups for {WAITERS} releases"
    );
    current.release().await.unwrap();
}

#[tokio::test]
async fn try_acquire_is_none_while_held() {
    let server = Server::start();
    let a = Mutex::new(connect(server.addr()).await, "/locks/try").unwrap();
    let b_client = connect(server.addr()).await;
    let b = Mutex::new(b_client.clone(), "/locks/try").unwrap();
    let guard = a.try_acquire().await.unwrap().expect("free lock is taken");
    assert!(b.try_acquire().await.unwrap().is_none());
    // The failed attempt left nothing behind.
    assert_eq!(children(&b_client, "/locks/try").await.len(), 1);
    guard.release().await.unwrap();
    let again = b.try_acquire().await.unwrap().expect("free again");
    again.release().await.unwrap();
}

#[tokio::test]
async fn acquire_timeout_and_cancellation_leave_no_node_behind() {
    let server = Server::start();
    let lock = "/locks/timeout";
    let observer = connect(server.addr()).await;
    let a = Mutex::new(connect(server.addr()).await, lock).unwrap();
    let b = Mutex::new(connect(server.addr()).await, lock).unwrap();
    let held = a.acquire().await.unwrap();

    let got = b.acquire_timeout(Duration::from_millis(300)).await.unwrap();
    assert!(got.is_none(), "the lock is held elsewhere");
    assert_eq!(
        children(&observer, lock).await,
        vec![held.node_path().rsplit('/').next().unwrap().to_string()],
        "the timed-out waiter's node is deleted before acquire_timeout returns"
    );

    // A waiter whose future is dropped mid-wait.
    let waiting = tokio::spawn(async move { b.acquire().await.map(drop) });
    eventually("the second waiter is in line", || async {
        children(&observer, lock).await.len() == 2
    })
    .await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    eventually("the cancelled waiter's node is deleted", || async {
        children(&observer, lock).await.len() == 1
    })
    .await;

    // A release within the timeout is a grant.
    let c = Mutex::new(connect(server.addr()).await, lock).unwrap();
    let waiting = tokio::spawn(async move { c.acquire_timeout(WAIT).await });
    eventually("the third waiter is in line", || async {
        children(&observer, lock).await.len() == 2
    })
    .await;
    let held_token = held.fencing_token();
    held.release().await.unwrap();
    let granted = waiting.await.unwrap().unwrap().expect("granted in time");
    assert!(granted.fencing_token() > held_token);
    granted.release().await.unwrap();
}

#[tokio::test]
async fn reentrant_per_handle() {
    let server = Server::start();
    let lock = "/locks/reentrant";
    let a_client = connect(server.addr()).await;
    let a = Mutex::new(a_client.clone(), lock).unwrap();
    let other = Mutex::new(connect(server.addr()).await, lock).unwrap();

    let outer = a.acquire().await.unwrap();
    let inner = a.acquire().await.unwrap();
    assert_eq!(outer.node_path(), inner.node_path());
    assert_eq!(outer.fencing_token(), inner.fencing_token());
    assert_eq!(
        children(&a_client, lock).await.len(),
        1,
        "one node for both"
    );

    // A clone is a separate contender, not a re-entry.
    assert!(a.clone().try_acquire().await.unwrap().is_none());

    inner.release().await.unwrap();
    assert!(a.is_held_here());
    assert!(other.try_acquire().await.unwrap().is_none(), "still held");
    let outer_token = outer.fencing_token();
    outer.release().await.unwrap();
    assert!(!a.is_held_here());
    let next = other.try_acquire().await.unwrap().expect("released");
    assert!(next.fencing_token() > outer_token);
    next.release().await.unwrap();
}

#[tokio::test]
async fn holder_and_holder_changes() {
    let server = Server::start();
    let lock = "/locks/holder";
    let client = connect(server.addr()).await;
    let m = Mutex::new(client.clone(), lock).unwrap();
    let watcher = Mutex::new(connect(server.addr()).await, lock).unwrap();
    assert_eq!(watcher.holder().await.unwrap(), None);

    let changed = tokio::spawn({
        let watcher = watcher.clone();
        async move { watcher.holder_changed(None).await }
    });
    let guard = m.acquire().await.unwrap();
    let seen = timeout(WAIT, changed)
        .await
        .expect("holder_changed fires")
        .unwrap()
        .unwrap()
        .expect("a holder now");
    assert_eq!(seen.node, guard.node_path());
    assert_eq!(seen.session_id, client.session_id());
    assert_eq!(seen.fencing_token, guard.fencing_token());
    assert!(seen.since_ms > 0);
    assert_eq!(watcher.holder().await.unwrap(), Some(seen.clone()));

    let freed = tokio::spawn(async move { watcher.holder_changed(Some(&seen)).await });
    guard.release().await.unwrap();
    let now = timeout(WAIT, freed).await.expect("fires").unwrap().unwrap();
    assert_eq!(now, None);
}

#[tokio::test]
async fn lost_fires_when_the_node_is_deleted_by_someone_else() {
    let server = Server::start();
    let m = Mutex::new(connect(server.addr()).await, "/locks/lost").unwrap();
    let admin = connect(server.addr()).await;
    let guard = m.acquire().await.unwrap();
    let lost = tokio::spawn(guard.lost());
    admin.delete(guard.node_path(), None).await.unwrap();
    let reason = timeout(WAIT, lost).await.expect("lost() resolves").unwrap();
    assert_eq!(reason, LockLost::NodeDeleted);
    // Releasing a lost grant is not an error: the node is already gone.
    guard.release().await.unwrap();
}

#[tokio::test]
async fn lost_fires_when_the_session_closes() {
    let server = Server::start();
    let client = connect(server.addr()).await;
    let m = Mutex::new(client.clone(), "/locks/closed").unwrap();
    let guard = m.acquire().await.unwrap();
    let lost = tokio::spawn(guard.lost());
    client.close().await.unwrap();
    let reason = timeout(WAIT, lost).await.expect("lost() resolves").unwrap();
    assert_eq!(reason, LockLost::SessionClosed);
    drop(guard);
}

/// A holder process killed with SIGKILL cannot release: the lock is freed
/// when its session times out, and the waiter gets it with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lock_passes_on_after_its_session_timeout() {
    let server = Server::start();
    let lock = "/locks/dead";
    let dir = tempfile_dir();
    let pid_file = dir.join("sleep.pid");
    let mut holder = std::process::Command::new(warden_testkit::binary("wardenctl"))
        .args([
            "--servers",
            server.addr(),
            "lock",
            lock,
            "--ttl",
            "1000",
            "--",
        ])
        .args(["sh", "-c", "echo $$ > \"$0\"; exec sleep 60"])
        .arg(&pid_file)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("run wardenctl lock");

    let client = connect(server.addr()).await;
    let waiter = Mutex::new(client.clone(), lock).unwrap();
    eventually("wardenctl holds the lock", || async {
        waiter.holder().await.unwrap().is_some() && pid_file.exists()
    })
    .await;
    let dead = waiter.holder().await.unwrap().unwrap();
    assert_ne!(dead.session_id, client.session_id());

    let acquiring = tokio::spawn(async move {
        let guard = waiter.acquire().await?;
        Ok::<_, warden_recipes::Error>((waiter, guard))
    });
    warden_testkit::sigkill(holder.id());
    holder.wait().expect("reap wardenctl");
    let (waiter, guard) = timeout(WAIT, acquiring)
        .await
        .expect("the lock passes on after the session timeout")
        .unwrap()
        .unwrap();
    assert!(guard.fencing_token() > dead.fencing_token);
    assert_eq!(
        waiter.holder().await.unwrap().map(|h| h.session_id),
        Some(client.session_id())
    );
    guard.release().await.unwrap();

    // The orphaned `sleep` of the killed wardenctl.
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        warden_testkit::sigkill(pid);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory under the system temp dir.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "warden-mutex-test-{}-{:x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// The create's answer is lost but the create was applied: the contender
/// finds its own node by its id instead of creating a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_is_lost_is_adopted_not_repeated() {
    let server = Server::start();
    let lock = "/locks/protected";
    let admin = connect(server.addr()).await;
    // Persistent, so that the first request the mutex sends is its create.
    for p in ["/locks", lock] {
        admin
            .create(p, b"", warden_client::CreateOptions::persistent())
            .await
            .unwrap();
    }
    let proxy = LossyProxy::start(server.addr()).await;
    let options = ConnectOptions {
        // Long, so that no heartbeat slips in before the create.
        session_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&proxy.addr, options).await.unwrap();
    let mutex = Mutex::new(client.clone(), lock).unwrap();
    proxy.lose_the_answer_to_the_next_request();
    let guard = timeout(WAIT, mutex.acquire())
        .await
        .expect("granted in time")
        .expect("acquire survives the lost answer");
    assert_eq!(proxy.cuts(), 1, "the create's answer was lost");
    let nodes = children(&admin, lock).await;
    assert_eq!(nodes.len(), 1, "no orphan, no duplicate: {nodes:?}");
    assert_eq!(format!("{lock}/{}", nodes[0]), guard.node_path());
    guard.release().await.unwrap();
    assert!(children(&admin, lock).await.is_empty());
}

/// A holder cut off from the service (as good as paused) loses the lock
/// after its session timeout: its `lost()` says the session expired, and
/// the waiter is granted with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_loses_the_lock_after_its_session_timeout() {
    let server = Server::start();
    let lock = "/locks/partitioned";
    let proxy = LossyProxy::start(server.addr()).await;
    let options = ConnectOptions {
        session_timeout: Duration::from_millis(1_000),
        ..ConnectOptions::default()
    };
    let holder_client = Client::connect(&proxy.addr, options).await.unwrap();
    let holder = Mutex::new(holder_client, lock).unwrap();
    let guard = holder.acquire().await.unwrap();
    let lost = tokio::spawn(guard.lost());

    let waiter = Mutex::new(connect(server.addr()).await, lock).unwrap();
    let acquiring = tokio::spawn(async move { waiter.acquire().await });
    proxy.partition();

    let reason = timeout(WAIT, lost).await.expect("lost() resolves").unwrap();
    assert_eq!(reason, LockLost::SessionExpired);
    let granted = timeout(WAIT, acquiring)
        .await
        .expect("the waiter is granted after the holder's session timeout")
        .unwrap()
        .unwrap();
    assert!(granted.fencing_token() > guard.fencing_token());
    granted.release().await.unwrap();
    drop(guard);
}
