//! RUSTSEC-2024-0437's input shape (deeply nested unknown groups) sent to
//! a cluster's peer ports: every node refuses the frame in
//! `raft::wire_guard`, names why in its log, and keeps serving.

use std::io::Write as _;
use std::net::TcpStream;
use std::time::Duration;

use prost::Message as _;
use warden_client::{Client, ConnectOptions, CreateOptions};
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
}
