//! The read-write lock against a real `warden` server. Every contender has
//! its own client, hence its own session, as separate processes would.
//!
//! Exclusion is checked by shared counters inside the critical sections,
//! never by timing; every wait has a deadline and fails the test if the
//! condition does not come.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{connect, wait_for, DEADLINE};
use warden_client::Client;
use warden_recipes::{ReadWriteLock, RwLockMode, READ_KIND, WRITE_KIND};
use warden_testkit::Server;

/// A wait that is meant to run out (the lock is busy throughout).
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

/// The contender nodes under `path` of `kind` (any kind if `None`).
async fn contenders(client: &Client, path: &str, kind: Option<&str>) -> Vec<String> {
    match client.get_children_linearizable(path).await {
        Ok((children, _)) => children
            .into_iter()
            .filter(|c| kind.is_none_or(|k| c.contains(&format!("-{k}"))))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_readers_hold_at_once() {
    const READERS: usize = 5;
    let server = Server::start();
    let all_in = Arc::new(tokio::sync::Barrier::new(READERS));
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let client = connect(server.addr()).await;
        let all_in = all_in.clone();
        tasks.push(tokio::spawn(async move {
            let lock = ReadWriteLock::new(client, "/rw/readers");
            let guard = lock.read_lock().acquire().await.expect("read lock");
            assert_eq!(guard.mode(), RwLockMode::Read);
            // Only passes if every reader holds at the same time.
            tokio::time::timeout(DEADLINE, all_in.wait())
                .await
                .expect("all readers should hold the lock together");
            guard.release().await.expect("release");
        }));
    }
    for task in tasks {
        task.await.expect("reader task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_excludes_readers_and_writers() {
    const WRITERS: usize = 3;
    const READERS: usize = 3;
    const ROUNDS: usize = 4;
    let server = Server::start();
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let write_tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WRITERS + READERS {
        let client = connect(server.addr()).await;
        let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
        let write_tokens = write_tokens.clone();
        let writer = i < WRITERS;
        tasks.push(tokio::spawn(async move {
            let lock = ReadWriteLock::new(client.clone(), "/rw/exclusion");
            for _ in 0..ROUNDS {
                if writer {
                    let guard = lock.write_lock().acquire().await.expect("write lock");
                    assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader with writer");
                    write_tokens
                        .lock()
                        .expect("tokens")
                        .push(guard.fencing_token());
                    // A round trip inside the section widens the window in
                    // which a wrongly admitted contender would be caught.
                    client.exists("/rw").await.expect("exists");
                    assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader with writer");
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                } else {
                    let guard = lock.read_lock().acquire().await.expect("read lock");
                    readers_in.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer with reader");
                    client.exists("/rw").await.expect("exists");
                    assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer with reader");
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender task");
    }
    // Write grants, in the order they happened, carry increasing tokens.
    let tokens = write_tokens.lock().expect("tokens").clone();
    assert_eq!(tokens.len(), WRITERS * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must increase: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_writer_is_not_overtaken_by_later_readers() {
    const PATH: &str = "/rw/fair";
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let first_reader = ReadWriteLock::new(connect(server.addr()).await, PATH);
    let read_guard = first_reader.read_lock().acquire().await.expect("read");

    // A writer queues behind the reader.
    let writer_client = connect(server.addr()).await;
    let writer_holds = Arc::new(AtomicBool::new(false));
    let late_reader_holds = Arc::new(AtomicBool::new(false));
    let (release_writer, writer_may_go) = tokio::sync::oneshot::channel::<()>();
    let writer = {
        let (writer_holds, late_reader_holds) = (writer_holds.clone(), late_reader_holds.clone());
        tokio::spawn(async move {
            let lock = ReadWriteLock::new(writer_client, PATH);
            let guard = lock.write_lock().acquire().await.expect("write");
            writer_holds.store(true, Ordering::SeqCst);
            assert!(!late_reader_holds.load(Ordering::SeqCst));
            writer_may_go.await.expect("signal");
            writer_holds.store(false, Ordering::SeqCst);
            guard.release().await.expect("release");
        })
    };
    wait_for("the writer to queue", || async {
        contenders(&observer, PATH, Some(WRITE_KIND)).await.len() == 1
    })
    .await;

    // A reader arriving now must not pass the queued writer, even though
    // only a reader holds the lock.
    let late = ReadWriteLock::new(connect(server.addr()).await, PATH);
    assert!(late.read_lock().try_acquire().await.expect("try").is_none());
    let late_reader = {
        let late_reader_holds = late_reader_holds.clone();
        let writer_holds = writer_holds.clone();
        tokio::spawn(async move {
            let guard = late.read_lock().acquire().await.expect("late read");
            late_reader_holds.store(true, Ordering::SeqCst);
            assert!(!writer_holds.load(Ordering::SeqCst), "reader beside writer");
            guard.release().await.expect("release");
        })
    };
    wait_for("the late reader to queue", || async {
        contenders(&observer, PATH, Some(READ_KIND)).await.len() == 2
    })
    .await;

    // The first reader leaves: the writer goes first, the late reader
    // only after it.
    read_guard.release().await.expect("release");
    wait_for("the writer to hold", || async {
        writer_holds.load(Ordering::SeqCst)
    })
    .await;
    assert!(!late_reader_holds.load(Ordering::SeqCst));
    release_writer.send(()).expect("writer waiting");
    tokio::time::timeout(DEADLINE, writer)
        .await
        .expect("writer done")
        .expect("writer task");
    tokio::time::timeout(DEADLINE, late_reader)
        .await
        .expect("late reader done")
        .expect("late reader task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn giving_up_removes_the_waiters_node() {
    const PATH: &str = "/rw/timeout";
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let holder = ReadWriteLock::new(connect(server.addr()).await, PATH);
    let guard = holder.write_lock().acquire().await.expect("write");

    let other = ReadWriteLock::new(connect(server.addr()).await, PATH);
    // Timeout: both sides.
    assert!(other
        .write_lock()
        .acquire_timeout(SHORT_TIMEOUT)
        .await
        .expect("timeout is not an error")
        .is_none());
    assert!(other
        .read_lock()
        .acquire_timeout(SHORT_TIMEOUT)
        .await
        .expect("timeout is not an error")
        .is_none());
    assert_eq!(contenders(&observer, PATH, None).await.len(), 1);
    // try_acquire.
    assert!(other
        .read_lock()
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert!(other
        .write_lock()
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    assert_eq!(contenders(&observer, PATH, None).await.len(), 1);

    // A cancelled acquire (its future dropped) removes its node too.
    let cancelled = tokio::time::timeout(SHORT_TIMEOUT, other.write_lock().acquire()).await;
    assert!(
        cancelled.is_err(),
        "the lock is held: acquire cannot finish"
    );
    wait_for("the cancelled waiter's node to go", || async {
        contenders(&observer, PATH, None).await.len() == 1
    })
    .await;

    // Once released, the lock is free for the other, with a larger token.
    let first_token = guard.fencing_token();
    guard.release().await.expect("release");
    let next = other
        .write_lock()
        .try_acquire()
        .await
        .expect("try")
        .expect("the lock is free");
    assert!(next.fencing_token() > first_token);
    // Dropping a guard releases it in the background.
    drop(next);
    wait_for("the dropped guard's node to go", || async {
        contenders(&observer, PATH, None).await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_whose_session_closes_frees_the_lock() {
    const PATH: &str = "/rw/session";
    let server = Server::start();
    let holder_client = connect(server.addr()).await;
    let holder = ReadWriteLock::new(holder_client.clone(), PATH);
    let _guard = holder.write_lock().acquire().await.expect("write");
    let other = ReadWriteLock::new(connect(server.addr()).await, PATH);
    let waiting = tokio::spawn(async move { other.read_lock().acquire().await.map(drop) });
    holder_client.close().await.expect("close");
    tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the reader should get the lock once the writer's session is over")
        .expect("task")
        .expect("read lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contenders_on_different_nodes_of_a_cluster_exclude_each_other() {
    const ROUNDS: usize = 4;
    let cluster = warden_testkit::Cluster::start(3);
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    // A writer and a reader on every node.
    for node in cluster.node_ids() {
        for writer in [true, false] {
            let client = connect(cluster.addr(node)).await;
            let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
            tasks.push(tokio::spawn(async move {
                let lock = ReadWriteLock::new(client, "/rw/cluster");
                for _ in 0..ROUNDS {
                    if writer {
                        let guard = lock.write_lock().acquire().await.expect("write lock");
                        assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader with writer");
                        tokio::task::yield_now().await;
                        assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader with writer");
                        writers_in.fetch_sub(1, Ordering::SeqCst);
                        guard.release().await.expect("release");
                    } else {
                        let guard = lock.read_lock().acquire().await.expect("read lock");
                        readers_in.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer with reader");
                        tokio::task::yield_now().await;
                        assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer with reader");
                        readers_in.fetch_sub(1, Ordering::SeqCst);
                        guard.release().await.expect("release");
                    }
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("contender done")
            .expect("contender task");
    }
}
