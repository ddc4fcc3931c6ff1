//! Requests, one file per kind: each checks its input once (paths, sizes,
//! flag combinations — the same rules for every door) and says how it is
//! served: a write becomes a [`Txn`] to propose, a read runs against the
//! local tree when its turn in the session's order comes.
//!
//! Nothing here touches Raft or a connection: [`plan`] is pure, [`read`]
//! only reads the tree (and registers watches), [`write_answer`] turns what
//! a write did (the tree's result, or the outcome it recorded for a copy
//! of the write) into the wire answer.

pub mod acl;
pub(crate) mod cluster;
mod create;
mod delete;
mod exists;
mod get_children;
mod get_data;
mod multi;
mod reads;
mod set_data;
mod watches;

use warden_protocol::pb::{self, request::Op, response::Result as Res, ErrorCode};
use warden_protocol::{path, DATA_BYTES_MAX};

use crate::limits::Limits;
use crate::proto::{txn::Kind, AuthId, Txn};
use crate::tree::{DataTree, Recorded, TreeError, TxnResult};
use crate::watch::{ConnId, WatchRegistry};

/// How a request is served.
#[derive(Debug)]
pub enum Plan {
    /// Propose this txn; answer when it applies.
    Write(Txn),
    /// Serve from the local tree in session order (after a ReadIndex round
    /// first, when `linearizable`).
    Read {
        op: ReadOp,
        linearizable: bool,
    },
    /// Heartbeat: an empty answer in order.
    Ping,
    /// Close the session (a write: CloseSession).
    Close,
    /// The group's members as this server sees them; with `watch_config`,
    /// the connection hears once of the next membership change.
    ClusterStatus {
        watch_config: bool,
    },
    /// A raft conf change.
    AddMember(pb::AddMemberRequest),
    RemoveMember(pb::RemoveMemberRequest),
    /// ZooKeeper's reconfig: several conf changes, one after the other
    /// (checked against the membership by the core, which knows it).
    Reconfig(pb::ReconfigRequest),
    /// Refused before reaching the log.
    Reject(Failure),
}

/// Reads and other requests answered from local state.
#[derive(Debug, Clone)]
pub enum ReadOp {
    GetData(pb::GetDataRequest),
    Exists(pb::ExistsRequest),
    GetChildren(pb::GetChildrenRequest),
    GetAcl(pb::GetAclRequest),
    Sync(pb::SyncRequest),
    AddWatch(pb::AddWatchRequest),
    RemoveWatches(pb::RemoveWatchesRequest),
    SetWatches(pb::SetWatchesRequest),
    GetEphemerals(pb::GetEphemeralsRequest),
    CountDescendants(pb::CountDescendantsRequest),
    CheckWatches(pb::CheckWatchesRequest),
    MultiRead(pb::MultiReadRequest),
    /// The connection's identities when the request arrived.
    WhoAmI,
}

/// An error answer: the code and a message naming the path or field.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    /// A result that goes with the error (a failed multi's per-op results).
    pub detail: Option<Box<Res>>,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            detail: None,
        }
    }
}

impl From<TreeError> for Failure {
    fn from(e: TreeError) -> Self {
        Failure::new(e.code, e.path)
    }
}

/// A watch event for one connection, produced while serving a read
/// (SetWatches fires at once for changes the client missed).
#[derive(Debug, Clone, PartialEq)]
pub struct ImmediateEvent {
    pub event: pb::WatchEvent,
}

/// Decides how to serve a request from the session `session_id`, made on
/// a connection holding the identities `ids` (which replace the `auth`
/// entries of the ACLs it stores). An auth request never gets here: it
/// changes the connection, which is the core's.
pub fn plan(op: Op, session_id: u64, ids: &[AuthId]) -> Plan {
    let planned = match op {
        Op::Create(r) => create::plan(r, session_id, ids).map(Plan::Write),
        Op::Delete(r) => delete::plan(r).map(Plan::Write),
        Op::SetData(r) => set_data::plan(r).map(Plan::Write),
        Op::SetAcl(r) => acl::plan_set(r, ids).map(Plan::Write),
        Op::Multi(r) => multi::plan(r, session_id, ids).map(Plan::Write),
        Op::GetData(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: r.linearizable,
            op: ReadOp::GetData(r),
        }),
        Op::Exists(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: r.linearizable,
            op: ReadOp::Exists(r),
        }),
        Op::GetChildren(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: r.linearizable,
            op: ReadOp::GetChildren(r),
        }),
        Op::GetAcl(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::GetAcl(r),
        }),
        Op::Sync(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: true,
            op: ReadOp::Sync(r),
        }),
        Op::AddWatch(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::AddWatch(r),
        }),
        Op::RemoveWatches(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::RemoveWatches(r),
        }),
        Op::SetWatches(r) => watches::check_set(&r).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::SetWatches(r),
        }),
        Op::GetEphemerals(r) => check_path(&r.prefix_path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::GetEphemerals(r),
        }),
        Op::CountDescendants(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::CountDescendants(r),
        }),
        Op::CheckWatches(r) => check_path(&r.path).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::CheckWatches(r),
        }),
        Op::MultiRead(r) => reads::check_multi(&r).map(|_| Plan::Read {
            linearizable: false,
            op: ReadOp::MultiRead(r),
        }),
        // Served in its turn, so an auth sent before it is seen.
        Op::WhoAmI(_) => Ok(Plan::Read {
            linearizable: false,
            op: ReadOp::WhoAmI,
        }),
        Op::ClusterStatus(r) => Ok(Plan::ClusterStatus {
            watch_config: r.watch_config,
        }),
        Op::AddMember(r) => cluster::check_add(&r).map(|_| Plan::AddMember(r)),
        Op::RemoveMember(r) => cluster::check_remove(&r).map(|_| Plan::RemoveMember(r)),
        Op::Reconfig(r) => Ok(Plan::Reconfig(r)),
        Op::Ping(_) => Ok(Plan::Ping),
        Op::Close(_) => Ok(Plan::Close),
        Op::Auth(_) => Err(Failure::new(
            ErrorCode::BadArguments,
            "an auth request is answered by the connection, not planned",
        )),
    };
    planned.unwrap_or_else(Plan::Reject)
}

/// Serves a read for connection `conn` from the local tree, checking the
/// permission it needs against `ids` (the connection's identities when the
/// request arrived). Returns the answer and any events to push to this
/// connection *before* it.
pub fn read(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    session_id: u64,
    ids: &[AuthId],
    op: &ReadOp,
    limits: &Limits,
) -> (Result<Option<Res>, Failure>, Vec<pb::WatchEvent>) {
    match op {
        // The session's own ephemerals: nothing another session's ACL
        // could hide.
        ReadOp::GetEphemerals(r) => (reads::ephemerals(tree, session_id, r), vec![]),
        ReadOp::CountDescendants(r) => (reads::count(tree, ids, r), vec![]),
        ReadOp::WhoAmI => (Ok(Some(reads::who_am_i(ids))), vec![]),
        ReadOp::CheckWatches(r) => (watches::check(watches, conn, r), vec![]),
        ReadOp::MultiRead(r) => (reads::multi(tree, watches, conn, ids, r, limits), vec![]),
        ReadOp::GetData(r) => (get_data::read(tree, watches, conn, ids, r), vec![]),
        // exists needs no permission, as in ZooKeeper.
        ReadOp::Exists(r) => (exists::read(tree, watches, conn, r), vec![]),
        ReadOp::GetChildren(r) => (
            get_children::read(tree, watches, conn, ids, r, limits),
            vec![],
        ),
        ReadOp::GetAcl(r) => (acl::read_get(tree, ids, r), vec![]),
        ReadOp::Sync(r) => (
            Ok(Some(Res::Sync(pb::SyncResponse {
                path: r.path.clone(),
            }))),
            vec![],
        ),
        ReadOp::AddWatch(r) => (watches::add(tree, watches, conn, ids, r), vec![]),
        ReadOp::RemoveWatches(r) => (watches::remove(watches, conn, r), vec![]),
        ReadOp::SetWatches(r) => match watches::set(tree, watches, conn, r) {
            Ok(events) => (Ok(None), events),
            Err(f) => (Err(f), vec![]),
        },
    }
}

/// The wire answer to request `xid`, at `zxid`: a result, or a failure
/// (with its detail, e.g. a multi's per-op results).
pub fn response(xid: u64, zxid: u64, result: Result<Option<Res>, Failure>) -> pb::Response {
    match result {
        Ok(result) => pb::Response {
            xid,
            zxid,
            error: ErrorCode::Ok as i32,
            message: String::new(),
            result,
        },
        Err(f) => pb::Response {
            xid,
            zxid,
            error: f.code as i32,
            message: f.message,
            result: f.detail.map(|d| *d),
        },
    }
}

/// The wire answer to the write `txn`, whose entry applied at `zxid` with
/// `result`. A copy of a write the tree recognised is answered from what
/// its first apply recorded, shaped as the first answer was.
pub fn write_answer(txn: &Txn, zxid: u64, result: &TxnResult) -> pb::Response {
    match result {
        TxnResult::Duplicate { first } => recorded_answer(txn, first),
        _ => response(txn.xid, zxid, write_response(result, txn)),
    }
}

/// The wire answer to the write `txn` from what the tree recorded of its
/// first apply (a copy of it, or a write whose entry a snapshot holds).
pub fn recorded_answer(txn: &Txn, recorded: &Recorded) -> pb::Response {
    match recorded {
        Recorded::Outcome { zxid, result } => response(txn.xid, *zxid, write_response(result, txn)),
        Recorded::Answer(bytes) => Recorded::old_answer(bytes).unwrap_or_else(|| {
            // Checked when the snapshot was loaded; kept total all the same.
            response(
                txn.xid,
                0,
                Err(Failure::new(
                    ErrorCode::RuntimeInconsistency,
                    "the recorded answer of this write does not decode; its outcome is unknown",
                )),
            )
        }),
    }
}

/// Turns the applied result of `txn` into the wire answer's result.
fn write_response(result: &TxnResult, txn: &Txn) -> Result<Option<Res>, Failure> {
    // A NoAuth from the tree names only the path: say which permission
    // was missing and who asked.
    let failure = |e: TreeError| {
        if e.code == ErrorCode::NoAuth {
            acl::no_auth(&e.path, acl::write_perm(txn, None), acl::txn_ids(txn))
        } else if e.code == ErrorCode::BadArguments
            && matches!(&txn.kind, Some(Kind::SetData(s)) if s.ttl_ms > 0)
        {
            set_data::no_ttl(&e.path)
        } else if e.code == ErrorCode::LimitExceeded {
            Failure::new(
                e.code,
                format!(
                    "{}: would exceed a hard quota (countHardLimit or byteHardLimit under /zookeeper/quota)",
                    e.path.escape_debug()
                ),
            )
        } else {
            Failure::from(e)
        }
    };
    match result {
        TxnResult::Create(r) => r
            .as_ref()
            .map(|(path, stat)| {
                Some(Res::Create(pb::CreateResponse {
                    path: path.clone(),
                    stat: Some(*stat),
                }))
            })
            .map_err(|e| failure(e.clone())),
        TxnResult::Delete(r) => r.as_ref().map(|()| None).map_err(|e| failure(e.clone())),
        TxnResult::SetData(r) | TxnResult::SetAcl(r) => r
            .as_ref()
            .map(|stat| Some(Res::Stat(pb::StatResponse { stat: Some(*stat) })))
            .map_err(|e| failure(e.clone())),
        TxnResult::Multi(outcome) => multi::response(outcome, txn),
        // Answered from its first apply's record by `write_answer`.
        TxnResult::Duplicate { .. } => Ok(None),
        &TxnResult::Stale { latest_xid } if txn.seq != 0 => Err(Failure::new(
            ErrorCode::SessionMoved,
            format!(
                "write {} of this session's connection arrived after its write {latest_xid} \
                 was applied (it lost its place in a leader change, or is a copy of a write \
                 applied before); not applied",
                txn.seq
            ),
        )),
        &TxnResult::Stale { latest_xid } => Err(Failure::new(
            ErrorCode::SessionMoved,
            format!(
                "request {} of this session arrived after its later request {latest_xid} \
                 was applied (left behind on a server the session moved away from); \
                 not applied",
                txn.xid
            ),
        )),
        &TxnResult::Moved { epoch } => Err(Failure::new(
            ErrorCode::SessionMoved,
            format!(
                "the session was resumed on another connection (at zxid {epoch}) after this \
                 write was sent; not applied"
            ),
        )),
        TxnResult::SessionGone => Err(Failure::new(
            ErrorCode::SessionExpired,
            "the session had ended when this write reached the log; not applied",
        )),
        TxnResult::SessionCreated
        | TxnResult::SessionBound { .. }
        | TxnResult::SessionClosed { .. }
        | TxnResult::GuardedDelete { .. }
        | TxnResult::Noop => Ok(None),
    }
}

fn check_path(p: &str) -> Result<(), Failure> {
    path::validate(p).map_err(|e| Failure::new(ErrorCode::InvalidPath, e.to_string()))
}

fn check_version(version: Option<i32>, p: &str) -> Result<(), Failure> {
    match version {
        Some(v) if v < 0 => Err(Failure::new(
            ErrorCode::BadArguments,
            format!("{p}: version {v} is negative (omit it to match any version)"),
        )),
        _ => Ok(()),
    }
}

/// The data of a create or set_data: within the size limit, and empty
/// when it is null.
fn check_data(data: &[u8], null: bool, p: &str) -> Result<(), Failure> {
    if null && !data.is_empty() {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "{p}: data_null with {} bytes of data (null data is empty)",
                data.len()
            ),
        ));
    }
    if data.len() > DATA_BYTES_MAX {
        return Err(Failure::new(
            ErrorCode::DataTooLarge,
            format!(
                "{p}: {} bytes exceeds the limit of {DATA_BYTES_MAX}",
                data.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod answers_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn reject_code(op: Op) -> ErrorCode {
        match plan(op, 1, &[]) {
            Plan::Reject(f) => f.code,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn bad_input_is_rejected_before_the_log() {
        assert_eq!(
            reject_code(Op::GetData(pb::GetDataRequest {
                path: "a/b".into(),
                ..Default::default()
            })),
            ErrorCode::InvalidPath
        );
        assert_eq!(
            reject_code(Op::Create(pb::CreateRequest {
                path: "/a".into(),
                data: vec![0; DATA_BYTES_MAX + 1],
                ..Default::default()
            })),
            ErrorCode::DataTooLarge
        );
        assert_eq!(
            reject_code(Op::Create(pb::CreateRequest {
                path: "/a".into(),
                container: true,
                ephemeral: true,
                ..Default::default()
            })),
            ErrorCode::BadArguments
        );
        assert_eq!(
            reject_code(Op::SetData(pb::SetDataRequest {
                path: "/a/".into(),
                ..Default::default()
            })),
            ErrorCode::InvalidPath
        );
        assert_eq!(
            reject_code(Op::Delete(pb::DeleteRequest {
                path: "/".into(),
                version: None
            })),
            ErrorCode::BadArguments
        );
    }

    #[test]
    fn reads_and_writes_are_planned() {
        assert!(matches!(
            plan(
                Op::Create(pb::CreateRequest {
                    path: "/a".into(),
                    ..Default::default()
                }),
                1,
                &[]
            ),
            Plan::Write(_)
        ));
        assert!(matches!(
            plan(
                Op::GetData(pb::GetDataRequest {
                    path: "/a".into(),
                    linearizable: true,
                    ..Default::default()
                }),
                1,
                &[]
            ),
            Plan::Read {
                linearizable: true,
                ..
            }
        ));
    }
}
