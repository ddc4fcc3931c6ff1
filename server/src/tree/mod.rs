//! The DataTree: Warden's deterministic state machine.
//!
//! It owns the znodes, the replicated session table (with what each
//! session's recent writes did, for their copies) and the members'
//! addresses, and
//! changes only in [`DataTree::apply`] (a raft conf change is applied as a
//! `MemberChangeTxn`). It must never read a clock, draw a random number or
//! do I/O: every input (time, session ids, expiry decisions) travels inside
//! the [`Txn`](crate::proto::Txn), so every replica that applies the same log
//! holds the same tree, byte for byte.
//!
//! API CONTRACT (the rest of the server is written against exactly this):
//!
//! ```text
//! DataTree::new() -> DataTree                      // just "/" (czxid 0, open ACL)
//! tree.apply(zxid: u64, time_ms: i64, txn: &Txn) -> Applied
//! tree.skip(zxid: u64)                             // an entry with no Txn (raft empty entry)
//! tree.applied_index() -> u64                      // last zxid given to apply/skip
//! tree.get_data(path) -> Option<(&[u8], Stat)>
//! tree.stat(path) -> Option<Stat>
//! tree.children(path) -> Option<(Vec<String>, Stat)>  // names, sorted
//! tree.acl(path) -> Option<(Vec<Acl>, Stat)>
//! tree.session(id) -> Option<&SessionInfo>
//! tree.recorded(&txn) -> Option<Recorded>           // what a session's write did, if kept
//! tree.sessions() -> impl Iterator<Item = (u64, &SessionInfo)>
//! tree.ephemerals(session_id) -> Vec<String>       // sorted paths
//! tree.node_count() -> usize
//! tree.removal_candidates_by(ttl_expired: FnMut(&str, TtlNode) -> bool) -> Vec<GuardedDeleteTxn>
//! tree.freeze() -> FrozenTree                      // a view that later changes miss
//! frozen.to_snapshot() / frozen.encode()           // proto::Snapshot, on any thread
//! tree.to_snapshot() -> Snapshot                   // freeze + to_snapshot
//! DataTree::from_snapshot(&Snapshot) -> Result<DataTree, SnapshotError>
//! tree.check_invariants() -> Result<(), String>     // full check, for tests
//! ```
//!
//! Layout: `node.rs` holds one znode ([`Node`]), `txn.rs` is `apply` (with the
//! undo log that makes a multi all-or-nothing), `writes.rs` judges a
//! client write new, duplicate or out of order, `outcome.rs` is what the
//! session records of a write (the tree's account, from which the request
//! layer shapes the answer: the tree never calls up into it), `frozen.rs` is the frozen
//! view snapshots are built from, `snapshot.rs` converts to and from the
//! snapshot format, `invariants.rs` is the full consistency check the tests
//! run after every step.
//!
//! Nodes, their paths and the session records are held behind `Arc`s, so
//! that [`DataTree::freeze`] can take a view of the whole tree for the cost
//! of a pointer per node, and a snapshot is encoded and written on another
//! thread while the tree goes on applying. The tree copies a node the view
//! still shares on its first change ([`DataTree::node_mut`],
//! `Arc::make_mut`): a node, its data and its child names, never its
//! children themselves.
//!
//! Besides the nodes, the tree keeps four indexes that `apply` updates in
//! the same step as the node they describe: session id -> its ephemeral
//! paths (so closing a session does not scan the tree), and the sets of
//! container and TTL paths (so the leader's periodic removal check does
//! not either), and the paths with a quota ([`quota`]). They are derived data: a snapshot does not store them and
//! [`DataTree::from_snapshot`] rebuilds them.

pub mod acl;
mod acl_table;
mod digest;
mod frozen;
mod invariants;
mod node;
mod outcome;
pub mod quota;
mod snapshot;
mod txn;
pub mod writes;

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod data_null_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod writes_tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use warden_protocol::path;
use warden_protocol::pb::{Acl, Stat};

use crate::proto::{GuardedDeleteTxn, MemberChangeTxn};

pub use acl_table::SharedAcl;
pub use frozen::{FrozenTree, STREAM_CHUNK};
pub use node::{Node, SessionInfo, SERVER_XID_BIT};
pub use outcome::Recorded;
pub use snapshot::SnapshotError;
pub use txn::{Applied, MultiOutcome, OpOutcome, TreeError, Trigger, TxnResult};

/// The root path, which always exists and can never be deleted.
pub const ROOT: &str = "/";

/// The znode tree and the session table at `applied_index`.
///
/// Two trees that applied the same log compare equal (`PartialEq`), which is
/// what the determinism tests check.
#[derive(Clone, PartialEq)]
pub struct DataTree {
    /// Every node by full path. A `HashMap` is fine here: nothing iterates
    /// it in an order that matters (snapshots sort, listings use the
    /// parent's sorted child set). Nodes and paths are shared (`Arc`): the
    /// table's buckets (a power of two of them, up to half empty) hold two
    /// pointers each, not a whole node, and a frozen view shares both.
    /// Hashed with foldhash: SipHash was a tenth of a snapshot restore,
    /// and the keys come from the log, not from an attacker's free choice.
    nodes: NodeMap,
    /// Live sessions by id, sorted so that iteration is deterministic.
    /// Shared with frozen views like the nodes.
    sessions: BTreeMap<u64, Arc<SessionInfo>>,
    /// Session id -> paths of its ephemeral nodes. A session without
    /// ephemerals has no entry (so a rebuilt index compares equal).
    ephemerals: BTreeMap<u64, BTreeSet<String>>,
    /// Paths of container nodes.
    containers: BTreeSet<String>,
    /// Paths of nodes with a TTL.
    ttls: BTreeSet<String>,
    /// Paths with a quota (a `zookeeper_limits` node below
    /// `/zookeeper/quota`, see [`quota`]).
    quotas: BTreeSet<String>,
    /// The zxid of the last log entry given to `apply` or `skip`.
    applied_index: u64,
    /// Peer addresses of members added through conf changes, by id.
    members: BTreeMap<u64, String>,
    /// One copy of each distinct ACL, shared by the nodes that have it.
    acls: acl_table::AclTable,
    /// ZooKeeper's approximate data size: the bytes of every node's path
    /// and data, kept as nodes come, go and change (`mntr`).
    data_bytes: u64,
}

/// The node table: full path -> node, both shared with frozen views.
type NodeMap = HashMap<Arc<str>, Arc<Node>, foldhash::fast::RandomState>;

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

// Written out rather than derived so that the output is sorted, which keeps
// a failing property test's diff readable.
impl fmt::Debug for DataTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: BTreeMap<&str, &Node> = self.nodes.iter().map(|(p, n)| (&**p, &**n)).collect();
        f.debug_struct("DataTree")
            .field("applied_index", &self.applied_index)
            .field("nodes", &nodes)
            .field("sessions", &self.sessions)
            .field("ephemerals", &self.ephemerals)
            .field("containers", &self.containers)
            .field("ttls", &self.ttls)
            .finish()
    }
}

impl DataTree {
    /// A tree holding only the root, which has an all-zero stat and the
    /// open ACL.
    pub fn new() -> Self {
        let mut nodes = NodeMap::default();
        nodes.insert(ROOT.into(), Arc::new(Node::root()));
        DataTree {
            nodes,
            sessions: BTreeMap::new(),
            ephemerals: BTreeMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            quotas: BTreeSet::new(),
            applied_index: 0,
            members: BTreeMap::new(),
            acls: Default::default(),
            data_bytes: ROOT.len() as u64,
        }
    }

    /// A raft conf change, applied as a [`MemberChangeTxn`]: records or
    /// forgets member `id`'s peer address (an addition without an address
    /// keeps the one known).
    fn member_change(&mut self, t: &MemberChangeTxn) {
        if t.removed {
            self.members.remove(&t.id);
        } else if !t.addr.is_empty() {
            self.members.insert(t.id, t.addr.clone());
        }
    }

    /// Peer addresses of members added through conf changes.
    pub fn members(&self) -> &BTreeMap<u64, String> {
        &self.members
    }

    /// The zxid of the last entry given to [`apply`](Self::apply) or
    /// [`skip`](Self::skip).
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Whether the ACL of some node names `scheme:id` (e.g. a digest
    /// identity): O(distinct ACLs).
    pub fn acl_names(&self, scheme: &str, id: &str) -> bool {
        self.acls.names(scheme, id)
    }

    /// The node at `path`, for callers that need more than one field.
    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path).map(|n| &**n)
    }

    pub fn get_data(&self, path: &str) -> Option<(&[u8], Stat)> {
        self.nodes.get(path).map(|n| (n.data.as_slice(), n.stat()))
    }

    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(|n| n.stat())
    }

    /// Child names (not paths), sorted, and the parent's stat.
    pub fn children(&self, path: &str) -> Option<(Vec<String>, Stat)> {
        self.nodes
            .get(path)
            .map(|n| (n.children.iter().cloned().collect(), n.stat()))
    }

    /// The ACL of `path`, borrowed (for permission checks).
    pub fn node_acl(&self, path: &str) -> Option<&[Acl]> {
        self.nodes.get(path).map(|n| &*n.acl)
    }

    pub fn acl(&self, path: &str) -> Option<(Vec<Acl>, Stat)> {
        self.nodes.get(path).map(|n| (n.acl.to_vec(), n.stat()))
    }

    pub fn session(&self, id: u64) -> Option<&SessionInfo> {
        self.sessions.get(&id).map(|s| &**s)
    }

    /// How many sessions are live.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Live sessions, by increasing id.
    pub fn sessions(&self) -> impl Iterator<Item = (u64, &SessionInfo)> {
        self.sessions.iter().map(|(id, info)| (*id, &**info))
    }

    /// Paths of the ephemeral nodes `session_id` owns, sorted.
    pub fn ephemerals(&self, session_id: u64) -> Vec<String> {
        self.ephemerals
            .get(&session_id)
            .map(|paths| paths.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many nodes are below `path` (all descendants), or None if
    /// `path` does not exist. Walks the subtree.
    pub fn count_descendants(&self, path: &str) -> Option<u64> {
        let node = self.nodes.get(path)?;
        let mut count = 0u64;
        let mut stack: Vec<String> = node
            .children
            .iter()
            .map(|c| warden_protocol::path::join(path, c))
            .collect();
        while let Some(p) = stack.pop() {
            count += 1;
            if let Some(n) = self.nodes.get(p.as_str()) {
                stack.extend(
                    n.children
                        .iter()
                        .map(|c| warden_protocol::path::join(&p, c)),
                );
            }
        }
        Some(count)
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The bytes of every node's path and data (ZooKeeper's
    /// `approximateDataSize`).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Every node, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(p, n)| (&**p, &**n))
    }

    /// The removals the leader should propose, sorted by path: every
    /// childless container that has had a child (cversion > 0), and every
    /// childless TTL node that `ttl_expired` judges past its lifetime.
    /// `ttl_expired` is asked about every TTL node, childless or not, once
    /// per call (the leader's deadline table, `crate::ttl`, learns of each
    /// change that way). Each removal is guarded by the node's current mzxid
    /// and pzxid, so it becomes a no-op if the node changes before it
    /// applies.
    ///
    /// Reads only the container and TTL indexes, never the whole tree.
    pub fn removal_candidates_by(
        &self,
        mut ttl_expired: impl FnMut(&str, TtlNode) -> bool,
    ) -> Vec<GuardedDeleteTxn> {
        // The union of two sorted sets iterates in sorted order.
        self.containers
            .union(&self.ttls)
            .filter_map(|path| {
                let node = self.nodes.get(path.as_str())?;
                let expired = node.ttl_ms > 0
                    && ttl_expired(
                        path,
                        TtlNode {
                            mzxid: node.mzxid,
                            mtime_ms: node.mtime_ms,
                            ttl_ms: node.ttl_ms,
                        },
                    );
                if !node.children.is_empty() {
                    return None;
                }
                let container_done = node.container && node.cversion > 0;
                (container_done || expired).then(|| GuardedDeleteTxn {
                    path: path.clone(),
                    expected_mzxid: node.mzxid,
                    expected_pzxid: node.pzxid,
                })
            })
            .collect()
    }

    /// [`Self::removal_candidates_by`] with TTLs judged by a wall clock at
    /// `now_ms` against each node's mtime, as ZooKeeper does: the model the
    /// tree's tests use. The server itself judges TTLs on the leader's
    /// monotonic clock (`crate::ttl`), so a clock jump cannot expire one.
    #[cfg(test)]
    pub fn removal_candidates(&self, now_ms: i64) -> Vec<GuardedDeleteTxn> {
        self.removal_candidates_by(|_, n| n.expired_at_wall(now_ms))
    }

    /// The node at `path`, to change: copied first if a frozen view still
    /// shares it. Every change to a node goes through here.
    pub(super) fn node_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.nodes.get_mut(path).map(Arc::make_mut)
    }

    /// The session record of `id`, to change (copied first if shared).
    pub(super) fn session_mut(&mut self, id: u64) -> Option<&mut SessionInfo> {
        self.sessions.get_mut(&id).map(Arc::make_mut)
    }

    /// Adds `node` at `path` under its (existing) parent and indexes it.
    /// Every insertion goes through here so that the parent's child set and
    /// the indexes can never miss one.
    fn insert_node(&mut self, path: Arc<str>, node: Arc<Node>) {
        debug_assert!(&*path != ROOT, "the root is never inserted");
        match self.node_mut(path::parent(&path)) {
            Some(parent) => {
                let fresh = parent.children.insert(path::name(&path).to_string());
                debug_assert!(fresh, "{path}: already a child of its parent");
            }
            None => debug_assert!(false, "{path}: inserted without a parent"),
        }
        self.insert_linked(path, node);
    }

    /// The rest of [`insert_node`](Self::insert_node), once the parent
    /// lists the new child (a snapshot's restore links it while checking
    /// the parent, in one look-up).
    fn insert_linked(&mut self, path: Arc<str>, node: Arc<Node>) {
        debug_assert!(node.children.is_empty(), "{path}: inserted with children");
        self.index_insert(&path, &node);
        self.data_bytes += (path.len() + node.data.len()) as u64;
        let previous = self.nodes.insert(path, node);
        debug_assert!(previous.is_none(), "inserted over an existing node");
    }

    /// Removes the childless node at `path` from its parent and the
    /// indexes. The counterpart of [`insert_node`](Self::insert_node).
    fn remove_node(&mut self, path: &str) -> Option<Arc<Node>> {
        debug_assert!(path != ROOT, "the root is never removed");
        let node = self.nodes.remove(path)?;
        debug_assert!(node.children.is_empty(), "{path}: removed with children");
        if let Some(parent) = self.node_mut(path::parent(path)) {
            let was_child = parent.children.remove(path::name(path));
            debug_assert!(was_child, "{path}: not a child of its parent");
        }
        self.index_remove(path, &node);
        self.data_bytes -= (path.len() + node.data.len()) as u64;
        Some(node)
    }

    fn index_insert(&mut self, path: &str, node: &Node) {
        if node.ephemeral_owner != 0 {
            self.ephemerals
                .entry(node.ephemeral_owner)
                .or_default()
                .insert(path.to_string());
        }
        if node.container {
            self.containers.insert(path.to_string());
        }
        if node.ttl_ms > 0 {
            self.ttls.insert(path.to_string());
        }
        if let Some(target) = quota::limits_target(path) {
            self.quotas.insert(target.to_string());
        }
    }

    fn index_remove(&mut self, path: &str, node: &Node) {
        if node.ephemeral_owner != 0 {
            if let Some(paths) = self.ephemerals.get_mut(&node.ephemeral_owner) {
                paths.remove(path);
                // No empty entries: an index rebuilt from a snapshot has
                // none, and the two must compare equal.
                if paths.is_empty() {
                    self.ephemerals.remove(&node.ephemeral_owner);
                }
            }
        }
        if node.container {
            self.containers.remove(path);
        }
        if node.ttl_ms > 0 {
            self.ttls.remove(path);
        }
        if let Some(target) = quota::limits_target(path) {
            self.quotas.remove(target);
        }
    }
}

/// A TTL node, as an expiry check sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlNode {
    /// Changes with every write of the node (and so with every renewal).
    pub mzxid: u64,
    /// The leader's wall clock when the node was last written.
    pub mtime_ms: i64,
    pub ttl_ms: u64,
}

impl TtlNode {
    /// Whether the node is past its lifetime by a wall clock at `now_ms`:
    /// unmodified for more than `ttl_ms`. Computed in i128 so that a huge
    /// TTL (from the wire) or a far-future clock cannot overflow.
    pub fn expired_at_wall(&self, now_ms: i64) -> bool {
        i128::from(now_ms) > i128::from(self.mtime_ms) + i128::from(self.ttl_ms)
    }
}
