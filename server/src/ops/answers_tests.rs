//! The wire answer of a write is shaped here from what the tree says it
//! did (`write_answer`): a copy of a write, which the tree answers with
//! what its first apply recorded, gets exactly the answer the first apply
//! got (xid, zxid, code, message and result), also after a snapshot.
//! Every door answers from this one shape (the ZooKeeper door translates
//! it; the HTTP and gRPC gateway is a native client).

use warden_protocol::pb::{self, ErrorCode};

use super::write_answer;
use crate::proto::{
    multi_txn_op, txn::Kind, AuthId, AuthInfo, CheckTxn, CreateSessionTxn, CreateTxn, DeleteTxn,
    MultiTxn, MultiTxnOp, SetAclTxn, SetDataTxn, Txn,
};
use crate::tree::{DataTree, TxnResult};

const SESSION: u64 = 11;

struct Log {
    tree: DataTree,
    zxid: u64,
}

impl Log {
    fn new() -> Log {
        let mut log = Log {
            tree: DataTree::new(),
            zxid: 0,
        };
        log.answer(&Txn {
            kind: Some(Kind::CreateSession(CreateSessionTxn {
                session_id: SESSION,
                password: vec![3; 16],
                timeout_ms: 10_000,
            })),
            ..Default::default()
        });
        log
    }

    /// Applies `txn` and shapes its answer, as the origin's door does.
    fn answer(&mut self, txn: &Txn) -> (TxnResult, pb::Response) {
        self.zxid += 1;
        let applied = self.tree.apply(self.zxid, 1_000, txn);
        let answer = write_answer(txn, self.zxid, &applied.result);
        (applied.result, answer)
    }
}

fn create(path: &str, sequential: bool) -> CreateTxn {
    CreateTxn {
        path: path.into(),
        data: b"d".to_vec(),
        sequential,
        ..Default::default()
    }
}

/// A native write of the session, made by a connection holding `ids`
/// (its xid `xid`, unless the test numbers it).
fn native(xid: u64, kind: Kind, ids: &[&str]) -> Txn {
    Txn {
        kind: Some(kind),
        session_id: SESSION,
        xid,
        auth: Some(AuthInfo {
            ids: ids
                .iter()
                .map(|id| AuthId {
                    scheme: "digest".into(),
                    id: (*id).into(),
                })
                .collect(),
        }),
        ..Default::default()
    }
}

fn op(op: multi_txn_op::Op) -> MultiTxnOp {
    MultiTxnOp { op: Some(op) }
}

/// Writes of every kind, successful and refused; each applied, then a
/// copy of each after all of them (and again from a restored snapshot):
/// every copy changes nothing and gets its first answer.
#[test]
fn a_copy_of_a_write_is_answered_as_its_first_apply_was() {
    let mut log = Log::new();
    let locked = vec![pb::Acl {
        perms: warden_protocol::perms::READ,
        scheme: "digest".into(),
        id: "owner:hash".into(),
    }];
    let writes: Vec<Txn> = [
        native(1, Kind::Create(create("/q", false)), &[]),
        native(2, Kind::Create(create("/q/item-", true)), &[]),
        native(3, Kind::Create(create("/q", false)), &[]),
        native(
            4,
            Kind::SetData(SetDataTxn {
                path: "/q".into(),
                data: b"e".to_vec(),
                version: Some(0),
                ..Default::default()
            }),
            &[],
        ),
        native(
            5,
            Kind::SetData(SetDataTxn {
                path: "/q".into(),
                version: Some(0),
                ..Default::default()
            }),
            &[],
        ),
        native(
            6,
            Kind::SetData(SetDataTxn {
                path: "/q".into(),
                ttl_ms: 5_000,
                ..Default::default()
            }),
            &[],
        ),
        native(
            7,
            Kind::Multi(MultiTxn {
                ops: vec![
                    op(multi_txn_op::Op::Check(CheckTxn {
                        path: "/q".into(),
                        version: Some(1),
                    })),
                    op(multi_txn_op::Op::Create(create("/q/m-", true))),
                    op(multi_txn_op::Op::SetData(SetDataTxn {
                        path: "/q".into(),
                        ..Default::default()
                    })),
                ],
            }),
            &[],
        ),
        native(
            8,
            Kind::Multi(MultiTxn {
                ops: vec![
                    op(multi_txn_op::Op::Create(create("/q/n", false))),
                    op(multi_txn_op::Op::Delete(DeleteTxn {
                        path: "/missing".into(),
                        version: None,
                    })),
                    op(multi_txn_op::Op::Create(create("/q/o", false))),
                ],
            }),
            &[],
        ),
        native(
            12,
            Kind::Delete(DeleteTxn {
                path: "/q/item-0000000000".into(),
                version: None,
            }),
            &[],
        ),
        native(
            13,
            Kind::Delete(DeleteTxn {
                path: "/q/item-0000000000".into(),
                version: None,
            }),
            &[],
        ),
        native(
            9,
            Kind::SetAcl(SetAclTxn {
                path: "/q".into(),
                acl: locked,
                aversion: None,
            }),
            &[],
        ),
        // Refused by the ACL just set: the answer names who asked.
        native(10, Kind::Create(create("/q/x", false)), &["alice:hash"]),
        native(
            11,
            Kind::Multi(MultiTxn {
                ops: vec![op(multi_txn_op::Op::Create(create("/q/y", false)))],
            }),
            &["bob:hash"],
        ),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, mut txn)| {
        txn.xid = i as u64 + 1;
        txn
    })
    .collect();
    let mut firsts = Vec::new();
    for txn in &writes {
        let (result, answer) = log.answer(txn);
        assert!(
            !matches!(
                result,
                TxnResult::Duplicate { .. } | TxnResult::Stale { .. }
            ),
            "{result:?}"
        );
        assert_eq!((answer.xid, answer.zxid), (txn.xid, log.zxid));
        firsts.push(answer);
    }
    // The shapes the doors rely on, as the first apply gave them.
    let code = |i: usize| ErrorCode::try_from(firsts[i].error).expect("a code");
    assert_eq!(code(2), ErrorCode::NodeExists);
    assert_eq!(code(4), ErrorCode::BadVersion);
    assert_eq!(code(5), ErrorCode::BadArguments);
    assert!(
        firsts[5].message.contains("ttl_ms"),
        "{}",
        firsts[5].message
    );
    assert_eq!(code(7), ErrorCode::NoNode);
    assert!(
        matches!(&firsts[7].result, Some(pb::response::Result::Multi(m)) if m.results.len() == 3)
    );
    assert_eq!((code(8), code(9)), (ErrorCode::Ok, ErrorCode::NoNode));
    assert_eq!((code(11), code(12)), (ErrorCode::NoAuth, ErrorCode::NoAuth));
    assert!(
        firsts[11].message.contains("alice"),
        "{}",
        firsts[11].message
    );
    assert!(firsts[12].message.contains("bob"), "{}", firsts[12].message);

    let snapshot = log.tree.to_snapshot();
    for (txn, first) in writes.iter().zip(&firsts) {
        let before = log.tree.clone();
        let (result, again) = log.answer(txn);
        assert!(matches!(result, TxnResult::Duplicate { .. }), "{result:?}");
        assert_eq!(&again, first, "the copy of write {}", txn.xid);
        let mut unchanged = before;
        unchanged.skip(log.zxid);
        assert_eq!(log.tree, unchanged, "the copy of write {} applied", txn.xid);
    }
    // On a server that restored the snapshot (a follower that becomes the
    // session's server, a restart): the same answers.
    let mut restored = Log {
        tree: DataTree::from_snapshot(&snapshot).expect("loads"),
        zxid: log.zxid,
    };
    for (txn, first) in writes.iter().zip(&firsts) {
        let (_, again) = restored.answer(txn);
        assert_eq!(
            &again, first,
            "after a snapshot, the copy of write {}",
            txn.xid
        );
    }
}

/// A write the session's record refuses is answered, not recorded: it
/// says why it was not applied.
#[test]
fn a_write_out_of_its_sessions_order_is_answered_session_moved() {
    let mut log = Log::new();
    log.answer(&native(5, Kind::Create(create("/five", false)), &[]));
    let (result, answer) = log.answer(&native(3, Kind::Create(create("/three", false)), &[]));
    assert_eq!(result, TxnResult::Stale { latest_xid: 5 });
    assert_eq!(answer.error, ErrorCode::SessionMoved as i32);
    assert!(answer.message.contains("not applied"), "{}", answer.message);
    assert_eq!(log.tree.node("/three"), None);
}
