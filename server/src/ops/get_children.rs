//! get_children, optionally leaving a one-shot child watch.

use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::Failure;
use crate::proto::AuthId;
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchKind, WatchRegistry};

pub(super) fn read(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    ids: &[AuthId],
    r: &pb::GetChildrenRequest,
) -> Result<Option<Res>, Failure> {
    let Some((children, stat)) = tree.children(&r.path) else {
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    super::acl::require(tree, &r.path, warden_protocol::perms::READ, ids)?;
    if r.watch {
        watches.add(conn, WatchKind::Child, &r.path);
    }
    Ok(Some(Res::GetChildren(pb::GetChildrenResponse {
        children,
        stat: Some(stat),
    })))
}
