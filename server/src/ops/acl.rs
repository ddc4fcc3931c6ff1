//! get_acl and set_acl, and the ACL rules every door shares: which ACLs
//! may be stored (known schemes, well-formed ids, `auth` entries replaced
//! by the requester's identities) and the permission each request needs.
//!
//! Writes are checked by the tree when they apply (the identities travel
//! in the `Txn`); reads are checked here, on the serving server's tree,
//! when they are served.

use warden_protocol::auth::check_digest_id;
use warden_protocol::pb::{self, response::Result as Res, ErrorCode};
use warden_protocol::perms;

use super::{check_path, check_version, Failure};
use crate::proto::{txn::Kind, AuthId, SetAclTxn, Txn};
use crate::tree::acl::{allowed, no_auth_message, parse_ip_expr, SUPER_SCHEME};
use crate::tree::DataTree;

/// Most entries in one ACL.
pub const ACL_ENTRIES_MAX: usize = 1024;

pub(super) fn plan_set(r: pb::SetAclRequest, ids: &[AuthId]) -> Result<Txn, Failure> {
    check_path(&r.path)?;
    check_version(r.version, &r.path)?;
    if r.acl.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidAcl,
            format!("{}: an ACL needs at least one entry", r.path),
        ));
    }
    let acl = prepare(&r.acl, &r.path, ids)?;
    Ok(Txn {
        kind: Some(Kind::SetAcl(SetAclTxn {
            path: r.path,
            acl,
            aversion: r.version,
        })),
        ..Default::default()
    })
}

/// Checks an ACL a request wants to store and returns what is stored:
/// ZooKeeper's `fixupACL`. Every entry must name a known scheme with a
/// well-formed id (`world:anyone`, `digest:user:hash`, `ip:addr[/bits]`,
/// `x509:subject`, `sasl:user`) and permissions within cdrwa; an `auth`
/// entry stands for every authenticated identity of the requester (digest,
/// x509 and sasl, not ip) with its permissions, and is InvalidAcl when it
/// has none.
pub(super) fn prepare(acl: &[pb::Acl], p: &str, ids: &[AuthId]) -> Result<Vec<pb::Acl>, Failure> {
    if acl.len() > ACL_ENTRIES_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidAcl,
            format!(
                "{p}: {} ACL entries exceed the limit of {ACL_ENTRIES_MAX}",
                acl.len()
            ),
        ));
    }
    let mut out: Vec<pb::Acl> = Vec::with_capacity(acl.len());
    for a in acl {
        let invalid = |why: &str| {
            Failure::new(
                ErrorCode::InvalidAcl,
                format!(
                    "{p}: ACL entry {}:{}: {why}",
                    a.scheme.escape_debug(),
                    a.id.escape_debug()
                ),
            )
        };
        if a.perms & !perms::ALL != 0 {
            return Err(invalid(&format!(
                "permission bits {:#x} outside cdrwa",
                a.perms
            )));
        }
        let ok = match a.scheme.as_str() {
            "world" => a.id == "anyone",
            "digest" => check_digest_id(&a.id).is_ok(),
            "ip" => parse_ip_expr(&a.id).is_some(),
            "x509" | "sasl" => !a.id.is_empty(),
            "auth" => {
                let mine: Vec<&AuthId> = ids
                    .iter()
                    .filter(|i| matches!(i.scheme.as_str(), "digest" | "x509" | "sasl"))
                    .collect();
                if mine.is_empty() {
                    return Err(invalid(
                        "the auth scheme needs an authenticated connection (digest, x509 or sasl)",
                    ));
                }
                for i in mine {
                    push_unique(
                        &mut out,
                        pb::Acl {
                            perms: a.perms,
                            scheme: i.scheme.clone(),
                            id: i.id.clone(),
                        },
                    );
                }
                continue;
            }
            _ => {
                return Err(invalid(
                    "unknown scheme (known: world, auth, digest, ip, x509, sasl)",
                ))
            }
        };
        if !ok {
            return Err(invalid(match a.scheme.as_str() {
                "world" => "the world scheme's only id is anyone",
                "digest" => "a digest id is user:BASE64HASH",
                "ip" => "an ip id is an address or address/bits",
                "sasl" => "a sasl id is a user name (not empty)",
                _ => "an x509 id is a certificate subject (not empty)",
            }));
        }
        push_unique(&mut out, a.clone());
    }
    Ok(out)
}

fn push_unique(out: &mut Vec<pb::Acl>, a: pb::Acl) {
    if !out.contains(&a) {
        out.push(a);
    }
}

/// NoAuth naming the path, the permission and who asked, unless `ids` hold
/// `perm` on the node at `p` (a missing node is the caller's concern).
pub(super) fn require(tree: &DataTree, p: &str, perm: u32, ids: &[AuthId]) -> Result<(), Failure> {
    match tree.node_acl(p) {
        Some(acl) if !allowed(acl, ids, perm) => Err(no_auth(p, perm, ids)),
        _ => Ok(()),
    }
}

pub(super) fn no_auth(p: &str, perm: u32, ids: &[AuthId]) -> Failure {
    Failure::new(ErrorCode::NoAuth, no_auth_message(p, perm, ids))
}

/// READ or ADMIN, as in ZooKeeper; without ADMIN the digest hashes are
/// hidden (`digest:user:x`), as ZooKeeper does.
pub(super) fn read_get(
    tree: &DataTree,
    ids: &[AuthId],
    r: &pb::GetAclRequest,
) -> Result<Option<Res>, Failure> {
    let Some((mut acl, stat)) = tree.acl(&r.path) else {
        return Err(Failure::new(ErrorCode::NoNode, r.path.clone()));
    };
    require(tree, &r.path, perms::READ | perms::ADMIN, ids)?;
    if !allowed(&acl, ids, perms::ADMIN) {
        for a in acl.iter_mut().filter(|a| a.scheme == "digest") {
            if let Some((user, _)) = a.id.split_once(':') {
                a.id = format!("{user}:x");
            }
        }
    }
    Ok(Some(Res::GetAcl(pb::GetAclResponse {
        acl,
        stat: Some(stat),
    })))
}

/// The permission the write `txn` (or op `index` of a multi) needed, for
/// the message of a NoAuth the tree answered.
pub(super) fn write_perm(txn: &Txn, index: Option<usize>) -> u32 {
    use crate::proto::multi_txn_op::Op as TOp;
    match &txn.kind {
        Some(Kind::Create(_)) => perms::CREATE,
        Some(Kind::Delete(_)) => perms::DELETE,
        Some(Kind::SetData(_)) => perms::WRITE,
        Some(Kind::SetAcl(_)) => perms::ADMIN,
        Some(Kind::Multi(m)) => {
            match index.and_then(|i| m.ops.get(i)).and_then(|o| o.op.as_ref()) {
                Some(TOp::Create(_)) => perms::CREATE,
                Some(TOp::Delete(_)) => perms::DELETE,
                Some(TOp::SetData(_)) => perms::WRITE,
                Some(TOp::Check(_)) => perms::READ,
                None => 0,
            }
        }
        _ => 0,
    }
}

/// The identities a write carried (empty when it carried none).
pub(super) fn txn_ids(txn: &Txn) -> &[AuthId] {
    txn.auth.as_ref().map(|a| a.ids.as_slice()).unwrap_or(&[])
}

/// Whether `ids` include the super user.
pub fn is_super(ids: &[AuthId]) -> bool {
    ids.iter().any(|i| i.scheme == SUPER_SCHEME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(scheme: &str, id: &str, perms: u32) -> pb::Acl {
        pb::Acl {
            perms,
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    fn id(scheme: &str, id: &str) -> AuthId {
        AuthId {
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    #[test]
    fn known_schemes_and_well_formed_ids_only() {
        let ok = [
            acl("world", "anyone", perms::READ),
            acl("digest", "bob:aGFzaA==", perms::ALL),
            acl("ip", "10.0.0.0/8", perms::READ),
            acl("ip", "::1", perms::READ),
            acl("x509", "CN=alice,O=acme", perms::WRITE),
            acl("sasl", "bob", perms::READ),
        ];
        assert_eq!(prepare(&ok, "/a", &[]).unwrap(), ok.to_vec());
        for bad in [
            acl("world", "someone", perms::READ),
            acl("digest", "bob", perms::READ),
            acl("digest", "bob:a:b", perms::READ),
            acl("ip", "10.0.0.0/33", perms::READ),
            acl("ip", "host.example", perms::READ),
            acl("x509", "", perms::READ),
            acl("sasl", "", perms::READ),
            acl("kerberos", "bob", perms::READ),
            acl("", "", perms::READ),
            acl("world", "anyone", 1 << 7),
        ] {
            let f = prepare(std::slice::from_ref(&bad), "/a", &[]).unwrap_err();
            assert_eq!(f.code, ErrorCode::InvalidAcl, "{bad:?}");
            assert!(f.message.starts_with("/a: ACL entry"), "{}", f.message);
        }
    }

    #[test]
    fn auth_entries_become_the_requesters_authenticated_ids() {
        let ip = id("ip", "127.0.0.1");
        let bob = id("digest", "bob:aGFzaA==");
        let cert = id("x509", "CN=bob");
        let sup = id(SUPER_SCHEME, "");
        let wanted = [
            acl("auth", "", perms::ALL),
            acl("world", "anyone", perms::READ),
        ];
        let got = prepare(&wanted, "/a", &[ip.clone(), sup, bob.clone(), cert]).unwrap();
        assert_eq!(
            got,
            vec![
                acl("digest", "bob:aGFzaA==", perms::ALL),
                acl("x509", "CN=bob", perms::ALL),
                acl("world", "anyone", perms::READ),
            ]
        );
        // An ip identity is not an authenticated one.
        let f = prepare(&wanted, "/a", &[ip]).unwrap_err();
        assert_eq!(f.code, ErrorCode::InvalidAcl);
        assert!(f.message.contains("authenticated"), "{}", f.message);
    }
}
