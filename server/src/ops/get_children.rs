//! get_children, optionally leaving a one-shot child watch. A node with
//! more children than `--max-children-per-reply` is refused
//! (LimitExceeded) before its list is built.

use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::Failure;
use crate::limits::{self, Limit, Limits};
use crate::proto::AuthId;
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchKind, WatchRegistry};

pub(super) fn read(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    ids: &[AuthId],
    r: &pb::GetChildrenRequest,
    limits: &Limits,
) -> Result<Option<Res>, Failure> {
    let Some(stat) = tree.stat(&r.path) else {
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    // Before the limit: a reader without READ learns nothing of the count.
    super::acl::require(tree, &r.path, warden_protocol::perms::READ, ids)?;
    let max = limits.children_per_reply;
    if stat.num_children as usize > max {
        return Err(Failure::new(
            ErrorCode::LimitExceeded,
            limits::message(
                Limit::ChildrenPerReply,
                max,
                format!("{} has {} children", r.path, stat.num_children),
            ),
        ));
    }
    let Some((children, stat)) = tree.children(&r.path) else {
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    if r.watch {
        watches
            .try_add(conn, WatchKind::Child, &r.path)
            .map_err(|m| Failure::new(ErrorCode::LimitExceeded, m))?;
    }
    Ok(Some(Res::GetChildren(pb::GetChildrenResponse {
        children,
        stat: Some(stat),
    })))
}
