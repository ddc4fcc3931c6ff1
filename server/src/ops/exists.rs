//! exists: the node's stat or none; its watch also waits for a creation.

use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::Failure;
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchKind, WatchRegistry};

pub(super) fn read(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    r: &pb::ExistsRequest,
) -> Result<Option<Res>, Failure> {
    let stat = tree.stat(&r.path);
    if r.watch {
        watches
            .try_add(conn, WatchKind::Data, &r.path)
            .map_err(|m| Failure::new(ErrorCode::LimitExceeded, m))?;
    }
    Ok(Some(Res::Stat(pb::StatResponse { stat })))
}
