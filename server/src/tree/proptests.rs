//! Property tests: random op sequences over a small path alphabet, so that
//! ops collide (create what exists, delete what has children, multis that
//! half succeed), with sessions, ephemerals, sequential, container and TTL
//! nodes, guarded deletes and garbage paths mixed in.
//!
//! After every step: the full invariant check holds, counters never go
//! back, a failed txn changed nothing but the applied index. At the end: a
//! second tree fed the same txns is equal, a tree restored from a snapshot
//! taken midway and fed the rest is equal, and the final snapshot round
//! trips (through its bytes too).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;

use warden_protocol::path;
use warden_protocol::pb::Acl;

use super::*;
use crate::proto::{
    multi_txn_op::Op, txn::Kind, CheckTxn, CloseSessionTxn, CreateSessionTxn, CreateTxn, DeleteTxn,
    GuardedDeleteTxn, MultiTxn, MultiTxnOp, NoopTxn, SetAclTxn, SetDataTxn, Snapshot, Txn,
};

/// Cases per property: enough to find ordering bugs, small enough for a
/// debug build on two CI cores.
const CASES: u32 = 96;
/// Steps per case.
const STEPS_MAX: usize = 100;
/// How far past the last write the leader's clock may be when it looks
/// for removals, so that TTL nodes expire in some cases and not others.
const CLOCK_SKEW_MAX_MS: i64 = 120;
const TTL_MAX_MS: u64 = 60;
const SESSION_ID_MAX: u64 = 3;
const MULTI_OPS_MAX: usize = 6;

const PATHS: &[&str] = &["/a", "/b", "/a/x", "/a/y", "/b/z", "/a/x/q", "/c"];
/// Sequential create bases; a trailing '/' names the child by number alone.
const SEQ_BASES: &[&str] = &["/a/s-", "/b/", "/s-"];

/// A path an op works on, resolved against the tree when the op runs.
#[derive(Debug, Clone)]
enum Target {
    Fixed(usize),
    /// One of the nodes that exist at that point (the root included).
    Existing(Index),
    /// Anything at all, mostly invalid.
    Raw(String),
}

#[derive(Debug, Clone)]
enum Where {
    At(Target),
    Seq(usize),
    /// A new child "k" under an existing node.
    Under(Index),
}

#[derive(Debug, Clone)]
struct CreateSpec {
    at: Where,
    data_len: usize,
    ephemeral: bool,
    sequential: bool,
    container: bool,
    ttl_ms: u64,
    session_id: u64,
}

#[derive(Debug, Clone)]
enum MultiSpec {
    Create(CreateSpec),
    Delete(Target, Option<i32>),
    SetData(Target, Option<i32>),
    Check(Target, Option<i32>),
}

#[derive(Debug, Clone)]
enum GuardSpec {
    /// One of the leader's current removal candidates.
    Candidate(Index),
    /// The node's current mzxid/pzxid: applies if it is childless.
    Exact(Target),
    /// An outdated mzxid: never applies.
    Stale(Target),
}

#[derive(Debug, Clone)]
enum Spec {
    CreateSession(u64),
    CloseSession(u64),
    Create(CreateSpec),
    Delete(Target, Option<i32>),
    SetData(Target, usize, Option<i32>),
    SetAcl(Target, bool, Option<i32>),
    Multi(Vec<MultiSpec>),
    Guarded(GuardSpec),
    Noop,
    NoKind,
    Skip,
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        4 => (0..PATHS.len()).prop_map(Target::Fixed),
        4 => any::<Index>().prop_map(Target::Existing),
        1 => "[/a.\\x00]{0,5}".prop_map(Target::Raw),
    ]
}

/// Mostly a session that may exist; sometimes 0, which never does.
fn session_id() -> impl Strategy<Value = u64> {
    prop_oneof![9 => 1..=SESSION_ID_MAX, 1 => Just(0)]
}

fn version() -> impl Strategy<Value = Option<i32>> {
    prop_oneof![3 => Just(None), 1 => (0i32..3).prop_map(Some)]
}

fn create_spec() -> impl Strategy<Value = CreateSpec> {
    let at = prop_oneof![
        2 => target().prop_map(Where::At),
        2 => (0..SEQ_BASES.len()).prop_map(Where::Seq),
        3 => any::<Index>().prop_map(Where::Under),
    ];
    (
        at,
        0usize..8,
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop_oneof![4 => Just(0u64), 1 => 1..TTL_MAX_MS],
        session_id(),
    )
        .prop_map(
            |(at, data_len, ephemeral, sequential, container, ttl_ms, session_id)| CreateSpec {
                at,
                data_len,
                ephemeral,
                sequential,
                container,
                ttl_ms,
                session_id,
            },
        )
}

fn multi_spec() -> impl Strategy<Value = MultiSpec> {
    prop_oneof![
        3 => create_spec().prop_map(MultiSpec::Create),
        2 => (target(), version()).prop_map(|(t, v)| MultiSpec::Delete(t, v)),
        2 => (target(), version()).prop_map(|(t, v)| MultiSpec::SetData(t, v)),
        2 => (target(), version()).prop_map(|(t, v)| MultiSpec::Check(t, v)),
    ]
}

fn guard_spec() -> impl Strategy<Value = GuardSpec> {
    prop_oneof![
        any::<Index>().prop_map(GuardSpec::Candidate),
        target().prop_map(GuardSpec::Exact),
        target().prop_map(GuardSpec::Stale),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        3 => session_id().prop_map(Spec::CreateSession),
        1 => session_id().prop_map(Spec::CloseSession),
        8 => create_spec().prop_map(Spec::Create),
        4 => (target(), version()).prop_map(|(t, v)| Spec::Delete(t, v)),
        3 => (target(), 0usize..8, version()).prop_map(|(t, n, v)| Spec::SetData(t, n, v)),
        1 => (target(), prop::bool::weighted(0.2), version())
            .prop_map(|(t, empty, v)| Spec::SetAcl(t, empty, v)),
        1 => Just(Spec::Multi(vec![])),
        5 => vec(multi_spec(), 1..MULTI_OPS_MAX).prop_map(Spec::Multi),
        3 => guard_spec().prop_map(Spec::Guarded),
        1 => Just(Spec::Noop),
        1 => Just(Spec::NoKind),
        1 => Just(Spec::Skip),
    ]
}

/// One step of a case: what to do, and how far the clock moves first.
fn steps() -> impl Strategy<Value = Vec<(Spec, i64)>> {
    vec((spec(), 0i64..30), 1..STEPS_MAX)
}

fn existing(tree: &DataTree) -> Vec<String> {
    let mut paths: Vec<String> = tree.nodes.keys().map(|p| p.to_string()).collect();
    paths.sort();
    paths
}

fn resolve(tree: &DataTree, t: &Target) -> String {
    match t {
        Target::Fixed(i) => PATHS[*i].to_string(),
        Target::Existing(idx) => {
            // Not the root, unless it is alone: deleting it is always
            // refused, which a unit test covers.
            let paths = existing(tree);
            let others = &paths[usize::from(paths.len() > 1)..];
            others[idx.index(others.len())].clone()
        }
        Target::Raw(s) => s.clone(),
    }
}

fn build_create(tree: &DataTree, c: &CreateSpec) -> CreateTxn {
    let (path, sequential) = match &c.at {
        Where::At(t) => (resolve(tree, t), c.sequential),
        Where::Seq(i) => (SEQ_BASES[*i].to_string(), true),
        Where::Under(idx) => {
            let paths = existing(tree);
            (
                path::join(&paths[idx.index(paths.len())], "k"),
                c.sequential,
            )
        }
    };
    CreateTxn {
        path,
        data: vec![b'd'; c.data_len],
        acl: vec![],
        ephemeral: c.ephemeral,
        sequential,
        container: c.container,
        ttl_ms: c.ttl_ms,
        session_id: c.session_id,
        // Null data for empty creates: snapshots and undo must keep it.
        data_null: c.data_len == 0,
    }
}

/// The leader's view of "now" for removal decisions.
fn leader_now(time_ms: i64) -> i64 {
    time_ms + CLOCK_SKEW_MAX_MS
}

/// Turns a spec into the txn to log (None: an entry without a txn).
fn build(tree: &DataTree, time_ms: i64, spec: &Spec) -> Option<Txn> {
    let kind = match spec {
        Spec::Skip => return None,
        Spec::NoKind => return Some(Txn::default()),
        Spec::Noop => Kind::Noop(NoopTxn {}),
        Spec::CreateSession(id) => Kind::CreateSession(CreateSessionTxn {
            session_id: *id,
            password: id.to_be_bytes().to_vec(),
            timeout_ms: 5_000,
        }),
        Spec::CloseSession(id) => Kind::CloseSession(CloseSessionTxn {
            session_id: *id,
            reason: 1,
        }),
        Spec::Create(c) => Kind::Create(build_create(tree, c)),
        Spec::Delete(t, version) => Kind::Delete(DeleteTxn {
            path: resolve(tree, t),
            version: *version,
        }),
        Spec::SetData(t, n, version) => Kind::SetData(SetDataTxn {
            path: resolve(tree, t),
            data: vec![b's'; *n],
            version: *version,
            ttl_ms: 0,
            data_null: *n == 0,
        }),
        Spec::SetAcl(t, empty, aversion) => Kind::SetAcl(SetAclTxn {
            path: resolve(tree, t),
            acl: if *empty {
                vec![]
            } else {
                vec![Acl {
                    perms: 1,
                    scheme: "world".into(),
                    id: "anyone".into(),
                }]
            },
            aversion: *aversion,
        }),
        Spec::Multi(ops) => Kind::Multi(MultiTxn {
            ops: ops
                .iter()
                .map(|op| {
                    let op = match op {
                        MultiSpec::Create(c) => Op::Create(build_create(tree, c)),
                        MultiSpec::Delete(t, version) => Op::Delete(DeleteTxn {
                            path: resolve(tree, t),
                            version: *version,
                        }),
                        MultiSpec::SetData(t, version) => Op::SetData(SetDataTxn {
                            path: resolve(tree, t),
                            data: b"m".to_vec(),
                            version: *version,
                            ttl_ms: 0,
                            data_null: false,
                        }),
                        MultiSpec::Check(t, version) => Op::Check(CheckTxn {
                            path: resolve(tree, t),
                            version: *version,
                        }),
                    };
                    MultiTxnOp { op: Some(op) }
                })
                .collect(),
        }),
        Spec::Guarded(g) => Kind::GuardedDelete(match g {
            GuardSpec::Candidate(idx) => {
                let candidates = tree.removal_candidates(leader_now(time_ms));
                if candidates.is_empty() {
                    GuardedDeleteTxn {
                        path: "/none".into(),
                        ..Default::default()
                    }
                } else {
                    candidates[idx.index(candidates.len())].clone()
                }
            }
            GuardSpec::Exact(t) | GuardSpec::Stale(t) => {
                let path = resolve(tree, t);
                let stat = tree.stat(&path).unwrap_or_default();
                let stale = u64::from(matches!(g, GuardSpec::Stale(_)));
                GuardedDeleteTxn {
                    path,
                    // mzxid + 1 is never a node's mzxid: nothing has been
                    // applied at or after the current entry yet.
                    expected_mzxid: stat.mzxid + stale,
                    expected_pzxid: stat.pzxid,
                }
            }
        }),
    };
    Some(Txn {
        kind: Some(kind),
        ..Default::default()
    })
}

/// Whether `result` changed nothing (a refusal, a guard that did not hold,
/// a no-op), so the tree must be as before but for the applied index.
fn changed_nothing(result: &TxnResult) -> bool {
    matches!(
        result,
        TxnResult::Create(Err(_))
            | TxnResult::Delete(Err(_))
            | TxnResult::SetData(Err(_))
            | TxnResult::SetAcl(Err(_))
            | TxnResult::Multi(MultiOutcome::Failed { .. })
            | TxnResult::GuardedDelete { deleted: false }
            | TxnResult::Noop
    )
}

/// Counters of a node that lives on never go back (the test's values are
/// far from i32 wrap-around).
fn check_monotonic(
    before: &std::collections::BTreeMap<String, warden_protocol::pb::Stat>,
    tree: &DataTree,
) -> Result<(), TestCaseError> {
    for (p, old) in before {
        let Some(new) = tree.stat(p) else { continue };
        if new.czxid != old.czxid {
            continue; // deleted and created again
        }
        prop_assert!(new.cversion >= old.cversion, "{p}: cversion went back");
        prop_assert!(new.version >= old.version, "{p}: version went back");
        prop_assert!(new.aversion >= old.aversion, "{p}: aversion went back");
        prop_assert!(new.mzxid >= old.mzxid, "{p}: mzxid went back");
        prop_assert!(new.pzxid >= old.pzxid, "{p}: pzxid went back");
    }
    Ok(())
}

fn assert_round_trip(tree: &DataTree) -> Result<(), TestCaseError> {
    let snap = tree.to_snapshot();
    let loaded = DataTree::from_snapshot(&snap).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&loaded, tree);
    prop_assert_eq!(&loaded.to_snapshot(), &snap);
    let decoded = Snapshot::decode(snap.encode_to_vec().as_slice())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&decoded, &snap);
    Ok(())
}

fn run(steps: &[(Spec, i64)]) -> Result<(), TestCaseError> {
    let mut tree = DataTree::new();
    let mut replica = DataTree::new();
    let mut restored: Option<DataTree> = None;
    let snapshot_at = steps.len() / 2;
    let mut time_ms: i64 = 1_000;

    for (i, (spec, dt_ms)) in steps.iter().enumerate() {
        if i == snapshot_at {
            assert_round_trip(&tree)?;
            let loaded = DataTree::from_snapshot(&tree.to_snapshot())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            restored = Some(loaded);
        }
        let zxid = tree.applied_index() + 1;
        time_ms += dt_ms;
        let before = tree.clone();
        let before_stats = tree.stats();

        let Some(txn) = build(&tree, time_ms, spec) else {
            tree.skip(zxid);
            replica.skip(zxid);
            if let Some(r) = restored.as_mut() {
                r.skip(zxid);
            }
            continue;
        };
        let applied = tree.apply(zxid, time_ms, &txn);
        prop_assert_eq!(&replica.apply(zxid, time_ms, &txn), &applied);
        if let Some(r) = restored.as_mut() {
            prop_assert_eq!(&r.apply(zxid, time_ms, &txn), &applied);
        }

        tree.check_invariants()
            .map_err(|e| TestCaseError::fail(format!("after {txn:?}: {e}")))?;
        check_monotonic(&before_stats, &tree)?;
        if changed_nothing(&applied.result) {
            let mut expected = before;
            expected.skip(zxid);
            prop_assert_eq!(
                &tree,
                &expected,
                "a refused txn changed the tree: {:?}",
                txn
            );
            prop_assert!(applied.triggers.is_empty());
        }
        if let TxnResult::Create(Ok((path, stat))) = &applied.result {
            prop_assert_eq!(stat.czxid, zxid);
            prop_assert_eq!(tree.stat(path), Some(*stat));
        }
    }

    prop_assert_eq!(&replica, &tree);
    if let Some(r) = &restored {
        prop_assert_eq!(r, &tree);
    }
    assert_round_trip(&tree)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn random_logs_keep_every_invariant(steps in steps()) {
        run(&steps)?;
    }
}
