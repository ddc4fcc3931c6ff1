//! Unit tests for the DataTree: one test (or a few) per rule of `apply`,
//! the removal candidates, and snapshot loading.

use warden_protocol::pb::{Acl, ErrorCode, EventType, Stat};
use warden_protocol::{open_acl, perms, DATA_BYTES_MAX};

use super::*;
use crate::proto::{
    multi_txn_op::Op, txn::Kind, CheckTxn, CloseSessionTxn, CreateSessionTxn, CreateTxn, DeleteTxn,
    GuardedDeleteTxn, MultiTxn, MultiTxnOp, NoopTxn, SetAclTxn, SetDataTxn, Snapshot, Txn,
};

/// A tree plus a log position: every `step` applies at the next zxid, ten
/// milliseconds after the previous one.
struct Log {
    tree: DataTree,
    zxid: u64,
    time_ms: i64,
}

const T0_MS: i64 = 1_000_000;
const STEP_MS: i64 = 10;

impl Log {
    fn new() -> Log {
        Log {
            tree: DataTree::new(),
            zxid: 0,
            time_ms: T0_MS,
        }
    }

    fn step(&mut self, kind: Kind) -> Applied {
        self.zxid += 1;
        self.time_ms += STEP_MS;
        let applied = self.tree.apply(
            self.zxid,
            self.time_ms,
            &Txn {
                kind: Some(kind),
                ..Default::default()
            },
        );
        self.tree.check_invariants().expect("invariants after step");
        applied
    }

    /// Applies `kind`, which must fail, and checks it changed nothing but
    /// the applied index.
    fn step_fails(&mut self, kind: Kind) -> TreeError {
        let mut before = self.tree.clone();
        let applied = self.step(kind);
        before.skip(self.zxid);
        assert_eq!(self.tree, before, "a failed txn changed the tree");
        assert!(applied.triggers.is_empty());
        match applied.result {
            TxnResult::Create(Err(e))
            | TxnResult::Delete(Err(e))
            | TxnResult::SetData(Err(e))
            | TxnResult::SetAcl(Err(e))
            | TxnResult::Multi(MultiOutcome::Failed { error: e, .. }) => e,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    fn mk(&mut self, path: &str) -> (String, Stat) {
        match self.step(Kind::Create(create(path))).result {
            TxnResult::Create(Ok(created)) => created,
            other => panic!("create {path}: {other:?}"),
        }
    }

    fn mk_with(&mut self, t: CreateTxn) -> (String, Stat) {
        match self.step(Kind::Create(t.clone())).result {
            TxnResult::Create(Ok(created)) => created,
            other => panic!("create {t:?}: {other:?}"),
        }
    }

    fn session(&mut self, id: u64) {
        let r = self.step(Kind::CreateSession(CreateSessionTxn {
            session_id: id,
            password: vec![7; 16],
            timeout_ms: 10_000,
        }));
        assert_eq!(r.result, TxnResult::SessionCreated);
    }

    fn stat(&self, path: &str) -> Stat {
        self.tree
            .stat(path)
            .unwrap_or_else(|| panic!("{path} missing"))
    }
}

fn create(path: &str) -> CreateTxn {
    CreateTxn {
        path: path.to_string(),
        data: b"data".to_vec(),
        ..Default::default()
    }
}

fn delete(path: &str, version: Option<i32>) -> Kind {
    Kind::Delete(DeleteTxn {
        path: path.to_string(),
        version,
    })
}

fn set_data(path: &str, data: &[u8], version: Option<i32>) -> Kind {
    Kind::SetData(SetDataTxn {
        path: path.to_string(),
        data: data.to_vec(),
        version,
        ttl_ms: 0,
        data_null: false,
    })
}

fn multi(ops: Vec<Op>) -> Kind {
    Kind::Multi(MultiTxn {
        ops: ops
            .into_iter()
            .map(|op| MultiTxnOp { op: Some(op) })
            .collect(),
    })
}

fn guarded(path: &str, stat: Stat) -> Kind {
    Kind::GuardedDelete(GuardedDeleteTxn {
        path: path.to_string(),
        expected_mzxid: stat.mzxid,
        expected_pzxid: stat.pzxid,
    })
}

fn trigger(path: &str, event: EventType) -> Trigger {
    Trigger {
        path: path.to_string(),
        event,
    }
}

fn code(e: TreeError) -> ErrorCode {
    e.code
}

fn candidate_paths(tree: &DataTree, now_ms: i64) -> Vec<String> {
    tree.removal_candidates(now_ms)
        .into_iter()
        .map(|c| c.path)
        .collect()
}

// ------------------------------------------------------------------ basics

#[test]
fn new_tree_is_just_the_root() {
    let tree = DataTree::new();
    assert_eq!(tree, DataTree::default());
    assert_eq!(tree.node_count(), 1);
    assert_eq!(tree.applied_index(), 0);
    let (data, stat) = tree.get_data("/").unwrap();
    assert!(data.is_empty());
    assert_eq!(stat, Stat::default());
    assert_eq!(tree.acl("/").unwrap().0, open_acl());
    assert!(tree.children("/").unwrap().0.is_empty());
    assert_eq!(tree.sessions().count(), 0);
    tree.check_invariants().unwrap();
}

#[test]
fn skip_noop_and_empty_txn_only_advance_the_index() {
    let mut log = Log::new();
    let before = log.tree.clone();
    assert_eq!(log.step(Kind::Noop(NoopTxn {})).result, TxnResult::Noop);
    let applied = log.tree.apply(2, 0, &Txn::default());
    assert_eq!(applied.result, TxnResult::Noop);
    assert!(applied.triggers.is_empty());
    log.tree.skip(5);
    assert_eq!(log.tree.applied_index(), 5);
    let mut expected = before;
    expected.skip(5);
    assert_eq!(log.tree, expected);
}

#[test]
fn tree_error_displays_code_and_path() {
    let e = TreeError {
        code: ErrorCode::NoNode,
        path: "/a/b".into(),
    };
    assert_eq!(e.to_string(), "NoNode: /a/b");
    let e = TreeError {
        code: ErrorCode::InvalidPath,
        path: "/a\nb".into(),
    };
    assert_eq!(e.to_string(), "InvalidPath: /a\\nb");
}

// ------------------------------------------------------------------ create

#[test]
fn create_sets_stat_and_bumps_parent() {
    let mut log = Log::new();
    log.mk("/a");
    let a_before = log.stat("/a");
    let applied = log.step(Kind::Create(CreateTxn {
        data: b"hello".to_vec(),
        ..create("/a/b")
    }));
    let (path, stat) = match applied.result {
        TxnResult::Create(Ok(c)) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(path, "/a/b");
    let zxid = log.zxid;
    assert_eq!(
        stat,
        Stat {
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime_ms: log.time_ms,
            mtime_ms: log.time_ms,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 5,
            num_children: 0,
            container: false,
            ttl_ms: 0,
        }
    );
    assert_eq!(log.tree.stat("/a/b"), Some(stat));
    assert_eq!(log.tree.get_data("/a/b").unwrap().0, b"hello");
    assert_eq!(log.tree.acl("/a/b").unwrap().0, open_acl());
    assert_eq!(
        applied.triggers,
        vec![
            trigger("/a/b", EventType::NodeCreated),
            trigger("/a", EventType::NodeChildrenChanged)
        ]
    );
    let a = log.stat("/a");
    assert_eq!(a.cversion, a_before.cversion + 1);
    assert_eq!(a.pzxid, zxid);
    assert_eq!(a.num_children, 1);
    // The parent's own data did not change.
    assert_eq!(
        (a.mzxid, a.version, a.mtime_ms),
        (a_before.mzxid, 0, a_before.mtime_ms)
    );
}

#[test]
fn create_keeps_a_given_acl() {
    let mut log = Log::new();
    let acl = vec![Acl {
        perms: perms::READ,
        scheme: "digest".into(),
        id: "u:h".into(),
    }];
    log.mk_with(CreateTxn {
        acl: acl.clone(),
        ..create("/a")
    });
    assert_eq!(log.tree.acl("/a").unwrap().0, acl);
}

#[test]
fn children_are_sorted_names() {
    let mut log = Log::new();
    for p in ["/c", "/a", "/b", "/a/z", "/a/y"] {
        log.mk(p);
    }
    assert_eq!(log.tree.children("/").unwrap().0, vec!["a", "b", "c"]);
    assert_eq!(log.tree.children("/a").unwrap().0, vec!["y", "z"]);
    assert_eq!(log.tree.children("/a").unwrap().1.num_children, 2);
    assert_eq!(log.tree.node_count(), 6);
    assert!(log.tree.children("/nope").is_none());
}

#[test]
fn create_refuses_invalid_paths() {
    let mut log = Log::new();
    for p in ["", "a", "/", "/a/", "//", "/a//b", "/.", "/a/..", "/a\0b"] {
        let e = log.step_fails(Kind::Create(create(p)));
        assert_eq!(
            e,
            TreeError {
                code: ErrorCode::InvalidPath,
                path: p.into()
            },
            "{p:?}"
        );
    }
    for p in ["/", "//", ""] {
        let e = log.step_fails(Kind::Create(CreateTxn {
            sequential: true,
            ..create(p)
        }));
        assert_eq!(code(e), ErrorCode::InvalidPath, "{p:?}");
    }
}

#[test]
fn create_refuses_too_much_data() {
    let mut log = Log::new();
    let e = log.step_fails(Kind::Create(CreateTxn {
        data: vec![0; DATA_BYTES_MAX + 1],
        ..create("/big")
    }));
    assert_eq!(code(e), ErrorCode::DataTooLarge);
    let (_, stat) = log.mk_with(CreateTxn {
        data: vec![0; DATA_BYTES_MAX],
        ..create("/big")
    });
    assert_eq!(stat.data_length as usize, DATA_BYTES_MAX);
}

#[test]
fn container_refuses_other_kinds() {
    let mut log = Log::new();
    log.session(1);
    let container = CreateTxn {
        container: true,
        session_id: 1,
        ..create("/c")
    };
    for bad in [
        CreateTxn {
            ephemeral: true,
            ..container.clone()
        },
        CreateTxn {
            sequential: true,
            ..container.clone()
        },
        CreateTxn {
            ttl_ms: 5,
            ..container.clone()
        },
    ] {
        assert_eq!(
            code(log.step_fails(Kind::Create(bad))),
            ErrorCode::BadArguments
        );
    }
    log.mk_with(container);
    assert!(log.tree.node("/c").unwrap().is_container());
}

#[test]
fn ephemeral_needs_a_live_session() {
    let mut log = Log::new();
    let eph = |id| CreateTxn {
        ephemeral: true,
        session_id: id,
        ..create("/e")
    };
    assert_eq!(
        code(log.step_fails(Kind::Create(eph(1)))),
        ErrorCode::SessionExpired
    );
    assert_eq!(
        code(log.step_fails(Kind::Create(eph(0)))),
        ErrorCode::SessionExpired
    );
    log.session(1);
    let (_, stat) = log.mk_with(eph(1));
    assert_eq!(stat.ephemeral_owner, 1);
    assert_eq!(log.tree.ephemerals(1), vec!["/e"]);
    // A non-ephemeral create ignores the session id.
    let (_, stat) = log.mk_with(CreateTxn {
        session_id: 99,
        ..create("/p")
    });
    assert_eq!(stat.ephemeral_owner, 0);
}

#[test]
fn create_needs_a_parent() {
    let mut log = Log::new();
    let e = log.step_fails(Kind::Create(create("/a/b")));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NoNode,
            path: "/a/b".into()
        }
    );
    let e = log.step_fails(Kind::Create(CreateTxn {
        sequential: true,
        ..create("/a/")
    }));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NoNode,
            path: "/a/".into()
        }
    );
}

#[test]
fn ephemeral_nodes_have_no_children() {
    let mut log = Log::new();
    log.session(1);
    log.mk_with(CreateTxn {
        ephemeral: true,
        session_id: 1,
        ..create("/e")
    });
    let e = log.step_fails(Kind::Create(create("/e/child")));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NoChildrenForEphemerals,
            path: "/e/child".into()
        }
    );
}

#[test]
fn create_refuses_an_existing_node() {
    let mut log = Log::new();
    log.mk("/a");
    let e = log.step_fails(Kind::Create(create("/a")));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NodeExists,
            path: "/a".into()
        }
    );
}

// -------------------------------------------------------------- sequential

#[test]
fn sequential_names_come_from_parent_cversion() {
    let mut log = Log::new();
    log.mk("/q");
    let seq = |p: &str| CreateTxn {
        sequential: true,
        ..create(p)
    };
    assert_eq!(log.mk_with(seq("/q/n-")).0, "/q/n-0000000000");
    assert_eq!(log.mk_with(seq("/q/n-")).0, "/q/n-0000000001");
    // A plain create counts; a delete bumps cversion but, as in ZooKeeper,
    // not the sequence (which counts the parent's child creations).
    log.mk("/q/plain");
    log.step(delete("/q/plain", None));
    assert_eq!(log.stat("/q").cversion, 4);
    assert_eq!(log.mk_with(seq("/q/n-")).0, "/q/n-0000000003");
    // A trailing slash names the child by the number alone.
    assert_eq!(log.mk_with(seq("/q/")).0, "/q/0000000004");
}

#[test]
fn sequential_under_root_with_prefix() {
    let mut log = Log::new();
    let (p, _) = log.mk_with(CreateTxn {
        sequential: true,
        ..create("/lock-")
    });
    assert_eq!(p, "/lock-0000000000");
    assert_eq!(log.stat("/").cversion, 1);
}

#[test]
fn sequential_name_that_exists_is_refused() {
    let mut log = Log::new();
    log.mk("/q");
    log.mk("/q/x0000000001");
    let e = log.step_fails(Kind::Create(CreateTxn {
        sequential: true,
        ..create("/q/x")
    }));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NodeExists,
            path: "/q/x0000000001".into()
        }
    );
}

/// A tree loaded from a snapshot in which `/q` has the given cversion.
fn tree_with_cversion(cversion: i32) -> Log {
    let mut snap = DataTree::new().to_snapshot();
    snap.applied_index = 1;
    let mut root = snap.nodes[0].clone();
    root.stat.as_mut().unwrap().num_children = 1;
    root.stat.as_mut().unwrap().pzxid = 1;
    root.stat.as_mut().unwrap().cversion = 1;
    snap.nodes[0] = root;
    snap.nodes.push(crate::proto::SnapshotNode {
        path: "/q".into(),
        data: vec![],
        acl: open_acl(),
        stat: Some(Stat {
            czxid: 1,
            mzxid: 1,
            pzxid: 1,
            cversion,
            ..Default::default()
        }),
        container: false,
        ttl_ms: 0,
        data_null: false,
    });
    Log {
        tree: DataTree::from_snapshot(&snap).unwrap(),
        zxid: 1,
        time_ms: T0_MS,
    }
}

#[test]
fn sequential_number_counts_creations_at_large_counts() {
    // cversion = creations + deletions and num_children = creations -
    // deletions: with no children left, creations = cversion / 2.
    let mut log = tree_with_cversion(2_000_000_000);
    let seq = CreateTxn {
        sequential: true,
        ..create("/q/n")
    };
    assert_eq!(log.mk_with(seq.clone()).0, "/q/n1000000000");
    assert_eq!(log.mk_with(seq).0, "/q/n1000000001");
}

// ------------------------------------------------------------------ delete

#[test]
fn delete_removes_and_bumps_parent() {
    let mut log = Log::new();
    log.mk("/a");
    log.mk("/a/b");
    let before = log.stat("/a");
    let applied = log.step(delete("/a/b", Some(0)));
    assert_eq!(applied.result, TxnResult::Delete(Ok(())));
    assert_eq!(
        applied.triggers,
        vec![
            trigger("/a/b", EventType::NodeDeleted),
            trigger("/a", EventType::NodeChildrenChanged)
        ]
    );
    assert!(log.tree.stat("/a/b").is_none());
    let a = log.stat("/a");
    assert_eq!(a.cversion, before.cversion + 1);
    assert_eq!(a.pzxid, log.zxid);
    assert_eq!(a.num_children, 0);
    assert_eq!(a.mzxid, before.mzxid);
}

#[test]
fn delete_errors() {
    let mut log = Log::new();
    log.mk("/a");
    log.mk("/a/b");
    log.step(set_data("/a/b", b"x", None));
    assert_eq!(
        code(log.step_fails(delete("/", None))),
        ErrorCode::BadArguments
    );
    assert_eq!(
        code(log.step_fails(delete("/a/", None))),
        ErrorCode::InvalidPath
    );
    assert_eq!(
        code(log.step_fails(delete("", None))),
        ErrorCode::InvalidPath
    );
    let e = log.step_fails(delete("/nope", None));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::NoNode,
            path: "/nope".into()
        }
    );
    assert_eq!(
        code(log.step_fails(delete("/a/b", Some(0)))),
        ErrorCode::BadVersion
    );
    assert_eq!(
        code(log.step_fails(delete("/a", None))),
        ErrorCode::NotEmpty
    );
    // A version that does not match comes before "not empty", as in ZooKeeper.
    assert_eq!(
        code(log.step_fails(delete("/a", Some(3)))),
        ErrorCode::BadVersion
    );
    assert_eq!(
        log.step(delete("/a/b", Some(1))).result,
        TxnResult::Delete(Ok(()))
    );
    assert_eq!(
        log.step(delete("/a", None)).result,
        TxnResult::Delete(Ok(()))
    );
    assert_eq!(log.tree.node_count(), 1);
}

// ---------------------------------------------------------------- set data

#[test]
fn set_data_bumps_version_and_mzxid() {
    let mut log = Log::new();
    let (_, created) = log.mk("/a");
    let applied = log.step(set_data("/a", b"new!!", Some(0)));
    let stat = match applied.result {
        TxnResult::SetData(Ok(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        applied.triggers,
        vec![trigger("/a", EventType::NodeDataChanged)]
    );
    assert_eq!(stat.version, 1);
    assert_eq!(stat.mzxid, log.zxid);
    assert_eq!(stat.mtime_ms, log.time_ms);
    assert_eq!(stat.data_length, 5);
    assert_eq!(
        (stat.czxid, stat.ctime_ms, stat.pzxid),
        (created.czxid, created.ctime_ms, created.pzxid)
    );
    assert_eq!(log.tree.get_data("/a").unwrap(), (&b"new!!"[..], stat));
    // Any version when none is given.
    let applied = log.step(set_data("/a", b"", None));
    assert!(
        matches!(applied.result, TxnResult::SetData(Ok(s)) if s.version == 2 && s.data_length == 0)
    );
}

#[test]
fn set_data_errors() {
    let mut log = Log::new();
    log.mk("/a");
    assert_eq!(
        code(log.step_fails(set_data("/b", b"", None))),
        ErrorCode::NoNode
    );
    assert_eq!(
        code(log.step_fails(set_data("/a", b"", Some(1)))),
        ErrorCode::BadVersion
    );
    assert_eq!(
        code(log.step_fails(set_data("a", b"", None))),
        ErrorCode::InvalidPath
    );
    let big = vec![1; DATA_BYTES_MAX + 1];
    assert_eq!(
        code(log.step_fails(set_data("/a", &big, None))),
        ErrorCode::DataTooLarge
    );
}

#[test]
fn versions_wrap() {
    let mut snap = DataTree::new().to_snapshot();
    snap.applied_index = 1;
    snap.nodes[0].stat.as_mut().unwrap().version = i32::MAX;
    let mut log = Log {
        tree: DataTree::from_snapshot(&snap).unwrap(),
        zxid: 1,
        time_ms: T0_MS,
    };
    log.step(set_data("/", b"", Some(i32::MAX)));
    assert_eq!(log.stat("/").version, i32::MIN);
}

// ----------------------------------------------------------------- set acl

#[test]
fn set_acl_bumps_aversion_only() {
    let mut log = Log::new();
    let (_, before) = log.mk("/a");
    let acl = vec![Acl {
        perms: perms::READ | perms::ADMIN,
        scheme: "world".into(),
        id: "anyone".into(),
    }];
    let set_acl = |aversion| {
        Kind::SetAcl(SetAclTxn {
            path: "/a".into(),
            acl: acl.clone(),
            aversion,
        })
    };
    let applied = log.step(set_acl(Some(0)));
    assert!(applied.triggers.is_empty(), "setACL fires no watch");
    let stat = match applied.result {
        TxnResult::SetAcl(Ok(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(stat.aversion, 1);
    assert_eq!(
        (stat.mzxid, stat.version, stat.mtime_ms),
        (before.mzxid, 0, before.mtime_ms)
    );
    assert_eq!(log.tree.acl("/a").unwrap(), (acl.clone(), stat));

    assert_eq!(
        code(log.step_fails(set_acl(Some(0)))),
        ErrorCode::BadVersion
    );
    log.step(set_acl(None));
    assert_eq!(log.stat("/a").aversion, 2);
    let e = log.step_fails(Kind::SetAcl(SetAclTxn {
        path: "/a".into(),
        acl: vec![],
        aversion: None,
    }));
    assert_eq!(code(e), ErrorCode::InvalidAcl);
    let e = log.step_fails(Kind::SetAcl(SetAclTxn {
        path: "/zz".into(),
        acl: acl.clone(),
        aversion: None,
    }));
    assert_eq!(code(e), ErrorCode::NoNode);
}

// ------------------------------------------------------------------- multi

#[test]
fn empty_multi_succeeds() {
    let mut log = Log::new();
    let applied = log.step(multi(vec![]));
    assert_eq!(applied.result, TxnResult::Multi(MultiOutcome::Ok(vec![])));
    assert!(applied.triggers.is_empty());
}

#[test]
fn multi_ops_see_earlier_ops() {
    let mut log = Log::new();
    let applied = log.step(multi(vec![
        Op::Create(create("/a")),
        Op::Create(create("/a/b")),
        Op::SetData(SetDataTxn {
            path: "/a/b".into(),
            data: b"x".to_vec(),
            version: Some(0),
            ttl_ms: 0,
            data_null: false,
        }),
        Op::Check(CheckTxn {
            path: "/a/b".into(),
            version: Some(1),
        }),
        Op::Create(CreateTxn {
            sequential: true,
            ..create("/a/s")
        }),
        Op::Delete(DeleteTxn {
            path: "/a/b".into(),
            version: Some(1),
        }),
    ]));
    let zxid = log.zxid;
    let outcomes = match applied.result {
        TxnResult::Multi(MultiOutcome::Ok(o)) => o,
        other => panic!("{other:?}"),
    };
    assert_eq!(outcomes.len(), 6);
    assert!(
        matches!(&outcomes[0], OpOutcome::Create { path, stat } if path == "/a" && stat.czxid == zxid)
    );
    assert!(matches!(&outcomes[2], OpOutcome::SetData { stat } if stat.version == 1));
    assert_eq!(outcomes[3], OpOutcome::Check);
    assert!(matches!(&outcomes[4], OpOutcome::Create { path, .. } if path == "/a/s0000000001"));
    assert_eq!(outcomes[5], OpOutcome::Delete);
    assert_eq!(
        applied.triggers,
        vec![
            trigger("/a", EventType::NodeCreated),
            trigger("/", EventType::NodeChildrenChanged),
            trigger("/a/b", EventType::NodeCreated),
            trigger("/a", EventType::NodeChildrenChanged),
            trigger("/a/b", EventType::NodeDataChanged),
            trigger("/a/s0000000001", EventType::NodeCreated),
            trigger("/a", EventType::NodeChildrenChanged),
            trigger("/a/b", EventType::NodeDeleted),
            trigger("/a", EventType::NodeChildrenChanged),
        ]
    );
    assert_eq!(log.tree.children("/a").unwrap().0, vec!["s0000000001"]);
    assert_eq!(log.stat("/a").cversion, 3);
}

#[test]
fn failed_multi_restores_exact_state() {
    let mut log = Log::new();
    log.session(1);
    log.mk("/q");
    log.mk("/q/old");
    log.mk_with(CreateTxn {
        container: true,
        ..create("/c")
    });
    log.mk_with(CreateTxn {
        ttl_ms: 100,
        ..create("/t")
    });
    log.step(set_data("/q/old", b"before", None));
    let before = log.tree.clone();

    let ops = vec![
        Op::Create(CreateTxn {
            sequential: true,
            ..create("/q/s")
        }),
        Op::Create(CreateTxn {
            ephemeral: true,
            session_id: 1,
            ..create("/q/e")
        }),
        Op::SetData(SetDataTxn {
            path: "/q/old".into(),
            data: b"after".to_vec(),
            version: None,
            ttl_ms: 0,
            data_null: false,
        }),
        Op::Delete(DeleteTxn {
            path: "/q/old".into(),
            version: None,
        }),
        Op::Create(create("/c/child")),
        // A new TTL, undone with the rest.
        Op::SetData(SetDataTxn {
            data_null: false,
            path: "/t".into(),
            data: b"longer".to_vec(),
            version: None,
            ttl_ms: 60_000,
        }),
        Op::Delete(DeleteTxn {
            path: "/t".into(),
            version: None,
        }),
        Op::Create(CreateTxn {
            ttl_ms: 5,
            ..create("/q/old")
        }),
        Op::Check(CheckTxn {
            path: "/q/missing".into(),
            version: None,
        }),
    ];
    let error = log.step_fails(multi(ops.clone()));
    assert_eq!(
        error,
        TreeError {
            code: ErrorCode::NoNode,
            path: "/q/missing".into()
        }
    );
    let applied = {
        let mut again = before.clone();
        again.apply(
            log.zxid + 1,
            0,
            &Txn {
                kind: Some(multi(ops)),
                ..Default::default()
            },
        )
    };
    assert_eq!(
        applied.result,
        TxnResult::Multi(MultiOutcome::Failed {
            index: 8,
            error: TreeError {
                code: ErrorCode::NoNode,
                path: "/q/missing".into()
            }
        })
    );

    // The sequence counter was restored too: the next number is the one the
    // failed multi had used.
    let (p, _) = log.mk_with(CreateTxn {
        sequential: true,
        ..create("/q/s")
    });
    assert_eq!(p, "/q/s0000000001");
    assert!(log.tree.ephemerals(1).is_empty());
    assert_eq!(log.tree.get_data("/q/old").unwrap().0, b"before");
    assert_eq!(log.tree.node("/t").expect("/t").ttl_ms(), 100);
}

#[test]
fn multi_failure_reports_the_failing_index() {
    let mut log = Log::new();
    log.mk("/a");
    let e = log.step(multi(vec![
        Op::Check(CheckTxn {
            path: "/a".into(),
            version: Some(0),
        }),
        Op::Check(CheckTxn {
            path: "/a".into(),
            version: Some(4),
        }),
        Op::Create(create("/x")),
    ]));
    assert_eq!(
        e.result,
        TxnResult::Multi(MultiOutcome::Failed {
            index: 1,
            error: TreeError {
                code: ErrorCode::BadVersion,
                path: "/a".into()
            }
        })
    );
    let e = log.step(multi(vec![Op::Check(CheckTxn {
        path: "/b".into(),
        version: None,
    })]));
    assert!(matches!(
        e.result,
        TxnResult::Multi(MultiOutcome::Failed { index: 0, error }) if error.code == ErrorCode::NoNode
    ));
    // An op with no kind fails the multi.
    let e = log.step_fails(Kind::Multi(MultiTxn {
        ops: vec![
            MultiTxnOp {
                op: Some(Op::Create(create("/y"))),
            },
            MultiTxnOp { op: None },
        ],
    }));
    assert_eq!(code(e), ErrorCode::BadArguments);
}

// ---------------------------------------------------------------- sessions

#[test]
fn sessions_are_recorded() {
    let mut log = Log::new();
    log.session(3);
    log.session(1);
    assert_eq!(
        log.tree.sessions().map(|(id, _)| id).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(log.tree.session(3).unwrap().timeout_ms, 10_000);
    assert_eq!(log.tree.session(3).unwrap().password, vec![7; 16]);
    assert!(log.tree.session(2).is_none());
    // Id 0 means "no owner" in a stat, so it can never be a session.
    let r = log.step(Kind::CreateSession(CreateSessionTxn {
        session_id: 0,
        password: vec![],
        timeout_ms: 1,
    }));
    assert_eq!(r.result, TxnResult::Noop);
    assert!(log.tree.session(0).is_none());
}

#[test]
fn close_session_removes_its_ephemerals() {
    let mut log = Log::new();
    log.session(1);
    log.session(2);
    log.mk("/a");
    let eph = |p: &str, id| CreateTxn {
        ephemeral: true,
        session_id: id,
        ..create(p)
    };
    log.mk_with(eph("/z", 1));
    log.mk_with(eph("/a/e", 1));
    log.mk_with(CreateTxn {
        sequential: true,
        ..eph("/a/s", 1)
    });
    log.mk_with(eph("/other", 2));
    assert_eq!(log.tree.ephemerals(1), vec!["/a/e", "/a/s0000000001", "/z"]);
    let root_before = log.stat("/");

    let applied = log.step(Kind::CloseSession(CloseSessionTxn {
        session_id: 1,
        reason: 0,
    }));
    assert_eq!(
        applied.result,
        TxnResult::SessionClosed {
            deleted: vec!["/a/e".into(), "/a/s0000000001".into(), "/z".into()]
        }
    );
    assert_eq!(
        applied.triggers,
        vec![
            trigger("/a/e", EventType::NodeDeleted),
            trigger("/a", EventType::NodeChildrenChanged),
            trigger("/a/s0000000001", EventType::NodeDeleted),
            trigger("/a", EventType::NodeChildrenChanged),
            trigger("/z", EventType::NodeDeleted),
            trigger("/", EventType::NodeChildrenChanged),
        ]
    );
    assert!(log.tree.session(1).is_none());
    assert!(log.tree.ephemerals(1).is_empty());
    assert!(log.tree.stat("/z").is_none());
    assert_eq!(log.stat("/").cversion, root_before.cversion + 1);
    assert_eq!(log.stat("/a").cversion, 4);
    assert_eq!(log.tree.ephemerals(2), vec!["/other"]);
    // The closed session can no longer create ephemerals.
    assert_eq!(
        code(log.step_fails(Kind::Create(eph("/late", 1)))),
        ErrorCode::SessionExpired
    );

    // Closing it again, or an unknown one, changes nothing.
    let before = log.tree.clone();
    let applied = log.step(Kind::CloseSession(CloseSessionTxn {
        session_id: 1,
        reason: 1,
    }));
    assert_eq!(applied.result, TxnResult::SessionClosed { deleted: vec![] });
    assert!(applied.triggers.is_empty());
    let mut expected = before;
    expected.skip(log.zxid);
    assert_eq!(log.tree, expected);
}

#[test]
fn deleting_an_ephemeral_updates_the_index() {
    let mut log = Log::new();
    log.session(1);
    log.mk_with(CreateTxn {
        ephemeral: true,
        session_id: 1,
        ..create("/e")
    });
    log.step(delete("/e", None));
    assert!(log.tree.ephemerals(1).is_empty());
    let applied = log.step(Kind::CloseSession(CloseSessionTxn {
        session_id: 1,
        reason: 0,
    }));
    assert_eq!(applied.result, TxnResult::SessionClosed { deleted: vec![] });
}

// ----------------------------------------------------- containers and TTLs

#[test]
fn container_is_a_candidate_once_emptied() {
    let mut log = Log::new();
    log.mk_with(CreateTxn {
        container: true,
        ..create("/c")
    });
    // Never had a child: not a candidate (it was just created).
    assert!(log.tree.removal_candidates(i64::MAX).is_empty());
    log.mk("/c/x");
    assert!(
        log.tree.removal_candidates(i64::MAX).is_empty(),
        "has a child"
    );
    log.step(delete("/c/x", None));
    let c = log.stat("/c");
    assert_eq!(
        log.tree.removal_candidates(0),
        vec![GuardedDeleteTxn {
            path: "/c".into(),
            expected_mzxid: c.mzxid,
            expected_pzxid: c.pzxid,
        }]
    );
    let applied = log.step(guarded("/c", c));
    assert_eq!(applied.result, TxnResult::GuardedDelete { deleted: true });
    assert_eq!(
        applied.triggers,
        vec![
            trigger("/c", EventType::NodeDeleted),
            trigger("/", EventType::NodeChildrenChanged)
        ]
    );
    assert!(log.tree.stat("/c").is_none());
    assert!(log.tree.removal_candidates(i64::MAX).is_empty());
}

#[test]
fn guarded_delete_is_a_noop_when_modified_since() {
    let mut log = Log::new();
    log.mk_with(CreateTxn {
        container: true,
        ..create("/c")
    });
    log.mk("/c/x");
    log.step(delete("/c/x", None));
    let seen = log.stat("/c");

    // A child came and went: same mzxid, new pzxid.
    log.mk("/c/y");
    log.step(delete("/c/y", None));
    let noop = |log: &mut Log, kind| {
        let mut before = log.tree.clone();
        let applied = log.step(kind);
        before.skip(log.zxid);
        assert_eq!(applied.result, TxnResult::GuardedDelete { deleted: false });
        assert!(applied.triggers.is_empty());
        assert_eq!(log.tree, before);
    };
    noop(&mut log, guarded("/c", seen));

    // The data changed: new mzxid.
    let seen = log.stat("/c");
    log.step(set_data("/c", b"x", None));
    noop(&mut log, guarded("/c", seen));

    // It has a child now, whatever the zxids say.
    log.mk("/c/z");
    let now = log.stat("/c");
    noop(&mut log, guarded("/c", now));

    // Missing, root, bad path.
    noop(&mut log, guarded("/missing", Stat::default()));
    let root = log.stat("/");
    noop(&mut log, guarded("/", root));
    noop(&mut log, guarded("c", Stat::default()));
    let now = log.stat("/c");
    noop(&mut log, guarded("/c/", now));

    log.step(delete("/c/z", None));
    let applied = log.step(guarded("/c", log.stat("/c")));
    assert_eq!(applied.result, TxnResult::GuardedDelete { deleted: true });
}

#[test]
fn ttl_node_is_a_candidate_after_its_ttl() {
    let mut log = Log::new();
    let (_, stat) = log.mk_with(CreateTxn {
        ttl_ms: 1000,
        ..create("/t")
    });
    let mtime = stat.mtime_ms;
    assert!(
        candidate_paths(&log.tree, mtime + 1000).is_empty(),
        "not yet: the bound is exclusive"
    );
    assert_eq!(candidate_paths(&log.tree, mtime + 1001), vec!["/t"]);

    // A write restarts the clock.
    log.step(set_data("/t", b"again", None));
    let mtime = log.stat("/t").mtime_ms;
    assert!(candidate_paths(&log.tree, mtime + 1000).is_empty());

    // A TTL node with children stays.
    log.mk("/t/child");
    assert!(candidate_paths(&log.tree, i64::MAX).is_empty());
    log.step(delete("/t/child", None));
    let stat = log.stat("/t");
    let candidates = log.tree.removal_candidates(i64::MAX);
    assert_eq!(candidates.len(), 1);
    assert_eq!(candidates[0].expected_pzxid, stat.pzxid);
    let applied = log.step(Kind::GuardedDelete(candidates[0].clone()));
    assert_eq!(applied.result, TxnResult::GuardedDelete { deleted: true });
    assert_eq!(log.tree.node_count(), 1);
}

/// A set_data with a TTL gives a TTL node that TTL from this write on;
/// without one (0) the TTL stays; a node created without a TTL refuses one.
#[test]
fn set_data_may_change_a_ttl_nodes_ttl() {
    let mut log = Log::new();
    log.mk_with(CreateTxn {
        ttl_ms: 1000,
        ..create("/t")
    });
    let with_ttl = |ttl_ms| {
        Kind::SetData(SetDataTxn {
            data_null: false,
            path: "/t".into(),
            data: b"renewed".to_vec(),
            version: None,
            ttl_ms,
        })
    };
    log.step(with_ttl(5000));
    let mtime = log.stat("/t").mtime_ms;
    assert_eq!(log.tree.node("/t").expect("/t").ttl_ms(), 5000);
    assert!(candidate_paths(&log.tree, mtime + 5000).is_empty());
    assert_eq!(candidate_paths(&log.tree, mtime + 5001), vec!["/t"]);
    // Shorter again; then a plain write keeps it.
    log.step(with_ttl(200));
    log.step(set_data("/t", b"plain", None));
    let mtime = log.stat("/t").mtime_ms;
    assert_eq!(log.tree.node("/t").expect("/t").ttl_ms(), 200);
    assert_eq!(candidate_paths(&log.tree, mtime + 201), vec!["/t"]);

    log.mk("/plain");
    let e = log.step_fails(Kind::SetData(SetDataTxn {
        data_null: false,
        path: "/plain".into(),
        data: b"x".to_vec(),
        version: None,
        ttl_ms: 1000,
    }));
    assert_eq!(
        e,
        TreeError {
            code: ErrorCode::BadArguments,
            path: "/plain".into()
        }
    );
    assert_eq!(log.tree.node("/plain").expect("/plain").ttl_ms(), 0);
}

#[test]
fn ttl_may_be_ephemeral_and_huge() {
    let mut log = Log::new();
    log.session(4);
    log.mk_with(CreateTxn {
        ttl_ms: 10,
        ephemeral: true,
        session_id: 4,
        ..create("/te")
    });
    log.mk_with(CreateTxn {
        ttl_ms: u64::MAX,
        ..create("/forever")
    });
    log.mk_with(CreateTxn {
        ttl_ms: 10,
        sequential: true,
        ..create("/ts-")
    });
    // No overflow with a u64::MAX TTL or an extreme clock.
    assert_eq!(
        candidate_paths(&log.tree, i64::MAX),
        vec!["/te", "/ts-0000000002"]
    );
    assert!(candidate_paths(&log.tree, i64::MIN).is_empty());
}

#[test]
fn candidates_are_sorted_across_kinds() {
    let mut log = Log::new();
    for (p, container) in [("/d", true), ("/b", false), ("/c", true), ("/a", false)] {
        log.mk_with(CreateTxn {
            container,
            ttl_ms: if container { 0 } else { 1 },
            ..create(p)
        });
        log.mk(&format!("{p}/x"));
        log.step(delete(&format!("{p}/x"), None));
    }
    assert_eq!(
        candidate_paths(&log.tree, i64::MAX),
        vec!["/a", "/b", "/c", "/d"]
    );
}

// ---------------------------------------------------------------- snapshot

/// A tree with every kind of node and a session or two.
fn rich_tree() -> DataTree {
    let mut log = Log::new();
    log.session(5);
    log.session(9);
    log.mk("/a");
    log.mk("/a-b");
    log.mk("/a/b");
    log.mk_with(CreateTxn {
        container: true,
        ..create("/a/c")
    });
    log.mk("/a/c/x");
    log.mk_with(CreateTxn {
        ttl_ms: 50,
        ..create("/t")
    });
    log.mk_with(CreateTxn {
        ephemeral: true,
        session_id: 5,
        sequential: true,
        ..create("/a/e-")
    });
    log.step(set_data("/a/b", b"bytes", None));
    log.step(Kind::SetAcl(SetAclTxn {
        path: "/a".into(),
        acl: vec![Acl {
            perms: perms::ALL,
            scheme: "digest".into(),
            id: "x:y".into(),
        }],
        aversion: None,
    }));
    log.tree
}

#[test]
fn snapshot_round_trips() {
    let tree = rich_tree();
    let snap = tree.to_snapshot();
    let paths: Vec<&str> = snap.nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "/",
            "/a",
            "/a-b",
            "/a/b",
            "/a/c",
            "/a/c/x",
            "/a/e-0000000002",
            "/t"
        ]
    );
    assert_eq!(
        snap.sessions
            .iter()
            .map(|s| s.session_id)
            .collect::<Vec<_>>(),
        vec![5, 9]
    );
    assert_eq!(snap.applied_index, tree.applied_index());
    let loaded = DataTree::from_snapshot(&snap).unwrap();
    assert_eq!(loaded, tree);
    assert_eq!(loaded.to_snapshot(), snap);
    assert_eq!(loaded.ephemerals(5), vec!["/a/e-0000000002"]);

    // Through the bytes, too.
    use prost::Message;
    let bytes = snap.encode_to_vec();
    let decoded = Snapshot::decode(bytes.as_slice()).unwrap();
    assert_eq!(DataTree::from_snapshot(&decoded).unwrap(), tree);
}

#[test]
fn from_snapshot_refuses_broken_snapshots() {
    let good = rich_tree().to_snapshot();
    let index = |snap: &Snapshot, p: &str| snap.nodes.iter().position(|n| n.path == p).unwrap();
    let broken = |edit: &dyn Fn(&mut Snapshot)| {
        let mut snap = good.clone();
        edit(&mut snap);
        DataTree::from_snapshot(&snap).unwrap_err()
    };

    assert_eq!(broken(&|s| s.nodes.clear()), SnapshotError::MissingRoot);
    assert_eq!(
        broken(&|s| s.nodes.swap(0, 1)),
        SnapshotError::RootNotFirst { found: "/a".into() }
    );
    assert_eq!(
        broken(&|s| s.nodes[0].stat.as_mut().unwrap().ephemeral_owner = 5),
        SnapshotError::BadRoot
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/b");
            s.nodes[i].path = "/a//b".into();
        }),
        SnapshotError::InvalidPath {
            path: "/a//b".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let dup = s.nodes[1].clone();
            s.nodes.push(dup);
        }),
        SnapshotError::DuplicateNode { path: "/a".into() }
    );
    assert_eq!(
        broken(&|s| {
            let root = s.nodes[0].clone();
            s.nodes.push(root);
        }),
        SnapshotError::DuplicateNode { path: "/".into() }
    );
    assert_eq!(
        broken(&|s| {
            s.nodes.remove(index(s, "/a/c"));
        }),
        SnapshotError::MissingParent {
            path: "/a/c/x".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/c/x");
            let n = s.nodes.remove(i);
            s.nodes.insert(1, n);
        }),
        SnapshotError::MissingParent {
            path: "/a/c/x".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/b");
            s.nodes[i].stat = None;
        }),
        SnapshotError::MissingStat {
            path: "/a/b".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/b");
            s.nodes[i].data.push(0);
        }),
        SnapshotError::DataLengthMismatch {
            path: "/a/b".into(),
            stat: 5,
            actual: 6
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a");
            s.nodes[i].stat.as_mut().unwrap().num_children = 7;
        }),
        SnapshotError::ChildCountMismatch {
            path: "/a".into(),
            stat: 7,
            actual: 3
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/b");
            s.nodes[i].acl.clear();
        }),
        SnapshotError::EmptyAcl {
            path: "/a/b".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/t");
            s.nodes[i].container = true;
        }),
        SnapshotError::ConflictingFlags { path: "/t".into() }
    );
    assert_eq!(
        broken(&|s| s.sessions.retain(|x| x.session_id != 5)),
        SnapshotError::UnknownOwner {
            path: "/a/e-0000000002".into(),
            session_id: 5
        }
    );
    assert_eq!(
        broken(&|s| {
            let dup = s.sessions[0].clone();
            s.sessions.push(dup);
        }),
        SnapshotError::DuplicateSession { session_id: 5 }
    );
    assert_eq!(
        broken(&|s| s.sessions[0].session_id = 0),
        SnapshotError::ReservedSessionId
    );
    assert_eq!(
        broken(&|s| {
            let mut child = s.nodes[index(s, "/a/b")].clone();
            child.path = "/a/e-0000000002/kid".into();
            s.nodes.push(child);
            let i = index(s, "/a/e-0000000002");
            s.nodes[i].stat.as_mut().unwrap().num_children = 1;
        }),
        SnapshotError::ChildOfEphemeral {
            path: "/a/e-0000000002/kid".into()
        }
    );
    assert_eq!(
        broken(&|s| {
            let i = index(s, "/a/b");
            s.nodes[i].data = vec![0; DATA_BYTES_MAX + 1];
        }),
        SnapshotError::DataTooLarge {
            path: "/a/b".into(),
            actual: DATA_BYTES_MAX + 1
        }
    );
    // Zxids after the snapshot's own index cannot have been applied.
    assert!(matches!(
        broken(&|s| s.applied_index = 2),
        SnapshotError::Inconsistent(_)
    ));
    // Errors name what is wrong.
    let e = broken(&|s| {
        s.nodes.remove(index(s, "/a/c"));
    });
    assert_eq!(
        e.to_string(),
        "node /a/c/x comes before its parent, or its parent is missing"
    );
}

#[test]
fn same_log_same_tree() {
    assert_eq!(rich_tree(), rich_tree());
    assert_eq!(rich_tree().to_snapshot(), rich_tree().to_snapshot());
}
