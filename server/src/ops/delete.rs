//! delete, guarded by an optional expected version.

use warden_protocol::pb::{self, ErrorCode};

use super::{check_path, check_version, Failure};
use crate::proto::{txn::Kind, DeleteTxn, Txn};

pub(super) fn validate(r: &pb::DeleteRequest) -> Result<DeleteTxn, Failure> {
    check_path(&r.path)?;
    if r.path == "/" {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            "/: the root cannot be deleted",
        ));
    }
    check_version(r.version, &r.path)?;
    Ok(DeleteTxn {
        path: r.path.clone(),
        version: r.version,
    })
}

pub(super) fn plan(r: pb::DeleteRequest) -> Result<Txn, Failure> {
    Ok(Txn {
        kind: Some(Kind::Delete(validate(&r)?)),
        ..Default::default()
    })
}
