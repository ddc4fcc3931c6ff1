//! [`send`] and [`receive`] over a real loopback connection, with the
//! test playing the follower's core (it answers the offer and takes the
//! built tree).

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType, Snapshot, SnapshotMetadata};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::proto::{txn::Kind, CreateTxn, Txn};
use crate::raft::snapfile::SnapDir;
use crate::raft::transport::{codec, PeerEvent};

struct Leader {
    _dir: tempfile::TempDir,
    file: PathBuf,
    msg: Vec<u8>,
    descriptor: Descriptor,
    nodes: usize,
}

/// A snapshot file of a tree of 300 znodes, and the MsgSnapshot for it.
fn leader_snapshot() -> Leader {
    use prost::Message as _;
    let dir = tempfile::tempdir().unwrap();
    let snaps = SnapDir::open(dir.path()).unwrap();
    let mut tree = DataTree::new();
    for i in 1..=300u64 {
        let txn = Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: format!("/n{i}"),
                data: vec![b'v'; 50],
                ..Default::default()
            })),
            ..Default::default()
        };
        tree.apply(i, 0, &txn);
    }
    let mut meta = SnapshotMetadata {
        index: 300,
        term: 2,
        ..Default::default()
    };
    meta.mut_conf_state().voters = vec![1, 2];
    let file = snaps
        .write(&meta, &tree.to_snapshot().encode_to_vec())
        .unwrap();
    let (file_bytes, checksum) = snaps.describe(300, 2).unwrap();
    let descriptor = Descriptor {
        file_bytes,
        checksum,
    };
    let mut snap = Snapshot {
        data: descriptor.encode().into(),
        ..Default::default()
    };
    snap.set_metadata(meta);
    let mut msg = Message {
        from: 1,
        to: 2,
        ..Default::default()
    };
    msg.set_msg_type(MessageType::MsgSnapshot);
    msg.set_snapshot(snap);
    Leader {
        _dir: dir,
        file,
        msg: msg.write_to_bytes().unwrap(),
        descriptor,
        nodes: tree.node_count(),
    }
}

fn job(l: &Leader, chunk_bytes: usize, corrupt: bool) -> SendJob {
    SendJob {
        me: 1,
        msg: l.msg.clone(),
        file: std::fs::File::open(&l.file).unwrap(),
        descriptor: l.descriptor,
        chunk_bytes,
        corrupt,
        stall: Duration::from_secs(10),
    }
}

/// What the follower's "core" saw.
#[derive(Debug, Default)]
struct Seen {
    offers: usize,
    /// Received snapshots: (nodes of the built tree, the file's bytes).
    received: Vec<(usize, Vec<u8>)>,
}

/// A follower: a listener handing the connection to [`receive`], and a
/// core that takes every offer into `dir` and installs what it is given.
async fn follower(dir: PathBuf) -> (String, tokio::task::JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, mut rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut framed = Framed::new(Stream::from(tcp), codec());
        let first = framed.next().await.unwrap().unwrap();
        let Some(peer_frame::Kind::SnapshotOffer(offer)) = first.kind else {
            panic!("the first frame is not an offer");
        };
        receive(framed, first.from, offer, tx, CancellationToken::new()).await;
    });
    let core = tokio::spawn(async move {
        let mut seen = Seen::default();
        while let Some(event) = rx.recv().await {
            match event {
                PeerEvent::SnapshotOffered(o) => {
                    seen.offers += 1;
                    let path = dir.join(format!("recv-{}.snap.tmp", seen.offers));
                    let _ = o.reply.send(Ok(Accepted {
                        path,
                        cancel: CancellationToken::new(),
                    }));
                }
                PeerEvent::SnapshotReceived(r) => {
                    let bytes = std::fs::read(&r.path).unwrap();
                    seen.received.push((r.tree.node_count(), bytes));
                    let _ = r.reply.send(Outcome::Installed);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        seen
    });
    (addr, core)
}

async fn dial(addr: &str) -> Stream {
    Stream::from(TcpStream::connect(addr).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_streams_in_chunks_and_arrives_whole_and_built() {
    let l = leader_snapshot();
    let dir = tempfile::tempdir().unwrap();
    let (addr, core) = follower(dir.path().to_path_buf()).await;
    // Chunks of 1000 bytes: the file takes dozens, 4 in flight at most.
    assert!(
        l.descriptor.file_bytes > 20_000,
        "{}",
        l.descriptor.file_bytes
    );
    let outcome = send(dial(&addr).await, job(&l, 1000, false)).await;
    assert_eq!(outcome, Ok(Outcome::Installed));
    let seen = core.await.unwrap();
    assert_eq!(seen.offers, 1);
    assert_eq!(seen.received.len(), 1);
    let (nodes, bytes) = &seen.received[0];
    assert_eq!(*nodes, l.nodes);
    assert_eq!(
        *bytes,
        std::fs::read(&l.file).unwrap(),
        "the file, byte for byte"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_chunk_is_refused_and_nothing_reaches_the_core() {
    let l = leader_snapshot();
    let dir = tempfile::tempdir().unwrap();
    let (addr, core) = follower(dir.path().to_path_buf()).await;
    let outcome = send(dial(&addr).await, job(&l, 1000, true)).await;
    match outcome {
        Ok(Outcome::Refused(why)) => assert!(why.contains("checksum mismatch"), "{why}"),
        other => panic!("a damaged transfer ended {other:?}"),
    }
    let seen = core.await.unwrap();
    assert_eq!(seen.offers, 1);
    assert!(
        seen.received.is_empty(),
        "a damaged snapshot reached the core"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the damaged file is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_stops_answering_fails_the_transfer() {
    let l = leader_snapshot();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // Takes the offer, acknowledges it, then reads and never answers.
    let silent = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut framed = Framed::new(Stream::from(tcp), codec());
        framed.next().await.unwrap().unwrap();
        framed
            .send(reply_frame(2, 0, SnapshotOutcome::Pending, String::new()))
            .await
            .unwrap();
        let mut chunks = 0;
        while let Some(Ok(_)) = framed.next().await {
            chunks += 1;
        }
        chunks
    });
    let mut j = job(&l, 1000, false);
    j.stall = Duration::from_millis(300);
    let outcome = send(dial(&addr).await, j).await;
    match outcome {
        Err(e) => assert!(e.contains("said nothing"), "{e}"),
        other => panic!("a stalled transfer ended {other:?}"),
    }
    // The window held: no more than its chunks went unacknowledged.
    assert_eq!(silent.await.unwrap(), WINDOW_CHUNKS as usize);
}
