//! get_ephemerals, count_descendants and multi_read: reads the ZooKeeper
//! door needs (getEphemerals, getAllChildrenNumber, multiRead), offered to
//! every door.

use warden_protocol::pb::{self, multi_read_op::Op as ROp, response::Result as Res, ErrorCode};

use super::{check_path, get_children, get_data, Failure};
use crate::limits::Limits;
use crate::proto::AuthId;
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchRegistry};

/// Most ops in one multi_read.
const MULTI_READ_OPS_MAX: usize = 1000;

pub(super) fn ephemerals(
    tree: &DataTree,
    session_id: u64,
    r: &pb::GetEphemeralsRequest,
) -> Result<Option<Res>, Failure> {
    let prefix = r.prefix_path.as_str();
    let paths = tree
        .ephemerals(session_id)
        .into_iter()
        .filter(|p| prefix == "/" || p.starts_with(prefix))
        .collect();
    Ok(Some(Res::GetEphemerals(pb::GetEphemeralsResponse {
        paths,
    })))
}

/// The identities a request is checked with (ZooKeeper's whoAmI): no
/// permission needed, as in ZooKeeper.
pub(super) fn who_am_i(ids: &[AuthId]) -> Res {
    Res::WhoAmI(pb::WhoAmIResponse {
        ids: ids
            .iter()
            .map(|i| pb::Identity {
                scheme: i.scheme.clone(),
                id: i.id.clone(),
            })
            .collect(),
    })
}

/// READ on the node, as ZooKeeper's getAllChildrenNumber.
pub(super) fn count(
    tree: &DataTree,
    ids: &[AuthId],
    r: &pb::CountDescendantsRequest,
) -> Result<Option<Res>, Failure> {
    match tree.count_descendants(&r.path) {
        Some(count) => {
            super::acl::require(tree, &r.path, warden_protocol::perms::READ, ids)?;
            Ok(Some(Res::CountDescendants(pb::CountDescendantsResponse {
                count,
            })))
        }
        None => Err(Failure::new(ErrorCode::NoNode, r.path.clone())),
    }
}

pub(super) fn check_multi(r: &pb::MultiReadRequest) -> Result<(), Failure> {
    if r.ops.len() > MULTI_READ_OPS_MAX {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "multi_read of {} ops exceeds the limit of {MULTI_READ_OPS_MAX}",
                r.ops.len()
            ),
        ));
    }
    for (i, op) in r.ops.iter().enumerate() {
        match &op.op {
            Some(ROp::GetData(g)) => check_path(&g.path)?,
            Some(ROp::GetChildren(g)) => check_path(&g.path)?,
            None => {
                return Err(Failure::new(
                    ErrorCode::BadArguments,
                    format!("multi_read op {i} is empty"),
                ))
            }
        }
    }
    Ok(())
}

/// Each read answered on its own (one failing does not fail the others),
/// all from the same state.
pub(super) fn multi(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    ids: &[AuthId],
    r: &pb::MultiReadRequest,
    limits: &Limits,
) -> Result<Option<Res>, Failure> {
    let results = r
        .ops
        .iter()
        .map(|op| {
            let answer = match &op.op {
                Some(ROp::GetData(g)) => get_data::read(tree, watches, conn, ids, g),
                Some(ROp::GetChildren(g)) => {
                    get_children::read(tree, watches, conn, ids, g, limits)
                }
                None => Err(Failure::new(ErrorCode::BadArguments, "empty op")),
            };
            match answer {
                Ok(Some(Res::GetData(d))) => pb::MultiReadResult {
                    error: ErrorCode::Ok as i32,
                    message: String::new(),
                    result: Some(pb::multi_read_result::Result::GetData(d)),
                },
                Ok(Some(Res::GetChildren(c))) => pb::MultiReadResult {
                    error: ErrorCode::Ok as i32,
                    message: String::new(),
                    result: Some(pb::multi_read_result::Result::GetChildren(c)),
                },
                Ok(_) => pb::MultiReadResult::default(),
                Err(f) => pb::MultiReadResult {
                    error: f.code as i32,
                    message: f.message,
                    result: None,
                },
            }
        })
        .collect();
    Ok(Some(Res::MultiRead(pb::MultiReadResponse { results })))
}
