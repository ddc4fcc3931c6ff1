//! A create whose answer is lost and that arrives *late* — after the
//! client looked for it and found nothing, just before its retry — must
//! not leave an orphan in the queue: every recipe on the shared queue
//! (`recipes/src/queue.rs`) is granted, with exactly one node left. The
//! join settles its session's writes before it looks, so the late create
//! is refused (before issue 27 it committed and was swept).
//!
//! Nor may a create that lands after its join was cancelled and cleaned
//! up (the `*_cancelled_*` tests, through the [`HeldCreate`] proxies of
//! `common/held.rs`): the clean-up settles the session's writes before it
//! looks, so the late create is refused, and the lock is free at once.
//!
//! Nor may the second of two creates of one join that both lost their
//! answers (the `*_two_lost_creates_*` tests): the join settles the
//! session's writes before each look-up, so the look-up that adopts the
//! first cannot be followed by the second landing.
//!
//! The client reaches two servers of a 3-node cluster through
//! [`LateCreate`] proxies, which hold the recipe's first create back, cut
//! the client off, and send that create on the old connection only when
//! the client sends its retry (see `common/late.rs`). Were it applied and
//! not swept, the late node would sort first and block the caller behind
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
    assert!(proxies.late_answered(), "the first create was sent late");
    assert!(
        !proxies.late_created(),
        "refused: the join settled its writes before it looked"
    );
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
    assert!(proxies.late_answered(), "the first create was sent late");
    assert!(
        !proxies.late_created(),
        "refused: the join settled its writes before it looked"
    );
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
    assert!(proxies.late_answered(), "the first create was sent late");
    assert!(
        !proxies.late_created(),
        "refused: the join settled its writes before it looked"
    );
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
    assert!(proxies.late_answered(), "the first create was sent late");
    assert!(
        !proxies.late_created(),
        "refused: the join settled its writes before it looked"
    );
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
    assert!(proxies.late_answered(), "the first create was sent late");
    assert!(
        !proxies.late_created(),
        "refused: the join settled its writes before it looked"
    );
    let nodes = children(&admin, "/semaphores/late").await;
    assert_eq!(nodes.len(), 1, "one node, no orphan: {nodes:?}");
    lease.release().await.unwrap();
}

/// A 3-node cluster, [`HeldCreate`] proxies in front of `fronted` of its
/// servers, a client through them (long session) and one straight to it.
async fn setup_held(fronted: usize) -> (Cluster, HeldCreate, Client, Client) {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    let upstreams: Vec<&str> = ids[..fronted].iter().map(|&i| cluster.addr(i)).collect();
    let proxies = HeldCreate::start(&upstreams).await;
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
///
/// `session` is a handle of the client `acquire` runs on, kept here until
/// the held create is answered. Were the handles in `acquire` the last
/// ones, the cancel would drop them all once the detached clean-up ended,
/// and the client would close its session just as the proxy sends the
/// held create (after the clean-up's look-up): a server drops a closed
/// session's connections, so the create, refused by the tree as of an
/// ended session, went unanswered in up to a third of the runs on a
/// loaded machine (a lease test did so until it kept a handle), and such
/// a run proves nothing.
async fn cancel_while_created<F>(
    proxies: &HeldCreate,
    session: Client,
    acquire: F,
) -> common::held::Late
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
    drop(session);
    // Answered by the cluster (applied or refused), not lost on the way:
    // else the test would prove nothing.
    assert_ne!(late.code, ErrorCode::ConnectionLoss, "{late:?}");
    late
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_a_cancelled_acquire_leaves_no_late_orphan() {
    let (_cluster, proxies, client, admin) = setup_held(2).await;
    make_path(&admin, "/locks/cancel").await;
    proxies.hold_create("/locks/cancel/_c_", "/locks/cancel");
    let mutex = Mutex::new(client.clone(), "/locks/cancel").unwrap();
    let late = cancel_while_created(&proxies, client.clone(), async move {
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
    let (_cluster, proxies, client, admin) = setup_held(2).await;
    make_path(&admin, "/leases/cancel").await;
    proxies.hold_create("/leases/cancel/lease-", "/leases/cancel");
    let leases = LeaseLock::new(client.clone(), "/leases");
    let late = cancel_while_created(&proxies, client.clone(), async move {
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
    // And for the cancelled client id on its own session: no place of its
    // is left to rejoin.
    let again = LeaseLock::new(client, "/leases");
    let lease = timeout(DEADLINE, again.acquire("cancel", "w1", TTL, GRANT_WAIT))
        .await
        .expect("the acquire ends")
        .unwrap()
        .expect("the cancelled client id takes the lease again");
    let state = others.state_synced("cancel").await.unwrap().expect("held");
    assert_eq!((state.holder.client_id.as_str(), state.waiters), ("w1", 0));
    again
        .release("cancel", "w1", lease.fencing_token)
        .await
        .unwrap();
}

/// Runs `acquire` while two of its creates lose their answers: the first
/// is held, the client comes back through another proxy and creates
/// again; that create is held too, and the first is sent while the client
/// is cut off (it lands, or is refused), so the look-up that follows can
/// find it; the second is sent once the acquire is over, or, given
/// `before_set`, just before the acquire's first set_data under that
/// prefix (a lease's grant stamp, its first write after the look-up).
/// Returns the acquire's result and what became of the two held creates.
async fn two_creates_lost<T, F>(
    proxies: &HeldCreate,
    before_set: Option<&str>,
    acquire: F,
) -> (T, common::held::Late, common::held::Late)
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let task = tokio::spawn(acquire);
    timeout(DEADLINE, proxies.wait_held_count(1))
        .await
        .expect("the first create is held");
    proxies.open();
    timeout(DEADLINE, proxies.wait_held_count(2))
        .await
        .expect("the second create is held");
    let first = timeout(DEADLINE, proxies.release(0))
        .await
        .expect("the first create is answered");
    if let Some(prefix) = before_set {
        proxies.release_before_set(1, prefix);
    }
    proxies.open();
    let acquired = timeout(DEADLINE, task)
        .await
        .expect("the acquire ends")
        .expect("the acquire task");
    let second = match before_set {
        Some(_) => timeout(DEADLINE, proxies.late()).await,
        None => timeout(DEADLINE, proxies.release(1)).await,
    }
    .expect("the second create is answered");
    // Answered by the cluster (applied or refused), not lost on the way:
    // else the test would prove nothing.
    assert_ne!(first.code, ErrorCode::ConnectionLoss, "{first:?}");
    assert_ne!(second.code, ErrorCode::ConnectionLoss, "{second:?}");
    (acquired, first, second)
}

/// Issue 27: two creates of one acquire lose their answers, and the
/// look-up after the second finds the first. Red before (no settling
/// write before that look-up): the first was adopted, the second landed
/// after the grant, two members for one join, the orphan next in line
/// for its session's life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_two_lost_creates_of_one_acquire_leave_no_orphan() {
    let (_cluster, proxies, client, admin) = setup_held(3).await;
    make_path(&admin, "/locks/twice").await;
    proxies.hold_creates("/locks/twice/_c_", 2);
    let mutex = Mutex::new(client, "/locks/twice").unwrap();
    let (acquired, first, second) = two_creates_lost(&proxies, None, async move {
        mutex.acquire_timeout(GRANT_WAIT).await
    })
    .await;
    let guard = acquired
        .expect("the acquire survives the lost answers")
        .expect("granted");
    let nodes = children(&admin, "/locks/twice").await;
    assert_eq!(
        nodes.len(),
        1,
        "two members for one join: {nodes:?} (first create {first:?}, second {second:?})"
    );
    assert_eq!(format!("/locks/twice/{}", nodes[0]), guard.node_path());
    guard.release().await.unwrap();
    // Free for anyone at once, not held by an orphan.
    let other = Mutex::new(admin.clone(), "/locks/twice").unwrap();
    let guard = other
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free once released");
    guard.release().await.unwrap();
}

/// The same for a lease lock, whose orphan would hold the lease for its
/// TTL once the holder lets go. Its grant stamp is a write that settles
/// the session, so the second create lands just before it. Red before:
/// two lease nodes for one acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_two_lost_creates_of_one_acquire_leave_no_orphan() {
    let (_cluster, proxies, client, admin) = setup_held(3).await;
    make_path(&admin, "/leases/twice").await;
    proxies.hold_creates("/leases/twice/lease-", 2);
    let leases = LeaseLock::new(client, "/leases");
    let mine = leases.clone();
    let (acquired, first, second) =
        two_creates_lost(&proxies, Some("/leases/twice/lease-"), async move {
            mine.acquire("twice", "w1", TTL, GRANT_WAIT).await
        })
        .await;
    let lease = acquired
        .expect("the acquire survives the lost answers")
        .expect("granted");
    let nodes = children(&admin, "/leases/twice").await;
    assert_eq!(
        nodes.len(),
        1,
        "two members for one join: {nodes:?} (first create {first:?}, second {second:?})"
    );
    leases
        .release("twice", "w1", lease.fencing_token)
        .await
        .unwrap();
    // Free for another client id at once, not after an orphan's TTL.
    let others = LeaseLock::new(admin.clone(), "/leases");
    let next = others
        .acquire("twice", "w2", TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lease is free once released");
    others
        .release("twice", "w2", next.fencing_token)
        .await
        .unwrap();
}
