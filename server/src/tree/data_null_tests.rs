//! Null data (ZooKeeper's `create(path, null)`), kept apart from empty data
//! through create, set_data, a failed multi's undo, and a snapshot; and the
//! approximate data size that follows every change.

use super::*;
use crate::proto::{
    multi_txn_op::Op, txn::Kind, CheckTxn, CreateTxn, MultiTxn, MultiTxnOp, SetDataTxn, Txn,
};

struct Log {
    tree: DataTree,
    zxid: u64,
}

impl Log {
    fn step(&mut self, kind: Kind) -> TxnResult {
        self.zxid += 1;
        let txn = Txn {
            kind: Some(kind),
            ..Default::default()
        };
        let result = self.tree.apply(self.zxid, 1_000, &txn).result;
        self.tree.check_invariants().expect("invariants after step");
        result
    }

    fn null(&self, path: &str) -> bool {
        self.tree.node(path).expect("exists").data_is_null()
    }
}

fn create(path: &str, data: &[u8], data_null: bool) -> CreateTxn {
    CreateTxn {
        path: path.into(),
        data: data.to_vec(),
        data_null,
        ..Default::default()
    }
}

fn set(path: &str, data: &[u8], data_null: bool) -> SetDataTxn {
    SetDataTxn {
        ttl_ms: 0,
        path: path.into(),
        data: data.to_vec(),
        version: None,
        data_null,
    }
}

#[test]
fn null_data_is_kept_apart_from_empty_data() {
    let mut log = Log {
        tree: DataTree::new(),
        zxid: 0,
    };
    assert_eq!(log.tree.data_bytes(), 1, "the root's path");
    log.step(Kind::Create(create("/null", b"", true)));
    log.step(Kind::Create(create("/empty", b"", false)));
    log.step(Kind::Create(create("/full", b"abc", false)));
    assert!(log.null("/null"));
    assert!(!log.null("/empty"));
    assert!(!log.null("/full"));
    assert_eq!(log.tree.stat("/null").unwrap().data_length, 0);
    // "/" + "/null" + "/empty" + "/full" and 3 bytes of data.
    assert_eq!(log.tree.data_bytes(), 1 + 5 + 6 + 5 + 3);

    log.step(Kind::SetData(set("/full", b"", true)));
    assert!(log.null("/full"));
    assert_eq!(log.tree.data_bytes(), 1 + 5 + 6 + 5);
    log.step(Kind::SetData(set("/null", b"xy", false)));
    assert!(!log.null("/null"));
    assert_eq!(log.tree.node("/null").unwrap().data(), b"xy");

    // A failed multi puts the null flag (and the size) back.
    let before = log.tree.clone();
    let failed = log.step(Kind::Multi(MultiTxn {
        ops: vec![
            MultiTxnOp {
                op: Some(Op::SetData(set("/full", b"1234", false))),
            },
            MultiTxnOp {
                op: Some(Op::SetData(set("/empty", b"", true))),
            },
            MultiTxnOp {
                op: Some(Op::Check(CheckTxn {
                    path: "/missing".into(),
                    version: None,
                })),
            },
        ],
    }));
    assert!(matches!(
        failed,
        TxnResult::Multi(MultiOutcome::Failed { .. })
    ));
    assert!(log.null("/full"));
    assert!(!log.null("/empty"));
    assert_eq!(log.tree.data_bytes(), before.data_bytes());

    // A snapshot keeps it.
    let restored = DataTree::from_snapshot(&log.tree.to_snapshot()).unwrap();
    assert_eq!(restored, log.tree);
    assert!(restored.node("/full").unwrap().data_is_null());
    assert!(!restored.node("/empty").unwrap().data_is_null());
    assert_eq!(restored.data_bytes(), log.tree.data_bytes());

    // Deleting gives the bytes back.
    log.step(Kind::Delete(crate::proto::DeleteTxn {
        path: "/null".into(),
        version: None,
    }));
    assert_eq!(log.tree.data_bytes(), 1 + 6 + 5);
}

#[test]
fn a_snapshot_with_null_data_that_holds_bytes_is_refused() {
    let mut tree = DataTree::new();
    tree.apply(
        1,
        1_000,
        &Txn {
            kind: Some(Kind::Create(create("/a", b"x", false))),
            ..Default::default()
        },
    );
    let mut snap = tree.to_snapshot();
    let node = snap.nodes.iter_mut().find(|n| n.path == "/a").unwrap();
    node.data_null = true;
    let err = DataTree::from_snapshot(&snap).unwrap_err();
    assert!(err.to_string().contains("null data"), "{err}");
}
