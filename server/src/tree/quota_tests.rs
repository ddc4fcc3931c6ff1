//! The tree's side of ZooKeeper's quotas ([`super::quota`]): the stats it
//! keeps, the hard limits it enforces, the soft ones it lets through, and
//! the quota index across a snapshot.

use warden_protocol::pb::ErrorCode;

use super::*;
use crate::proto::{
    multi_txn_op::Op, txn::Kind, CreateTxn, DeleteTxn, MultiTxn, MultiTxnOp, SetDataTxn, Txn,
};

struct Log {
    tree: DataTree,
    zxid: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            tree: DataTree::new(),
            zxid: 0,
        }
    }

    fn step(&mut self, kind: Kind) -> TxnResult {
        self.zxid += 1;
        let txn = Txn {
            kind: Some(kind),
            ..Default::default()
        };
        let applied = self.tree.apply(self.zxid, 1_000 + self.zxid as i64, &txn);
        self.tree.check_invariants().expect("invariants");
        applied.result
    }

    fn ok(&mut self, kind: Kind) {
        let result = self.step(kind.clone());
        let failed = match &result {
            TxnResult::Create(r) => r.is_err(),
            TxnResult::Delete(r) => r.is_err(),
            TxnResult::SetData(r) => r.is_err(),
            TxnResult::Multi(m) => matches!(m, MultiOutcome::Failed { .. }),
            _ => false,
        };
        assert!(!failed, "{kind:?}: {result:?}");
    }

    /// `kind` fails with LimitExceeded and changes nothing.
    fn over_quota(&mut self, kind: Kind) {
        let mut before = self.tree.clone();
        let result = self.step(kind.clone());
        let error = match result {
            TxnResult::Create(Err(e))
            | TxnResult::SetData(Err(e))
            | TxnResult::Multi(MultiOutcome::Failed { error: e, .. }) => e,
            other => panic!("{kind:?}: expected LimitExceeded, got {other:?}"),
        };
        assert_eq!(error.code, ErrorCode::LimitExceeded, "{kind:?}");
        before.skip(self.zxid);
        assert_eq!(self.tree, before, "a refused write changed the tree");
    }

    fn data(&self, path: &str) -> String {
        let (data, _) = self.tree.get_data(path).expect(path);
        String::from_utf8(data.to_vec()).unwrap()
    }
}

fn create(path: &str, data: &str) -> Kind {
    Kind::Create(create_txn(path, data))
}

fn create_txn(path: &str, data: &str) -> CreateTxn {
    CreateTxn {
        path: path.to_string(),
        data: data.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn set(path: &str, data: &str) -> Kind {
    Kind::SetData(SetDataTxn {
        path: path.to_string(),
        data: data.as_bytes().to_vec(),
        ..Default::default()
    })
}

fn delete(path: &str) -> Kind {
    Kind::Delete(DeleteTxn {
        path: path.to_string(),
        version: None,
    })
}

const STATS: &str = "/zookeeper/quota/app/zookeeper_stats";
const LIMITS: &str = "/zookeeper/quota/app/zookeeper_limits";

/// /app (2 bytes) and /app/x (3 bytes), then zkCli's setquota: the quota
/// node (which brings /zookeeper/quota), the limits, the stats.
fn with_quota(limits: &str) -> Log {
    let mut log = Log::new();
    log.ok(create("/app", "ab"));
    log.ok(create("/app/x", "cde"));
    log.ok(create("/zookeeper/quota/app", ""));
    log.ok(create(LIMITS, limits));
    log.ok(create(STATS, "count=0,bytes=0"));
    log
}

#[test]
fn setquota_brings_the_quota_root_and_the_stats_are_computed() {
    let log = with_quota("count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=10");
    assert!(log.tree.stat("/zookeeper").is_some());
    assert_eq!(
        log.tree.children("/zookeeper/quota").unwrap().0,
        vec!["app".to_string()]
    );
    assert_eq!(log.data(STATS), "count=2,bytes=5");
}

#[test]
fn the_stats_follow_creates_deletes_and_data_changes() {
    let mut log = with_quota("count=-1,bytes=-1");
    log.ok(create("/app/y", "f"));
    log.ok(create("/app/y/z", ""));
    assert_eq!(log.data(STATS), "count=4,bytes=6");
    log.ok(set("/app/x", "c"));
    assert_eq!(log.data(STATS), "count=4,bytes=4");
    log.ok(delete("/app/y/z"));
    assert_eq!(log.data(STATS), "count=3,bytes=4");
    // Outside the subtree, and the stats node's own version: untouched.
    log.ok(create("/other", "12345"));
    assert_eq!(log.data(STATS), "count=3,bytes=4");
    assert_eq!(log.tree.stat(STATS).unwrap().version, 0);
}

#[test]
fn a_count_hard_limit_refuses_the_create_past_it() {
    let mut log = with_quota("count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=3");
    log.ok(create("/app/y", ""));
    log.over_quota(create("/app/z", ""));
    log.over_quota(create("/app/y/deeper", ""));
    // In a multi: the whole multi, though its first op fits.
    let ops = vec![
        Op::Delete(DeleteTxn {
            path: "/app/y".into(),
            version: None,
        }),
        Op::Create(create_txn("/app/a", "")),
        Op::Create(create_txn("/app/b", "")),
    ];
    log.over_quota(Kind::Multi(MultiTxn {
        ops: ops
            .into_iter()
            .map(|op| MultiTxnOp { op: Some(op) })
            .collect(),
    }));
    assert_eq!(log.data(STATS), "count=3,bytes=5");
    // Room again after a delete.
    log.ok(delete("/app/y"));
    log.ok(create("/app/z", ""));
    // Elsewhere, no limit.
    log.ok(create("/free", ""));
}

#[test]
fn a_byte_hard_limit_refuses_the_data_past_it() {
    let mut log = with_quota("count=-1,bytes=-1=;byteHardLimit=8;countHardLimit=-1");
    log.over_quota(set("/app", "abcdefg"));
    log.over_quota(create("/app/big", "1234"));
    log.ok(set("/app", "abcde"));
    assert_eq!(log.data(STATS), "count=2,bytes=8");
    // Shrinking is always allowed.
    log.ok(set("/app/x", ""));
    log.ok(create("/app/small", "123"));
    assert_eq!(log.data(STATS), "count=3,bytes=8");
}

#[test]
fn soft_limits_let_writes_through() {
    let mut log = with_quota("count=2,bytes=1");
    log.ok(create("/app/y", "more bytes"));
    assert_eq!(log.data(STATS), "count=3,bytes=15");
}

#[test]
fn delquota_ends_the_enforcement() {
    let mut log = with_quota("count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=2");
    log.over_quota(create("/app/y", ""));
    log.ok(delete(LIMITS));
    log.ok(delete(STATS));
    log.ok(delete("/zookeeper/quota/app"));
    log.ok(create("/app/y", ""));
}

#[test]
fn the_quota_index_survives_a_snapshot() {
    let mut log = with_quota("count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=2");
    let restored = DataTree::from_snapshot(&log.tree.to_snapshot()).unwrap();
    assert_eq!(restored, log.tree);
    log.tree = restored;
    log.over_quota(create("/app/y", ""));
}

/// A quota on a path that does not exist yet counts it once created,
/// and nothing below /zookeeper is ever counted.
#[test]
fn a_quota_before_its_node_and_none_below_zookeeper() {
    let mut log = Log::new();
    log.ok(create("/zookeeper/quota/later", ""));
    log.ok(create(
        "/zookeeper/quota/later/zookeeper_limits",
        "count=-1,bytes=-1=;countHardLimit=1",
    ));
    log.ok(create("/zookeeper/quota/later/zookeeper_stats", ""));
    assert_eq!(
        log.data("/zookeeper/quota/later/zookeeper_stats"),
        "count=0,bytes=0"
    );
    log.ok(create("/later", "x"));
    log.over_quota(create("/later/child", ""));
    assert_eq!(
        log.data("/zookeeper/quota/later/zookeeper_stats"),
        "count=1,bytes=1"
    );
}

/// A /zookeeper made natively as an ephemeral cannot hold the quota root:
/// the quota node's create fails (NoNode) and changes nothing.
#[test]
fn no_quota_root_under_an_ephemeral_zookeeper_node() {
    use crate::proto::CreateSessionTxn;
    let mut log = Log::new();
    log.step(Kind::CreateSession(CreateSessionTxn {
        session_id: 7,
        password: vec![1; 16],
        timeout_ms: 10_000,
    }));
    log.ok(Kind::Create(CreateTxn {
        ephemeral: true,
        session_id: 7,
        ..create_txn("/zookeeper", "")
    }));
    let before = log.tree.clone();
    match log.step(create("/zookeeper/quota/app", "")) {
        TxnResult::Create(Err(e)) => assert_eq!(e.code, ErrorCode::NoNode),
        other => panic!("{other:?}"),
    }
    let mut before = before;
    before.skip(log.zxid);
    assert_eq!(log.tree, before);
}

/// A failed multi takes back the quota root its first op brought.
#[test]
fn a_failed_multi_takes_the_quota_root_back() {
    let mut log = Log::new();
    let ops = vec![
        Op::Create(create_txn("/zookeeper/quota/app", "")),
        Op::Create(create_txn("/missing/child", "")),
    ];
    let before = log.tree.clone();
    let result = log.step(Kind::Multi(MultiTxn {
        ops: ops
            .into_iter()
            .map(|op| MultiTxnOp { op: Some(op) })
            .collect(),
    }));
    assert!(
        matches!(
            result,
            TxnResult::Multi(MultiOutcome::Failed { index: 1, .. })
        ),
        "{result:?}"
    );
    let mut before = before;
    before.skip(log.zxid);
    assert_eq!(log.tree, before);
    assert!(log.tree.stat("/zookeeper").is_none());
}
