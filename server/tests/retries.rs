//! Idempotent retries: a write retried with the same session and xid after
//! a dropped connection is applied once, and the retry gets the original
//! answer (ZooKeeper lacks this: ZOOKEEPER-22).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use prost::Message;
use warden_protocol::pb::{self, client_frame, request::Op, server_frame, ErrorCode};
use warden_testkit::{Cluster, Server};

struct Raw(TcpStream);

impl Raw {
    fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw(s)
    }

    fn send(&mut self, f: pb::ClientFrame) {
        let body = f.encode_to_vec();
        self.0
            .write_all(&(body.len() as u32).to_be_bytes())
            .unwrap();
        self.0.write_all(&body).unwrap();
    }

    fn recv(&mut self) -> pb::ServerFrame {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).unwrap();
        let mut body = vec![0; u32::from_be_bytes(len) as usize];
        self.0.read_exact(&mut body).unwrap();
        pb::ServerFrame::decode(&body[..]).unwrap()
    }

    fn handshake(&mut self, session_id: u64, password: Vec<u8>) -> pb::ConnectResponse {
        self.send(pb::ClientFrame {
            kind: Some(client_frame::Kind::Connect(pb::ConnectRequest {
                protocol_version: 1,
                session_id,
                password,
                timeout_ms: 30_000,
                last_zxid_seen: 0,
            })),
        });
        match self.recv().kind {
            Some(server_frame::Kind::Connect(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    fn request(&mut self, xid: u64, op: Op) {
        self.send(pb::ClientFrame {
            kind: Some(client_frame::Kind::Request(pb::Request {
                xid,
                op: Some(op),
            })),
        });
    }

    fn response(&mut self) -> pb::Response {
        loop {
            if let Some(server_frame::Kind::Response(r)) = self.recv().kind {
                return r;
            }
        }
    }
}

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
    let mut a = Raw::connect(first);
    let hello = a.handshake(0, vec![]);
    assert_eq!(hello.error, 0);
    a.request(
        1,
        Op::Create(pb::CreateRequest {
            path: "/q".into(),
            ..Default::default()
        }),
    );
    assert_eq!(a.response().error, 0);

    // Answer read, then the connection drops; the client retries anyway.
    a.request(2, seq_create("/q/item-"));
    let original = a.response();
    assert_eq!(original.error, 0);
    // Answer never read: the connection drops right after sending.
    a.request(3, seq_create("/q/item-"));
    a.request(
        4,
        Op::SetData(pb::SetDataRequest {
            path: "/q".into(),
            data: b"once".to_vec(),
            version: Some(0),
        }),
    );
    drop(a);

    let mut b = Raw::connect(second);
    let resumed = b.handshake(hello.session_id, hello.password.clone());
    assert_eq!(resumed.error, 0, "{resumed:?}");
    b.request(2, seq_create("/q/item-"));
    let retry2 = b.response();
    assert_eq!(retry2.error, 0, "{retry2:?}");
    assert_eq!(
        created_path(&retry2),
        created_path(&original),
        "same answer as the first apply"
    );
    b.request(3, seq_create("/q/item-"));
    let retry3 = b.response();
    assert_eq!(retry3.error, 0);
    // A version-guarded set retried: applied once, so the retry is not a
    // BadVersion but the original success.
    b.request(
        4,
        Op::SetData(pb::SetDataRequest {
            path: "/q".into(),
            data: b"once".to_vec(),
            version: Some(0),
        }),
    );
    let retry4 = b.response();
    assert_eq!(retry4.error, ErrorCode::Ok as i32, "{retry4:?}");

    // Exactly two items, and /q at version 1.
    b.request(5, Op::Sync(pb::SyncRequest { path: "/q".into() }));
    b.response();
    b.request(6, children("/q"));
    match b.response().result {
        Some(pb::response::Result::GetChildren(c)) => {
            assert_eq!(c.children.len(), 2, "{:?}", c.children);
            assert_eq!(c.stat.unwrap().version, 1);
        }
        other => panic!("{other:?}"),
    }
    // A new xid is a new write.
    b.request(7, seq_create("/q/item-"));
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
