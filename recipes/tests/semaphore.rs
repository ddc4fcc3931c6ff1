//! The counting semaphore against a real `warden` server. Every contender
//! has its own client, hence its own session.
//!
//! The bound is checked by a shared counter inside the critical sections;
//! every wait has a deadline and fails the test if the condition does not
//! come.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{connect, wait_for, DEADLINE};
use warden_client::{Client, ErrorCode};
use warden_recipes::Semaphore;
use warden_testkit::Server;

/// A wait that is meant to run out (every lease is taken throughout).
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

async fn contender_count(client: &Client, path: &str) -> usize {
    match client.get_children_linearizable(path).await {
        Ok((children, _)) => children.len(),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_max_leases_holders_and_the_bound_is_reached() {
    const MAX: u32 = 3;
    const CONTENDERS: usize = 8;
    const ROUNDS: usize = 3;
    let server = Server::start();
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let client = connect(server.addr()).await;
        let (holding, peak) = (holding.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let semaphore = Semaphore::new(client.clone(), "/sem/bound", MAX);
            for _ in 0..ROUNDS {
                let lease = semaphore.acquire().await.expect("lease");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= MAX as usize, "{now} holders at once");
                peak.fetch_max(now, Ordering::SeqCst);
                // Hold until the bound has been reached once: the first
                // MAX holders meet here, proving MAX can hold together.
                wait_for("the holder count to reach the bound", || async {
                    peak.load(Ordering::SeqCst) >= MAX as usize
                })
                .await;
                client.exists("/sem").await.expect("exists");
                assert!(holding.load(Ordering::SeqCst) <= MAX as usize);
                holding.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender task");
    }
    assert_eq!(peak.load(Ordering::SeqCst), MAX as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mismatched_or_zero_max_leases_is_refused() {
    const PATH: &str = "/sem/mismatch";
    let server = Server::start();
    let three = Semaphore::new(connect(server.addr()).await, PATH, 3);
    let lease = three.acquire().await.expect("lease");
    let observer = connect(server.addr()).await;

    let four = Semaphore::new(connect(server.addr()).await, PATH, 4);
    let err = four.acquire().await.expect_err("4 disagrees with 3");
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    let err = four.try_acquire().await.expect_err("4 disagrees with 3");
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    // Refused before queueing: only the holder's node is there.
    assert_eq!(contender_count(&observer, PATH).await, 1);

    let zero = Semaphore::new(observer.clone(), "/sem/zero", 0);
    let err = zero.acquire().await.expect_err("zero leases");
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn giving_up_removes_the_waiters_node() {
    const PATH: &str = "/sem/timeout";
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let holder = Semaphore::new(connect(server.addr()).await, PATH, 1);
    let lease = holder.acquire().await.expect("lease");

    let other = Semaphore::new(connect(server.addr()).await, PATH, 1);
    assert!(other
        .acquire_timeout(SHORT_TIMEOUT)
        .await
        .expect("a timeout is not an error")
        .is_none());
    assert!(other.try_acquire().await.expect("try").is_none());
    assert_eq!(contender_count(&observer, PATH).await, 1);

    lease.release().await.expect("release");
    let got = other
        .acquire_timeout(DEADLINE)
        .await
        .expect("acquire")
        .expect("the lease is free");
    got.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_whose_client_closes_frees_its_lease() {
    const PATH: &str = "/sem/close";
    let server = Server::start();
    let holder_client = connect(server.addr()).await;
    let holder = Semaphore::new(holder_client.clone(), PATH, 1);
    let _lease = holder.acquire().await.expect("lease");

    let other = Semaphore::new(connect(server.addr()).await, PATH, 1);
    let waiting = tokio::spawn(async move { other.acquire().await.map(drop) });
    holder_client.close().await.expect("close");
    tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the waiter should get the lease once the holder's session is over")
        .expect("task")
        .expect("lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_in_order_of_arrival() {
    const PATH: &str = "/sem/fifo";
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let holder = Semaphore::new(connect(server.addr()).await, PATH, 1);
    let lease = holder.acquire().await.expect("lease");

    // Two waiters, queued one after the other.
    let first_holds = Arc::new(AtomicBool::new(false));
    let second_holds = Arc::new(AtomicBool::new(false));
    let (let_first_go, first_may_go) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let semaphore = Semaphore::new(connect(server.addr()).await, PATH, 1);
        let (first_holds, second_holds) = (first_holds.clone(), second_holds.clone());
        tokio::spawn(async move {
            let lease = semaphore.acquire().await.expect("first");
            first_holds.store(true, Ordering::SeqCst);
            assert!(!second_holds.load(Ordering::SeqCst));
            first_may_go.await.expect("signal");
            first_holds.store(false, Ordering::SeqCst);
            lease.release().await.expect("release");
        })
    };
    wait_for("the first waiter to queue", || async {
        contender_count(&observer, PATH).await == 2
    })
    .await;
    let second = {
        let semaphore = Semaphore::new(connect(server.addr()).await, PATH, 1);
        let (first_holds, second_holds) = (first_holds.clone(), second_holds.clone());
        tokio::spawn(async move {
            let lease = semaphore.acquire().await.expect("second");
            second_holds.store(true, Ordering::SeqCst);
            assert!(!first_holds.load(Ordering::SeqCst));
            lease.release().await.expect("release");
        })
    };
    wait_for("the second waiter to queue", || async {
        contender_count(&observer, PATH).await == 3
    })
    .await;

    lease.release().await.expect("release");
    wait_for("the first waiter to hold", || async {
        first_holds.load(Ordering::SeqCst)
    })
    .await;
    assert!(!second_holds.load(Ordering::SeqCst));
    let_first_go.send(()).expect("first waiting");
    for task in [first, second] {
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("waiter done")
            .expect("waiter task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bound_holds_across_a_leader_kill() {
    const MAX: u32 = 2;
    const CONTENDERS: usize = 5;
    /// Rounds each contender runs before the kill, and again after it.
    const ROUNDS_PER_PHASE: usize = 3;
    /// Time for everyone to finish, failover included.
    const FAILOVER_DEADLINE: Duration = Duration::from_secs(60);
    let mut cluster = warden_testkit::Cluster::start(3);
    let servers = cluster.servers();
    let holding = Arc::new(AtomicUsize::new(0));
    let rounds_done = Arc::new(AtomicUsize::new(0));
    let (killed, killed_signal) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        // Every client may use any node, so it can move off a dead one.
        let client = connect(&servers).await;
        let (holding, rounds_done) = (holding.clone(), rounds_done.clone());
        let mut killed_signal = killed_signal.clone();
        tasks.push(tokio::spawn(async move {
            let semaphore = Semaphore::new(client.clone(), "/sem/failover", MAX);
            for round in 0..2 * ROUNDS_PER_PHASE {
                if round == ROUNDS_PER_PHASE {
                    killed_signal.wait_for(|k| *k).await.expect("signal");
                }
                let lease = semaphore.acquire().await.expect("lease");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= MAX as usize, "{now} holders at once");
                // A round trip while holding (it may meet the failover).
                let _ = client.exists("/sem").await;
                assert!(holding.load(Ordering::SeqCst) <= MAX as usize);
                holding.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.expect("release");
                rounds_done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    wait_for("the first phase", || async {
        rounds_done.load(Ordering::SeqCst) == CONTENDERS * ROUNDS_PER_PHASE
    })
    .await;
    let admin = connect(&servers).await;
    let leader = admin.cluster_status().await.expect("status").leader_id;
    let leader = usize::try_from(leader).expect("node id");
    assert!(cluster.node_ids().contains(&leader), "leader {leader}");
    cluster.kill9(leader);
    killed.send(true).expect("contenders waiting");
    for task in tasks {
        tokio::time::timeout(FAILOVER_DEADLINE, task)
            .await
            .expect("contender done")
            .expect("contender task");
    }
    assert_eq!(
        rounds_done.load(Ordering::SeqCst),
        2 * CONTENDERS * ROUNDS_PER_PHASE
    );
}
