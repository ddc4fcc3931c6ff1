//! RUSTSEC-2024-0437's input shape (deeply nested unknown groups) sent to
//! a cluster's peer ports: every node refuses the frame in
//! `raft::wire_guard`, names why in its log, and keeps serving. Then the
//! frame bound itself: a frame announced past `PEER_FRAME_BYTES_MAX` is
//! refused from its length, its body never read; and a client write
//! whose log entry would not fit a peer frame is refused before raft
//! holds it (else no follower could ever receive it).

use std::io::Write as _;
use std::net::TcpStream;
use std::time::Duration;

use prost::Message as _;
use warden_client::{perms, Acl, Client, ConnectOptions, CreateOptions, ErrorCode, Op};
use warden_server::limits::{ENTRY_BYTES_MAX, PEER_FRAME_BYTES_MAX};
use warden_server::proto::{peer_frame, PeerFrame};
use warden_server::raft::wire_guard::nested_groups;
use warden_testkit::{wait_until, Cluster};

/// Deep enough to overflow any thread's stack in a recursive decoder;
/// 2 MB on the wire, within the peer frame limit.
const DEPTH: usize = 1_000_000;

fn frame(from: u64, raft: Vec<u8>) -> Vec<u8> {
    let body = PeerFrame {
        from,
        kind: Some(peer_frame::Kind::Raft(raft)),
    }
    .encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

#[tokio::test]
async fn a_cluster_sent_nested_groups_refuses_them_and_keeps_serving() {
    let mut cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    for &to in &ids {
        let from = ids.iter().copied().find(|&i| i != to).unwrap();
        let mut s = TcpStream::connect(cluster.peer_addr(to)).unwrap();
        s.write_all(&frame(
            from as u64,
            nested_groups(from as u64, to as u64, DEPTH),
        ))
        .unwrap();
        s.flush().unwrap();
    }
    for &i in &ids {
        wait_until(
            Duration::from_secs(30),
            &format!("node {i} to log the refused frame"),
            || {
                let log = cluster.log(i);
                log.contains("undecodable raft message") && log.contains("group field 100")
            },
        );
    }
    for &i in &ids {
        assert!(cluster.is_running(i), "node {i} died:\n{}", cluster.log(i));
    }
    // Every node still serves a write and reads it back.
    for &i in &ids {
        let c = Client::connect(cluster.addr(i), ConnectOptions::default())
            .await
            .unwrap();
        let path = format!("/after-{i}");
        c.create(&path, b"ok", CreateOptions::default())
            .await
            .unwrap();
        c.sync("/").await.unwrap();
        assert_eq!(c.get_data(&path).await.unwrap().0, b"ok");
    }

    // A frame announced one byte past the bound (a thirtieth of the 1 GiB
    // the bound was), its body sent after: the node closes the connection
    // on reading the length, so the body cannot all go out (the socket
    // buffers hold a few MiB); red before: every byte was read, and held.
    for &i in &ids {
        let mut s = TcpStream::connect(cluster.peer_addr(i)).unwrap();
        s.write_all(&((PEER_FRAME_BYTES_MAX + 1) as u32).to_be_bytes())
            .unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0;
        while sent <= PEER_FRAME_BYTES_MAX {
            match s.write(&chunk[..chunk.len().min(PEER_FRAME_BYTES_MAX + 1 - sent)]) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(
            sent <= PEER_FRAME_BYTES_MAX,
            "node {i} read the whole body of a frame past the bound"
        );
        let limit = format!("exceeds the limit of {PEER_FRAME_BYTES_MAX} bytes");
        wait_until(
            Duration::from_secs(30),
            &format!("node {i} to log the oversized frame"),
            || cluster.log(i).contains(&limit),
        );
    }

    // A write whose entry would pass the entry bound, from a client within
    // every request bound: its connection holds 15 digest identities of
    // ~1 KiB, and a multi of 70 creates gives each node an ACL of 31
    // `auth` entries (one per permission set), which the server expands to
    // the connection's identities: 70 x 31 x 15 entries of ~1 KiB, a 33 MB
    // txn from a request of a few KiB. Refused with LimitExceeded naming
    // the sizes. Red before: proposed (and, with the bound on peer frames,
    // it would have reached no follower: the cluster stuck for good).
    let c = Client::connect(&cluster.servers(), ConnectOptions::default())
        .await
        .unwrap();
    for n in 0..15 {
        let credentials = format!("u{n}{}:pw", "x".repeat(1000));
        c.add_auth("digest", credentials.as_bytes()).await.unwrap();
    }
    let acl: Vec<Acl> = (1..=perms::ALL)
        .map(|p| Acl {
            perms: p,
            scheme: "auth".into(),
            id: String::new(),
        })
        .collect();
    let ops = (0..70)
        .map(|n| {
            Op::create(
                format!("/expanded-{n}"),
                b"x".to_vec(),
                CreateOptions::default().acl(acl.clone()),
            )
        })
        .collect();
    let err = c
        .multi(ops)
        .await
        .expect_err("an entry past the bound was accepted");
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    assert!(
        err.to_string().contains("log entry")
            && err.to_string().contains(&ENTRY_BYTES_MAX.to_string()),
        "{err}"
    );
    assert!(
        c.exists("/expanded-0").await.unwrap().is_none(),
        "half applied"
    );
    drop(c);
    for &i in &ids {
        assert!(cluster.is_running(i), "node {i} died:\n{}", cluster.log(i));
        let c = Client::connect(cluster.addr(i), ConnectOptions::default())
            .await
            .unwrap();
        let path = format!("/after-bounds-{i}");
        c.create(&path, b"ok", CreateOptions::default())
            .await
            .unwrap();
        c.sync("/").await.unwrap();
        assert_eq!(c.get_data(&path).await.unwrap().0, b"ok");
    }
}
