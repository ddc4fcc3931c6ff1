//! Converting the tree to and from its snapshot format (`proto::Snapshot`).
//!
//! This file owns the mapping between the in-memory tree and the stored
//! one, and the validation of a loaded snapshot. A snapshot comes from disk
//! or from a peer, so it is untrusted: loading must never panic and must
//! refuse anything the tree could not have produced, naming what is wrong.
//! The indexes (ephemerals, containers, TTLs) are not stored; loading
//! rebuilds them from the nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use warden_protocol::{path, DATA_BYTES_MAX};

use super::node::Node;
use super::outcome::Recorded;
use super::{DataTree, SessionInfo, ROOT};
use crate::proto::{Snapshot, SnapshotNode};

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
    /// Loads a snapshot, checking that it describes a tree `apply` could
    /// have built: the root first, every parent before its children,
    /// stored counts matching the data and children, zxids in order,
    /// ephemerals owned by listed sessions and childless. Rebuilds the
    /// indexes.
    pub fn from_snapshot(snap: &Snapshot) -> Result<DataTree, SnapshotError> {
        Self::from_snapshot_owned(snap.clone())
    }

    /// [`from_snapshot`](Self::from_snapshot) taking the snapshot by
    /// value: each node's data moves into the tree instead of being
    /// copied (what a server restoring a million nodes wants).
    ///
    /// Every rule is checked node by node as it is loaded (its parent is
    /// already in), so the tree is not walked a second time; the full
    /// [`check_invariants`](Self::check_invariants) still runs in debug
    /// builds.
    pub fn from_snapshot_owned(snap: Snapshot) -> Result<DataTree, SnapshotError> {
        let mut sessions = BTreeMap::new();
        for s in snap.sessions {
            if s.session_id == 0 {
                return Err(SnapshotError::ReservedSessionId);
            }
            let records = |list: Vec<crate::proto::RecentResult>| {
                list.into_iter()
                    .map(Recorded::from_proto)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        SnapshotError::Inconsistent(format!("session {:#x}: {e}", s.session_id))
                    })
            };
            let writes = super::writes::SessionWrites {
                applied_xid: s.applied_xid,
                recent: records(s.recent)?.into_iter().collect(),
                epoch: s.epoch,
                applied_seq: s.applied_seq,
                answers: records(s.answers)?.into_iter().collect(),
            }
            .restored();
            let newest_answer = writes.answers.keys().next_back().copied().unwrap_or(0);
            if writes.epoch > snap.applied_index || newest_answer > writes.applied_seq {
                return Err(SnapshotError::Inconsistent(format!(
                    "session {:#x}: epoch {} (applied index {}), an answer for write {newest_answer} \
                     above the highest applied {}",
                    s.session_id, writes.epoch, snap.applied_index, writes.applied_seq
                )));
            }
            let info = SessionInfo {
                password: s.password,
                timeout_ms: s.timeout_ms,
                writes,
            };
            if sessions.insert(s.session_id, Arc::new(info)).is_some() {
                return Err(SnapshotError::DuplicateSession {
                    session_id: s.session_id,
                });
            }
        }
        let mut nodes = super::NodeMap::default();
        nodes.reserve(snap.nodes.len());
        let mut tree = DataTree {
            nodes,
            sessions,
            ephemerals: BTreeMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            quotas: BTreeSet::new(),
            applied_index: snap.applied_index,
            members: snap.members.into_iter().map(|m| (m.id, m.addr)).collect(),
            acls: Default::default(),
            data_bytes: 0,
        };

        // Stored children counts, compared once every node is in.
        let mut counts: Vec<(Arc<str>, u32)> = Vec::with_capacity(snap.nodes.len());
        let mut stored = snap.nodes.into_iter();
        let root = stored.next().ok_or(SnapshotError::MissingRoot)?;
        if root.path != ROOT {
            return Err(SnapshotError::RootNotFirst { found: root.path });
        }
        let root_children = root.stat.map_or(0, |s| s.num_children);
        let root_node = tree.node_from_snapshot(ROOT, root)?;
        if root_node.ephemeral_owner != 0 || root_node.container || root_node.ttl_ms > 0 {
            return Err(SnapshotError::BadRoot);
        }
        tree.data_bytes = (ROOT.len() + root_node.data.len()) as u64;
        tree.check_zxids(ROOT, &root_node)?;
        counts.push((ROOT.into(), root_children));
        tree.nodes.insert(ROOT.into(), Arc::new(root_node));

        for mut sn in stored {
            let p = std::mem::take(&mut sn.path);
            if path::validate(&p).is_err() {
                return Err(SnapshotError::InvalidPath { path: p });
            }
            if p == ROOT {
                return Err(SnapshotError::DuplicateNode { path: p });
            }
            let stored_children = sn.stat.map_or(0, |s| s.num_children);
            let node = tree.node_from_snapshot(&p, sn)?;
            tree.check_zxids(&p, &node)?;
            // One look-up of the parent checks it and links the child (a
            // path stored twice is a name its parent already lists); a
            // million-node restore spends much of its time hashing paths.
            let Some(parent) = tree.node_mut(path::parent(&p)) else {
                return Err(SnapshotError::MissingParent { path: p });
            };
            if parent.ephemeral_owner != 0 {
                return Err(SnapshotError::ChildOfEphemeral { path: p });
            }
            // The parent's pzxid is the zxid of its latest child create or
            // delete, which is at least this child's create.
            if parent.pzxid < node.czxid {
                return Err(SnapshotError::Inconsistent(format!(
                    "{p}: created at {} after its parent's pzxid {}",
                    node.czxid, parent.pzxid
                )));
            }
            if !parent.children.insert(path::name(&p).to_string()) {
                return Err(SnapshotError::DuplicateNode { path: p });
            }
            let p: Arc<str> = p.into();
            counts.push((p.clone(), stored_children));
            tree.insert_linked(p, Arc::new(node));
        }

        for (p, stat) in &counts {
            let actual = tree.nodes.get(&**p).map_or(0, |n| n.children.len());
            if usize::try_from(*stat).ok() != Some(actual) {
                return Err(SnapshotError::ChildCountMismatch {
                    path: p.to_string(),
                    stat: *stat,
                    actual,
                });
            }
        }
        drop(counts);
        debug_assert_eq!(tree.check_invariants(), Ok(()));
        Ok(tree)
    }

    /// A node's own zxids in order, none after the snapshot's index.
    fn check_zxids(&self, p: &str, node: &Node) -> Result<(), SnapshotError> {
        if node.mzxid < node.czxid || node.pzxid < node.czxid {
            return Err(SnapshotError::Inconsistent(format!(
                "{p}: czxid {} after mzxid {} or pzxid {}",
                node.czxid, node.mzxid, node.pzxid
            )));
        }
        let newest = node.czxid.max(node.mzxid).max(node.pzxid);
        if newest > self.applied_index {
            return Err(SnapshotError::Inconsistent(format!(
                "{p}: zxid {newest} is after the applied index {}",
                self.applied_index
            )));
        }
        Ok(())
    }

    /// One stored node, checked on its own (its links are checked by the
    /// caller). Needs the session table, already loaded, for ephemerals.
    fn node_from_snapshot(&mut self, path: &str, sn: SnapshotNode) -> Result<Node, SnapshotError> {
        let p = || path.to_string();
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
            sn.data,
            self.acls.intern(&sn.acl),
            sn.container,
            sn.ttl_ms,
            sn.data_null,
        ))
    }
}
