//! One znode and one session record: the values the DataTree stores.
//!
//! This file owns the per-node fields and how a [`Stat`] is derived from
//! them. It must never store a value that can be derived: `data_length` and
//! `num_children` are computed from `data` and `children` every time, so they
//! cannot drift out of sync with what the node holds.

use std::collections::BTreeSet;

use warden_protocol::pb::{Acl, Stat};

/// A znode. Its path is the key it is stored under in the tree, and its
/// children are kept by name so that a listing is sorted for free.
///
/// Fields are private to the tree module: only `DataTree::apply` may change
/// a node, because every change must also keep the parent and the indexes in
/// step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub(super) data: Vec<u8>,
    pub(super) acl: super::SharedAcl,
    pub(super) czxid: u64,
    pub(super) mzxid: u64,
    pub(super) pzxid: u64,
    pub(super) ctime_ms: i64,
    pub(super) mtime_ms: i64,
    pub(super) version: i32,
    pub(super) cversion: i32,
    pub(super) aversion: i32,
    /// Session that owns this ephemeral node; 0 for any other node.
    pub(super) ephemeral_owner: u64,
    /// Removed by the leader once it has had a child and has none left.
    pub(super) container: bool,
    /// Non-zero: removed by the leader when unmodified this long and
    /// childless.
    pub(super) ttl_ms: u64,
    /// Names (not paths) of the children.
    pub(super) children: BTreeSet<String>,
    /// The data is null (ZooKeeper's `create(path, null)`), not merely
    /// empty; `data` is then empty.
    pub(super) data_null: bool,
}

impl Node {
    /// The root: all-zero stat, open ACL, no data.
    pub(super) fn root() -> Node {
        Node {
            data: Vec::new(),
            acl: warden_protocol::open_acl().into(),
            czxid: 0,
            mzxid: 0,
            pzxid: 0,
            ctime_ms: 0,
            mtime_ms: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            container: false,
            ttl_ms: 0,
            children: BTreeSet::new(),
            data_null: false,
        }
    }

    /// A node restored from a snapshot's stored stat; its children are
    /// added as they are restored.
    pub(super) fn from_stat(
        stat: &Stat,
        data: Vec<u8>,
        acl: super::SharedAcl,
        container: bool,
        ttl_ms: u64,
        data_null: bool,
    ) -> Node {
        Node {
            data,
            acl,
            czxid: stat.czxid,
            mzxid: stat.mzxid,
            pzxid: stat.pzxid,
            ctime_ms: stat.ctime_ms,
            mtime_ms: stat.mtime_ms,
            version: stat.version,
            cversion: stat.cversion,
            aversion: stat.aversion,
            ephemeral_owner: stat.ephemeral_owner,
            container,
            ttl_ms,
            children: BTreeSet::new(),
            data_null,
        }
    }

    /// The node's `Stat`, with the derived counts filled in.
    pub fn stat(&self) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            pzxid: self.pzxid,
            ctime_ms: self.ctime_ms,
            mtime_ms: self.mtime_ms,
            version: self.version,
            cversion: self.cversion,
            aversion: self.aversion,
            ephemeral_owner: self.ephemeral_owner,
            data_length: len_u32(self.data.len()),
            num_children: len_u32(self.children.len()),
            container: self.container,
            ttl_ms: self.ttl_ms,
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Whether the data is null rather than empty.
    pub fn data_is_null(&self) -> bool {
        self.data_null
    }

    pub fn acl(&self) -> &[Acl] {
        &self.acl
    }

    /// Child names, sorted.
    pub fn children(&self) -> impl Iterator<Item = &str> {
        self.children.iter().map(String::as_str)
    }

    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0
    }

    pub fn is_container(&self) -> bool {
        self.container
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }
}

/// A length as the wire's `u32`. Data is capped at 1 MiB, and more than
/// 4 billion children cannot fit in memory, so saturating never happens in
/// practice; it only keeps the conversion total.
pub(super) fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A replicated session record. Its existence matters to the tree
/// (ephemeral creates need a live owner); the password and timeout are kept
/// so that any replica can resume the session after a leader change; its
/// writes' record judges every client write of the session new, duplicate
/// or stale (see [`super::writes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub password: Vec<u8>,
    pub timeout_ms: u32,
    pub writes: super::writes::SessionWrites,
}

/// Native-door write answers remembered per session for a client's
/// retries (same xid on a new connection): a retry of one of the latest
/// this many gets its original answer. Whether a write applies never
/// depends on it: the session's highest applied xid decides that.
pub const RECENT_RESULTS_MAX: usize = 64;

/// Set in the xid of a server-made txn of a client's session (a close) and,
/// under `--unsafe-bounded-dedup` only, of ZooKeeper-door writes (the old
/// scheme): such xids carry no order, they are never stale, and only the
/// session's last [`RECENT_RESULTS_MAX`] answers recognise a second apply.
pub const SERVER_XID_BIT: u64 = 1 << 63;
