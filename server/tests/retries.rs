//! Idempotent retries: a write retried with the same session and xid after
//! a dropped connection is applied once, and the retry gets the original
//! answer (ZooKeeper lacks this: ZOOKEEPER-22).

use warden_protocol::pb::{self, request::Op, ErrorCode};
use warden_testkit::raw::RawConn;
use warden_testkit::{Cluster, Server};

fn seq_create(path: &str) -> Op {
    Op::Create(pb::CreateRequest {
        path: path.into(),
        sequential: true,
        ..Default::default()
    })
}

fn children(path: &str) -> Op {
    Op::GetChildren(pb::GetChildrenRequest {
        path: path.into(),
        ..Default::default()
    })
}

fn created_path(r: &pb::Response) -> String {
    match &r.result {
        Some(pb::response::Result::Create(c)) => c.path.clone(),
        other => panic!("not a create answer: {r:?} {other:?}"),
    }
}

/// Runs the scenario against `addrs` (the retry goes to the last one).
fn retried_writes_apply_once(first: &str, second: &str) {
    let mut a = RawConn::connect(first);
    let hello = a.handshake(0, vec![]);
    assert_eq!(hello.error, 0);
    a.send_request(
        1,
        Op::Create(pb::CreateRequest {
            path: "/q".into(),
            ..Default::default()
        }),
    );
    assert_eq!(a.response().error, 0);

    // Answer read, then the connection drops; the client retries anyway.
    a.send_request(2, seq_create("/q/item-"));
    let original = a.response();
    assert_eq!(original.error, 0);
    // Answer never read: the connection drops right after sending.
    a.send_request(3, seq_create("/q/item-"));
    a.send_request(
        4,
        Op::SetData(pb::SetDataRequest {
            path: "/q".into(),
            data: b"once".to_vec(),
            version: Some(0),
            ttl_ms: 0,
            data_null: false,
        }),
    );
    drop(a);

    let mut b = RawConn::connect(second);
    let resumed = b.handshake(hello.session_id, hello.password.clone());
    assert_eq!(resumed.error, 0, "{resumed:?}");
    b.send_request(2, seq_create("/q/item-"));
    let retry2 = b.response();
    assert_eq!(retry2.error, 0, "{retry2:?}");
    assert_eq!(
        created_path(&retry2),
        created_path(&original),
        "same answer as the first apply"
    );
    b.send_request(3, seq_create("/q/item-"));
    let retry3 = b.response();
    assert_eq!(retry3.error, 0);
    // A version-guarded set retried: applied once, so the retry is not a
    // BadVersion but the original success.
    b.send_request(
        4,
        Op::SetData(pb::SetDataRequest {
            path: "/q".into(),
            data: b"once".to_vec(),
            version: Some(0),
            ttl_ms: 0,
            data_null: false,
        }),
    );
    let retry4 = b.response();
    assert_eq!(retry4.error, ErrorCode::Ok as i32, "{retry4:?}");

    // Exactly two items, and /q at version 1.
    b.send_request(5, Op::Sync(pb::SyncRequest { path: "/q".into() }));
    b.response();
    b.send_request(6, children("/q"));
    match b.response().result {
        Some(pb::response::Result::GetChildren(c)) => {
            assert_eq!(c.children.len(), 2, "{:?}", c.children);
            assert_eq!(c.stat.unwrap().version, 1);
        }
        other => panic!("{other:?}"),
    }
    // A new xid is a new write.
    b.send_request(7, seq_create("/q/item-"));
    let fresh = b.response();
    assert_ne!(created_path(&fresh), created_path(&retry3));
}

#[test]
fn retry_with_same_xid_is_applied_once() {
    let server = Server::start();
    retried_writes_apply_once(server.addr(), server.addr());
}

#[test]
fn retry_on_another_server_is_applied_once() {
    let cluster = Cluster::start(3);
    retried_writes_apply_once(cluster.addr(1), cluster.addr(2));
}

/// Found by the Jepsen lock workload (pause nemesis): a create left behind
/// on a paused server was forwarded when the server woke, long after the
/// client had moved to another server and gone on; the node it made, owned
/// by the live session, blocked the lock for good. A write older than the
/// session's latest applied write is now refused, not applied late.
#[test]
fn write_older_than_the_sessions_latest_is_refused() {
    let cluster = Cluster::start(3);
    let mut a = RawConn::connect(cluster.addr(1));
    let hello = a.handshake(0, vec![]);
    assert_eq!(hello.error, 0);
    a.send_request(
        5,
        Op::Create(pb::CreateRequest {
            path: "/newer".into(),
            ..Default::default()
        }),
    );
    assert_eq!(a.response().error, 0);
    drop(a);

    // The same session elsewhere; a request with an older xid turns up.
    let mut b = RawConn::connect(cluster.addr(2));
    let resumed = b.handshake(hello.session_id, hello.password.clone());
    assert_eq!(resumed.error, 0, "{resumed:?}");
    b.send_request(
        3,
        Op::Create(pb::CreateRequest {
            path: "/older".into(),
            ..Default::default()
        }),
    );
    let late = b.response();
    assert_eq!(late.error, ErrorCode::SessionMoved as i32, "{late:?}");
    assert!(late.message.contains("not applied"), "{}", late.message);
    b.send_request(
        6,
        Op::Exists(pb::ExistsRequest {
            path: "/older".into(),
            ..Default::default()
        }),
    );
    let exists = b.response();
    assert_eq!(exists.error, 0, "{exists:?}");
    assert!(
        matches!(
            exists.result,
            Some(pb::response::Result::Stat(pb::StatResponse { stat: None }))
        ),
        "/older must not exist: {exists:?}"
    );
    // Newer writes go on; a retry of the latest still gets its answer.
    b.send_request(
        7,
        Op::Create(pb::CreateRequest {
            path: "/newest".into(),
            ..Default::default()
        }),
    );
    assert_eq!(b.response().error, 0);
}
