//! What `DiskStorage` costs on the server's path (fjall, no fsync: the
//! fsync is the disk's, not the code's): a leader's append of 8 entries of
//! 150 bytes over the log's tail (the conflicting suffix removed and
//! written again, one batch) with the commit index stored, and a read of
//! 8 entries for a follower. Written to compare the storage before and
//! after the log went behind the `LogStore` trait (issue 28).
//! Run with `cargo bench -p warden-server --bench raft_storage`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage as _};
use std::hint::black_box;
use warden_server::raft::DiskStorage;

fn entries(term: u64) -> Vec<Entry> {
    (101..=108)
        .map(|index| Entry {
            term,
            index,
            data: vec![7u8; 150].into(),
            ..Default::default()
        })
        .collect()
}

/// A storage holding entries 1-108 of term 1, synced, commit at 100.
fn storage(dir: &std::path::Path) -> DiskStorage {
    let mut s = DiskStorage::open(&dir.join("raft"), &dir.join("snapshots")).unwrap();
    s.bootstrap(vec![1]).unwrap();
    let head: Vec<Entry> = (1..=100)
        .map(|index| Entry {
            term: 1,
            index,
            data: vec![7u8; 150].into(),
            ..Default::default()
        })
        .collect();
    s.append(&head).unwrap();
    s.append(&entries(1)).unwrap();
    s.set_hard_state(HardState {
        term: 1,
        commit: 100,
        ..Default::default()
    })
    .unwrap();
    s.sync().unwrap();
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("raft_storage");
    g.throughput(Throughput::Elements(8));
    // Read first, from a store of its own: the append below rewrites the
    // same indexes, and the versions it leaves slow a scan of them down.
    let read_dir = tempfile::tempdir().unwrap();
    let s = storage(read_dir.path());
    g.bench_function("read 8 entries", |b| {
        b.iter(|| {
            black_box(
                s.entries(101, 109, None, GetEntriesContext::empty(false))
                    .unwrap(),
            )
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let mut s = storage(dir.path());
    let batch = entries(1);
    let mut commit = 100;
    g.bench_function("append 8 over the tail + commit", |b| {
        b.iter(|| {
            s.append(black_box(&batch)).unwrap();
            commit += 1;
            s.set_commit(commit).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
