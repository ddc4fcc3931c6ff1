//! Bad input over the native protocol, sent as raw bytes: each gets a clear
//! error, the server keeps serving other clients, and nothing changes.

use warden_protocol::pb::{self, client_frame, request::Op, server_frame, ErrorCode};
use warden_testkit::raw::RawConn;
use warden_testkit::Server;

fn code(r: &pb::Response) -> ErrorCode {
    ErrorCode::try_from(r.error).expect("known code")
}

fn create(path: &str, data: &[u8]) -> Op {
    Op::Create(pb::CreateRequest {
        path: path.into(),
        data: data.to_vec(),
        ..Default::default()
    })
}

fn get(path: &str) -> Op {
    Op::GetData(pb::GetDataRequest {
        path: path.into(),
        ..Default::default()
    })
}

fn children(path: &str) -> Op {
    Op::GetChildren(pb::GetChildrenRequest {
        path: path.into(),
        ..Default::default()
    })
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let server = Server::start();

    // A well-behaved client that stays connected throughout.
    let mut good = RawConn::connect(server.addr());
    assert_eq!(good.handshake(0, vec![]).error, ErrorCode::Ok as i32);
    assert_eq!(
        code(&good.request(1, create("/keep", b"v1"))),
        ErrorCode::Ok
    );
    let before = good.request(2, children("/"));

    // Illegal paths: refused with InvalidPath naming the path.
    for (i, bad) in ["no-slash", "/trailing/", "/a//b", "/a/../b", "/nul\0byte"]
        .iter()
        .enumerate()
    {
        let r = good.request(10 + i as u64, create(bad, b""));
        assert_eq!(code(&r), ErrorCode::InvalidPath, "{bad:?}: {r:?}");
        assert!(
            r.message.contains("path"),
            "message names the problem: {}",
            r.message
        );
    }
    // Oversized data: DataTooLarge.
    let r = good.request(
        20,
        create("/big", &vec![7u8; warden_protocol::DATA_BYTES_MAX + 1]),
    );
    assert_eq!(code(&r), ErrorCode::DataTooLarge);
    assert!(r.message.contains("/big"), "{}", r.message);
    let r = good.request(
        21,
        Op::SetData(pb::SetDataRequest {
            path: "/keep".into(),
            data: vec![0u8; warden_protocol::DATA_BYTES_MAX + 1],
            version: None,
            ttl_ms: 0,
            data_null: false,
        }),
    );
    assert_eq!(code(&r), ErrorCode::DataTooLarge);

    // A malformed frame: an error naming it, then the connection closes.
    let mut garbage = RawConn::connect(server.addr());
    assert_eq!(garbage.handshake(0, vec![]).error, ErrorCode::Ok as i32);
    garbage.send_bytes(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
    let answers = garbage.drain_until_closed();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), ErrorCode::MarshallingError);
    assert!(
        answers[0].message.contains("malformed frame"),
        "{}",
        answers[0].message
    );

    // An oversized frame: refused before the server reads (or allocates) it.
    let mut huge = RawConn::connect(server.addr());
    assert_eq!(huge.handshake(0, vec![]).error, ErrorCode::Ok as i32);
    huge.send_bytes(&(64u32 * 1024 * 1024).to_be_bytes());
    let answers = huge.drain_until_closed();
    assert_eq!(answers.len(), 1);
    // A limit (--max-request-bytes), not a malformed frame.
    assert_eq!(code(&answers[0]), ErrorCode::LimitExceeded);
    assert!(
        answers[0].message.contains("exceeds the limit"),
        "{}",
        answers[0].message
    );

    // Garbage instead of a handshake.
    let mut nohello = RawConn::connect(server.addr());
    nohello.send_bytes(&[0, 0, 0, 2, 0xde, 0xad]);
    match nohello.recv() {
        Some(pb::ServerFrame {
            kind: Some(server_frame::Kind::Connect(c)),
        }) => assert_eq!(c.error, ErrorCode::MarshallingError as i32),
        other => panic!("expected a refused handshake, got {other:?}"),
    }
    assert!(
        nohello.recv().is_none(),
        "connection closed after the refusal"
    );

    // Resuming an unknown session: SessionExpired, then closed.
    let mut ghost = RawConn::connect(server.addr());
    let c = ghost.handshake(0x0123_4567_89ab_cdef, b"nope".to_vec());
    assert_eq!(c.error, ErrorCode::SessionExpired as i32);
    assert!(c.message.contains("0x123456789abcdef"), "{}", c.message);
    assert!(ghost.recv().is_none());

    // Resuming a real session with a wrong password: refused the same way.
    let mut other = RawConn::connect(server.addr());
    let real = other.handshake(0, vec![]);
    let mut thief = RawConn::connect(server.addr());
    assert_eq!(
        thief.handshake(real.session_id, b"wrong".to_vec()).error,
        ErrorCode::SessionExpired as i32
    );

    // The good client was never disturbed and nothing changed.
    let r = good.request(30, get("/keep"));
    assert_eq!(code(&r), ErrorCode::Ok);
    match r.result {
        Some(pb::response::Result::GetData(d)) => assert_eq!(d.data, b"v1"),
        other => panic!("{other:?}"),
    }
    let after = good.request(31, children("/"));
    assert_eq!(
        before.result, after.result,
        "no node was created by bad input"
    );
}

#[test]
fn requests_before_handshake_and_second_handshake_are_refused() {
    let server = Server::start();
    let mut raw = RawConn::connect(server.addr());
    raw.send(pb::ClientFrame {
        kind: Some(client_frame::Kind::Request(pb::Request {
            xid: 1,
            op: Some(get("/")),
        })),
    });
    match raw.recv() {
        Some(pb::ServerFrame {
            kind: Some(server_frame::Kind::Connect(c)),
        }) => {
            assert_eq!(c.error, ErrorCode::MarshallingError as i32);
            assert!(c.message.contains("ConnectRequest"), "{}", c.message);
        }
        other => panic!("{other:?}"),
    }

    let mut raw = RawConn::connect(server.addr());
    assert_eq!(raw.handshake(0, vec![]).error, ErrorCode::Ok as i32);
    raw.send(pb::ClientFrame {
        kind: Some(client_frame::Kind::Connect(pb::ConnectRequest::default())),
    });
    let answers = raw.drain_until_closed();
    assert_eq!(answers.len(), 1);
    assert_eq!(code(&answers[0]), ErrorCode::MarshallingError);
}
