//! ACL enforcement where writes apply: each permission refused and then
//! granted, refusals that change nothing, and a follower's stale view that
//! cannot let through what the log's order refuses.

use warden_protocol::pb::{Acl, ErrorCode};
use warden_protocol::perms;

use super::acl::{allowed, SUPER_SCHEME};
use super::*;
use crate::proto::{
    multi_txn_op::Op, txn::Kind, AuthId, AuthInfo, CheckTxn, CreateTxn, DeleteTxn, MultiTxn,
    MultiTxnOp, SetAclTxn, SetDataTxn, Txn,
};

const BOB: &str = "bob:BOBHASH=";
const ALICE: &str = "alice:ALICEHASH=";

fn id(scheme: &str, id: &str) -> AuthId {
    AuthId {
        scheme: scheme.into(),
        id: id.into(),
    }
}

fn anon() -> Vec<AuthId> {
    vec![id("ip", "127.0.0.1")]
}

fn bob() -> Vec<AuthId> {
    vec![id("ip", "127.0.0.1"), id("digest", BOB)]
}

fn alice() -> Vec<AuthId> {
    vec![id("ip", "127.0.0.1"), id("digest", ALICE)]
}

fn entry(scheme: &str, i: &str, perms: u32) -> Acl {
    Acl {
        perms,
        scheme: scheme.into(),
        id: i.into(),
    }
}

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

    /// Applies `kind` as a request of a connection holding `ids`.
    fn apply(&mut self, ids: &[AuthId], kind: Kind) -> TxnResult {
        self.zxid += 1;
        let txn = Txn {
            kind: Some(kind),
            auth: Some(AuthInfo { ids: ids.to_vec() }),
            ..Default::default()
        };
        let applied = self.tree.apply(self.zxid, 1_000 + self.zxid as i64, &txn);
        self.tree.check_invariants().expect("invariants");
        applied.result
    }

    /// Like `apply`, for a txn that must fail: returns its error and checks
    /// that nothing but the applied index changed.
    fn refused(&mut self, ids: &[AuthId], kind: Kind) -> TreeError {
        let mut before = self.tree.clone();
        let result = self.apply(ids, kind);
        before.skip(self.zxid);
        assert_eq!(self.tree, before, "a refused write changed the tree");
        match result {
            TxnResult::Create(Err(e))
            | TxnResult::Delete(Err(e))
            | TxnResult::SetData(Err(e))
            | TxnResult::SetAcl(Err(e))
            | TxnResult::Multi(MultiOutcome::Failed { error: e, .. }) => e,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

fn create(path: &str, acl: Vec<Acl>) -> Kind {
    Kind::Create(CreateTxn {
        path: path.into(),
        acl,
        ..Default::default()
    })
}

fn delete(path: &str) -> Kind {
    Kind::Delete(DeleteTxn {
        path: path.into(),
        version: None,
    })
}

fn set_data(path: &str, data: &[u8]) -> Kind {
    Kind::SetData(SetDataTxn {
        path: path.into(),
        data: data.to_vec(),
        version: None,
        ttl_ms: 0,
        data_null: false,
    })
}

fn set_acl(path: &str, acl: Vec<Acl>) -> Kind {
    Kind::SetAcl(SetAclTxn {
        path: path.into(),
        acl,
        aversion: None,
    })
}

fn no_auth(path: &str) -> TreeError {
    TreeError {
        code: ErrorCode::NoAuth,
        path: path.into(),
    }
}

/// /app: bob holds `perm` (and world READ), nobody else anything more.
fn app_granting(perm: u32) -> Log {
    let mut log = Log::new();
    let acl = vec![
        entry("digest", BOB, perm),
        entry("world", "anyone", perms::READ),
    ];
    assert!(matches!(
        log.apply(&anon(), create("/app", acl)),
        TxnResult::Create(Ok(_))
    ));
    log
}

#[test]
fn create_needs_create_on_the_parent() {
    let mut log = app_granting(perms::CREATE);
    assert_eq!(
        log.refused(&anon(), create("/app/x", vec![])),
        no_auth("/app/x")
    );
    assert_eq!(
        log.refused(&alice(), create("/app/x", vec![])),
        no_auth("/app/x")
    );
    assert!(matches!(
        log.apply(&bob(), create("/app/x", vec![])),
        TxnResult::Create(Ok(_))
    ));
    // NoAuth comes before NodeExists: who may not create learns nothing.
    assert_eq!(
        log.refused(&anon(), create("/app/x", vec![])),
        no_auth("/app/x")
    );
    assert_eq!(
        log.refused(&bob(), create("/app/x", vec![])).code,
        ErrorCode::NodeExists
    );
}

#[test]
fn delete_needs_delete_on_the_parent() {
    let mut log = app_granting(perms::DELETE);
    assert!(matches!(
        log.apply(&anon(), create("/app/x", vec![])),
        TxnResult::Create(Err(_))
    ));
    // Made by the super user (who passes every check).
    let sup = vec![id(SUPER_SCHEME, "")];
    assert!(matches!(
        log.apply(&sup, create("/app/x", vec![])),
        TxnResult::Create(Ok(_))
    ));
    assert_eq!(log.refused(&anon(), delete("/app/x")), no_auth("/app/x"));
    // Checked before the node is looked up, as in ZooKeeper.
    assert_eq!(
        log.refused(&anon(), delete("/app/nope")),
        no_auth("/app/nope")
    );
    assert!(matches!(
        log.apply(&bob(), delete("/app/x")),
        TxnResult::Delete(Ok(()))
    ));
}

#[test]
fn set_data_needs_write_on_the_node() {
    let mut log = app_granting(perms::WRITE);
    assert_eq!(
        log.refused(&anon(), set_data("/app", b"x")),
        no_auth("/app")
    );
    assert!(matches!(
        log.apply(&bob(), set_data("/app", b"x")),
        TxnResult::SetData(Ok(_))
    ));
    // A missing node is NoNode, whoever asks.
    assert_eq!(
        log.refused(&anon(), set_data("/nope", b"x")).code,
        ErrorCode::NoNode
    );
}

#[test]
fn set_acl_needs_admin_on_the_node() {
    let mut log = app_granting(perms::ADMIN);
    let open = vec![entry("world", "anyone", perms::ALL)];
    assert_eq!(
        log.refused(&anon(), set_acl("/app", open.clone())),
        no_auth("/app")
    );
    assert!(matches!(
        log.apply(&bob(), set_acl("/app", open)),
        TxnResult::SetAcl(Ok(_))
    ));
    assert!(matches!(
        log.apply(&anon(), set_data("/app", b"now open")),
        TxnResult::SetData(Ok(_))
    ));
}

#[test]
fn a_multi_with_one_refused_op_applies_nothing() {
    let mut log = app_granting(perms::CREATE);
    // /open lets anyone do anything; /app lets only bob create.
    log.apply(&anon(), create("/open", vec![]));
    let ops = |paths: &[&str]| {
        Kind::Multi(MultiTxn {
            ops: paths
                .iter()
                .map(|p| MultiTxnOp {
                    op: Some(Op::Create(CreateTxn {
                        path: p.to_string(),
                        ..Default::default()
                    })),
                })
                .collect(),
        })
    };
    let mut before = log.tree.clone();
    let r = log.apply(&anon(), ops(&["/open/a", "/app/b", "/open/c"]));
    match r {
        TxnResult::Multi(MultiOutcome::Failed { index, error }) => {
            assert_eq!(index, 1);
            assert_eq!(error, no_auth("/app/b"));
        }
        other => panic!("{other:?}"),
    }
    before.skip(log.zxid);
    assert_eq!(log.tree, before, "a refused multi changed the tree");
    assert!(matches!(
        log.apply(&bob(), ops(&["/open/a", "/app/b", "/open/c"])),
        TxnResult::Multi(MultiOutcome::Ok(_))
    ));
    // A version check reads the node: READ.
    log.apply(
        &bob(),
        set_acl("/open", vec![entry("digest", BOB, perms::ALL)]),
    );
    let check = Kind::Multi(MultiTxn {
        ops: vec![MultiTxnOp {
            op: Some(Op::Check(CheckTxn {
                path: "/open".into(),
                version: Some(0),
            })),
        }],
    });
    assert_eq!(log.refused(&anon(), check.clone()), no_auth("/open"));
    assert!(matches!(
        log.apply(&bob(), check),
        TxnResult::Multi(MultiOutcome::Ok(_))
    ));
}

/// A follower that has not yet applied the set_acl that locks /cfg still
/// sees it open and proposes an anonymous write. The write is ordered
/// after the set_acl in the log, and every replica, that follower
/// included, refuses it when it applies it.
#[test]
fn a_stale_follower_cannot_let_a_refused_write_through() {
    let mut leader = Log::new();
    leader.apply(&bob(), create("/cfg", vec![]));
    let mut follower = Log {
        tree: leader.tree.clone(),
        zxid: leader.zxid,
    };
    // The follower's (stale) view grants the write...
    let stale_acl = follower.tree.node_acl("/cfg").unwrap().to_vec();
    assert!(allowed(&stale_acl, &anon(), perms::WRITE));
    // ...but the log holds, in this order, bob's lock-down and then the
    // anonymous write the follower forwarded.
    let lock = set_acl("/cfg", vec![entry("digest", BOB, perms::ALL)]);
    let write = set_data("/cfg", b"sneaky");
    for replica in [&mut leader, &mut follower] {
        assert!(matches!(
            replica.apply(&bob(), lock.clone()),
            TxnResult::SetAcl(Ok(_))
        ));
        assert_eq!(replica.refused(&anon(), write.clone()), no_auth("/cfg"));
    }
    assert_eq!(leader.tree, follower.tree);
    assert_eq!(leader.tree.get_data("/cfg").unwrap().0, b"");
}

/// Entries written before ACLs were enforced carry no identities; they
/// apply as they did then, so a replica replaying an old log agrees with
/// the ones that applied it at the time.
#[test]
fn entries_without_identities_are_not_checked() {
    let mut log = Log::new();
    log.apply(
        &bob(),
        create("/cfg", vec![entry("digest", BOB, perms::ALL)]),
    );
    log.zxid += 1;
    let old = Txn {
        kind: Some(set_data("/cfg", b"old entry")),
        ..Default::default()
    };
    let applied = log.tree.apply(log.zxid, 5, &old);
    assert!(matches!(applied.result, TxnResult::SetData(Ok(_))));
    // The same write with (anonymous) identities is refused.
    assert_eq!(
        log.refused(&anon(), set_data("/cfg", b"x")),
        no_auth("/cfg")
    );
}
