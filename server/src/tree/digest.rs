//! The tree's digest (ZooKeeper's `hash` word): one number for the whole
//! tree, the same on every replica that applied the same log, so
//! operators can compare replicas at a zxid. As ZooKeeper's, it covers
//! each node's path, data and stat, and is a sum of per-node hashes
//! (order-free). Computed on demand (O(n)), unlike ZooKeeper's running
//! digest: the word is rare and the tree is not slowed for it.

use super::{DataTree, Node};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn node_hash(path: &str, n: &Node) -> u64 {
    let s = n.stat();
    let mut h = fnv(FNV_OFFSET, path.as_bytes());
    h = fnv(h, &[0, u8::from(n.data_null)]);
    h = fnv(h, &n.data);
    for v in [s.czxid, s.mzxid, s.pzxid, s.ephemeral_owner] {
        h = fnv(h, &v.to_be_bytes());
    }
    for v in [s.ctime_ms, s.mtime_ms] {
        h = fnv(h, &v.to_be_bytes());
    }
    for v in [s.version, s.cversion, s.aversion] {
        h = fnv(h, &v.to_be_bytes());
    }
    h
}

impl DataTree {
    /// The digest of every node (see the module doc).
    pub fn digest(&self) -> u64 {
        self.nodes
            .iter()
            .fold(0u64, |sum, (p, n)| sum.wrapping_add(node_hash(p, n)))
    }
}

#[cfg(test)]
mod tests {
    use crate::proto::{txn::Kind, CreateTxn, SetDataTxn, Txn};
    use crate::tree::DataTree;

    fn apply(tree: &mut DataTree, zxid: u64, kind: Kind) {
        let txn = Txn {
            kind: Some(kind),
            ..Default::default()
        };
        tree.apply(zxid, 1_000, &txn);
    }

    #[test]
    fn same_log_same_digest_and_any_change_moves_it() {
        let mut a = DataTree::new();
        let empty = a.digest();
        apply(
            &mut a,
            1,
            Kind::Create(CreateTxn {
                path: "/x".into(),
                ..Default::default()
            }),
        );
        let mut b = DataTree::from_snapshot(&a.to_snapshot()).unwrap();
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), empty);
        // Null and empty data differ.
        apply(
            &mut b,
            2,
            Kind::SetData(SetDataTxn {
                path: "/x".into(),
                data_null: true,
                ..Default::default()
            }),
        );
        apply(
            &mut a,
            2,
            Kind::SetData(SetDataTxn {
                path: "/x".into(),
                ..Default::default()
            }),
        );
        assert_ne!(a.digest(), b.digest());
    }
}
