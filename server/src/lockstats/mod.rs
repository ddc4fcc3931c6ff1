//! Lock observability: every lock this server can recognise in its tree,
//! whoever took it and through whichever door (the recipes over the native
//! protocol, a ZooKeeper client, the HTTP lock API).
//!
//! A lock is a directory whose children are *contenders*, named in one of
//! the shapes [`shape`] recognises; the contender with the lowest
//! sequence number holds it, the others wait. [`LockObserver`] keeps an
//! index of them (directory -> contenders by sequence number) beside the
//! tree, on the core:
//!
//! - [`LockObserver::observe`] is called for every applied entry, with the
//!   watch triggers the entry fired. Only `NodeCreated` and `NodeDeleted`
//!   are looked at, and only names of a contender's shape go further: for
//!   any other entry the cost is a loop over its triggers and a look at the
//!   last ten bytes of a name, with no allocation.
//! - a grant is the head of a lock's queue changing to a contender after
//!   the entry (not within it): a release and the next grant in one entry
//!   count once each.
//! - after a snapshot restore (start, or a leader's snapshot) the index is
//!   rebuilt from the tree ([`LockObserver::rebuild`]); nothing is counted
//!   for what the snapshot skipped.
//!
//! Counting: every replica applies the same log, and the times used are
//! the log's (the leader's clock when it proposed), so every server counts
//! the same figures for the same entries. Entries replayed at start (up to
//! the commit index the log had when the server started) update the index
//! but are not counted again. See `docs/locks-observability.md`.

pub mod metrics;
pub mod shape;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::Serialize;
use warden_protocol::pb::EventType;
use warden_protocol::perms;

use crate::proto::{txn::Kind as TxnKind, AuthId, CloseReason, Txn};
use crate::tree::{Applied, DataTree};

pub use metrics::{LockMetrics, Role};
pub use shape::Kind;

/// Most locks one listing page may hold.
pub const PAGE_LIMIT_MAX: usize = 1000;
/// Most bytes of a holder's data shown as its `client_id` (or a lease's
/// read for its label).
const CLIENT_ID_SHOWN_MAX: usize = 256;

/// One lock's contenders of one kind, by sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Queue {
    kind: Kind,
    contenders: BTreeMap<u64, Box<str>>,
    /// When the head was granted, by the log's clock; `None` when the
    /// grant is older than the snapshot the index was rebuilt from.
    granted_at_ms: Option<i64>,
}

/// A lock whose head changed in the entry being observed.
#[derive(Debug)]
struct Touched {
    parent: String,
    kind: Kind,
    /// The head before the entry.
    head_before: Option<u64>,
}

/// The index of recognised locks, and their figures.
#[derive(Debug)]
pub struct LockObserver {
    /// Directory path -> its queues (one per kind; almost always one).
    locks: BTreeMap<String, Vec<Queue>>,
    /// Contenders and non-empty queues now, by kind.
    contenders: [usize; shape::KINDS],
    held: [usize; shape::KINDS],
    metrics: LockMetrics,
    /// Entries up to this index are replayed, not counted.
    count_after: u64,
    /// Reused for each entry's touched locks.
    touched: Vec<Touched>,
}

/// What a listing asks for.
#[derive(Debug, Clone, Default)]
pub struct LockQuery {
    /// Only locks whose path sorts after this one.
    pub after: Option<String>,
    pub limit: usize,
    pub kind: Option<Kind>,
    /// List the waiters too, not only their count.
    pub waiters: bool,
    /// The caller's identities: a lock is listed when they may READ its
    /// directory; a holder's data (its `client_id`, a lease's label) shown when they may
    /// READ the holder's node.
    pub ids: Vec<AuthId>,
}

/// One page of the listing.
#[derive(Debug, Clone, Serialize)]
pub struct LockPage {
    pub locks: Vec<LockInfo>,
    /// The `after` of the next page; `None` on the last.
    pub next: Option<String>,
    /// The index this server had applied when it answered.
    pub applied_index: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LockInfo {
    /// The lock's directory node.
    pub path: String,
    /// The HTTP lock's name for `http-lease`, else the path.
    pub name: String,
    pub kind: &'static str,
    pub holder: Contender,
    pub waiters: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Vec<Contender>>,
}

/// A contender node, as the tree has it now.
#[derive(Debug, Clone, Serialize)]
pub struct Contender {
    pub node: String,
    pub sequence: u64,
    /// The node's czxid: the grant's fencing token for the holder.
    pub fencing_token: u64,
    /// The owning session (`0x...`) of an ephemeral contender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For kinds other than leases, the node's data when it is UTF-8
    /// text (kazoo's identifier, a candidate's id). Never a lease's
    /// client id: whoever presents that holds the lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// A lease's holder label (`crate::http::holder::label`): names the
    /// holder, proves nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When the node was created (queued), ms since the Unix epoch.
    pub created_at_ms: i64,
    /// When it was granted (holder only; `None` when the grant is older
    /// than the snapshot the index was rebuilt from).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granted_at_ms: Option<i64>,
    /// A lease's expiry: its last write plus its TTL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

impl LockObserver {
    /// An observer recording into `metrics`, with an index of `tree`'s
    /// locks; entries up to `replayed` are not counted.
    pub fn new(metrics: LockMetrics, tree: &DataTree, replayed: u64) -> Self {
        let mut o = LockObserver {
            locks: BTreeMap::new(),
            contenders: [0; shape::KINDS],
            held: [0; shape::KINDS],
            metrics,
            count_after: replayed,
            touched: Vec::new(),
        };
        o.rebuild(tree);
        o
    }

    /// Builds the index anew from `tree` (after a snapshot replaced it).
    /// Walks every node once.
    pub fn rebuild(&mut self, tree: &DataTree) {
        self.locks.clear();
        self.contenders = [0; shape::KINDS];
        self.held = [0; shape::KINDS];
        for (path, _) in tree.nodes() {
            if !shape::ends_with_sequence(path) {
                continue;
            }
            let Some((parent, name)) = shape::split(path) else {
                continue;
            };
            if let Some((kind, seq)) = shape::contender(parent, name) {
                self.insert(parent, name, kind, seq);
            }
        }
        for kind in Kind::ALL {
            self.publish(kind);
        }
    }

    /// Observes the entry `zxid` (proposed at `time_ms`) that `applied`
    /// describes.
    pub fn observe(
        &mut self,
        tree: &DataTree,
        txn: &Txn,
        applied: &Applied,
        zxid: u64,
        time_ms: i64,
    ) {
        // Only these create or delete nodes (a set_data, the commonest
        // write, stops here).
        let may_create_or_delete = matches!(
            txn.kind,
            Some(
                TxnKind::Create(_)
                    | TxnKind::Delete(_)
                    | TxnKind::Multi(_)
                    | TxnKind::CloseSession(_)
                    | TxnKind::GuardedDelete(_)
            )
        );
        if !may_create_or_delete {
            return;
        }
        let mut any = false;
        for t in &applied.triggers {
            let created = match t.event {
                EventType::NodeCreated => true,
                EventType::NodeDeleted => false,
                _ => continue,
            };
            if !shape::ends_with_sequence(&t.path) {
                continue;
            }
            let Some((parent, name)) = shape::split(&t.path) else {
                continue;
            };
            let Some((kind, seq)) = shape::contender(parent, name) else {
                continue;
            };
            if !any {
                any = true;
                self.touched.clear();
            }
            self.touch(parent, kind);
            if created {
                self.insert(parent, name, kind, seq);
            } else {
                self.remove(parent, kind, seq, by_server(txn), zxid);
            }
        }
        if any {
            self.settle(tree, zxid, time_ms);
        }
    }

    /// Notes `parent`'s head of `kind` before the entry changes it.
    fn touch(&mut self, parent: &str, kind: Kind) {
        if self
            .touched
            .iter()
            .any(|t| t.kind == kind && t.parent == parent)
        {
            return;
        }
        let head_before = self
            .queue(parent, kind)
            .and_then(|q| q.contenders.keys().next().copied());
        self.touched.push(Touched {
            parent: parent.to_string(),
            kind,
            head_before,
        });
    }

    fn queue(&self, parent: &str, kind: Kind) -> Option<&Queue> {
        self.locks.get(parent)?.iter().find(|q| q.kind == kind)
    }

    fn insert(&mut self, parent: &str, name: &str, kind: Kind, seq: u64) {
        let queues = match self.locks.get_mut(parent) {
            Some(q) => q,
            None => self.locks.entry(parent.to_string()).or_default(),
        };
        let queue = match queues.iter().position(|q| q.kind == kind) {
            Some(i) => &mut queues[i],
            None => {
                queues.push(Queue {
                    kind,
                    contenders: BTreeMap::new(),
                    granted_at_ms: None,
                });
                self.held[kind.index()] += 1;
                queues.last_mut().expect("just pushed")
            }
        };
        if queue.contenders.insert(seq, name.into()).is_none() {
            self.contenders[kind.index()] += 1;
        }
    }

    /// Removes a contender; counts a holder's release or an expiry.
    fn remove(&mut self, parent: &str, kind: Kind, seq: u64, by_server: bool, zxid: u64) {
        let Some(queues) = self.locks.get_mut(parent) else {
            return;
        };
        let Some(i) = queues.iter().position(|q| q.kind == kind) else {
            return;
        };
        let queue = &mut queues[i];
        // The holder is the head before the entry: a waiter that becomes
        // the head within the entry and goes in it too was never granted.
        let was_head = self
            .touched
            .iter()
            .any(|t| t.kind == kind && t.parent == parent && t.head_before == Some(seq));
        if queue.contenders.remove(&seq).is_none() {
            return;
        }
        self.contenders[kind.index()] -= 1;
        if queue.contenders.is_empty() {
            queues.swap_remove(i);
            self.held[kind.index()] -= 1;
            if queues.is_empty() {
                self.locks.remove(parent);
            }
        }
        if zxid <= self.count_after {
            return;
        }
        let role = if was_head { Role::Holder } else { Role::Waiter };
        if by_server {
            self.metrics.expired(kind, role);
        } else if was_head {
            self.metrics.released(kind);
        }
    }

    /// After the entry: a lock whose head changed to a contender was
    /// granted to it.
    fn settle(&mut self, tree: &DataTree, zxid: u64, time_ms: i64) {
        let count = zxid > self.count_after;
        let touched = std::mem::take(&mut self.touched);
        for t in &touched {
            let Some(queue) = self
                .locks
                .get_mut(t.parent.as_str())
                .and_then(|qs| qs.iter_mut().find(|q| q.kind == t.kind))
            else {
                continue;
            };
            let Some((&head, name)) = queue.contenders.iter().next() else {
                continue;
            };
            if Some(head) == t.head_before {
                continue;
            }
            queue.granted_at_ms = Some(time_ms);
            if !count {
                continue;
            }
            let path = warden_protocol::path::join(&t.parent, name);
            let (handoff, waited_ms) = match tree.stat(&path) {
                // Created by an earlier entry: it waited in the queue.
                Some(stat) if stat.czxid < zxid => (true, time_ms.saturating_sub(stat.ctime_ms)),
                _ => (false, 0),
            };
            self.metrics
                .granted(t.kind, handoff, waited_ms.max(0) as f64 / 1000.0);
        }
        for t in &touched {
            self.publish(t.kind);
        }
        // Kept for the next entry's (its capacity with it).
        self.touched = touched;
    }

    /// Sets `kind`'s gauges to the index.
    fn publish(&self, kind: Kind) {
        let k = kind.index();
        self.metrics
            .set_now(kind, self.held[k], self.contenders[k] - self.held[k]);
    }

    /// A page of the listing, read from `tree` as applied now.
    pub fn list(&self, tree: &DataTree, q: &LockQuery) -> LockPage {
        let limit = q.limit.clamp(1, PAGE_LIMIT_MAX);
        let from = match &q.after {
            Some(a) => Bound::Excluded(a.as_str()),
            None => Bound::Unbounded,
        };
        let mut locks = Vec::new();
        let mut next = None;
        for (parent, queues) in self.locks.range::<str, _>((from, Bound::Unbounded)) {
            if locks.len() >= limit {
                // There is more: the next page starts after the last listed.
                next = locks.last().map(|l: &LockInfo| l.path.clone());
                break;
            }
            let readable = tree
                .node_acl(parent)
                .is_some_and(|acl| crate::tree::acl::allowed(acl, &q.ids, perms::READ));
            if !readable {
                continue;
            }
            let mut queues: Vec<&Queue> = queues
                .iter()
                .filter(|qu| q.kind.is_none_or(|k| k == qu.kind))
                .collect();
            queues.sort_by_key(|qu| qu.kind);
            for queue in queues {
                let mut contenders = queue
                    .contenders
                    .iter()
                    .filter_map(|(&seq, name)| contender(tree, parent, name, seq, queue.kind, q));
                let Some(mut holder) = contenders.next() else {
                    continue;
                };
                holder.granted_at_ms = queue.granted_at_ms;
                let waiters = queue.contenders.len() - 1;
                let waiting = q.waiters.then(|| contenders.collect());
                locks.push(LockInfo {
                    path: parent.clone(),
                    name: shape::display_name(queue.kind, parent).to_string(),
                    kind: queue.kind.label(),
                    holder,
                    waiters,
                    waiting,
                });
            }
        }
        LockPage {
            locks,
            next,
            applied_index: tree.applied_index(),
        }
    }

    /// The metrics this observer records into.
    pub fn metrics(&self) -> &LockMetrics {
        &self.metrics
    }
}

/// Whether `txn` is the server removing nodes on its own: a TTL node's
/// removal, or an expired session's close.
fn by_server(txn: &Txn) -> bool {
    match &txn.kind {
        Some(TxnKind::GuardedDelete(_)) => true,
        Some(TxnKind::CloseSession(cs)) => cs.reason == CloseReason::Expired as i32,
        _ => false,
    }
}

/// The contender `parent`/`name` as the tree holds it now.
fn contender(
    tree: &DataTree,
    parent: &str,
    name: &str,
    sequence: u64,
    kind: Kind,
    q: &LockQuery,
) -> Option<Contender> {
    let node = warden_protocol::path::join(parent, name);
    let (data, stat) = tree.get_data(&node)?;
    let readable = tree
        .node_acl(&node)
        .is_some_and(|acl| crate::tree::acl::allowed(acl, &q.ids, perms::READ));
    let text = || {
        std::str::from_utf8(data)
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= CLIENT_ID_SHOWN_MAX)
    };
    let (client_id, label) = match (readable, kind.is_lease()) {
        (false, _) => (None, None),
        // A lease's data: "<ttl_ms>\n<client_id>", shown by its label.
        (true, true) => (
            None,
            text()
                .and_then(|s| s.split_once('\n'))
                .map(|(_, id)| crate::http::holder::label(id)),
        ),
        (true, false) => (text().map(str::to_string), None),
    };
    let expires_at_ms = (kind.is_lease() && stat.ttl_ms > 0).then(|| {
        stat.mtime_ms
            .saturating_add(i64::try_from(stat.ttl_ms).unwrap_or(i64::MAX))
    });
    Some(Contender {
        node,
        sequence,
        fencing_token: stat.czxid,
        session_id: (stat.ephemeral_owner != 0).then(|| format!("{:#x}", stat.ephemeral_owner)),
        client_id,
        label,
        created_at_ms: stat.ctime_ms,
        granted_at_ms: None,
        expires_at_ms,
    })
}
