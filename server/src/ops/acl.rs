//! get_acl and set_acl. ACLs are stored, replicated and versioned
//! (aversion) now; enforcing them comes with authentication.

use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::{check_acl, check_path, check_version, Failure};
use crate::proto::{txn::Kind, SetAclTxn, Txn};
use crate::tree::DataTree;

pub(super) fn plan_set(r: pb::SetAclRequest) -> Result<Txn, Failure> {
    check_path(&r.path)?;
    check_version(r.version, &r.path)?;
    if r.acl.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidAcl,
            format!("{}: an ACL needs at least one entry", r.path),
        ));
    }
    check_acl(&r.acl, &r.path)?;
    Ok(Txn {
        kind: Some(Kind::SetAcl(SetAclTxn {
            path: r.path,
            acl: r.acl,
            aversion: r.version,
        })),
        ..Default::default()
    })
}

pub(super) fn read_get(tree: &DataTree, r: &pb::GetAclRequest) -> Result<Option<Res>, Failure> {
    let Some((acl, stat)) = tree.acl(&r.path) else {
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    Ok(Some(Res::GetAcl(pb::GetAclResponse {
        acl,
        stat: Some(stat),
    })))
}
