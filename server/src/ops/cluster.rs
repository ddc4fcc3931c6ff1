//! cluster_status, add_member, remove_member: served by the core from the
//! raft node's state; membership changes become raft conf changes.

use warden_protocol::pb::{self, ErrorCode};

use super::Failure;

pub(crate) fn check_add(r: &pb::AddMemberRequest) -> Result<(), Failure> {
    if r.id == 0 {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            "member id must be non-zero",
        ));
    }
    let addr_ok = r
        .addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !addr_ok {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!("member {}: address {:?} is not HOST:PORT", r.id, r.addr),
        ));
    }
    Ok(())
}

pub(super) fn check_remove(r: &pb::RemoveMemberRequest) -> Result<(), Failure> {
    if r.id == 0 {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            "member id must be non-zero",
        ));
    }
    Ok(())
}
