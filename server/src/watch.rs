//! The watch registry of this server: which connection watches what.
//!
//! Watches are per server and in memory. They are registered by reads
//! (one-shot data/exist/child watches) and by AddWatch (persistent and
//! persistent-recursive), and fired by the triggers the tree returns when
//! this server applies an entry. The registry only decides *who* gets an
//! event; the core sends it, on the same queue as responses, which is what
//! orders events before later responses.
//!
//! Firing rules (ZooKeeper 3.6's):
//! - NodeCreated, NodeDataChanged: data/exist watches on the path.
//! - NodeDeleted: data/exist and child watches on the path.
//! - NodeChildrenChanged: child watches on the path (the parent).
//! - Persistent watches get every event type of exactly their path.
//! - Persistent-recursive watches get Created/Deleted/DataChanged of their
//!   path and every descendant, never ChildrenChanged.
//!
//! One-shot watches are removed as they fire; each connection receives at
//! most one copy of an event, however many of its watches match, and only
//! if it may READ the node (ZooKeeper 3.8.4's rule, see
//! [`WatchRegistry::recipients`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use warden_protocol::path;
use warden_protocol::pb::{Acl, EventType, WatcherType};

use crate::limits::{self, Limit};
use crate::proto::AuthId;
use crate::tree::{Applied, DataTree, Trigger};

/// A client connection on this server.
pub type ConnId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// From get_data and exists: ZooKeeper keeps them in one table.
    Data,
    Child,
    Persistent,
    PersistentRecursive,
}

const KINDS: [WatchKind; 4] = [
    WatchKind::Data,
    WatchKind::Child,
    WatchKind::Persistent,
    WatchKind::PersistentRecursive,
];

#[derive(Debug, Default)]
pub struct WatchRegistry {
    by_path: HashMap<WatchKind, HashMap<String, HashSet<ConnId>>>,
    /// Reverse index for cleanup when a connection closes.
    by_conn: HashMap<ConnId, HashSet<(WatchKind, String)>>,
    /// Most watches one connection (so one session: a session has one
    /// connection at a time) may hold; None: no bound.
    per_conn_max: Option<usize>,
}

impl WatchRegistry {
    /// A registry where a connection holds at most `per_conn_max` watches
    /// (`--max-watches-per-session`).
    pub fn with_limit(per_conn_max: usize) -> Self {
        Self {
            per_conn_max: Some(per_conn_max),
            ..Self::default()
        }
    }

    /// How many more watches `conn` may add.
    pub fn room(&self, conn: ConnId) -> usize {
        match self.per_conn_max {
            Some(max) => max.saturating_sub(self.count(conn)),
            None => usize::MAX,
        }
    }

    /// How many watches `conn` holds.
    pub fn len_of(&self, conn: ConnId) -> usize {
        self.count(conn)
    }

    fn count(&self, conn: ConnId) -> usize {
        self.by_conn.get(&conn).map_or(0, HashSet::len)
    }

    /// Whether `conn` already has exactly this watch.
    pub fn contains(&self, conn: ConnId, kind: WatchKind, path: &str) -> bool {
        self.watchers(kind, path).is_some_and(|c| c.contains(&conn))
    }

    /// Adds a watch unless `conn` is at its limit (a watch it already has
    /// is not a new one). Err: the message for the client.
    pub fn try_add(&mut self, conn: ConnId, kind: WatchKind, path: &str) -> Result<(), String> {
        if self.room(conn) == 0 && !self.contains(conn, kind, path) {
            let held = self.count(conn);
            return Err(limits::message(
                Limit::WatchesPerSession,
                self.per_conn_max.unwrap_or(usize::MAX),
                format!("{path}: the session already holds {held} watches on this server"),
            ));
        }
        self.add(conn, kind, path);
        Ok(())
    }

    /// Adds a watch, whatever the limit (callers check [`Self::room`]).
    pub fn add(&mut self, conn: ConnId, kind: WatchKind, path: &str) {
        self.by_path
            .entry(kind)
            .or_default()
            .entry(path.to_string())
            .or_default()
            .insert(conn);
        self.by_conn
            .entry(conn)
            .or_default()
            .insert((kind, path.to_string()));
    }

    /// Removes `conn`'s watches of the given type on `path`. Returns whether
    /// any was there.
    pub fn remove(&mut self, conn: ConnId, watcher_type: WatcherType, path: &str) -> bool {
        let kinds: &[WatchKind] = match watcher_type {
            WatcherType::Any => &KINDS,
            WatcherType::Data => &[WatchKind::Data],
            WatcherType::Children => &[WatchKind::Child],
            WatcherType::Persistent => &[WatchKind::Persistent],
            WatcherType::PersistentRecursive => &[WatchKind::PersistentRecursive],
        };
        let mut removed = false;
        for &kind in kinds {
            removed |= self.remove_one(conn, kind, path);
        }
        removed
    }

    /// Whether `conn` has a watch of the given type on `path`.
    pub fn has(&self, conn: ConnId, watcher_type: WatcherType, path: &str) -> bool {
        let kinds: &[WatchKind] = match watcher_type {
            WatcherType::Any => &KINDS,
            WatcherType::Data => &[WatchKind::Data],
            WatcherType::Children => &[WatchKind::Child],
            WatcherType::Persistent => &[WatchKind::Persistent],
            WatcherType::PersistentRecursive => &[WatchKind::PersistentRecursive],
        };
        kinds
            .iter()
            .any(|k| self.watchers(*k, path).is_some_and(|c| c.contains(&conn)))
    }

    fn remove_one(&mut self, conn: ConnId, kind: WatchKind, path: &str) -> bool {
        let Some(paths) = self.by_path.get_mut(&kind) else {
            return false;
        };
        let Some(conns) = paths.get_mut(path) else {
            return false;
        };
        let removed = conns.remove(&conn);
        if conns.is_empty() {
            paths.remove(path);
        }
        if let Some(set) = self.by_conn.get_mut(&conn) {
            set.remove(&(kind, path.to_string()));
            if set.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        removed
    }

    /// Whether `conn` holds a persistent or persistent-recursive watch.
    pub fn has_persistent(&self, conn: ConnId) -> bool {
        self.by_conn.get(&conn).is_some_and(|set| {
            set.iter()
                .any(|(k, _)| matches!(k, WatchKind::Persistent | WatchKind::PersistentRecursive))
        })
    }

    /// The state machine jumped from `old` to `new` (a leader's snapshot
    /// was installed) without the entries in between firing anything.
    /// Fires, and removes, every one-shot watch whose node changed between
    /// the two, as the next change would have: created, deleted, data
    /// changed (its mzxid moved) or children changed (its pzxid moved).
    /// Persistent watches cannot be caught up this way (they would have
    /// heard of every change); their connections are the caller's to close.
    pub fn catch_up(&mut self, old: &DataTree, new: &DataTree) -> Vec<(ConnId, EventType, String)> {
        let mut fired = Vec::new();
        let data_paths: Vec<String> = self
            .by_path
            .get(&WatchKind::Data)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for path in data_paths {
            let event = match (old.stat(&path), new.stat(&path)) {
                (None, Some(_)) => EventType::NodeCreated,
                (Some(_), None) => EventType::NodeDeleted,
                (Some(a), Some(b)) if a.mzxid != b.mzxid => EventType::NodeDataChanged,
                _ => continue,
            };
            let mut conns = BTreeSet::new();
            self.take_oneshot(WatchKind::Data, &path, &mut conns);
            fired.extend(conns.into_iter().map(|c| (c, event, path.clone())));
        }
        let child_paths: Vec<String> = self
            .by_path
            .get(&WatchKind::Child)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for path in child_paths {
            let event = match (old.stat(&path), new.stat(&path)) {
                (Some(_), None) => EventType::NodeDeleted,
                (Some(a), Some(b)) if a.pzxid != b.pzxid => EventType::NodeChildrenChanged,
                // A child watch is set on an existing node only.
                (None, Some(_)) => EventType::NodeChildrenChanged,
                _ => continue,
            };
            let mut conns = BTreeSet::new();
            self.take_oneshot(WatchKind::Child, &path, &mut conns);
            fired.extend(conns.into_iter().map(|c| (c, event, path.clone())));
        }
        fired.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        fired
    }

    /// Forgets every watch of a closed connection.
    pub fn remove_conn(&mut self, conn: ConnId) {
        let Some(set) = self.by_conn.remove(&conn) else {
            return;
        };
        for (kind, path) in set {
            if let Some(paths) = self.by_path.get_mut(&kind) {
                if let Some(conns) = paths.get_mut(&path) {
                    conns.remove(&conn);
                    if conns.is_empty() {
                        paths.remove(&path);
                    }
                }
            }
        }
    }

    /// The connections to notify of `event` on `path`, each once, in a
    /// stable order. One-shot watches that fire are removed.
    pub fn fire(&mut self, event: EventType, path: &str) -> BTreeSet<ConnId> {
        let (mut out, below) = self.fire_split(event, path);
        out.extend(below);
        out
    }

    /// [`fire`](Self::fire), split in two: the connections watching `path`
    /// itself, and those that hear of it only through a recursive watch on
    /// an ancestor (whose read permission on `path` the caller checks, as
    /// ZooKeeper 3.8.4 does: a recursive watch must not reveal nodes its
    /// client may not read).
    pub fn fire_split(
        &mut self,
        event: EventType,
        path: &str,
    ) -> (BTreeSet<ConnId>, BTreeSet<ConnId>) {
        let mut out = BTreeSet::new();
        let mut below = BTreeSet::new();
        match event {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                self.take_oneshot(WatchKind::Data, path, &mut out);
            }
            EventType::NodeDeleted => {
                self.take_oneshot(WatchKind::Data, path, &mut out);
                self.take_oneshot(WatchKind::Child, path, &mut out);
            }
            EventType::NodeChildrenChanged => {
                self.take_oneshot(WatchKind::Child, path, &mut out);
            }
            EventType::Unspecified => return (out, below),
        }
        if let Some(conns) = self.watchers(WatchKind::Persistent, path) {
            out.extend(conns.iter().copied());
        }
        if event != EventType::NodeChildrenChanged {
            if let Some(conns) = self.watchers(WatchKind::PersistentRecursive, path) {
                out.extend(conns.iter().copied());
            }
            for p in path::ancestors(path) {
                if let Some(conns) = self.watchers(WatchKind::PersistentRecursive, p) {
                    below.extend(conns.iter().copied().filter(|c| !out.contains(c)));
                }
            }
        }
        (out, below)
    }

    /// Who hears `trigger`, one of the triggers of `applied` (just applied
    /// to `tree`), each connection once; one-shot watches that fire are
    /// removed. A connection hears of a node only if it may READ it,
    /// judged by the ACL the node has now, or had when it was deleted (for
    /// NodeChildrenChanged, the parent's), whichever watch matched: as
    /// ZooKeeper 3.8.4 does since CVE-2024-23944 (`ServerCnxn.process`
    /// checks READ for every watch event; a one-shot watch is used up all
    /// the same). `ids_of` gives a connection's identities.
    pub fn recipients<'a>(
        &mut self,
        tree: &DataTree,
        applied: &Applied,
        trigger: &Trigger,
        ids_of: impl Fn(ConnId) -> Option<&'a [AuthId]>,
    ) -> BTreeSet<ConnId> {
        let (mut conns, below) = self.fire_split(trigger.event, &trigger.path);
        conns.extend(below);
        if conns.is_empty() {
            return conns;
        }
        let acl = event_acl(tree, applied, trigger);
        conns.retain(|&conn| {
            // A node found nowhere (cannot happen) is not revealed.
            acl.is_some_and(|acl| {
                ids_of(conn).is_some_and(|ids| {
                    crate::tree::acl::allowed(acl, ids, warden_protocol::perms::READ)
                })
            })
        });
        conns
    }

    fn watchers(&self, kind: WatchKind, path: &str) -> Option<&HashSet<ConnId>> {
        self.by_path.get(&kind)?.get(path)
    }

    fn take_oneshot(&mut self, kind: WatchKind, path: &str, out: &mut BTreeSet<ConnId>) {
        let Some(conns) = self.by_path.get_mut(&kind).and_then(|m| m.remove(path)) else {
            return;
        };
        for conn in conns {
            if let Some(set) = self.by_conn.get_mut(&conn) {
                set.remove(&(kind, path.to_string()));
                if set.is_empty() {
                    self.by_conn.remove(&conn);
                }
            }
            out.insert(conn);
        }
    }

    /// Number of registered watches (all kinds), for status and tests.
    pub fn len(&self) -> usize {
        self.by_conn.values().map(HashSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_conn.is_empty()
    }

    /// The paths each connection watches (any kind, each path once),
    /// by connection, each sorted: ZooKeeper's `wchc`.
    pub fn paths_by_conn(&self) -> Vec<(ConnId, Vec<String>)> {
        let mut out: Vec<(ConnId, Vec<String>)> = self
            .by_conn
            .iter()
            .filter(|(_, watches)| !watches.is_empty())
            .map(|(conn, watches)| {
                let paths: BTreeSet<&String> = watches.iter().map(|(_, p)| p).collect();
                (*conn, paths.into_iter().cloned().collect())
            })
            .collect();
        // The table's order differs per process.
        out.sort_unstable_by_key(|(conn, _)| *conn);
        out
    }
}

/// The ACL that decides who may hear of `trigger`: the node's own, or for
/// a deletion the one it had (the last one recorded for the path, as a
/// multi may delete and re-create it).
fn event_acl<'t>(tree: &'t DataTree, applied: &'t Applied, trigger: &Trigger) -> Option<&'t [Acl]> {
    let deleted = || {
        applied
            .deleted_acls
            .iter()
            .rev()
            .find(|(p, _)| *p == trigger.path)
            .map(|(_, acl)| &**acl)
    };
    match trigger.event {
        EventType::NodeDeleted => deleted(),
        _ => tree.node_acl(&trigger.path).or_else(deleted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(r: &mut WatchRegistry, e: EventType, p: &str) -> Vec<ConnId> {
        r.fire(e, p).into_iter().collect()
    }

    #[test]
    fn oneshot_data_watch_fires_once() {
        let mut r = WatchRegistry::default();
        r.add(1, WatchKind::Data, "/a");
        assert_eq!(fired(&mut r, EventType::NodeDataChanged, "/a"), vec![1]);
        assert!(fired(&mut r, EventType::NodeDataChanged, "/a").is_empty());
        assert!(r.is_empty());
    }

    #[test]
    fn routing_follows_zookeeper() {
        let mut r = WatchRegistry::default();
        r.add(1, WatchKind::Data, "/a");
        r.add(2, WatchKind::Child, "/a");
        assert_eq!(fired(&mut r, EventType::NodeChildrenChanged, "/a"), vec![2]);
        r.add(2, WatchKind::Child, "/a");
        assert_eq!(fired(&mut r, EventType::NodeDeleted, "/a"), vec![1, 2]);
        r.add(1, WatchKind::Child, "/a");
        assert!(fired(&mut r, EventType::NodeCreated, "/a").is_empty());
    }

    #[test]
    fn persistent_and_recursive() {
        let mut r = WatchRegistry::default();
        r.add(1, WatchKind::Persistent, "/a");
        r.add(2, WatchKind::PersistentRecursive, "/a");
        assert_eq!(fired(&mut r, EventType::NodeChildrenChanged, "/a"), vec![1]);
        assert_eq!(fired(&mut r, EventType::NodeCreated, "/a/b/c"), vec![2]);
        assert_eq!(fired(&mut r, EventType::NodeDataChanged, "/a"), vec![1, 2]);
        assert_eq!(fired(&mut r, EventType::NodeDataChanged, "/a"), vec![1, 2]);
        assert!(fired(&mut r, EventType::NodeCreated, "/ab").is_empty());
        assert!(r.remove(2, WatcherType::PersistentRecursive, "/a"));
        assert!(!r.remove(2, WatcherType::PersistentRecursive, "/a"));
        assert_eq!(fired(&mut r, EventType::NodeDataChanged, "/a"), vec![1]);
    }

    #[test]
    fn watches_per_connection_are_bounded() {
        let mut r = WatchRegistry::with_limit(2);
        r.try_add(1, WatchKind::Data, "/a").unwrap();
        r.try_add(1, WatchKind::Child, "/a").unwrap();
        // The same watch again is not a new one.
        r.try_add(1, WatchKind::Data, "/a").unwrap();
        let err = r.try_add(1, WatchKind::Data, "/b").unwrap_err();
        assert!(
            err.contains("/b") && err.contains("--max-watches-per-session"),
            "{err}"
        );
        // Another connection has its own allowance.
        r.try_add(2, WatchKind::Data, "/b").unwrap();
        // A fired one-shot watch frees its place.
        fired(&mut r, EventType::NodeDataChanged, "/a");
        assert_eq!(r.room(1), 1);
        r.try_add(1, WatchKind::Data, "/b").unwrap();
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn one_copy_per_connection_and_cleanup() {
        let mut r = WatchRegistry::default();
        r.add(1, WatchKind::Data, "/a");
        r.add(1, WatchKind::Persistent, "/a");
        r.add(1, WatchKind::PersistentRecursive, "/");
        assert_eq!(fired(&mut r, EventType::NodeDataChanged, "/a"), vec![1]);
        r.remove_conn(1);
        assert!(r.is_empty());
        assert!(fired(&mut r, EventType::NodeDataChanged, "/a").is_empty());
    }

    #[test]
    fn watchers_hear_only_of_nodes_they_may_read() {
        use crate::proto::{txn::Kind, CreateTxn, DeleteTxn, Txn};
        let secret = vec![Acl {
            perms: warden_protocol::perms::ALL,
            scheme: "x509".into(),
            id: "CN=alice".into(),
        }];
        let alice = vec![AuthId {
            scheme: "x509".into(),
            id: "CN=alice".into(),
        }];
        let create = |path: &str, acl: Vec<Acl>| Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: path.into(),
                acl,
                ..Default::default()
            })),
            ..Default::default()
        };
        let mut tree = DataTree::new();
        tree.apply(1, 0, &create("/a", warden_protocol::open_acl()));
        let mut r = WatchRegistry::default();
        // 1: alice, recursive on /a; 2: anonymous, recursive on /a;
        // 3: anonymous, a data watch on the node itself (exists needs no
        // permission); 4: alice, a data watch on it.
        r.add(1, WatchKind::PersistentRecursive, "/a");
        r.add(2, WatchKind::PersistentRecursive, "/a");
        r.add(3, WatchKind::Data, "/a/s");
        r.add(4, WatchKind::Data, "/a/s");
        let ids = |conn: ConnId| -> Option<&[AuthId]> {
            match conn {
                1 | 4 => Some(&alice),
                2 | 3 => Some(&[]),
                _ => None,
            }
        };
        let applied = tree.apply(2, 0, &create("/a/s", secret.clone()));
        let heard = r.recipients(&tree, &applied, &applied.triggers[0], ids);
        assert_eq!(heard.into_iter().collect::<Vec<_>>(), vec![1, 4]);
        // 3's one-shot watch was used up, unheard, as in ZooKeeper.
        assert!(!r
            .paths_by_conn()
            .iter()
            .any(|(conn, _)| *conn == 3 || *conn == 4));
        // A deletion is judged by the ACL the node had.
        r.add(3, WatchKind::Data, "/a/s");
        r.add(4, WatchKind::Data, "/a/s");
        let del = Txn {
            kind: Some(Kind::Delete(DeleteTxn {
                path: "/a/s".into(),
                version: None,
            })),
            ..Default::default()
        };
        let applied = tree.apply(3, 0, &del);
        let t = applied
            .triggers
            .iter()
            .find(|t| t.event == EventType::NodeDeleted)
            .unwrap();
        let heard = r.recipients(&tree, &applied, t, ids);
        assert_eq!(heard.into_iter().collect::<Vec<_>>(), vec![1, 4]);
    }

    #[test]
    fn one_shot_watches_catch_up_across_a_jump_of_the_tree() {
        use crate::proto::{txn::Kind, CreateTxn, DeleteTxn, SetDataTxn, Txn};
        let txn = |kind| Txn {
            kind: Some(kind),
            ..Default::default()
        };
        let create = |p: &str| {
            txn(Kind::Create(CreateTxn {
                path: p.into(),
                ..Default::default()
            }))
        };
        let mut old = DataTree::new();
        old.apply(1, 0, &create("/a"));
        old.apply(2, 0, &create("/b"));
        old.apply(3, 0, &create("/same"));
        let mut new = old.clone();
        new.apply(
            4,
            0,
            &txn(Kind::SetData(SetDataTxn {
                path: "/a".into(),
                data: b"x".to_vec(),
                version: None,
                ttl_ms: 0,
                data_null: false,
            })),
        );
        new.apply(
            5,
            0,
            &txn(Kind::Delete(DeleteTxn {
                path: "/b".into(),
                version: None,
            })),
        );
        new.apply(6, 0, &create("/c"));
        new.apply(7, 0, &create("/a/kid"));
        let mut r = WatchRegistry::default();
        r.add(1, WatchKind::Data, "/a");
        r.add(1, WatchKind::Child, "/a");
        r.add(2, WatchKind::Data, "/b");
        r.add(2, WatchKind::Data, "/c");
        r.add(3, WatchKind::Data, "/same");
        r.add(4, WatchKind::Persistent, "/a");
        assert!(r.has_persistent(4) && !r.has_persistent(1));
        let fired = r.catch_up(&old, &new);
        assert_eq!(
            fired,
            vec![
                (1, EventType::NodeDataChanged, "/a".to_string()),
                (1, EventType::NodeChildrenChanged, "/a".to_string()),
                (2, EventType::NodeDeleted, "/b".to_string()),
                (2, EventType::NodeCreated, "/c".to_string()),
            ]
        );
        // Fired one-shots are gone; the unchanged one stays.
        assert!(r.contains(3, WatchKind::Data, "/same"));
        assert!(!r.contains(1, WatchKind::Data, "/a"));
        assert!(r.catch_up(&old, &new).is_empty());
    }
}
