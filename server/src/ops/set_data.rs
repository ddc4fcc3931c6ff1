//! set_data, guarded by an optional expected version; with a non-zero
//! `ttl_ms`, it also gives a TTL node a new TTL (counted from this write).

use warden_protocol::pb::{self, ErrorCode};

use super::create::TTL_MS_MAX;
use super::{check_data, check_path, check_version, Failure};
use crate::proto::{txn::Kind, SetDataTxn, Txn};

pub(super) fn validate(r: &pb::SetDataRequest) -> Result<SetDataTxn, Failure> {
    check_path(&r.path)?;
    check_data(&r.data, r.data_null, &r.path)?;
    check_version(r.version, &r.path)?;
    if r.ttl_ms > TTL_MS_MAX {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "{}: ttl_ms {} exceeds the limit of {TTL_MS_MAX}",
                r.path, r.ttl_ms
            ),
        ));
    }
    Ok(SetDataTxn {
        path: r.path.clone(),
        data: r.data.clone(),
        version: r.version,
        ttl_ms: r.ttl_ms,
        data_null: r.data_null,
    })
}

pub(super) fn plan(r: pb::SetDataRequest) -> Result<Txn, Failure> {
    Ok(Txn {
        kind: Some(Kind::SetData(validate(&r)?)),
        ..Default::default()
    })
}

/// The message of a TTL change the tree refused (BadArguments naming
/// only the node): the node has no TTL to change.
pub(super) fn no_ttl(path: &str) -> Failure {
    Failure::new(
        ErrorCode::BadArguments,
        format!("{path}: ttl_ms changes the TTL of a TTL node; this node was created without one"),
    )
}
