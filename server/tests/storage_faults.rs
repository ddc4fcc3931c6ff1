//! Storage that stops rather than lies: a data dir that lost acknowledged
//! writes, holds an unreadable snapshot or an unreadable log entry makes
//! the server refuse to start, naming the problem, instead of serving
//! (and voting) with silently wrong state.

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use protobuf::Message as _;
use warden_client::{Client, ConnectOptions, CreateOptions};
use warden_testkit::{Server, ServerOptions};

async fn write_some(server: &Server, n: usize) {
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    for i in 0..n {
        c.create(&format!("/n{i}"), b"x", CreateOptions::default())
            .await
            .unwrap();
    }
    c.close().await.unwrap();
}

fn with_raft_db(data_dir: &Path, f: impl FnOnce(&Database)) {
    let db = Database::builder(data_dir.join("data").join("raft"))
        .open()
        .unwrap();
    f(&db);
    db.persist(PersistMode::SyncAll).unwrap();
}

fn log_keys(db: &Database) -> Vec<Vec<u8>> {
    let log = db
        .keyspace("raft_log", KeyspaceCreateOptions::default)
        .unwrap();
    log.range::<&[u8], _>(..)
        .map(|kv| kv.into_inner().unwrap().0.to_vec())
        .collect()
}

fn refused(server: &mut Server, what: &str) {
    let err = server
        .try_restart()
        .expect_err("the server started on a damaged data dir");
    assert!(
        err.contains("exited before it was ready") && err.contains(what),
        "expected a refusal naming {what:?}, got:\n{err}"
    );
}

#[tokio::test]
async fn a_data_dir_that_lost_acknowledged_writes_is_refused() {
    let mut server = Server::start();
    write_some(&server, 10).await;
    server.stop().expect("stopped");
    with_raft_db(server.data_dir(), |db| {
        let last = log_keys(db).pop().expect("a log");
        let log = db
            .keyspace("raft_log", KeyspaceCreateOptions::default)
            .unwrap();
        log.remove(last).unwrap();
    });
    refused(&mut server, "acknowledged writes are missing");
}

#[tokio::test]
async fn an_unreadable_snapshot_is_refused() {
    let mut server = Server::start_with(ServerOptions {
        snapshot_entries: Some(5),
        ..ServerOptions::default()
    });
    write_some(&server, 10).await;
    server.stop().expect("stopped");
    with_raft_db(server.data_dir(), |db| {
        let meta = db
            .keyspace("raft_meta", KeyspaceCreateOptions::default)
            .unwrap();
        assert!(
            meta.get(b"snapshot").unwrap().is_some(),
            "no snapshot taken"
        );
        meta.insert(b"snapshot", vec![0xff; 64]).unwrap();
    });
    refused(&mut server, "corrupt snapshot");
}

#[tokio::test]
async fn an_unreadable_log_entry_is_refused_not_skipped() {
    let mut server = Server::start();
    write_some(&server, 10).await;
    server.stop().expect("stopped");
    let index = with_entry_replaced(server.data_dir());
    refused(&mut server, &format!("log entry {index}: undecodable"));
}

/// Replaces the data of the last client write in the log with bytes that
/// are no proposal (what a flipped bit in an old, synced entry looks
/// like); returns its index.
fn with_entry_replaced(data_dir: &Path) -> u64 {
    let mut index = 0;
    with_raft_db(data_dir, |db| {
        let log = db
            .keyspace("raft_log", KeyspaceCreateOptions::default)
            .unwrap();
        for key in log_keys(db).into_iter().rev() {
            let bytes = log.get(&key).unwrap().unwrap();
            let mut entry = raft::eraftpb::Entry::parse_from_bytes(&bytes).unwrap();
            if entry.get_entry_type() != raft::eraftpb::EntryType::EntryNormal
                || entry.data.is_empty()
            {
                continue;
            }
            entry.data = vec![0xff; 16].into();
            index = entry.index;
            log.insert(&key, entry.write_to_bytes().unwrap()).unwrap();
            return;
        }
        panic!("no client write in the log");
    });
    index
}
