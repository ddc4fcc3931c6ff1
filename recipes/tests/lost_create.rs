//! A create whose answer is lost and that commits *late* — after the
//! client looked for it and found nothing, just before its retry — must
//! not leave an orphan in the queue: every recipe on the shared queue
//! (`recipes/src/queue.rs`) is granted, with exactly one node left.
//!
//! Nor may a create that lands after its join was cancelled and cleaned
//! up (the `*_cancelled_*` tests, through the [`HeldCreate`] proxies of
//! `common/held.rs`): the clean-up settles the session's writes before it
//! looks, so the late create is refused, and the lock is free at once.
//!
//! The client reaches two servers of a 3-node cluster through
//! [`LateCreate`] proxies, which hold the recipe's first create back, cut
//! the client off, and let that create commit on the old connection only
//! when the client sends its retry (see `common/late.rs`). Without the
//! orphan sweep the late node sorts first and blocks the caller behind
//! itself (a lease for its TTL, an election for the session's life).

mod common;

use std::time::Duration;

use common::held::HeldCreate;
use common::late::LateCreate;
use tokio::time::timeout;
use warden_client::{Client, ConnectOptions, ErrorCode};
use warden_recipes::{LeaderElection, LeaseLock, Mutex, ReadWriteLock, Semaphore};
use warden_testkit::Cluster;

/// Longest wait for anything that must happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long a recipe may wait for its grant: shorter than [`DEADLINE`],
/// so a caller stuck behind its own orphan shows as "not granted".
const GRANT_WAIT: Duration = Duration::from_secs(10);
/// A lease TTL far longer than the test: an orphan would outlive it.
const TTL: Duration = Duration::from_secs(120);

/// A 3-node cluster, proxies in front of two of its servers, a client
/// through them (long session: no ping slips in) and one straight to it.
async fn setup() -> (Cluster, LateCreate, Client, Client) {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    let proxies = LateCreate::start(&[cluster.addr(ids[0]), cluster.addr(ids[1])]).await;
    let options = ConnectOptions {
        session_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&proxies.servers(), options)
        .await
        .expect("connect through the proxies");
    let admin = common::connect(&cluster.servers()).await;
    (cluster, proxies, client, admin)
}

/// Makes `path` and its parents as persistent nodes, so that the
/// recipe's first create is the one held back (not a `NoNode` that makes
/// it create the container first).
async fn make_path(admin: &Client, path: &str) {
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at = format!("{at}/{part}");
        match admin
            .create(&at, b"", warden_client::CreateOptions::persistent())
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == ErrorCode::NodeExists => {}
            Err(e) => panic!("create {at}: {e}"),
        }
    }
}

/// The children of `path`, read linearizably.
async fn children(admin: &Client, path: &str) -> Vec<String> {
    match admin.get_children_linearizable(path).await {
        Ok((c, _)) => c,
        Err(e) if e.code() == ErrorCode::NoNode => Vec::new(),
        Err(e) => panic!("get_children {path}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_a_late_create_leaves_no_orphan() {
    let (_cluster, proxies, client, admin) = setup().await;
    let leases = LeaseLock::new(client, "/leases");
    make_path(&admin, "/leases/late").await;
    proxies.hold_next("/leases/late/lease-").await;
    let lease = timeout(DEADLINE, leases.acquire("late", "w1", TTL, GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .expect("the acquire survives the lost answer")
        .expect("granted, not queued behind its own orphan");
    assert!(proxies.late_created(), "the first create committed late");
    let nodes = children(&admin, "/leases/late").await;
    assert_eq!(nodes.len(), 1, "one node, no orphan: {nodes:?}");
    let others = LeaseLock::new(admin.clone(), "/leases");
    let state = others.state("late").await.unwrap().expect("held");
    assert_eq!(state.holder.fencing_token, lease.fencing_token);
    assert_eq!(state.waiters, 0);
    assert!(others
        .acquire("late", "w2", TTL, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    leases
        .release("late", "w1", lease.fencing_token)
        .await
        .unwrap();
    let next = others
        .acquire("late", "w2", TTL, GRANT_WAIT)
        .await
        .unwrap()
        .expect("the next client is granted once released");
    assert!(next.fencing_token > lease.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_a_late_create_leaves_no_orphan() {
    let (_cluster, proxies, client, admin) = setup().await;
    let path = "/elections/late";
    let election = LeaderElection::new(client, path, "n1");
    make_path(&admin, "/elections/late").await;
    proxies.hold_next("/elections/late/c-").await;
    let leadership = timeout(GRANT_WAIT, election.campaign())
        .await
        .expect("leads, not stuck behind its own orphan")
        .expect("the campaign survives the lost answer");
    assert!(proxies.late_created(), "the first create committed late");
    let nodes = children(&admin, path).await;
    assert_eq!(nodes.len(), 1, "one candidate node, no orphan: {nodes:?}");
    let observer = LeaderElection::new(admin.clone(), path, "observer");
    let leader = observer.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.id.as_str(), leader.token), ("n1", leadership.token));
    // Resigning hands over to the next candidate at once.
    let next = tokio::spawn(async move { observer.campaign().await });
    common::wait_for("the second candidate queues", || async {
        children(&admin, path).await.len() == 2
    })
    .await;
    let token = leadership.token;
    leadership.resign().await.unwrap();
    let second = timeout(DEADLINE, next)
        .await
        .expect("the next candidate leads")
        .unwrap()
        .unwrap();
    assert!(second.token > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_a_late_create_leaves_no_orphan() {
    let (_cluster, proxies, client, admin) = setup().await;
    let mutex = Mutex::new(client, "/locks/late").unwrap();
    make_path(&admin, "/locks/late").await;
    proxies.hold_next("/locks/late/_c_").await;
    let guard = timeout(DEADLINE, mutex.acquire_timeout(GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .expect("the acquire survives the lost answer")
        .expect("granted, not queued behind its own orphan");
    assert!(proxies.late_created(), "the first create committed late");
    let nodes = children(&admin, "/locks/late").await;
    assert_eq!(nodes.len(), 1, "one node, no orphan: {nodes:?}");
    assert_eq!(format!("/locks/late/{}", nodes[0]), guard.node_path());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_a_late_create_leaves_no_orphan() {
    let (_cluster, proxies, client, admin) = setup().await;
    let lock = ReadWriteLock::new(client, "/locks/rwlate");
    make_path(&admin, "/locks/rwlate").await;
    proxies.hold_next("/locks/rwlate/_c_").await;
    let guard = timeout(DEADLINE, lock.write_lock().acquire_timeout(GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .expect("the acquire survives the lost answer")
        .expect("granted, not queued behind its own orphan");
    assert!(proxies.late_created(), "the first create committed late");
    let nodes = children(&admin, "/locks/rwlate").await;
    assert_eq!(nodes.len(), 1, "one node, no orphan: {nodes:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_a_late_create_leaves_no_orphan() {
    let (_cluster, proxies, client, admin) = setup().await;
    let pool = Semaphore::new(client, "/semaphores/late", 1);
    make_path(&admin, "/semaphores/late").await;
    // The semaphore's node holds its max_leases.
    admin
        .set_data("/semaphores/late", b"1", None)
        .await
        .unwrap();
    proxies.hold_next("/semaphores/late/_c_").await;
    let lease = timeout(DEADLINE, pool.acquire_timeout(GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .expect("the acquire survives the lost answer")
        .expect("granted, not queued behind its own orphan");
    assert!(proxies.late_created(), "the first create committed late");
    let nodes = children(&admin, "/semaphores/late").await;
    assert_eq!(nodes.len(), 1, "one node, no orphan: {nodes:?}");
    lease.release().await.unwrap();
}

/// A 3-node cluster, [`HeldCreate`] proxies in front of two of its
/// servers, a client through them (long session) and one straight to it.
async fn setup_held() -> (Cluster, HeldCreate, Client, Client) {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    let proxies = HeldCreate::start(&[cluster.addr(ids[0]), cluster.addr(ids[1])]).await;
    let options = ConnectOptions {
        session_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&proxies.servers(), options)
        .await
        .expect("connect through the proxies");
    let admin = common::connect(&cluster.servers()).await;
    (cluster, proxies, client, admin)
}

/// Runs `acquire` until its first create is held, cancels it, lets the
/// client back and returns what became of the held create once the
/// clean-up had looked.
async fn cancel_while_created<F>(proxies: &HeldCreate, acquire: F) -> common::held::Late
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let task = tokio::spawn(acquire);
    timeout(DEADLINE, proxies.wait_held())
        .await
        .expect("the create is held");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    proxies.open();
    let late = timeout(DEADLINE, proxies.late())
        .await
        .expect("the held create is sent after the clean-up looked");
    // Answered by the cluster (applied or refused), not lost on the way:
    // else the test would prove nothing.
    assert_ne!(late.code, ErrorCode::ConnectionLoss, "{late:?}");
    late
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_a_cancelled_acquire_leaves_no_late_orphan() {
    let (_cluster, proxies, client, admin) = setup_held().await;
    make_path(&admin, "/locks/cancel").await;
    proxies.hold_create("/locks/cancel/_c_", "/locks/cancel");
    let mutex = Mutex::new(client.clone(), "/locks/cancel").unwrap();
    let late = cancel_while_created(&proxies, async move {
        let _ = mutex.acquire_timeout(GRANT_WAIT).await;
    })
    .await;
    let nodes = children(&admin, "/locks/cancel").await;
    assert!(
        nodes.is_empty(),
        "an orphan of the cancelled acquire: {nodes:?} ({late:?})"
    );
    assert_eq!(
        late.created, None,
        "the create landed after the clean-up: {late:?}"
    );
    // The lock is free for anyone at once, the cancelled session included.
    let other = Mutex::new(admin.clone(), "/locks/cancel").unwrap();
    let guard = other
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free");
    guard.release().await.unwrap();
    let again = Mutex::new(client, "/locks/cancel").unwrap();
    let guard = timeout(DEADLINE, again.acquire_timeout(GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .unwrap()
        .expect("the cancelled session takes the lock again");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_a_cancelled_acquire_leaves_no_late_orphan() {
    let (_cluster, proxies, client, admin) = setup_held().await;
    make_path(&admin, "/leases/cancel").await;
    proxies.hold_create("/leases/cancel/lease-", "/leases/cancel");
    let leases = LeaseLock::new(client, "/leases");
    let late = cancel_while_created(&proxies, async move {
        let _ = leases.acquire("cancel", "w1", TTL, GRANT_WAIT).await;
    })
    .await;
    let nodes = children(&admin, "/leases/cancel").await;
    assert!(
        nodes.is_empty(),
        "an orphan of the cancelled acquire: {nodes:?} ({late:?})"
    );
    assert_eq!(
        late.created, None,
        "the create landed after the clean-up: {late:?}"
    );
    // Free for another client id at once, not after the orphan's TTL.
    let others = LeaseLock::new(admin.clone(), "/leases");
    let lease = others
        .acquire("cancel", "w2", TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lease is free");
    others
        .release("cancel", "w2", lease.fencing_token)
        .await
        .unwrap();
}
