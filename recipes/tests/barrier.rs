//! The double barrier against a real `warden` server, and once on a real
//! 3-node cluster. Every member has its own client, hence its own session.
//!
//! "Nobody passes before everyone arrived" is checked while a member is
//! still missing, when passing is impossible, not by timing; every wait
//! has a deadline and fails the test if the condition does not come.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{connect, wait_for, DEADLINE};
use tokio::task::JoinHandle;
use warden_client::{Client, ErrorCode};
use warden_recipes::{DoubleBarrier, READY_NODE};
use warden_testkit::{Cluster, Server};

/// A wait that is meant to run out (a member is missing throughout).
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

/// The member nodes under `path` (without `ready`).
async fn members(client: &Client, path: &str) -> Vec<String> {
    match client.get_children_linearizable(path).await {
        Ok((mut children, _)) => {
            children.retain(|c| c != READY_NODE);
            children.sort();
            children
        }
        Err(_) => Vec::new(),
    }
}

async fn await_task<T>(task: JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(DEADLINE, task)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Runs `enter` then `leave` for one member, counting who passed each
/// step, and waiting for `go_leave` in between.
fn member(
    barrier: DoubleBarrier,
    entered: Arc<AtomicUsize>,
    left: Arc<AtomicUsize>,
    go_leave: tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        barrier.enter().await.expect("enter");
        entered.fetch_add(1, Ordering::SeqCst);
        let mut go_leave = go_leave;
        go_leave.wait_for(|go| *go).await.expect("signal");
        barrier.leave().await.expect("leave");
        left.fetch_add(1, Ordering::SeqCst);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nobody_passes_until_all_entered_or_all_left() {
    const PATH: &str = "/barriers/phase";
    const COUNT: u32 = 4;
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let entered = Arc::new(AtomicUsize::new(0));
    let left = Arc::new(AtomicUsize::new(0));
    // m0..m2 leave when told; m3, the highest name, on its own signal.
    let (go_leave, leave_signal) = tokio::sync::watch::channel(false);
    let (go_leave_last, last_leave_signal) = tokio::sync::watch::channel(false);

    let mut tasks = Vec::new();
    for i in 0..COUNT - 1 {
        let barrier =
            DoubleBarrier::new(connect(server.addr()).await, PATH, format!("m{i}"), COUNT);
        tasks.push(member(
            barrier,
            entered.clone(),
            left.clone(),
            leave_signal.clone(),
        ));
    }
    wait_for("three members to enter", || async {
        members(&observer, PATH).await.len() == COUNT as usize - 1
    })
    .await;
    // One member is missing: nobody can have passed.
    assert_eq!(entered.load(Ordering::SeqCst), 0);
    assert!(observer
        .exists(&format!("{PATH}/{READY_NODE}"))
        .await
        .expect("exists")
        .is_none());

    let last = DoubleBarrier::new(connect(server.addr()).await, PATH, "m3", COUNT);
    tasks.push(member(
        last,
        entered.clone(),
        left.clone(),
        last_leave_signal,
    ));
    wait_for("every member to pass enter", || async {
        entered.load(Ordering::SeqCst) == COUNT as usize
    })
    .await;

    // Three leave; m0 (the lowest) waits for the rest, m1 and m2 delete
    // their nodes and wait for m0; m3 is still in.
    go_leave.send(true).expect("members waiting");
    wait_for("m1 and m2 to have left", || async {
        members(&observer, PATH).await == ["m0", "m3"]
    })
    .await;
    assert_eq!(left.load(Ordering::SeqCst), 0);

    go_leave_last.send(true).expect("m3 waiting");
    for (i, task) in tasks.into_iter().enumerate() {
        await_task(task, &format!("member {i}")).await;
    }
    assert_eq!(left.load(Ordering::SeqCst), COUNT as usize);
    // The last to leave tidied up.
    assert!(members(&observer, PATH).await.is_empty());
    assert!(observer
        .exists(&format!("{PATH}/{READY_NODE}"))
        .await
        .expect("exists")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enter_timeout_gives_up_and_uncounts_the_member() {
    const PATH: &str = "/barriers/timeout";
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let alone = DoubleBarrier::new(connect(server.addr()).await, PATH, "alone", 3);
    assert!(!alone
        .enter_timeout(SHORT_TIMEOUT)
        .await
        .expect("a timeout is not an error"));
    assert!(members(&observer, PATH).await.is_empty());

    // Leave times out too while another member is still in.
    let a = DoubleBarrier::new(connect(server.addr()).await, PATH, "a", 2);
    let b = DoubleBarrier::new(connect(server.addr()).await, PATH, "b", 2);
    let b_enters = tokio::spawn(async move { b.enter().await.map(|()| b) });
    a.enter_timeout(DEADLINE).await.expect("enter");
    let b = await_task(b_enters, "b to enter").await.expect("enter");
    // a, the lowest, waits for b, which has not left yet.
    assert!(!a
        .leave_timeout(SHORT_TIMEOUT)
        .await
        .expect("a timeout is not an error"));
    // b leaves (deleting its node) and then waits for a, the lowest, ...
    let b_leaves = tokio::spawn(async move { b.leave_timeout(DEADLINE).await });
    wait_for("b's node to go", || async {
        members(&observer, PATH).await == ["a"]
    })
    .await;
    // ... which may now go, and so may b.
    assert!(a.leave_timeout(DEADLINE).await.expect("leave"));
    assert!(await_task(b_leaves, "b to leave").await.expect("leave"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_arguments_are_refused() {
    let server = Server::start();
    let client = connect(server.addr()).await;
    for (id, count) in [("ready", 2), ("", 2), ("a/b", 2), ("ok", 0)] {
        let barrier = DoubleBarrier::new(client.clone(), "/barriers/bad", id, count);
        let err = barrier.enter().await.expect_err("refused");
        assert_eq!(err.code(), ErrorCode::BadArguments, "{id:?} {count}: {err}");
    }
    // A member id already held by another session.
    let holder = DoubleBarrier::new(client.clone(), "/barriers/taken2", "same", 2);
    let holder_task = tokio::spawn(async move { holder.enter().await });
    wait_for("the holder to enter", || async {
        members(&client, "/barriers/taken2").await.len() == 1
    })
    .await;
    let other = DoubleBarrier::new(connect(server.addr()).await, "/barriers/taken2", "same", 2);
    let err = other.enter().await.expect_err("id taken");
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    holder_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_on_different_nodes_of_a_cluster_pass_together() {
    const PATH: &str = "/barriers/cluster";
    const COUNT: u32 = 3;
    let cluster = Cluster::start(3);
    let entered = Arc::new(AtomicUsize::new(0));
    let left = Arc::new(AtomicUsize::new(0));
    let (go_leave, leave_signal) = tokio::sync::watch::channel(false);
    let observer = connect(&cluster.servers()).await;
    let mut tasks = Vec::new();
    // One member per node; the last joins once the others are in.
    for (i, node) in cluster.node_ids().into_iter().enumerate() {
        if i == COUNT as usize - 1 {
            wait_for("the first members to enter", || async {
                members(&observer, PATH).await.len() == i
            })
            .await;
            assert_eq!(entered.load(Ordering::SeqCst), 0);
        }
        let client = connect(cluster.addr(node)).await;
        let barrier = DoubleBarrier::new(client, PATH, format!("m{i}"), COUNT);
        tasks.push(member(
            barrier,
            entered.clone(),
            left.clone(),
            leave_signal.clone(),
        ));
    }
    wait_for("every member to pass enter", || async {
        entered.load(Ordering::SeqCst) == COUNT as usize
    })
    .await;
    assert_eq!(left.load(Ordering::SeqCst), 0);
    go_leave.send(true).expect("members waiting");
    for (i, task) in tasks.into_iter().enumerate() {
        await_task(task, &format!("member {i}")).await;
    }
    assert_eq!(left.load(Ordering::SeqCst), COUNT as usize);
    assert!(members(&observer, PATH).await.is_empty());
}
