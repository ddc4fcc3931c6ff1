//! Memory of the DataTree per znode: builds a tree of N znodes of 32 bytes
//! (1,000 parents of N/1,000 children each, the open ACL, as a benchmark
//! of a million small config nodes would) by applying creates, and prints
//! the process's resident memory before and after, per znode. Then takes
//! a snapshot of it and restores it, as a server does, and prints how long
//! each took and the memory of the restored tree alone.
//!
//!     cargo run --release -p warden-server --example tree_memory [N]

use std::time::Instant;

use prost::Message as _;
use warden_server::proto::{txn::Kind, CreateTxn, Snapshot, Txn};
use warden_server::tree::DataTree;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn create(path: String) -> Txn {
    Txn {
        kind: Some(Kind::Create(CreateTxn {
            path,
            data: vec![b'x'; 32],
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("N: a number"))
        .unwrap_or(1_000_000);
    let parents = 1_000.min(n.max(1));
    let before = rss_bytes();
    let mut tree = DataTree::new();
    let mut zxid = 0;
    for p in 0..parents {
        zxid += 1;
        tree.apply(zxid, 0, &create(format!("/p{p:04}")));
    }
    for i in 0..n {
        zxid += 1;
        let path = format!("/p{:04}/n{:07}", i % parents, i);
        tree.apply(zxid, 0, &create(path));
    }
    let after = rss_bytes();
    let nodes = tree.node_count() as u64;
    println!(
        "{nodes} znodes: RSS {} MB before, {} MB after, {} bytes per znode",
        before / 1_000_000,
        after / 1_000_000,
        (after - before) / nodes
    );

    let started = Instant::now();
    // As a server does: freeze, then encode (on its own thread there).
    let encoded = tree.freeze().encode();
    let encode_ms = started.elapsed().as_millis();
    drop(tree);
    let started = Instant::now();
    let decoded = Snapshot::decode(&encoded[..]).expect("decodes");
    let restored = DataTree::from_snapshot_owned(decoded).expect("restores");
    let restore_ms = started.elapsed().as_millis();
    drop(encoded);
    warden_server::core::release_freed_memory();
    let restored_rss = rss_bytes();
    println!(
        "snapshot: encoded in {encode_ms} ms; restored in {restore_ms} ms \
         (decode + load); RSS with the restored tree only: {} MB",
        restored_rss / 1_000_000
    );
    assert_eq!(restored.node_count() as u64, nodes);
}
