//! DataTree hot paths: applying creates and set_data, reads, snapshots.
//! Run with `cargo bench -p warden-server --bench tree`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use warden_server::proto::{txn::Kind, CreateTxn, SetDataTxn, Txn};
use warden_server::tree::DataTree;

const NODES: u64 = 10_000;

fn create(path: String) -> Txn {
    Txn {
        kind: Some(Kind::Create(CreateTxn {
            path,
            data: vec![0u8; 64],
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn populated() -> DataTree {
    let mut tree = DataTree::new();
    tree.apply(1, 0, &create("/bench".into()));
    for i in 0..NODES {
        tree.apply(i + 2, 0, &create(format!("/bench/n{i}")));
    }
    tree
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tree");
    g.throughput(Throughput::Elements(NODES));
    g.bench_function("apply 10k creates", |b| b.iter(|| black_box(populated())));

    let tree = populated();
    g.bench_function("apply 10k set_data", |b| {
        b.iter_batched(
            || tree.clone(),
            |mut t| {
                let base = t.applied_index();
                for i in 0..NODES {
                    let txn = Txn {
                        kind: Some(Kind::SetData(SetDataTxn {
                            path: format!("/bench/n{i}"),
                            data: vec![1u8; 64],
                            version: None,
                            ttl_ms: 0,
                            data_null: false,
                        })),
                        ..Default::default()
                    };
                    black_box(t.apply(base + i + 1, 1, &txn));
                }
                t
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("get_data 10k", |b| {
        b.iter(|| {
            for i in 0..NODES {
                black_box(tree.get_data(&format!("/bench/n{i}")));
            }
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("snapshot of 10k nodes", |b| {
        b.iter(|| black_box(tree.to_snapshot()))
    });
    let snap = tree.to_snapshot();
    g.bench_function("restore 10k nodes", |b| {
        b.iter(|| black_box(DataTree::from_snapshot(&snap).expect("valid")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
