//! set_data, guarded by an optional expected version.

use warden_protocol::pb;

use super::{check_data, check_path, check_version, Failure};
use crate::proto::{txn::Kind, SetDataTxn, Txn};

pub(super) fn validate(r: &pb::SetDataRequest) -> Result<SetDataTxn, Failure> {
    check_path(&r.path)?;
    check_data(&r.data, r.data_null, &r.path)?;
    check_version(r.version, &r.path)?;
    Ok(SetDataTxn {
        path: r.path.clone(),
        data: r.data.clone(),
        version: r.version,
        data_null: r.data_null,
    })
}

pub(super) fn plan(r: pb::SetDataRequest) -> Result<Txn, Failure> {
    Ok(Txn {
        kind: Some(Kind::SetData(validate(&r)?)),
        ..Default::default()
    })
}
