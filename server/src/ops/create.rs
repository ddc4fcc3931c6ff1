//! create: persistent, ephemeral, sequential, container and TTL nodes.

use warden_protocol::path;
use warden_protocol::pb::{self, ErrorCode};

use super::{check_data, Failure};
use crate::proto::{txn::Kind, AuthId, CreateTxn, Txn};

/// Largest TTL accepted (a year): beyond that it is surely a unit mistake.
pub(super) const TTL_MS_MAX: u64 = 365 * 24 * 3600 * 1000;

pub(super) fn validate(
    r: &pb::CreateRequest,
    session_id: u64,
    ids: &[AuthId],
) -> Result<CreateTxn, Failure> {
    path::validate_create(&r.path, r.sequential)
        .map_err(|e| Failure::new(ErrorCode::InvalidPath, e.to_string()))?;
    check_data(&r.data, r.data_null, &r.path)?;
    // Empty stays empty: the tree gives the node world:anyone, all perms.
    let acl = super::acl::prepare(&r.acl, &r.path, ids)?;
    if r.container && (r.ephemeral || r.sequential || r.ttl_ms > 0) {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "{}: a container node cannot also be ephemeral, sequential or TTL",
                r.path
            ),
        ));
    }
    if r.ttl_ms > TTL_MS_MAX {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "{}: ttl_ms {} exceeds the limit of {TTL_MS_MAX}",
                r.path, r.ttl_ms
            ),
        ));
    }
    Ok(CreateTxn {
        path: r.path.clone(),
        data: r.data.clone(),
        acl,
        ephemeral: r.ephemeral,
        sequential: r.sequential,
        container: r.container,
        ttl_ms: r.ttl_ms,
        session_id,
        data_null: r.data_null,
    })
}

pub(super) fn plan(r: pb::CreateRequest, session_id: u64, ids: &[AuthId]) -> Result<Txn, Failure> {
    Ok(Txn {
        kind: Some(Kind::Create(validate(&r, session_id, ids)?)),
        ..Default::default()
    })
}
