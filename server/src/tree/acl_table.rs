//! One copy of each distinct ACL: nodes share it (as ZooKeeper's ACL
//! cache does), so a million nodes with the open ACL hold one ACL, not a
//! million.
//!
//! The table is derived data: two trees that applied the same log hold
//! equal ACLs per node whatever their tables hold, so the table takes no
//! part in comparing trees. ACLs no node uses any more are dropped when
//! the table has doubled since it was last swept.

use std::collections::HashMap;
use std::sync::Arc;

use warden_protocol::pb::Acl;

/// A shared, immutable ACL.
pub type SharedAcl = Arc<[Acl]>;

#[derive(Clone, Default)]
pub struct AclTable {
    by_key: HashMap<Vec<u8>, SharedAcl>,
    /// Size after the last sweep.
    swept_at: usize,
}

/// Smallest table that is swept at all.
const SWEEP_MIN: usize = 64;

impl AclTable {
    /// The shared copy of `acl`.
    pub fn intern(&mut self, acl: &[Acl]) -> SharedAcl {
        let key = key_of(acl);
        if let Some(shared) = self.by_key.get(&key) {
            return shared.clone();
        }
        if self.by_key.len() >= SWEEP_MIN.max(2 * self.swept_at) {
            // Held only here: no node uses it.
            self.by_key.retain(|_, a| Arc::strong_count(a) > 1);
            self.swept_at = self.by_key.len();
        }
        let shared: SharedAcl = acl.into();
        self.by_key.insert(key, shared.clone());
        shared
    }

    /// Whether an ACL some node has names `scheme:id` (the lock API's
    /// gateway asks before it opens a session for a digest identity no
    /// user list vouches for).
    pub fn names(&self, scheme: &str, id: &str) -> bool {
        self.by_key.values().any(|acl| {
            Arc::strong_count(acl) > 1 && acl.iter().any(|a| a.scheme == scheme && a.id == id)
        })
    }

    /// Distinct ACLs held (some may be unused until the next sweep).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// Derived data: never makes two trees differ.
impl PartialEq for AclTable {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// An unambiguous key: each entry's permissions, then its scheme and id,
/// each with its length.
fn key_of(acl: &[Acl]) -> Vec<u8> {
    let mut key = Vec::with_capacity(acl.len() * 24);
    for a in acl {
        key.extend_from_slice(&a.perms.to_le_bytes());
        for s in [&a.scheme, &a.id] {
            key.extend_from_slice(&(s.len() as u32).to_le_bytes());
            key.extend_from_slice(s.as_bytes());
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(perms: u32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    #[test]
    fn equal_acls_share_one_copy() {
        let mut t = AclTable::default();
        let a = t.intern(&[acl(31, "world", "anyone")]);
        let b = t.intern(&[acl(31, "world", "anyone")]);
        assert!(Arc::ptr_eq(&a, &b));
        let c = t.intern(&[acl(1, "world", "anyone")]);
        assert!(!Arc::ptr_eq(&a, &c));
        // Lengths keep keys apart: "ab"+"c" is not "a"+"bc".
        let d = t.intern(&[acl(1, "ab", "c")]);
        let e = t.intern(&[acl(1, "a", "bc")]);
        assert!(!Arc::ptr_eq(&d, &e));
        assert_eq!(&*e, &[acl(1, "a", "bc")]);
    }

    #[test]
    fn unused_acls_are_swept_as_the_table_grows() {
        let mut t = AclTable::default();
        let kept = t.intern(&[acl(31, "digest", "kept")]);
        for i in 0..1000 {
            t.intern(&[acl(31, "digest", &format!("u{i}"))]);
        }
        assert!(t.len() < 200, "{} ACLs held", t.len());
        assert!(Arc::ptr_eq(&kept, &t.intern(&[acl(31, "digest", "kept")])));
    }
}
