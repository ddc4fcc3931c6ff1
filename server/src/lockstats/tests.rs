//! The observer against a real tree: grants, hand-offs, waits, releases
//! and expiries counted from applied entries, and the incremental index
//! always equal to one rebuilt from the tree.

use super::*;
use crate::proto::{
    CloseSessionTxn, CreateSessionTxn, CreateTxn, DeleteTxn, GuardedDeleteTxn, MultiTxn,
    MultiTxnOp, SetDataTxn,
};

const HEX: &str = "0123456789abcdef0123456789abcdef";

/// A tree, an observer, and the next zxid; each step 1 s after the last.
struct Log {
    tree: DataTree,
    obs: LockObserver,
    zxid: u64,
}

impl Log {
    fn new() -> Log {
        let tree = DataTree::new();
        let obs = LockObserver::new(LockMetrics::default(), &tree, 0);
        let mut log = Log { tree, obs, zxid: 0 };
        for p in ["/locks", "/locks/m", "/leases", "/leases/l"] {
            log.step(
                0,
                TxnKind::Create(CreateTxn {
                    path: p.into(),
                    ..Default::default()
                }),
            );
        }
        log.step(
            0,
            TxnKind::CreateSession(CreateSessionTxn {
                session_id: 1,
                password: vec![0; 16],
                timeout_ms: 10_000,
            }),
        );
        log.step(
            0,
            TxnKind::CreateSession(CreateSessionTxn {
                session_id: 2,
                password: vec![0; 16],
                timeout_ms: 10_000,
            }),
        );
        log
    }

    fn time_ms(&self) -> i64 {
        self.zxid as i64 * 1000
    }

    fn step(&mut self, session_id: u64, kind: TxnKind) -> Applied {
        self.zxid += 1;
        let txn = Txn {
            kind: Some(kind),
            session_id,
            ..Default::default()
        };
        let t = self.time_ms();
        let applied = self.tree.apply(self.zxid, t, &txn);
        self.obs.observe(&self.tree, &txn, &applied, self.zxid, t);
        let rebuilt = LockObserver::new(LockMetrics::default(), &self.tree, 0);
        assert_eq!(
            rebuilt.locks.keys().collect::<Vec<_>>(),
            self.obs.locks.keys().collect::<Vec<_>>()
        );
        for (path, queues) in &rebuilt.locks {
            let mine = &self.obs.locks[path];
            for q in queues {
                let m = mine.iter().find(|m| m.kind == q.kind).expect("same kinds");
                assert_eq!(m.contenders, q.contenders, "{path}");
            }
        }
        assert_eq!(rebuilt.contenders, self.obs.contenders);
        assert_eq!(rebuilt.held, self.obs.held);
        applied
    }

    /// Creates an ephemeral-sequential mutex contender of `session`.
    fn contend(&mut self, session: u64) -> String {
        let applied = self.step(
            session,
            TxnKind::Create(CreateTxn {
                path: format!("/locks/m/_c_{HEX}-lock-"),
                ephemeral: true,
                sequential: true,
                session_id: session,
                ..Default::default()
            }),
        );
        match applied.result {
            crate::tree::TxnResult::Create(Ok((path, _))) => path,
            other => panic!("{other:?}"),
        }
    }

    fn delete(&mut self, path: &str) {
        self.step(
            0,
            TxnKind::Delete(DeleteTxn {
                path: path.into(),
                version: None,
            }),
        );
    }

    fn m(&self) -> &LockMetrics {
        self.obs.metrics()
    }
}

#[test]
fn grants_handoffs_waits_and_releases_are_counted() {
    let mut log = Log::new();
    let a = log.contend(1);
    assert_eq!(log.m().acquisitions(Kind::Mutex), 1);
    assert_eq!(log.m().handoffs(Kind::Mutex), 0);
    let b = log.contend(2);
    let c = log.contend(2);
    assert_eq!(
        log.m().acquisitions(Kind::Mutex),
        1,
        "waiters are no grants"
    );
    assert_eq!(log.m().waiters(Kind::Mutex), 2);
    // A waiter that gives up is neither a grant nor a release.
    log.delete(&c);
    assert_eq!(log.m().waiters(Kind::Mutex), 1);
    assert_eq!(log.m().acquisitions(Kind::Mutex), 1);
    log.delete(&a);
    assert_eq!(log.m().acquisitions(Kind::Mutex), 2);
    assert_eq!(log.m().handoffs(Kind::Mutex), 1);
    assert_eq!(log.m().waiters(Kind::Mutex), 0);
    let page = log.obs.list(
        &log.tree,
        &LockQuery {
            limit: 10,
            waiters: true,
            ..Default::default()
        },
    );
    assert_eq!(page.locks.len(), 1);
    let lock = &page.locks[0];
    assert_eq!(
        (lock.path.as_str(), lock.kind, lock.waiters),
        ("/locks/m", "mutex", 0)
    );
    assert_eq!(lock.holder.node, b);
    assert_eq!(lock.holder.session_id.as_deref(), Some("0x2"));
    assert_eq!(lock.holder.granted_at_ms, Some(log.time_ms()));
    log.delete(&b);
    assert!(log
        .obs
        .list(
            &log.tree,
            &LockQuery {
                limit: 10,
                ..Default::default()
            }
        )
        .locks
        .is_empty());
    assert_eq!(log.m().acquisitions(Kind::Mutex), 2);
    assert_eq!(log.m().handoffs(Kind::Mutex), 1);
}

#[test]
fn expired_sessions_and_ttls_are_counted_by_role() {
    let mut log = Log::new();
    log.contend(1);
    log.contend(1);
    log.contend(2);
    // Session 1 holds and waits: both nodes go with it, session 2 is
    // granted (one grant, a hand-off).
    log.step(
        0,
        TxnKind::CloseSession(CloseSessionTxn {
            session_id: 1,
            reason: CloseReason::Expired as i32,
        }),
    );
    assert_eq!(log.m().expirations(Kind::Mutex, Role::Holder), 1);
    assert_eq!(log.m().expirations(Kind::Mutex, Role::Waiter), 1);
    assert_eq!(log.m().acquisitions(Kind::Mutex), 2);
    assert_eq!(log.m().handoffs(Kind::Mutex), 1);
    // A client's own close is a release, not an expiry.
    log.step(
        0,
        TxnKind::CloseSession(CloseSessionTxn {
            session_id: 2,
            reason: CloseReason::Client as i32,
        }),
    );
    assert_eq!(log.m().expirations(Kind::Mutex, Role::Holder), 1);

    // A lease removed by its TTL.
    let applied = log.step(
        0,
        TxnKind::Create(CreateTxn {
            path: format!("/leases/l/lease-{HEX}-"),
            sequential: true,
            ttl_ms: 1000,
            data: b"1000\nworker-7".to_vec(),
            ..Default::default()
        }),
    );
    let crate::tree::TxnResult::Create(Ok((lease, stat))) = applied.result else {
        panic!()
    };
    assert_eq!(log.m().acquisitions(Kind::Lease), 1);
    let page = log.obs.list(
        &log.tree,
        &LockQuery {
            limit: 10,
            ..Default::default()
        },
    );
    let holder = &page.locks[0].holder;
    // A lease's client id is its holder's secret: shown by label only.
    assert_eq!(holder.client_id, None);
    assert_eq!(
        holder.label.as_deref(),
        Some(crate::http::holder::label("worker-7").as_str())
    );
    assert_eq!(holder.expires_at_ms, Some(stat.mtime_ms + 1000));
    assert_eq!(holder.session_id, None);
    log.step(
        0,
        TxnKind::GuardedDelete(GuardedDeleteTxn {
            path: lease,
            expected_mzxid: stat.mzxid,
            expected_pzxid: stat.pzxid,
        }),
    );
    assert_eq!(log.m().expirations(Kind::Lease, Role::Holder), 1);
}

#[test]
fn a_release_and_a_grant_in_one_multi_count_once_and_waits_use_the_log_clock() {
    let mut log = Log::new();
    let a = log.contend(1);
    let created = log.time_ms();
    log.contend(2);
    log.step(
        0,
        TxnKind::SetData(SetDataTxn {
            path: "/locks".into(),
            ..Default::default()
        }),
    );
    log.step(
        0,
        TxnKind::Multi(MultiTxn {
            ops: vec![MultiTxnOp {
                op: Some(crate::proto::multi_txn_op::Op::Delete(DeleteTxn {
                    path: a,
                    version: None,
                })),
            }],
        }),
    );
    assert_eq!(log.m().acquisitions(Kind::Mutex), 2);
    assert_eq!(log.m().handoffs(Kind::Mutex), 1);
    // Created at `created` + 1 s, granted 2 s later.
    let _ = created;
    let mut registry = prometheus_client::registry::Registry::default();
    log.m().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("locks_wait_seconds_sum{kind=\"mutex\"} 2.0\n"),
        "{text}"
    );
}

#[test]
fn replayed_entries_update_the_index_but_are_not_counted() {
    let mut log = Log::new();
    log.obs.count_after = log.zxid + 2;
    let a = log.contend(1);
    log.contend(2);
    log.delete(&a);
    assert_eq!(
        log.m().acquisitions(Kind::Mutex),
        1,
        "only the grant after the replay"
    );
    assert_eq!(log.m().releases(Kind::Mutex), 1);
    assert_eq!(log.m().waiters(Kind::Mutex), 0);
}

#[test]
fn listing_pages_filters_and_hides_what_the_caller_may_not_read() {
    let mut log = Log::new();
    for i in 0..5 {
        log.step(
            0,
            TxnKind::Create(CreateTxn {
                path: format!("/locks/k{i}"),
                ..Default::default()
            }),
        );
        log.step(
            1,
            TxnKind::Create(CreateTxn {
                path: format!("/locks/k{i}/lock-"),
                ephemeral: true,
                sequential: true,
                session_id: 1,
                data: b"me".to_vec(),
                ..Default::default()
            }),
        );
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = log.obs.list(
            &log.tree,
            &LockQuery {
                after: after.clone(),
                limit: 2,
                ..Default::default()
            },
        );
        seen.extend(page.locks.iter().map(|l| l.path.clone()));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(
        seen,
        [
            "/locks/k0",
            "/locks/k1",
            "/locks/k2",
            "/locks/k3",
            "/locks/k4"
        ]
    );
    let q = LockQuery {
        limit: 10,
        kind: Some(Kind::Kazoo),
        ..Default::default()
    };
    assert!(log.obs.list(&log.tree, &q).locks.is_empty());
    // A directory only bob may read is not listed to others.
    let bob = warden_protocol::pb::Acl {
        perms: perms::ALL,
        scheme: "digest".into(),
        id: "bob:x".into(),
    };
    log.step(
        0,
        TxnKind::SetAcl(crate::proto::SetAclTxn {
            path: "/locks/k1".into(),
            acl: vec![bob],
            aversion: None,
        }),
    );
    let page = log.obs.list(
        &log.tree,
        &LockQuery {
            limit: 10,
            ..Default::default()
        },
    );
    assert_eq!(page.locks.len(), 4);
    assert_eq!(page.locks[0].holder.client_id.as_deref(), Some("me"));
    let ids = vec![AuthId {
        scheme: "digest".into(),
        id: "bob:x".into(),
    }];
    let page = log.obs.list(
        &log.tree,
        &LockQuery {
            limit: 10,
            ids,
            ..Default::default()
        },
    );
    assert_eq!(page.locks.len(), 5);
}
