//! Storage that stops rather than lies: a data dir that lost acknowledged
//! writes, holds a damaged or unreadable snapshot file or an unreadable log
//! entry makes the server refuse to start, naming the problem, instead of
//! serving (and voting) with silently wrong state.

use std::path::{Path, PathBuf};

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

/// The term and vote this server synced (it voted for itself to lead)
/// vanish with a damaged journal tail: it would vote again in that term.
/// Refused, naming the watermark file that says what was synced.
#[tokio::test]
async fn a_journal_that_lost_a_vote_is_refused_naming_the_file() {
    let mut server = Server::start();
    write_some(&server, 3).await;
    server.stop().expect("stopped");
    with_raft_db(server.data_dir(), |db| {
        let meta = db
            .keyspace("raft_meta", KeyspaceCreateOptions::default)
            .unwrap();
        let stored = meta.get(b"hard_state").unwrap().expect("a hard state");
        let mut hs = raft::eraftpb::HardState::parse_from_bytes(&stored).unwrap();
        assert_eq!(hs.vote, 1, "it voted for itself");
        hs.vote = 0;
        meta.insert(b"hard_state", hs.write_to_bytes().unwrap())
            .unwrap();
    });
    let watermark = server
        .data_dir()
        .join("data")
        .join("raft")
        .join("raft-synced");
    refused(&mut server, &watermark.display().to_string());
    refused(&mut server, "vote twice in one term");
}

/// The server's newest snapshot file, the one a start loads (it takes
/// one every 5 entries here; one whose build was under way when it
/// stopped may be there beside the one it recorded).
fn snapshot_file(data_dir: &Path) -> PathBuf {
    let dir = data_dir.join("data").join("snapshots");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    // Names are <index>-<term>, zero-padded: they sort as the snapshots.
    files.sort();
    files
        .pop()
        .unwrap_or_else(|| panic!("no snapshot file in {}", dir.display()))
}

async fn server_with_a_snapshot() -> (Server, PathBuf) {
    let mut server = Server::start_with(ServerOptions {
        snapshot_entries: Some(5),
        ..ServerOptions::default()
    });
    write_some(&server, 10).await;
    server.stop().expect("stopped");
    let file = snapshot_file(server.data_dir());
    (server, file)
}

#[tokio::test]
async fn a_damaged_snapshot_file_is_refused_naming_it() {
    let (mut server, file) = server_with_a_snapshot().await;
    let good = std::fs::read(&file).unwrap();
    let name = file.display().to_string();
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 3] = [
        // A flipped bit in the middle: only the checksum can tell.
        ("checksum mismatch", |b| {
            let mid = b.len() / 2;
            b[mid] ^= 0x10;
        }),
        // A lost tail.
        ("truncated", |b| b.truncate(b.len() - 3)),
        // Not a snapshot file at all.
        ("no snapshot header", |b| {
            b[..8].copy_from_slice(b"NOTASNAP")
        }),
    ];
    for (what, damage) in damages {
        let mut bytes = good.clone();
        damage(&mut bytes);
        std::fs::write(&file, &bytes).unwrap();
        let err = server
            .try_restart()
            .expect_err("the server started on a damaged snapshot file");
        assert!(
            err.contains("exited before it was ready") && err.contains(what) && err.contains(&name),
            "expected a refusal naming {name} and {what:?}, got:\n{err}"
        );
    }
    // The same file, whole again: the server starts and has the writes.
    std::fs::write(&file, &good).unwrap();
    server.try_restart().expect("starts on its good snapshot");
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    assert!(c.exists("/n9").await.unwrap().is_some());
    c.close().await.unwrap();
}

/// A file whose checksum is right but whose contents are no tree (what a
/// bug or an old version could write) is refused too, naming the file.
#[tokio::test]
async fn a_snapshot_that_holds_no_tree_is_refused_naming_it() {
    let (mut server, file) = server_with_a_snapshot().await;
    let dir = warden_server::raft::snapfile::SnapDir::open(file.parent().unwrap()).unwrap();
    let (index, term) = *dir.list().unwrap().last().unwrap();
    let meta = dir.read(index, term).unwrap().take_metadata();
    dir.write(&meta, &[0xff; 64]).unwrap();
    refused(
        &mut server,
        &format!("snapshot on disk is unreadable: {}", file.display()),
    );
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

/// A byte flipped inside what the Raft journal holds: the server refuses,
/// naming the journal's directory (whether the journal fails its checksums
/// or is cut back to before entries it had synced).
#[tokio::test]
async fn a_flipped_byte_in_the_journal_is_refused_naming_it() {
    let mut server = Server::start();
    write_some(&server, 200).await;
    server.kill9();
    let raft_dir = server.data_dir().join("data").join("raft");
    let journal = std::fs::read_dir(&raft_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jnl"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a journal file");
    let mut bytes = std::fs::read(&journal).unwrap();
    // Journals are preallocated: flip within what was written, early on.
    let written = bytes.iter().rposition(|&b| b != 0).expect("written") + 1;
    let at = written / 3;
    bytes[at] = !bytes[at];
    std::fs::write(&journal, bytes).unwrap();
    refused(&mut server, &raft_dir.display().to_string());
}
