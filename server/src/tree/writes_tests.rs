//! Exactly-once client writes (`writes.rs`): a second copy of a write
//! changes nothing and gets the first one's answer, whatever came between;
//! a write out of its session's order is refused; a resume's bind starts
//! a new epoch; snapshots keep the record.

use super::*;
use crate::proto::{
    txn::Kind, BindSessionTxn, CloseSessionTxn, CreateSessionTxn, CreateTxn, RecentResult,
    SnapshotSession, Txn,
};

const SESSION: u64 = 9;

struct Log {
    tree: DataTree,
    zxid: u64,
}

impl Log {
    /// A tree with session [`SESSION`] (bound at its create: epoch 1) and
    /// the node `/q`.
    fn new() -> Log {
        let mut log = Log {
            tree: DataTree::new(),
            zxid: 0,
        };
        log.apply(&Txn {
            kind: Some(Kind::CreateSession(CreateSessionTxn {
                session_id: SESSION,
                password: vec![7; 16],
                timeout_ms: 10_000,
            })),
            ..Default::default()
        });
        log.apply(&Txn {
            kind: Some(Kind::Create(create("/q", false, b""))),
            ..Default::default()
        });
        log
    }

    fn apply(&mut self, txn: &Txn) -> Applied {
        self.zxid += 1;
        let applied = self.tree.apply(self.zxid, 1_000, txn);
        self.tree
            .check_invariants()
            .expect("invariants after apply");
        applied
    }

    fn epoch(&self) -> u64 {
        self.tree.session(SESSION).expect("session").writes.epoch
    }

    /// Children of `/q` holding `payload`.
    fn copies(&self, payload: &[u8]) -> usize {
        let q = self.tree.node("/q").expect("/q");
        q.children()
            .filter(|c| {
                self.tree
                    .node(&format!("/q/{c}"))
                    .is_some_and(|n| n.data() == payload)
            })
            .count()
    }
}

fn create(path: &str, sequential: bool, data: &[u8]) -> CreateTxn {
    CreateTxn {
        path: path.to_string(),
        data: data.to_vec(),
        sequential,
        ..Default::default()
    }
}

/// A ZooKeeper-door sequential create under `/q`: the write `seq` of the
/// connection bound at `epoch`, `acked_seq` acknowledged.
fn zk_create(epoch: u64, seq: u64, acked_seq: u64, payload: &[u8]) -> Txn {
    Txn {
        kind: Some(Kind::Create(create("/q/item-", true, payload))),
        session_id: SESSION,
        epoch,
        seq,
        acked_seq,
        ..Default::default()
    }
}

/// A native-door create of `path`, the client's request `xid`.
fn native_create(xid: u64, path: &str) -> Txn {
    Txn {
        kind: Some(Kind::Create(create(path, false, b"data"))),
        session_id: SESSION,
        xid,
        ..Default::default()
    }
}

fn created_path(a: &Applied) -> String {
    let result = match &a.result {
        TxnResult::Duplicate { first } => match first.as_ref() {
            Recorded::Outcome { result, .. } => result,
            other => panic!("not an outcome: {other:?}"),
        },
        result => result,
    };
    match result {
        TxnResult::Create(Ok((path, _))) => path.clone(),
        other => panic!("not a create: {other:?}"),
    }
}

/// What a copy of the write that applied at `zxid` with `first` gets.
fn duplicate_of(zxid: u64, first: &Applied) -> TxnResult {
    TxnResult::Duplicate {
        first: Box::new(Recorded::Outcome {
            zxid,
            result: first.result.clone(),
        }),
    }
}

/// The schedule of issue 27: a server re-proposes a write after a leader
/// change, and the copy lands after far more than 64 later writes of the
/// session (a pipeline of 1,000 is allowed). It must apply once and get
/// its original answer. Red before: ZooKeeper-door writes carried a
/// server-made xid that only the session's last 64 answers recognised, so
/// the copy made a second node.
#[test]
fn a_write_proposed_again_after_many_later_writes_applies_once_with_its_first_answer() {
    let mut log = Log::new();
    let epoch = log.epoch();
    let first = log.apply(&zk_create(epoch, 1, 0, b"w1"));
    let first_zxid = log.zxid;
    assert!(matches!(first.result, TxnResult::Create(Ok(_))));
    // 200 later writes, none of them acknowledging the first.
    for seq in 2..=201 {
        let payload = format!("w{seq}");
        let a = log.apply(&zk_create(epoch, seq, 0, payload.as_bytes()));
        assert!(matches!(a.result, TxnResult::Create(Ok(_))), "{a:?}");
    }
    let before = log.tree.clone();
    let again = log.apply(&zk_create(epoch, 1, 0, b"w1"));
    assert!(
        matches!(again.result, TxnResult::Duplicate { .. }),
        "{:?}",
        again.result
    );
    assert_eq!(log.copies(b"w1"), 1, "the copy applied a second time");
    assert_eq!(created_path(&again), created_path(&first));
    assert_eq!(
        again.result,
        duplicate_of(first_zxid, &first),
        "what the first apply did"
    );
    assert!(again.triggers.is_empty());
    let mut unchanged = before;
    unchanged.skip(log.zxid);
    assert_eq!(log.tree, unchanged, "a duplicate changed the tree");
    // A copy of a write in the middle too.
    let mid = log.apply(&zk_create(epoch, 150, 0, b"w150"));
    assert!(matches!(mid.result, TxnResult::Duplicate { .. }));
    assert_eq!(log.copies(b"w150"), 1);
}

/// The same schedule with the old tagging (a server-made xid, as under
/// `--unsafe-bounded-dedup`): the copy is not recognised past the last
/// [`RECENT_RESULTS_MAX`](super::node::RECENT_RESULTS_MAX) answers and
/// makes a second node. What the test above was red on, kept as the
/// known-bad mode a test of the whole system can show.
#[test]
fn with_server_made_xids_such_a_copy_applies_twice() {
    use crate::tree::SERVER_XID_BIT;
    let mut log = Log::new();
    let old = |xid: u64, payload: &[u8]| Txn {
        kind: Some(Kind::Create(create("/q/item-", true, payload))),
        session_id: SESSION,
        xid: SERVER_XID_BIT | xid,
        ..Default::default()
    };
    log.apply(&old(1, b"w1"));
    for xid in 2..=201 {
        log.apply(&old(xid, format!("w{xid}").as_bytes()));
    }
    assert!(matches!(
        log.apply(&old(1, b"w1")).result,
        TxnResult::Create(Ok(_))
    ));
    assert_eq!(log.copies(b"w1"), 2);
}

/// An acknowledged answer is forgotten; a copy of its write still never
/// applies (refused, not answered), and neither does a write that lost its
/// place behind a later one.
#[test]
fn acknowledged_answers_are_forgotten_and_their_copies_still_refused() {
    let mut log = Log::new();
    let epoch = log.epoch();
    log.apply(&zk_create(epoch, 1, 0, b"a"));
    log.apply(&zk_create(epoch, 2, 0, b"b"));
    // Write 4 applies before 3 (3 was dropped with a leader).
    log.apply(&zk_create(epoch, 4, 2, b"d"));
    let writes = &log.tree.session(SESSION).unwrap().writes;
    assert_eq!(writes.answers.keys().copied().collect::<Vec<_>>(), vec![4]);
    assert_eq!(writes.applied_seq, 4);
    for (seq, payload) in [(1, &b"a"[..]), (3, b"c")] {
        let a = log.apply(&zk_create(epoch, seq, 0, payload));
        assert_eq!(a.result, TxnResult::Stale { latest_xid: 4 }, "write {seq}");
    }
    assert_eq!((log.copies(b"a"), log.copies(b"c")), (1, 0));
}

/// A resume binds the session to its new connection: writes sent on the
/// one it left are refused however late they come, the new connection's
/// count from 1 again, and a second copy of the bind changes nothing.
#[test]
fn a_bind_starts_a_new_epoch_and_refuses_the_old_connections_writes() {
    let mut log = Log::new();
    let old = log.epoch();
    log.apply(&zk_create(old, 1, 0, b"old-1"));
    let bind = Txn {
        kind: Some(Kind::BindSession(BindSessionTxn {
            session_id: SESSION,
            expected_epoch: old,
        })),
        ..Default::default()
    };
    let bound = log.apply(&bind);
    let new = log.zxid;
    assert_eq!(bound.result, TxnResult::SessionBound { epoch: Some(new) });
    assert_eq!(log.epoch(), new);
    // The old connection's write 2, and a copy of its write 1.
    for (seq, payload) in [(2, &b"old-2"[..]), (1, b"old-1")] {
        let a = log.apply(&zk_create(old, seq, 0, payload));
        assert_eq!(a.result, TxnResult::Moved { epoch: new });
    }
    assert_eq!((log.copies(b"old-1"), log.copies(b"old-2")), (1, 0));
    // The new connection's writes start at 1.
    let a = log.apply(&zk_create(new, 1, 0, b"new-1"));
    assert!(matches!(a.result, TxnResult::Create(Ok(_))));
    // A second copy of the bind: the epoch stays.
    assert_eq!(
        log.apply(&bind).result,
        TxnResult::SessionBound { epoch: None }
    );
    assert_eq!(log.epoch(), new);
    // A bind of a session the tree does not have binds nothing.
    let gone = Txn {
        kind: Some(Kind::BindSession(BindSessionTxn {
            session_id: 77,
            expected_epoch: 0,
        })),
        ..Default::default()
    };
    assert_eq!(
        log.apply(&gone).result,
        TxnResult::SessionBound { epoch: None }
    );
}

/// The record survives a snapshot; a snapshot written before the highest
/// native xid was kept still refuses an older xid; one claiming answers
/// above what was applied is refused.
#[test]
fn snapshots_keep_the_record_and_old_ones_still_judge() {
    let mut log = Log::new();
    let epoch = log.epoch();
    log.apply(&zk_create(epoch, 1, 0, b"a"));
    log.apply(&native_create(5, "/n5"));
    let snap = log.tree.to_snapshot();
    let restored = DataTree::from_snapshot(&snap).unwrap();
    assert_eq!(restored, log.tree);
    let mut log2 = Log {
        tree: restored,
        zxid: log.zxid,
    };
    assert!(matches!(
        log2.apply(&zk_create(epoch, 1, 0, b"a")).result,
        TxnResult::Duplicate { .. }
    ));

    // As an older server wrote it: no applied_xid, epoch or answers.
    let mut old = snap.clone();
    let s: &mut SnapshotSession = &mut old.sessions[0];
    s.applied_xid = 0;
    s.epoch = 0;
    s.applied_seq = 0;
    s.answers.clear();
    s.recent = vec![RecentResult {
        xid: 5,
        response: vec![],
        outcome: None,
    }];
    let mut log3 = Log {
        tree: DataTree::from_snapshot(&old).unwrap(),
        zxid: log.zxid,
    };
    assert_eq!(
        log3.apply(&native_create(3, "/n3")).result,
        TxnResult::Stale { latest_xid: 5 }
    );

    let mut bad = snap;
    bad.sessions[0].applied_seq = 0;
    assert!(matches!(
        DataTree::from_snapshot(&bad),
        Err(SnapshotError::Inconsistent(_))
    ));
}

#[test]
fn a_write_older_than_the_sessions_latest_is_stale_and_changes_nothing() {
    let mut log = Log::new();
    let tagged = |log: &mut Log, xid: u64, path: &str| log.apply(&native_create(xid, path)).result;
    assert!(matches!(
        tagged(&mut log, 5, "/five"),
        TxnResult::Create(Ok(_))
    ));
    let mut before = log.tree.clone();
    assert_eq!(
        tagged(&mut log, 3, "/three"),
        TxnResult::Stale { latest_xid: 5 }
    );
    before.skip(log.zxid);
    assert_eq!(log.tree, before, "a stale write changed the tree");
    // The latest is still answered from its first apply; newer ones apply.
    assert!(matches!(
        tagged(&mut log, 5, "/five"),
        TxnResult::Duplicate { .. }
    ));
    assert!(matches!(
        tagged(&mut log, 6, "/six"),
        TxnResult::Create(Ok(_))
    ));
    // Untagged writes (server-made) are never stale.
    assert!(matches!(
        tagged(&mut log, 0, "/zero"),
        TxnResult::Create(Ok(_))
    ));
    // Older than the latest by more than the answers kept: still refused.
    for xid in 7..=100 {
        tagged(&mut log, xid, &format!("/n{xid}"));
    }
    assert_eq!(
        tagged(&mut log, 6, "/six"),
        TxnResult::Stale { latest_xid: 100 }
    );
}

#[test]
fn a_retried_write_gets_the_answer_its_first_apply_recorded() {
    let mut log = Log::new();
    let txn = native_create(4, "/once");
    let first = log.apply(&txn);
    let first_zxid = log.zxid;
    let recorded = log.tree.recorded(&txn).expect("a tagged write is recorded");
    assert_eq!(
        recorded,
        Recorded::Outcome {
            zxid: first_zxid,
            result: first.result.clone()
        }
    );
    let retry = log.apply(&txn);
    assert_eq!(
        retry.result,
        duplicate_of(first_zxid, &first),
        "the retry gets what the first apply did"
    );
    // Snapshots keep the records.
    let restored = DataTree::from_snapshot(&log.tree.to_snapshot()).unwrap();
    assert_eq!(restored, log.tree);
    assert_eq!(restored.recorded(&txn), Some(recorded));
    // An untagged write of the session records nothing.
    let recent = |log: &Log| log.tree.session(SESSION).unwrap().writes.recent.len();
    let before = recent(&log);
    let untagged = Txn {
        kind: Some(Kind::Create(create("/untagged", false, b""))),
        session_id: SESSION,
        ..Default::default()
    };
    assert!(matches!(
        log.apply(&untagged).result,
        TxnResult::Create(Ok(_))
    ));
    assert_eq!(recent(&log), before);
}

#[test]
fn server_made_xids_are_applied_once_and_never_stale() {
    use crate::tree::SERVER_XID_BIT;
    let mut log = Log::new();
    let tagged = |log: &mut Log, xid: u64, path: &str| log.apply(&native_create(xid, path)).result;
    // A client xid 5, then server-made ones in any order.
    assert!(matches!(
        tagged(&mut log, 5, "/c"),
        TxnResult::Create(Ok(_))
    ));
    let high = SERVER_XID_BIT | 900;
    let low = SERVER_XID_BIT | 3;
    assert!(matches!(
        tagged(&mut log, high, "/h"),
        TxnResult::Create(Ok(_))
    ));
    assert!(matches!(
        tagged(&mut log, low, "/l"),
        TxnResult::Create(Ok(_))
    ));
    // Proposed again (a leader change): answered, not applied twice.
    assert!(matches!(
        tagged(&mut log, high, "/h"),
        TxnResult::Duplicate { .. }
    ));
    // They do not make the client's own xids stale either.
    assert!(matches!(
        tagged(&mut log, 6, "/d"),
        TxnResult::Create(Ok(_))
    ));
}

/// A copy of a write that lands after its session ended never applies:
/// the session's record of what it applied went with it, so nothing could
/// tell the copy from a new write. Found by the zk-pipeline workload (seed
/// 201, docs/jepsen.md): a server re-proposed its waiting writes, the
/// leader expired three of its sessions meanwhile, and 353 creates applied
/// twice. Red before: the copy made a second node. ZooKeeper too refuses
/// a write of an expired session (SessionExpired).
#[test]
fn a_copy_that_lands_after_its_session_ended_is_refused() {
    let mut log = Log::new();
    let epoch = log.epoch();
    let first = log.apply(&zk_create(epoch, 1, 0, b"w1"));
    assert!(matches!(first.result, TxnResult::Create(Ok(_))));
    let native = log.apply(&native_create(5, "/q/native"));
    assert!(matches!(native.result, TxnResult::Create(Ok(_))));
    log.apply(&Txn {
        kind: Some(Kind::CloseSession(CloseSessionTxn {
            session_id: SESSION,
            ..Default::default()
        })),
        session_id: SESSION,
        xid: crate::tree::SERVER_XID_BIT | 1,
        ..Default::default()
    });
    assert!(log.tree.session(SESSION).is_none(), "the session ended");
    log.apply(&Txn {
        kind: Some(Kind::Delete(crate::proto::DeleteTxn {
            path: "/q/native".into(),
            version: None,
        })),
        ..Default::default()
    });
    let before = log.tree.clone();
    for copy in [zk_create(epoch, 1, 0, b"w1"), native_create(5, "/q/native")] {
        let again = log.apply(&copy);
        assert_eq!(again.result, TxnResult::SessionGone, "{copy:?}");
        assert!(again.triggers.is_empty());
    }
    assert_eq!(log.copies(b"w1"), 1, "the copy applied a second time");
    assert!(
        log.tree.node("/q/native").is_none(),
        "the copy made it again"
    );
    let mut unchanged = before;
    unchanged.skip(log.zxid);
    assert_eq!(log.tree, unchanged, "a refused copy changed the tree");
}
