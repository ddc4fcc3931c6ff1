//! Whether a set of identities holds a permission under a node's ACL:
//! ZooKeeper 3.8's `checkACL`, pure and deterministic.
//!
//! The tree calls it when it applies a write (the identities travel in the
//! `Txn`, so every replica decides alike) and the read path calls it on the
//! serving server's tree. It must never look at anything but its
//! arguments: no configuration, no clock, no connection.

use std::net::IpAddr;

use warden_protocol::auth::perms_names;
use warden_protocol::pb::Acl;

use crate::proto::AuthId;

/// The scheme of the super user's identity: it passes every check.
pub const SUPER_SCHEME: &str = "super";

/// Whether `ids` hold any of the permission bits `perm` under `acl`.
///
/// ZooKeeper's rules: an empty ACL grants everything; the super user
/// passes; otherwise some entry granting one of `perm` must be
/// `world:anyone`, or match one of `ids` in its scheme (digest, x509 and
/// sasl: the same id; ip: the address within the entry's address or CIDR
/// range). An `auth` entry never matches: it is replaced by the creator's
/// identities before it is stored.
pub fn allowed(acl: &[Acl], ids: &[AuthId], perm: u32) -> bool {
    if acl.is_empty() || ids.iter().any(|i| i.scheme == SUPER_SCHEME) {
        return true;
    }
    acl.iter()
        .filter(|a| a.perms & perm != 0)
        .any(|a| match a.scheme.as_str() {
            "world" => a.id == "anyone",
            "digest" | "x509" | "sasl" => ids.iter().any(|i| i.scheme == a.scheme && i.id == a.id),
            "ip" => ids
                .iter()
                .any(|i| i.scheme == "ip" && ip_matches(&i.id, &a.id)),
            _ => false,
        })
}

/// `ids` as one line: `digest:bob:HASH|ip:127.0.0.1`.
pub fn describe(ids: &[AuthId]) -> String {
    if ids.is_empty() {
        return "no identity".to_string();
    }
    ids.iter()
        .map(|i| format!("{}:{}", i.scheme, i.id))
        .collect::<Vec<_>>()
        .join("|")
}

/// The message of a NoAuth answer: `PATH: WRITE not granted to IDS`.
pub fn no_auth_message(path: &str, perm: u32, ids: &[AuthId]) -> String {
    format!(
        "{}: {} not granted to {}",
        path.escape_debug(),
        perms_names(perm).replace('|', " or "),
        describe(ids)
    )
}

/// Whether the address `id` lies within `expr`: an address, or an
/// address and a prefix length (`10.0.0.0/8`, `fd00::/8`). IPv4 and IPv6
/// never match each other (an IPv4-mapped IPv6 peer is recorded as IPv4).
pub fn ip_matches(id: &str, expr: &str) -> bool {
    let (Ok(addr), Some((net, bits))) = (id.parse::<IpAddr>(), parse_ip_expr(expr)) else {
        return false;
    };
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Parses an ip ACL id: an address, or `address/bits` with bits within
/// the address's width.
pub fn parse_ip_expr(expr: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = match expr.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (expr, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => width,
        Some(b) => b.parse::<u8>().ok().filter(|b| *b <= width)?,
    };
    Some((addr, bits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::perms;

    fn id(scheme: &str, id: &str) -> AuthId {
        AuthId {
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    fn entry(scheme: &str, id: &str, perms: u32) -> Acl {
        Acl {
            perms,
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    #[test]
    fn world_digest_x509_super() {
        let local = id("ip", "127.0.0.1");
        let bob = id("digest", "bob:HASH=");
        let alice_cert = id("x509", "CN=alice,O=acme");
        let acl = vec![
            entry("world", "anyone", perms::READ),
            entry("digest", "bob:HASH=", perms::WRITE),
            entry("x509", "CN=alice,O=acme", perms::DELETE),
        ];
        assert!(allowed(&acl, std::slice::from_ref(&local), perms::READ));
        assert!(!allowed(&acl, std::slice::from_ref(&local), perms::WRITE));
        assert!(allowed(&acl, &[local.clone(), bob.clone()], perms::WRITE));
        assert!(!allowed(&acl, std::slice::from_ref(&bob), perms::DELETE));
        assert!(allowed(
            &acl,
            std::slice::from_ref(&alice_cert),
            perms::DELETE
        ));
        // Another subject, or the same subject in another scheme, is not it.
        assert!(!allowed(&acl, &[id("x509", "CN=alice")], perms::DELETE));
        assert!(!allowed(
            &acl,
            &[id("digest", "CN=alice,O=acme")],
            perms::DELETE
        ));
        assert!(!allowed(&acl, std::slice::from_ref(&bob), perms::ADMIN));
        assert!(allowed(&acl, &[id(SUPER_SCHEME, "")], perms::ADMIN));
        // get_acl asks for READ or ADMIN: either will do.
        assert!(allowed(&acl, &[local], perms::READ | perms::ADMIN));
        // An empty ACL grants everything (as in ZooKeeper).
        assert!(allowed(&[], &[], perms::ADMIN));
        // world with another id, or an unexpanded auth entry, grants nothing.
        assert!(!allowed(
            &[entry("world", "someone", perms::ALL)],
            &[],
            perms::READ
        ));
        assert!(!allowed(
            &[entry("auth", "", perms::ALL)],
            &[bob],
            perms::READ
        ));
    }

    #[test]
    fn ip_ranges() {
        assert!(ip_matches("127.0.0.1", "127.0.0.1"));
        assert!(!ip_matches("127.0.0.2", "127.0.0.1"));
        assert!(ip_matches("10.1.2.3", "10.0.0.0/8"));
        assert!(!ip_matches("11.1.2.3", "10.0.0.0/8"));
        assert!(ip_matches("192.168.7.9", "0.0.0.0/0"));
        assert!(ip_matches("fd00::1", "fd00::/8"));
        assert!(!ip_matches("fe00::1", "fd00::/8"));
        assert!(!ip_matches("127.0.0.1", "::1"));
        assert!(!ip_matches("127.0.0.1", "127.0.0.1/33"));
        assert!(!ip_matches("127.0.0.1", "nonsense"));
        let acl = vec![entry("ip", "127.0.0.0/8", perms::READ)];
        assert!(allowed(&acl, &[id("ip", "127.0.0.5")], perms::READ));
        assert!(!allowed(&acl, &[id("ip", "10.0.0.5")], perms::READ));
    }

    #[test]
    fn messages_name_path_permission_and_identities() {
        let m = no_auth_message(
            "/app/cfg",
            perms::WRITE,
            &[id("digest", "bob:H="), id("ip", "127.0.0.1")],
        );
        assert_eq!(
            m,
            "/app/cfg: WRITE not granted to digest:bob:H=|ip:127.0.0.1"
        );
        assert_eq!(
            no_auth_message("/a", perms::READ | perms::ADMIN, &[]),
            "/a: READ or ADMIN not granted to no identity"
        );
    }
}
