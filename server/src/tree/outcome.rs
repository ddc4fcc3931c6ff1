//! What a client write did, as its session records it: the tree's own
//! account of the write, never a wire answer.
//!
//! A write tagged with its identity (an xid, or an epoch and sequence:
//! `writes.rs`) leaves a [`Recorded`] in its session. A copy of the write
//! gets it back (as [`TxnResult::Duplicate`]), and the door that waits for
//! it shapes the same answer from it as it did the first time. The tree
//! records what happened; the request layer says it.
//!
//! This file owns the record's type and its snapshot form. Loading must
//! never panic on a snapshot's content: a record the tree could not have
//! written is an error naming what is wrong.

use prost::Message as _;
use warden_protocol::pb::{self, ErrorCode};

use super::txn::{MultiOutcome, OpOutcome, TreeError, TxnResult};
use crate::proto::{
    write_outcome, MultiDone, OpDone, OpKind, OpRefused, RecentResult, SessionClosedOutcome,
    WriteOutcome,
};

/// What a session keeps of one of its applied writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// What the write did, at the zxid it applied at. `result` is never a
    /// refusal of the session's record (duplicate, stale, moved): those
    /// are not recorded.
    Outcome { zxid: u64, result: TxnResult },
    /// The answer as a server shaped it before outcomes were recorded (an
    /// encoded wire `Response`, from an old snapshot; checked to decode
    /// when loaded): given back as it is.
    Answer(Vec<u8>),
}

impl Recorded {
    /// The record of a write that applied at `zxid` with `result`. What a
    /// snapshot cannot tell apart is recorded alike: a result no door
    /// answers with more than "done" (a session created or bound, a
    /// guarded delete, a no-op) is kept as [`TxnResult::Noop`].
    pub(super) fn of(zxid: u64, result: &TxnResult) -> Recorded {
        let result = match result {
            TxnResult::Create(_)
            | TxnResult::Delete(_)
            | TxnResult::SetData(_)
            | TxnResult::SetAcl(_)
            | TxnResult::Multi(_)
            | TxnResult::SessionClosed { .. } => result.clone(),
            _ => TxnResult::Noop,
        };
        Recorded::Outcome { zxid, result }
    }

    /// The answer an old snapshot kept, decoded.
    pub fn old_answer(bytes: &[u8]) -> Option<pb::Response> {
        pb::Response::decode(bytes).ok()
    }

    /// Its snapshot form, for the write `xid` (or sequence).
    pub(super) fn to_proto(&self, xid: u64) -> RecentResult {
        match self {
            Recorded::Answer(bytes) => RecentResult {
                xid,
                response: bytes.clone(),
                outcome: None,
            },
            Recorded::Outcome { zxid, result } => RecentResult {
                xid,
                response: Vec::new(),
                outcome: Some(WriteOutcome {
                    zxid: *zxid,
                    result: stored(result),
                }),
            },
        }
    }

    /// A record read from a snapshot: (the write's xid or sequence, what
    /// it did).
    pub(super) fn from_proto(r: RecentResult) -> Result<(u64, Recorded), String> {
        let xid = r.xid;
        let Some(outcome) = r.outcome else {
            if Self::old_answer(&r.response).is_none() {
                return Err(format!("the answer of write {xid} does not decode"));
            }
            return Ok((xid, Recorded::Answer(r.response)));
        };
        if !r.response.is_empty() {
            return Err(format!("write {xid} has both an answer and an outcome"));
        }
        let result = loaded(outcome.result).map_err(|e| format!("write {xid}: {e}"))?;
        Ok((
            xid,
            Recorded::Outcome {
                zxid: outcome.zxid,
                result,
            },
        ))
    }
}

fn done(kind: OpKind, path: &str, stat: Option<&pb::Stat>) -> OpDone {
    OpDone {
        kind: kind as i32,
        path: path.to_string(),
        stat: stat.copied(),
    }
}

fn refused(kind: OpKind, e: &TreeError, index: usize) -> OpRefused {
    OpRefused {
        kind: kind as i32,
        code: e.code as i32,
        path: e.path.clone(),
        index: u32::try_from(index).unwrap_or(u32::MAX),
    }
}

/// The snapshot form of a recorded result.
fn stored(result: &TxnResult) -> Option<write_outcome::Result> {
    use write_outcome::Result as R;
    let single = |kind, r: Result<(&str, Option<&pb::Stat>), &TreeError>| match r {
        Ok((path, stat)) => R::Done(done(kind, path, stat)),
        Err(e) => R::Refused(refused(kind, e, 0)),
    };
    Some(match result {
        TxnResult::Create(r) => single(
            OpKind::Create,
            r.as_ref().map(|(p, s)| (p.as_str(), Some(s))),
        ),
        TxnResult::Delete(r) => single(OpKind::Delete, r.as_ref().map(|()| ("", None))),
        TxnResult::SetData(r) => single(OpKind::SetData, r.as_ref().map(|s| ("", Some(s)))),
        TxnResult::SetAcl(r) => single(OpKind::SetAcl, r.as_ref().map(|s| ("", Some(s)))),
        TxnResult::Multi(MultiOutcome::Ok(ops)) => R::Multi(MultiDone {
            ops: ops
                .iter()
                .map(|op| match op {
                    OpOutcome::Create { path, stat } => done(OpKind::Create, path, Some(stat)),
                    OpOutcome::Delete => done(OpKind::Delete, "", None),
                    OpOutcome::SetData { stat } => done(OpKind::SetData, "", Some(stat)),
                    OpOutcome::Check => done(OpKind::Check, "", None),
                })
                .collect(),
        }),
        TxnResult::Multi(MultiOutcome::Failed { index, error }) => {
            R::MultiRefused(refused(OpKind::Unspecified, error, *index))
        }
        TxnResult::SessionClosed { deleted } => R::SessionClosed(SessionClosedOutcome {
            deleted: deleted.clone(),
        }),
        _ => return None,
    })
}

fn kind_of(kind: i32) -> Result<OpKind, String> {
    OpKind::try_from(kind).map_err(|_| format!("unknown op kind {kind}"))
}

fn error_of(r: &OpRefused) -> Result<TreeError, String> {
    let code = ErrorCode::try_from(r.code).map_err(|_| format!("unknown error code {}", r.code))?;
    if code == ErrorCode::Ok {
        return Err(format!("{}: refused with code Ok", r.path.escape_debug()));
    }
    Ok(TreeError::new(code, &r.path))
}

fn stat_of(d: &OpDone) -> Result<pb::Stat, String> {
    d.stat
        .ok_or_else(|| format!("{}: applied without its stat", d.path.escape_debug()))
}

/// A recorded result from its snapshot form.
fn loaded(result: Option<write_outcome::Result>) -> Result<TxnResult, String> {
    use write_outcome::Result as R;
    Ok(match result {
        None => TxnResult::Noop,
        Some(R::Done(d)) => match kind_of(d.kind)? {
            OpKind::Create => {
                let stat = stat_of(&d)?;
                TxnResult::Create(Ok((d.path, stat)))
            }
            OpKind::Delete => TxnResult::Delete(Ok(())),
            OpKind::SetData => TxnResult::SetData(Ok(stat_of(&d)?)),
            OpKind::SetAcl => TxnResult::SetAcl(Ok(stat_of(&d)?)),
            k => return Err(format!("a single {} applied", k.as_str_name())),
        },
        Some(R::Refused(r)) => {
            let e = error_of(&r)?;
            match kind_of(r.kind)? {
                OpKind::Create => TxnResult::Create(Err(e)),
                OpKind::Delete => TxnResult::Delete(Err(e)),
                OpKind::SetData => TxnResult::SetData(Err(e)),
                OpKind::SetAcl => TxnResult::SetAcl(Err(e)),
                k => return Err(format!("a single {} refused", k.as_str_name())),
            }
        }
        Some(R::Multi(m)) => {
            let mut ops = Vec::with_capacity(m.ops.len());
            for d in m.ops {
                ops.push(match kind_of(d.kind)? {
                    OpKind::Create => {
                        let stat = stat_of(&d)?;
                        OpOutcome::Create { path: d.path, stat }
                    }
                    OpKind::Delete => OpOutcome::Delete,
                    OpKind::SetData => OpOutcome::SetData { stat: stat_of(&d)? },
                    OpKind::Check => OpOutcome::Check,
                    k => return Err(format!("a multi op {} applied", k.as_str_name())),
                });
            }
            TxnResult::Multi(MultiOutcome::Ok(ops))
        }
        Some(R::MultiRefused(r)) => TxnResult::Multi(MultiOutcome::Failed {
            index: r.index as usize,
            error: error_of(&r)?,
        }),
        Some(R::SessionClosed(c)) => TxnResult::SessionClosed { deleted: c.deleted },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::DataTree;

    fn stat(n: u64) -> pb::Stat {
        pb::Stat {
            czxid: n,
            mzxid: n + 1,
            version: 2,
            ..Default::default()
        }
    }

    fn error(code: ErrorCode) -> TreeError {
        TreeError::new(code, "/a/b")
    }

    /// Every result a client write can record, as its snapshot keeps it.
    #[test]
    fn every_recorded_result_survives_its_snapshot_form() {
        let results = [
            TxnResult::Create(Ok(("/a/b0000000001".into(), stat(3)))),
            TxnResult::Create(Err(error(ErrorCode::NodeExists))),
            TxnResult::Delete(Ok(())),
            TxnResult::Delete(Err(error(ErrorCode::NotEmpty))),
            TxnResult::SetData(Ok(stat(4))),
            TxnResult::SetData(Err(error(ErrorCode::BadVersion))),
            TxnResult::SetAcl(Ok(stat(5))),
            TxnResult::SetAcl(Err(error(ErrorCode::NoAuth))),
            TxnResult::Multi(MultiOutcome::Ok(vec![
                OpOutcome::Create {
                    path: "/m".into(),
                    stat: stat(6),
                },
                OpOutcome::Delete,
                OpOutcome::SetData { stat: stat(7) },
                OpOutcome::Check,
            ])),
            TxnResult::Multi(MultiOutcome::Ok(vec![])),
            TxnResult::Multi(MultiOutcome::Failed {
                index: 3,
                error: error(ErrorCode::LimitExceeded),
            }),
            TxnResult::SessionClosed {
                deleted: vec!["/e1".into(), "/e2".into()],
            },
            TxnResult::Noop,
        ];
        for (i, result) in results.into_iter().enumerate() {
            let recorded = Recorded::of(40 + i as u64, &result);
            assert_eq!(
                recorded,
                Recorded::Outcome {
                    zxid: 40 + i as u64,
                    result: result.clone()
                }
            );
            let stored = recorded.to_proto(7);
            let encoded = stored.encode_to_vec();
            let decoded = RecentResult::decode(&encoded[..]).expect("decodes");
            assert_eq!(
                Recorded::from_proto(decoded),
                Ok((7, recorded)),
                "{result:?}"
            );
        }
        // Results no door answers with more than "done" are kept alike.
        for result in [
            TxnResult::SessionCreated,
            TxnResult::SessionBound { epoch: Some(3) },
            TxnResult::GuardedDelete { deleted: true },
        ] {
            assert_eq!(
                Recorded::of(9, &result),
                Recorded::Outcome {
                    zxid: 9,
                    result: TxnResult::Noop
                }
            );
        }
    }

    /// A snapshot comes from disk or a peer: a record the tree could not
    /// have written is refused with what is wrong, never a panic.
    #[test]
    fn a_record_the_tree_could_not_have_written_is_refused() {
        let outcome = |result| RecentResult {
            xid: 3,
            response: Vec::new(),
            outcome: Some(WriteOutcome { zxid: 8, result }),
        };
        let done = |kind: OpKind, stat| {
            Some(write_outcome::Result::Done(OpDone {
                kind: kind as i32,
                path: "/x".into(),
                stat,
            }))
        };
        let refused = |kind: OpKind, code: i32| {
            Some(write_outcome::Result::Refused(OpRefused {
                kind: kind as i32,
                code,
                path: "/x".into(),
                index: 0,
            }))
        };
        let bad = [
            (outcome(done(OpKind::Create, None)), "without its stat"),
            (outcome(done(OpKind::Check, Some(stat(1)))), "single"),
            (outcome(done(OpKind::Unspecified, None)), "single"),
            (
                outcome(Some(write_outcome::Result::Done(OpDone {
                    kind: 99,
                    ..Default::default()
                }))),
                "unknown op kind 99",
            ),
            (outcome(refused(OpKind::Create, 0)), "code Ok"),
            (
                outcome(refused(OpKind::Create, 123_456)),
                "unknown error code",
            ),
            (
                outcome(refused(OpKind::Check, ErrorCode::NoNode as i32)),
                "single",
            ),
            (
                RecentResult {
                    xid: 3,
                    response: vec![1],
                    outcome: Some(WriteOutcome::default()),
                },
                "both",
            ),
            (
                RecentResult {
                    xid: 3,
                    response: vec![0xff, 0xff],
                    outcome: None,
                },
                "does not decode",
            ),
        ];
        for (record, why) in bad {
            match Recorded::from_proto(record.clone()) {
                Err(e) => assert!(e.contains(why), "{e} (expected {why:?})"),
                Ok(r) => panic!("{record:?} loaded as {r:?}"),
            }
        }
    }

    /// A snapshot written before outcomes were recorded keeps the answer
    /// as its server shaped it: it loads, survives the next snapshot as it
    /// was, and a copy of its write gets it back.
    #[test]
    fn an_old_snapshots_answer_loads_and_is_given_back() {
        use crate::proto::{txn::Kind, CreateSessionTxn, CreateTxn, Txn};
        let mut tree = DataTree::new();
        tree.apply(
            1,
            0,
            &Txn {
                kind: Some(Kind::CreateSession(CreateSessionTxn {
                    session_id: 5,
                    password: vec![1; 16],
                    timeout_ms: 10_000,
                })),
                ..Default::default()
            },
        );
        let create = Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: "/a".into(),
                ..Default::default()
            })),
            session_id: 5,
            xid: 2,
            ..Default::default()
        };
        tree.apply(2, 0, &create);
        let old_answer = pb::Response {
            xid: 2,
            zxid: 2,
            error: ErrorCode::Ok as i32,
            message: String::new(),
            result: Some(pb::response::Result::Create(pb::CreateResponse {
                path: "/a".into(),
                stat: Some(tree.node("/a").expect("/a").stat()),
            })),
        }
        .encode_to_vec();
        let mut snap = tree.to_snapshot();
        snap.sessions[0].recent = vec![RecentResult {
            xid: 2,
            response: old_answer.clone(),
            outcome: None,
        }];
        let mut old = DataTree::from_snapshot(&snap).expect("an old snapshot loads");
        let kept = Recorded::Answer(old_answer);
        assert_eq!(old.recorded(&create), Some(kept.clone()));
        assert_eq!(
            DataTree::from_snapshot(&old.to_snapshot()).expect("reloads"),
            old
        );
        assert_eq!(
            old.apply(3, 0, &create).result,
            TxnResult::Duplicate {
                first: Box::new(kept)
            }
        );
        // One whose answer does not decode is refused, naming the session.
        snap.sessions[0].recent[0].response = vec![0xff, 0xff];
        match DataTree::from_snapshot(&snap) {
            Err(crate::tree::SnapshotError::Inconsistent(e)) => {
                assert!(e.contains("session 0x5"), "{e}")
            }
            other => panic!("loaded: {other:?}"),
        }
    }

    /// The state machine never calls up into the request layer or a door:
    /// it records what happened, the door shapes the answer. Comments may
    /// name them; code may not.
    #[test]
    fn the_tree_does_not_depend_on_the_request_layer_or_the_doors() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tree");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).expect("src/tree") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("readable");
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for layer in ["ops", "core", "zk", "http"].map(|m| format!("crate::{m}")) {
                    assert!(
                        !code.contains(&layer),
                        "{}:{}: the tree uses {layer}: {line}",
                        path.display(),
                        n + 1
                    );
                }
            }
        }
        assert!(
            files > 10,
            "only {files} files read under {}",
            dir.display()
        );
    }
}
