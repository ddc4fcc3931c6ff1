//! Converting the tree to and from its snapshot format (`proto::Snapshot`).
//!
//! This file owns the mapping between the in-memory tree and the stored
//! one, and the validation of a loaded snapshot. A snapshot comes from disk
//! or from a peer, so it is untrusted: loading must never panic and must
//! refuse anything the tree could not have produced, naming what is wrong.
//! The indexes (ephemerals, containers, TTLs) are not stored; loading
//! rebuilds them from the nodes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use warden_protocol::{path, DATA_BYTES_MAX};

use super::node::Node;
use super::{DataTree, SessionInfo, ROOT};
use crate::proto::{Snapshot, SnapshotNode, SnapshotSession};

/// Why a snapshot could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot has no nodes: the root is missing")]
    MissingRoot,
    #[error("snapshot starts with {found:?}, not with the root")]
    RootNotFirst { found: String },
    #[error("the root is ephemeral, a container or has a TTL")]
    BadRoot,
    #[error("node path {path:?} is invalid")]
    InvalidPath { path: String },
    #[error("node {path} appears more than once")]
    DuplicateNode { path: String },
    #[error("node {path} comes before its parent, or its parent is missing")]
    MissingParent { path: String },
    #[error("node {path} is the child of an ephemeral node")]
    ChildOfEphemeral { path: String },
    #[error("node {path} has no stat")]
    MissingStat { path: String },
    #[error("node {path} holds {actual} bytes of data, more than the limit")]
    DataTooLarge { path: String, actual: usize },
    #[error("node {path}: stat says {stat} bytes of data, it holds {actual}")]
    DataLengthMismatch {
        path: String,
        stat: u32,
        actual: usize,
    },
    #[error("node {path}: stat says {stat} children, it has {actual}")]
    ChildCountMismatch {
        path: String,
        stat: u32,
        actual: usize,
    },
    #[error("node {path} is a container and also ephemeral or has a TTL")]
    ConflictingFlags { path: String },
    #[error("node {path} has an empty ACL")]
    EmptyAcl { path: String },
    #[error("node {path} is owned by session {session_id:#x}, which is not in the snapshot")]
    UnknownOwner { path: String, session_id: u64 },
    #[error("session {session_id:#x} appears more than once")]
    DuplicateSession { session_id: u64 },
    #[error("session id 0 is reserved")]
    ReservedSessionId,
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

impl DataTree {
    /// The whole state at `applied_index`: nodes sorted by path, sessions
    /// by id. Plain path order lists every parent before its children,
    /// because a parent's path is a prefix of theirs.
    pub fn to_snapshot(&self) -> Snapshot {
        let mut nodes: Vec<SnapshotNode> = self
            .nodes
            .iter()
            .map(|(p, n)| SnapshotNode {
                path: p.clone(),
                data: n.data.clone(),
                acl: n.acl.to_vec(),
                stat: Some(n.stat()),
                container: n.container,
                ttl_ms: n.ttl_ms,
                data_null: n.data_null,
            })
            .collect();
        nodes.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        let sessions = self
            .sessions
            .iter()
            .map(|(id, s)| SnapshotSession {
                session_id: *id,
                password: s.password.clone(),
                timeout_ms: s.timeout_ms,
                recent: s
                    .recent
                    .iter()
                    .map(|(xid, response)| crate::proto::RecentResult {
                        xid: *xid,
                        response: response.clone(),
                    })
                    .collect(),
            })
            .collect();
        Snapshot {
            applied_index: self.applied_index,
            nodes,
            sessions,
            members: self
                .members
                .iter()
                .map(|(id, addr)| crate::proto::SnapshotMember {
                    id: *id,
                    addr: addr.clone(),
                })
                .collect(),
        }
    }

    /// Loads a snapshot, checking that it describes a tree `apply` could
    /// have built: the root first, every parent before its children,
    /// stored counts matching the data and children, ephemerals owned by
    /// listed sessions and childless. Rebuilds the indexes.
    pub fn from_snapshot(snap: &Snapshot) -> Result<DataTree, SnapshotError> {
        let mut sessions = BTreeMap::new();
        for s in &snap.sessions {
            if s.session_id == 0 {
                return Err(SnapshotError::ReservedSessionId);
            }
            let info = SessionInfo {
                password: s.password.clone(),
                timeout_ms: s.timeout_ms,
                recent: s
                    .recent
                    .iter()
                    .rev()
                    .take(super::node::RECENT_RESULTS_MAX)
                    .rev()
                    .map(|r| (r.xid, r.response.clone()))
                    .collect(),
            };
            if sessions.insert(s.session_id, info).is_some() {
                return Err(SnapshotError::DuplicateSession {
                    session_id: s.session_id,
                });
            }
        }
        let mut tree = DataTree {
            nodes: HashMap::with_capacity(snap.nodes.len()),
            sessions,
            ephemerals: BTreeMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            applied_index: snap.applied_index,
            members: snap
                .members
                .iter()
                .map(|m| (m.id, m.addr.clone()))
                .collect(),
            acls: Default::default(),
            data_bytes: 0,
        };

        let mut stored = snap.nodes.iter();
        let root = stored.next().ok_or(SnapshotError::MissingRoot)?;
        if root.path != ROOT {
            return Err(SnapshotError::RootNotFirst {
                found: root.path.clone(),
            });
        }
        let root_node = tree.node_from_snapshot(root)?;
        if root_node.ephemeral_owner != 0 || root_node.container || root_node.ttl_ms > 0 {
            return Err(SnapshotError::BadRoot);
        }
        tree.data_bytes = (ROOT.len() + root_node.data.len()) as u64;
        tree.nodes.insert(ROOT.to_string(), Box::new(root_node));

        for sn in stored {
            let p = sn.path.as_str();
            if path::validate(p).is_err() {
                return Err(SnapshotError::InvalidPath {
                    path: p.to_string(),
                });
            }
            if tree.nodes.contains_key(p) {
                return Err(SnapshotError::DuplicateNode {
                    path: p.to_string(),
                });
            }
            match tree.nodes.get(path::parent(p)) {
                None => {
                    return Err(SnapshotError::MissingParent {
                        path: p.to_string(),
                    })
                }
                Some(parent) if parent.ephemeral_owner != 0 => {
                    return Err(SnapshotError::ChildOfEphemeral {
                        path: p.to_string(),
                    })
                }
                Some(_) => {}
            }
            let node = tree.node_from_snapshot(sn)?;
            tree.insert_node(p.to_string(), node);
        }

        // Children counts can only be compared once every node is in.
        for sn in &snap.nodes {
            let stat = sn.stat.unwrap_or_default();
            let actual = tree.nodes.get(&sn.path).map_or(0, |n| n.children.len());
            if usize::try_from(stat.num_children).ok() != Some(actual) {
                return Err(SnapshotError::ChildCountMismatch {
                    path: sn.path.clone(),
                    stat: stat.num_children,
                    actual,
                });
            }
        }
        // Whatever the specific checks above did not name (zxid order, a
        // parent's pzxid older than a child) still makes the snapshot one
        // that `apply` could not have produced.
        tree.check_invariants()
            .map_err(SnapshotError::Inconsistent)?;
        Ok(tree)
    }

    /// One stored node, checked on its own (its links are checked by the
    /// caller). Needs the session table, already loaded, for ephemerals.
    fn node_from_snapshot(&mut self, sn: &SnapshotNode) -> Result<Node, SnapshotError> {
        let p = || sn.path.clone();
        let stat = sn
            .stat
            .ok_or_else(|| SnapshotError::MissingStat { path: p() })?;
        if sn.data.len() > DATA_BYTES_MAX {
            return Err(SnapshotError::DataTooLarge {
                path: p(),
                actual: sn.data.len(),
            });
        }
        if usize::try_from(stat.data_length).ok() != Some(sn.data.len()) {
            return Err(SnapshotError::DataLengthMismatch {
                path: p(),
                stat: stat.data_length,
                actual: sn.data.len(),
            });
        }
        if sn.data_null && !sn.data.is_empty() {
            return Err(SnapshotError::Inconsistent(format!(
                "node {}: null data that holds {} bytes",
                sn.path,
                sn.data.len()
            )));
        }
        if sn.container && (stat.ephemeral_owner != 0 || sn.ttl_ms > 0) {
            return Err(SnapshotError::ConflictingFlags { path: p() });
        }
        if sn.acl.is_empty() {
            return Err(SnapshotError::EmptyAcl { path: p() });
        }
        if stat.ephemeral_owner != 0 && !self.sessions.contains_key(&stat.ephemeral_owner) {
            return Err(SnapshotError::UnknownOwner {
                path: p(),
                session_id: stat.ephemeral_owner,
            });
        }
        Ok(Node::from_stat(
            &stat,
            sn.data.clone(),
            self.acls.intern(&sn.acl),
            sn.container,
            sn.ttl_ms,
            sn.data_null,
        ))
    }
}
