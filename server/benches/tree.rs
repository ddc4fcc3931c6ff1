//! DataTree hot paths: applying creates and set_data, reads, snapshots.
//! Run with `cargo bench -p warden-server --bench tree`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use warden_server::lockstats::{LockMetrics, LockObserver};
use warden_server::proto::{txn::Kind, CreateSessionTxn, CreateTxn, DeleteTxn, SetDataTxn, Txn};
use warden_server::tree::{DataTree, TxnResult};

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

fn set_data(i: u64) -> Txn {
    Txn {
        kind: Some(Kind::SetData(SetDataTxn {
            path: format!("/bench/n{i}"),
            data: vec![1u8; 64],
            version: None,
            ttl_ms: 0,
            data_null: false,
        })),
        ..Default::default()
    }
}

fn observer(tree: &DataTree) -> LockObserver {
    LockObserver::new(LockMetrics::default(), tree, 0)
}

/// `populated()`, observed or not (the same loop either way).
fn creates(observed: bool) -> DataTree {
    let mut t = DataTree::new();
    let mut obs = observer(&t);
    let mut apply = |t: &mut DataTree, zxid: u64, txn: Txn| {
        let applied = t.apply(zxid, 0, &txn);
        if observed {
            obs.observe(t, &txn, &applied, zxid, 0);
        }
        black_box(applied);
    };
    apply(&mut t, 1, create("/bench".into()));
    for i in 0..NODES {
        apply(&mut t, i + 2, create(format!("/bench/n{i}")));
    }
    t
}

/// 10k creates of one client session, each tagged with its xid (as the
/// native door's writes are): every apply also records the write's
/// outcome in the session, for a copy of it.
fn session_creates() -> DataTree {
    const SESSION: u64 = 7;
    let mut t = DataTree::new();
    t.apply(
        1,
        0,
        &Txn {
            kind: Some(Kind::CreateSession(CreateSessionTxn {
                session_id: SESSION,
                password: vec![0; 16],
                timeout_ms: 10_000,
            })),
            ..Default::default()
        },
    );
    t.apply(2, 0, &create("/bench".into()));
    for i in 0..NODES {
        let mut txn = create(format!("/bench/n{i}"));
        txn.session_id = SESSION;
        txn.xid = i + 1;
        black_box(t.apply(i + 3, 0, &txn));
    }
    t
}

/// 10k contenders of one mutex (`_c_<id>-lock-<seq>`): each created
/// behind the one before, then deleted in order (10k grants, hand-offs).
fn contenders(observed: bool) -> DataTree {
    let mut t = DataTree::new();
    let mut obs = observer(&t);
    let mut zxid = 0;
    let mut apply = |t: &mut DataTree, txn: Txn| {
        zxid += 1;
        let applied = t.apply(zxid, zxid as i64, &txn);
        if observed {
            obs.observe(t, &txn, &applied, zxid, zxid as i64);
        }
        applied
    };
    apply(&mut t, create("/lock".into()));
    let mut paths = Vec::new();
    for _ in 0..NODES {
        let txn = Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: "/lock/_c_0123456789abcdef0123456789abcdef-lock-".into(),
                sequential: true,
                ..Default::default()
            })),
            ..Default::default()
        };
        if let TxnResult::Create(Ok((p, _))) = apply(&mut t, txn).result {
            paths.push(p);
        }
    }
    for path in paths {
        let txn = Txn {
            kind: Some(Kind::Delete(DeleteTxn {
                path,
                version: None,
            })),
            ..Default::default()
        };
        black_box(apply(&mut t, txn));
    }
    t
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tree");
    g.throughput(Throughput::Elements(NODES));
    g.bench_function("apply 10k creates", |b| b.iter(|| black_box(populated())));
    g.bench_function("apply 10k creates of a session (outcomes recorded)", |b| {
        b.iter(|| black_box(session_creates()))
    });

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
    // The lock observer's cost where entries apply (core/apply.rs): the
    // same set_data and creates with it; then lock contenders, where it
    // does its work.
    for observed in [false, true] {
        let name = if observed {
            "apply 10k set_data (observer's loop) + lock observer"
        } else {
            "apply 10k set_data (observer's loop)"
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || (tree.clone(), observer(&tree)),
                |(mut t, mut obs)| {
                    let base = t.applied_index();
                    for i in 0..NODES {
                        let zxid = base + i + 1;
                        let txn = set_data(i);
                        let applied = t.apply(zxid, 1, &txn);
                        if observed {
                            obs.observe(&t, &txn, &applied, zxid, 1);
                        }
                        black_box(applied);
                    }
                    (t, obs)
                },
                BatchSize::LargeInput,
            )
        });
    }
    for observed in [false, true] {
        let name = if observed {
            "apply 10k creates (observer's loop) + lock observer"
        } else {
            "apply 10k creates (observer's loop)"
        };
        g.bench_function(name, |b| b.iter(|| black_box(creates(observed))));
    }
    for observed in [false, true] {
        let name = if observed {
            "10k mutex contenders queued and released + lock observer"
        } else {
            "10k mutex contenders queued and released"
        };
        g.bench_function(name, |b| b.iter(|| black_box(contenders(observed))));
    }
    g.bench_function("lock index rebuilt over 10k nodes", |b| {
        b.iter(|| black_box(observer(&tree)))
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
