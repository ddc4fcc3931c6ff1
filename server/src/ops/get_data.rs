//! get_data, optionally leaving a one-shot data watch.

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
    r: &pb::GetDataRequest,
) -> Result<Option<Res>, Failure> {
    let Some(node) = tree.node(&r.path) else {
        // As in ZooKeeper, no watch is left on a node that does not exist:
        // exists() is the way to wait for a creation.
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    super::acl::require(tree, &r.path, warden_protocol::perms::READ, ids)?;
    if r.watch {
        watches
            .try_add(conn, WatchKind::Data, &r.path)
            .map_err(|m| Failure::new(ErrorCode::LimitExceeded, m))?;
    }
    Ok(Some(Res::GetData(pb::GetDataResponse {
        data: node.data().to_vec(),
        stat: Some(node.stat()),
        data_null: node.data_is_null(),
    })))
}
