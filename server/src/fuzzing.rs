//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz, nightly) and
//! for the stable test that replays their seed corpus
//! (`tests/fuzz_corpus.rs`), plus the generator of that corpus.
//!
//! Each target function takes arbitrary bytes and runs them through the
//! same decoders a connection, the peer link or a restart runs, then
//! through what the server does first with the result that is pure (a
//! request's plan, its apply to a tree, a read; a snapshot's load). It
//! panics only when the code under test breaks a promise: a panic inside
//! it, or an answer that contradicts its own checks. Bad input must come
//! back as an error, never as a panic.
//!
//! Not an API: hidden from the docs, free to change with the fuzz targets.

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use bytes::{Bytes, BytesMut};
use prost::Message as _;
use raft::eraftpb::{Entry, EntryType, Message as RaftMessage, MessageType};
use tokio_util::codec::{Decoder, Encoder};
use warden_protocol::pb::{self, request::Op};
use warden_protocol::{FrameCodec, FRAME_BYTES_MAX};

use crate::http::locks::{self, Contract};
use crate::ops::{self, Plan};
use crate::proto::{self, peer_frame, PeerFrame, Txn};
use crate::raft::transport::PEER_FRAME_BYTES_MAX;
use crate::tree::DataTree;
use crate::watch::WatchRegistry;
use crate::zk::jute::{Reader, Writer};
use crate::zk::proto::{self as zkproto, opcode};

/// The session the fuzzed requests come from (it exists in [`base_tree`]).
const SESSION_ID: u64 = 0x5eed;
/// The connection the fuzzed reads register watches for.
const CONN_ID: u64 = 1;

// ------------------------------------------------------------ the targets

/// The native door: the first byte is the size of the pieces the rest
/// arrives in; the rest is a byte stream decoded as a connection decodes
/// it, as client frames (the server side) and as server frames (the client
/// side). Every request decoded is planned, applied or read.
pub fn native_frame(data: &[u8]) {
    let Some((&piece, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece).max(1);
    let mut tree = base_tree().clone();
    let mut watches = WatchRegistry::default();
    for frame in feed::<pb::ClientFrame>(stream, piece, FRAME_BYTES_MAX) {
        match frame.kind {
            Some(pb::client_frame::Kind::Request(r)) => {
                if let Some(op) = r.op {
                    serve(&mut tree, &mut watches, op, r.xid);
                }
            }
            Some(pb::client_frame::Kind::Connect(_)) | None => {}
        }
    }
    feed::<pb::ServerFrame>(stream, piece, FRAME_BYTES_MAX);
}

/// The ZooKeeper door: the bytes as one connection's stream (4-byte
/// length frames: the ConnectRequest, then requests), and the same bytes
/// as one request frame's body, as a bare ConnectRequest and as a SASL
/// DIGEST-MD5 response.
pub fn zk_jute(data: &[u8]) {
    let mut tree = base_tree().clone();
    let mut watches = WatchRegistry::default();
    let mut codec = crate::zk::conn::codec();
    let mut buf = BytesMut::from(data);
    let mut first = true;
    while let Ok(Some(body)) = codec.decode(&mut buf) {
        if std::mem::take(&mut first) {
            if zkproto::decode_connect(&body).is_err() {
                break;
            }
        } else {
            zk_request(&body, &mut tree, &mut watches);
        }
    }
    let _ = zkproto::decode_connect(data);
    zk_request(data, &mut tree, &mut watches);
    // The same bytes as a SASL DIGEST-MD5 response, after the challenge.
    let users = crate::sasl::SaslUsers::new([("bob".to_string(), "secret".to_string())].into());
    let mut sasl = crate::sasl::digest_md5::DigestMd5Server::zookeeper();
    let _ = sasl.step(b"", &users);
    let _ = sasl.step(data, &users);
}

/// The peer link: the first byte is the piece size, the rest a stream of
/// peer frames; each raft message inside is decoded as the core decodes it.
/// The same bytes also go in as one bare frame body and one bare raft
/// message, which the fuzzer finds more easily than a framed one.
pub fn peer_frame(data: &[u8]) {
    if let Some((&piece, stream)) = data.split_first() {
        let piece = usize::from(piece).max(1);
        for frame in feed::<PeerFrame>(stream, piece, PEER_FRAME_BYTES_MAX) {
            peer_message(&frame);
        }
    }
    if let Ok(frame) = PeerFrame::decode(data) {
        round_trip(&frame);
        peer_message(&frame);
    }
    raft_message(data);
}

/// The snapshot loader, as a restart or a leader's snapshot runs it:
/// decode, load (which checks the tree's invariants); a loaded tree must
/// pass the invariant check and survive its own snapshot.
pub fn snapshot(data: &[u8]) {
    let Ok(snap) = proto::Snapshot::decode(data) else {
        return;
    };
    load_snapshot(&snap);
}

/// The HTTP lock API's bodies: the first byte picks the operation and the
/// body contract; with the path contract the lock name is what comes
/// before the first newline. A refusal must be a 400; what is accepted
/// must be within the documented bounds.
pub fn http_json(data: &[u8]) {
    let Some((&select, rest)) = data.split_first() else {
        return;
    };
    let (contract, path, body) = if select & 1 == 0 {
        let split = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..split]).into_owned();
        let body = rest.get(split + 1..).unwrap_or_default();
        (Contract::Path, Some(name), body)
    } else {
        (Contract::Body, None, rest)
    };
    let checked = match (select >> 1) % 3 {
        0 => locks::parse_acquire(contract, path, body, 1).map(|(name, client, ttl, wait)| {
            check_lock_args(&name, &client, Some(ttl));
            assert!(wait <= Duration::from_millis(locks::WAIT_TIMEOUT_MS_MAX));
        }),
        1 => locks::parse_renew(contract, path, body, 1).map(|(name, client, _token, ttl)| {
            check_lock_args(&name, &client, Some(ttl));
        }),
        _ => locks::parse_release(contract, path, body).map(|(name, client, _token)| {
            check_lock_args(&name, &client, None);
        }),
    };
    if let Err(refused) = checked {
        let status = refused.into_response().status();
        assert_eq!(status, StatusCode::BAD_REQUEST, "a bad body is a 400");
    }
}

// ------------------------------------------------------------ the paths

/// Feeds `stream` to a frame decoder in pieces of `piece` bytes, as reads
/// from a socket would, until it ends or the decoder refuses (the
/// connection would close). Returns the frames decoded.
fn feed<M: prost::Message + Default + PartialEq>(
    stream: &[u8],
    piece: usize,
    frame_bytes_max: usize,
) -> Vec<M> {
    let mut codec = FrameCodec::<M, M>::with_limit(frame_bytes_max);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    round_trip(&frame);
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(_) => return frames,
            }
        }
    }
    frames
}

/// A decoded message encodes and decodes back to itself, and the codec
/// frames it.
fn round_trip<M: prost::Message + Default + PartialEq>(m: &M) {
    let again = M::decode(m.encode_to_vec().as_slice()).expect("a decoded message re-decodes");
    assert!(again == *m, "a decoded message survives a round trip");
    let mut buf = BytesMut::new();
    FrameCodec::<M, M>::new()
        .encode(again, &mut buf)
        .expect("a message decoded from a frame fits one");
}

/// What the core does with a request: plan it, then apply its txn to the
/// tree (checking the tree's invariants after) or serve the read.
fn serve(tree: &mut DataTree, watches: &mut WatchRegistry, op: Op, xid: u64) {
    // A loopback client that presented a certificate: the ACL checks run
    // (and refuse) as they would for a real connection.
    let ids = crate::auth::connection_ids(
        std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
        Some("CN=fuzz"),
    );
    match ops::plan(op, SESSION_ID, &ids) {
        Plan::Write(mut txn) => {
            txn.session_id = SESSION_ID;
            txn.xid = xid;
            txn.auth = Some(proto::AuthInfo { ids });
            apply(tree, &txn);
        }
        Plan::Read { op, .. } => {
            let _ = ops::read(
                tree,
                watches,
                CONN_ID,
                SESSION_ID,
                &ids,
                &op,
                &crate::limits::Limits::default(),
            );
        }
        Plan::Ping
        | Plan::Close
        | Plan::ClusterStatus { .. }
        | Plan::AddMember(_)
        | Plan::RemoveMember(_)
        | Plan::Reconfig(_)
        | Plan::Reject(_) => {}
    }
}

fn apply(tree: &mut DataTree, txn: &Txn) {
    let zxid = tree.applied_index() + 1;
    let applied = tree.apply(zxid, 1_700_000_000_000, txn);
    let _ = ops::write_answer(txn, zxid, &applied.result);
    if let Err(broken) = tree.check_invariants() {
        panic!("applying {txn:?} broke the tree: {broken}");
    }
}

/// One ZooKeeper request frame, as `zk::conn` reads it: xid, opcode, body.
fn zk_request(body: &[u8], tree: &mut DataTree, watches: &mut WatchRegistry) {
    let mut r = Reader::new(body);
    let (Ok(xid), Ok(op)) = (r.int("xid"), r.int("type")) else {
        return;
    };
    let rest = &body[body.len() - r.remaining()..];
    if let Ok((request_op, reply)) = zkproto::decode_request(op, rest) {
        let _ = zkproto::encode_response(&reply, &pb::Response::default());
        serve(tree, watches, request_op, xid as u32 as u64);
    }
}

/// What the core does first with a peer frame that is pure: decode the
/// raft message inside (a snapshot in it is loaded, as a follower loads
/// a leader's snapshot).
fn peer_message(frame: &PeerFrame) {
    match &frame.kind {
        Some(peer_frame::Kind::Raft(bytes)) => raft_message(bytes),
        Some(peer_frame::Kind::SnapshotOffer(offer)) => raft_message(&offer.raft),
        Some(peer_frame::Kind::Touch(_))
        | Some(peer_frame::Kind::Status(_))
        | Some(peer_frame::Kind::SnapshotChunk(_))
        | Some(peer_frame::Kind::SnapshotReply(_))
        | None => {}
    }
}

fn raft_message(bytes: &[u8]) {
    // Decoded as the core decodes a peer's frame: the guard first, so the
    // fuzzer does not rediscover protobuf 2's unbounded group recursion.
    let Ok(msg) = crate::raft::wire_guard::decode_message(bytes) else {
        return;
    };
    // Re-encoded, it decodes again. Not compared for equality: rust-protobuf
    // keeps unknown fields, and merging a repeated sub-message's unknown
    // fields does not round-trip to an equal value (corpus file
    // peer_frame/unknown-fields-round-trip); the core never re-encodes.
    let again = protobuf::Message::write_to_bytes(&msg).expect("a decoded raft message encodes");
    <RaftMessage as protobuf::Message>::parse_from_bytes(&again)
        .expect("a re-encoded raft message decodes");
    if msg.get_msg_type() == MessageType::MsgSnapshot {
        if let Ok(snap) = proto::Snapshot::decode(msg.get_snapshot().get_data()) {
            load_snapshot(&snap);
        }
    }
}

fn load_snapshot(snap: &proto::Snapshot) {
    let Ok(tree) = DataTree::from_snapshot(snap) else {
        return;
    };
    if let Err(broken) = tree.check_invariants() {
        panic!("a loaded snapshot breaks the tree: {broken}");
    }
    let again = tree.to_snapshot();
    let reloaded = DataTree::from_snapshot(&again)
        .unwrap_or_else(|e| panic!("a loaded tree's own snapshot is refused: {e}"));
    assert!(
        reloaded.to_snapshot() == again,
        "a loaded tree's snapshot loads back to the same tree"
    );
}

fn check_lock_args(name: &str, client_id: &str, ttl: Option<Duration>) {
    assert!(
        !name.is_empty()
            && name.len() <= locks::NAME_LEN_MAX
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')),
        "accepted lock name {name:?}"
    );
    assert!(
        !client_id.is_empty()
            && client_id.len() <= locks::CLIENT_ID_LEN_MAX
            && !client_id.chars().any(char::is_control),
        "accepted client id {client_id:?}"
    );
    if let Some(ttl) = ttl {
        assert!(!ttl.is_zero() && ttl <= Duration::from_millis(locks::TTL_MS_MAX));
    }
}

// ------------------------------------------------------------ seeds

/// A small real tree: a session, persistent, ephemeral, sequential,
/// container and TTL nodes, data and a digest ACL, built by planning and
/// applying requests (the requests of [`zk_requests`]).
pub fn base_tree() -> &'static DataTree {
    static TREE: OnceLock<DataTree> = OnceLock::new();
    TREE.get_or_init(|| {
        let mut tree = DataTree::new();
        apply(
            &mut tree,
            &Txn {
                kind: Some(proto::txn::Kind::CreateSession(proto::CreateSessionTxn {
                    session_id: SESSION_ID,
                    password: vec![7; 16],
                    timeout_ms: 10_000,
                })),
                ..Default::default()
            },
        );
        let mut watches = WatchRegistry::default();
        for (xid, (op, body)) in zk_requests().into_iter().enumerate() {
            let (request_op, _) =
                zkproto::decode_request(op, &body).expect("the sample requests decode");
            serve(&mut tree, &mut watches, request_op, xid as u64 + 1);
        }
        let zxid = tree.applied_index() + 1;
        let member = crate::proto::Txn {
            kind: Some(crate::proto::txn::Kind::MemberChange(
                crate::proto::MemberChangeTxn {
                    id: 2,
                    addr: "127.0.0.1:7002".into(),
                    removed: false,
                },
            )),
            ..Default::default()
        };
        tree.apply(zxid, 0, &member);
        tree
    })
}

fn acl(w: &mut Writer, perms: i32, scheme: &str, id: &str) {
    w.int(perms).string(scheme).string(id);
}

/// ZooKeeper request bodies (opcode, body without the xid/type header),
/// one or more per opcode the door decodes, in an order that succeeds.
pub fn zk_requests() -> Vec<(i32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut push = |op: i32, f: &dyn Fn(&mut Writer)| {
        let mut w = Writer::default();
        f(&mut w);
        out.push((op, w.buf.to_vec()));
    };
    let create = |path: &'static str, data: &'static [u8], flags: i32, ttl: Option<i64>| {
        move |w: &mut Writer| {
            w.string(path).buffer(data).int(1);
            acl(w, 31, "world", "anyone");
            w.int(flags);
            if let Some(t) = ttl {
                w.long(t);
            }
        }
    };
    push(opcode::CREATE, &create("/app", b"", 0, None));
    push(opcode::CREATE2, &create("/app/config", b"v=1", 0, None));
    push(
        opcode::CREATE_CONTAINER,
        &create("/app/locks", b"", 4, None),
    );
    push(opcode::CREATE, &create("/app/locks/lock-", b"me", 3, None));
    push(
        opcode::CREATE_TTL,
        &create("/app/ttl", b"t", 5, Some(60_000)),
    );
    push(opcode::CREATE, &create("/app/seq-", b"", 2, None));
    push(opcode::SET_DATA, &|w| {
        w.string("/app/config").buffer(b"v=2").int(0);
    });
    push(opcode::SET_ACL, &|w| {
        w.string("/app/config").int(2);
        acl(w, 1, "world", "anyone");
        acl(w, 31, "digest", "admin:x1nq8J3PmFD3ZWzEW9Jk9ufDb5M=");
        w.int(-1);
    });
    push(opcode::GET_DATA, &|w| {
        w.string("/app/config").boolean(true);
    });
    push(opcode::EXISTS, &|w| {
        w.string("/app/missing").boolean(true);
    });
    push(opcode::GET_CHILDREN, &|w| {
        w.string("/app").boolean(true);
    });
    push(opcode::GET_CHILDREN2, &|w| {
        w.string("/app/locks").boolean(false);
    });
    push(opcode::GET_ACL, &|w| {
        w.string("/app/config");
    });
    push(opcode::SYNC, &|w| {
        w.string("/app");
    });
    push(opcode::PING, &|_| {});
    push(opcode::GET_EPHEMERALS, &|w| {
        w.string("/app");
    });
    push(opcode::GET_ALL_CHILDREN_NUMBER, &|w| {
        w.string("/");
    });
    push(opcode::ADD_WATCH, &|w| {
        w.string("/app").int(1);
    });
    push(opcode::CHECK_WATCHES, &|w| {
        w.string("/app").int(3);
    });
    push(opcode::REMOVE_WATCHES, &|w| {
        w.string("/app").int(5);
    });
    push(opcode::SET_WATCHES, &|w| {
        w.long(3)
            .strings(&["/app/config".into()])
            .strings(&["/app/missing".into()])
            .strings(&["/app".into()]);
    });
    push(opcode::SET_WATCHES2, &|w| {
        w.long(3)
            .strings(&[])
            .strings(&[])
            .strings(&[])
            .strings(&["/app".into()])
            .strings(&["/app/locks".into()]);
    });
    push(opcode::MULTI, &|w| {
        w.int(opcode::CHECK).boolean(false).int(-1);
        w.string("/app/config").int(1);
        w.int(opcode::CREATE).boolean(false).int(-1);
        create("/app/multi", b"m", 0, None)(w);
        w.int(opcode::SET_DATA).boolean(false).int(-1);
        w.string("/app/multi").buffer(b"n").int(-1);
        w.int(opcode::DELETE).boolean(false).int(-1);
        w.string("/app/multi").int(-1);
        w.int(-1).boolean(true).int(-1);
    });
    push(opcode::MULTI_READ, &|w| {
        w.int(opcode::GET_DATA).boolean(false).int(-1);
        w.string("/app/config").boolean(false);
        w.int(opcode::GET_CHILDREN).boolean(false).int(-1);
        w.string("/app").boolean(false);
        w.int(-1).boolean(true).int(-1);
    });
    push(opcode::CREATE, &create("/gone", b"", 0, None));
    push(opcode::DELETE, &|w| {
        w.string("/gone").int(-1);
    });
    out
}

fn zk_connect() -> Vec<u8> {
    let mut w = Writer::default();
    w.int(0)
        .long(0)
        .int(30_000)
        .long(0)
        .buffer(&[0; 16])
        .boolean(false);
    w.buf.to_vec()
}

fn length_prefixed(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

fn framed<M: prost::Message>(piece: u8, frames: &[M]) -> Vec<u8> {
    let mut out = vec![piece];
    out.extend(length_prefixed(
        &frames.iter().map(|f| f.encode_to_vec()).collect::<Vec<_>>(),
    ));
    out
}

fn native_requests() -> Vec<pb::ClientFrame> {
    let mut frames = vec![pb::ClientFrame {
        kind: Some(pb::client_frame::Kind::Connect(pb::ConnectRequest {
            protocol_version: warden_protocol::PROTOCOL_VERSION,
            session_id: 0,
            password: vec![],
            timeout_ms: 10_000,
            last_zxid_seen: 0,
        })),
    }];
    let mut ops: Vec<Op> = zk_requests()
        .into_iter()
        .map(|(op, body)| zkproto::decode_request(op, &body).expect("sample").0)
        .collect();
    ops.push(Op::ClusterStatus(pb::ClusterStatusRequest::default()));
    ops.push(Op::Close(pb::CloseRequest {}));
    for (xid, op) in ops.into_iter().enumerate() {
        frames.push(pb::ClientFrame {
            kind: Some(pb::client_frame::Kind::Request(pb::Request {
                xid: xid as u64 + 1,
                op: Some(op),
            })),
        });
    }
    frames
}

fn server_frames(tree: &DataTree) -> Vec<pb::ServerFrame> {
    let (data, stat) = tree.get_data("/app/config").expect("sample node");
    let (children, _) = tree.children("/app").expect("sample node");
    let response = |xid, result| pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Response(pb::Response {
            xid,
            zxid: tree.applied_index(),
            error: pb::ErrorCode::Ok as i32,
            message: String::new(),
            result: Some(result),
        })),
    };
    vec![
        pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Connect(pb::ConnectResponse {
                error: pb::ErrorCode::Ok as i32,
                message: String::new(),
                session_id: SESSION_ID,
                password: vec![7; 16],
                timeout_ms: 10_000,
                zxid: tree.applied_index(),
                server_id: 1,
                read_only: false,
            })),
        },
        response(
            1,
            pb::response::Result::GetData(pb::GetDataResponse {
                data: data.to_vec(),
                stat: Some(stat),
                data_null: false,
            }),
        ),
        response(
            2,
            pb::response::Result::GetChildren(pb::GetChildrenResponse {
                children,
                stat: Some(stat),
            }),
        ),
        pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Response(pb::Response {
                xid: 3,
                zxid: tree.applied_index(),
                error: pb::ErrorCode::NoNode as i32,
                message: "/app/missing".into(),
                result: None,
            })),
        },
        pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::WatchEvent(pb::WatchEvent {
                r#type: pb::EventType::NodeDataChanged as i32,
                path: "/app/config".into(),
                zxid: tree.applied_index(),
            })),
        },
        pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::SessionEvent(pb::SessionEvent {
                state: pb::SessionState::Expired as i32,
                message: "session expired".into(),
            })),
        },
    ]
}

fn raft_messages(snapshot: &[u8]) -> Vec<RaftMessage> {
    let proposal = proto::Proposal {
        origin_node: 1,
        request_id: 9,
        time_ms: 1_700_000_000_000,
        txn: Some(Txn {
            kind: Some(proto::txn::Kind::Noop(proto::NoopTxn {})),
            session_id: SESSION_ID,
            xid: 4,
            ..Default::default()
        }),
    };
    let mut heartbeat = RaftMessage::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    heartbeat.set_from(1);
    heartbeat.set_to(2);
    heartbeat.set_term(3);
    heartbeat.set_commit(7);

    let mut append = RaftMessage::default();
    append.set_msg_type(MessageType::MsgAppend);
    append.set_from(1);
    append.set_to(2);
    append.set_term(3);
    append.set_log_term(3);
    append.set_index(7);
    append.set_commit(7);
    let mut entry = Entry::default();
    entry.set_entry_type(EntryType::EntryNormal);
    entry.set_term(3);
    entry.set_index(8);
    entry.set_data(Bytes::from(proposal.encode_to_vec()));
    append.set_entries(vec![entry].into());

    let mut vote = RaftMessage::default();
    vote.set_msg_type(MessageType::MsgRequestVote);
    vote.set_from(3);
    vote.set_to(2);
    vote.set_term(4);
    vote.set_log_term(3);
    vote.set_index(8);

    let mut snap = RaftMessage::default();
    snap.set_msg_type(MessageType::MsgSnapshot);
    snap.set_from(1);
    snap.set_to(2);
    snap.set_term(3);
    let meta = snap.mut_snapshot().mut_metadata();
    meta.set_index(8);
    meta.set_term(3);
    meta.mut_conf_state().set_voters(vec![1, 2, 3]);
    snap.mut_snapshot().set_data(Bytes::from(snapshot.to_vec()));

    vec![heartbeat, append, vote, snap]
}

/// The seed corpus: (target, file name, bytes), from real encodings.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let tree = base_tree();
    let snapshot = tree.to_snapshot().encode_to_vec();
    let mut out = Vec::new();

    let requests = native_requests();
    out.push((
        "native_frame",
        "requests-whole".into(),
        framed(255, &requests),
    ));
    out.push((
        "native_frame",
        "requests-bytewise".into(),
        framed(1, &requests),
    ));
    for (i, r) in requests.iter().enumerate() {
        out.push((
            "native_frame",
            format!("request-{i:02}"),
            framed(7, std::slice::from_ref(r)),
        ));
    }
    out.push((
        "native_frame",
        "server-frames".into(),
        framed(64, &server_frames(tree)),
    ));

    let mut stream = vec![zk_connect()];
    for (i, (op, body)) in zk_requests().into_iter().enumerate() {
        let mut w = Writer::default();
        w.int(i as i32 + 1).int(op);
        w.buf.extend_from_slice(&body);
        let frame = w.buf.to_vec();
        out.push(("zk_jute", format!("request-{i:02}-op{op}"), frame.clone()));
        stream.push(frame);
    }
    out.push(("zk_jute", "connect".into(), zk_connect()));
    out.push(("zk_jute", "session-stream".into(), length_prefixed(&stream)));

    let raft: Vec<Vec<u8>> = raft_messages(&snapshot)
        .iter()
        .map(|m| protobuf::Message::write_to_bytes(m).expect("raft message encodes"))
        .collect();
    let mut peer_frames: Vec<PeerFrame> = raft
        .iter()
        .map(|bytes| PeerFrame {
            from: 1,
            kind: Some(peer_frame::Kind::Raft(bytes.clone())),
        })
        .collect();
    peer_frames.push(PeerFrame {
        from: 2,
        kind: Some(peer_frame::Kind::Touch(proto::SessionTouch {
            session_ids: vec![SESSION_ID, 0x77],
        })),
    });
    peer_frames.push(PeerFrame {
        from: 2,
        kind: Some(peer_frame::Kind::Status(proto::NodeStatus {
            id: 2,
            role: "follower".into(),
            term: 3,
            commit_index: 7,
            applied_index: 7,
            client_addr: "127.0.0.1:7001".into(),
            peer_addr: "127.0.0.1:7002".into(),
            leader_id: 1,
            ..Default::default()
        })),
    });
    for (i, bytes) in raft.iter().enumerate() {
        out.push(("peer_frame", format!("raft-{i}"), bytes.clone()));
    }
    for (i, f) in peer_frames.iter().enumerate() {
        out.push(("peer_frame", format!("frame-{i}"), f.encode_to_vec()));
    }
    out.push(("peer_frame", "stream".into(), framed(255, &peer_frames)));

    out.push(("snapshot", "sample-tree".into(), snapshot));
    out.push((
        "snapshot",
        "empty-tree".into(),
        DataTree::new().to_snapshot().encode_to_vec(),
    ));

    let http = [
        (0u8, "jobs.nightly\n{\"client_id\":\"worker-1\",\"ttl_ms\":30000,\"wait_timeout_ms\":1000}"),
        (2, "jobs.nightly\n{\"client_id\":\"worker-1\",\"fencing_token\":12,\"ttl_ms\":30000}"),
        (4, "jobs.nightly\n{\"client_id\":\"worker-1\",\"fencing_token\":12}"),
        (1, "{\"lock_key\":\"jobs\",\"client_id\":\"w\",\"lease_time_ms\":5000,\"block_time_ms\":10}"),
        (3, "{\"lock_key\":\"jobs\",\"client_id\":\"w\",\"fencing_token\":3,\"extend_time_ms\":5000}"),
        (5, "{\"lock_key\":\"jobs\",\"client_id\":\"w\",\"fencing_token\":3}"),
        (1, "{\"lock_key\":\"jobs\",\"client_id\":\"w\",\"ttl_ms\":0}"),
        (0, "..\n[1,2,3]"),
    ];
    for (i, (select, text)) in http.iter().enumerate() {
        let mut bytes = vec![*select];
        bytes.extend_from_slice(text.as_bytes());
        out.push(("http_json", format!("body-{i}"), bytes));
    }
    out
}

/// The targets by name, for the corpus replay test.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    Some(match name {
        "native_frame" => native_frame,
        "zk_jute" => zk_jute,
        "peer_frame" => peer_frame,
        "snapshot" => snapshot,
        "http_json" => http_json,
        _ => return None,
    })
}
