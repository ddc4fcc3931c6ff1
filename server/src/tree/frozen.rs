//! A frozen view of the tree: what a snapshot is built from, on a thread
//! other than the one applying.
//!
//! [`DataTree::freeze`] copies a pointer per node, path and session (the
//! tree holds them behind `Arc`s) and nothing else, so the thread that owns
//! the tree pauses for milliseconds, not for the seconds that sorting and
//! encoding a million nodes take. The tree goes on applying: a node it
//! changes while a view shares it is copied first (`Arc::make_mut`), so
//! the view keeps the state at its `applied_index`.
//!
//! This file owns the snapshot's byte layout when encoded from a view
//! ([`FrozenTree::encode`]): the same bytes as
//! `to_snapshot().encode_to_vec()`, written node by node, without a second
//! copy of every node's data held at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::node::{Node, SessionInfo};
use super::DataTree;
use crate::proto::{Snapshot, SnapshotMember, SnapshotNode, SnapshotSession};

/// Bytes per chunk of [`FrozenTree::encode_chunks`] (a backup streamed
/// over HTTP). Small: hyper's HTTP/1 writer takes body chunks into its own
/// buffer while that holds less than its limit (about 400 KB), so each
/// chunk can overshoot it; with 1 MiB chunks one backup was seen holding
/// 21 MB there after its client had gone.
pub const STREAM_CHUNK: usize = 64 << 10;

/// The tree at one applied index, shared with the live tree.
pub struct FrozenTree {
    applied_index: u64,
    nodes: Vec<(Arc<str>, Arc<Node>)>,
    sessions: Vec<(u64, Arc<SessionInfo>)>,
    members: BTreeMap<u64, String>,
}

impl DataTree {
    /// A view of the whole tree as it is now. Costs a pointer per node and
    /// session; later changes to the tree do not show in it.
    pub fn freeze(&self) -> FrozenTree {
        FrozenTree {
            applied_index: self.applied_index,
            nodes: self
                .nodes
                .iter()
                .map(|(p, n)| (p.clone(), n.clone()))
                .collect(),
            sessions: self
                .sessions
                .iter()
                .map(|(id, s)| (*id, s.clone()))
                .collect(),
            members: self.members.clone(),
        }
    }

    /// The whole state at `applied_index`: nodes sorted by path, sessions
    /// by id. Plain path order lists every parent before its children,
    /// because a parent's path is a prefix of theirs.
    pub fn to_snapshot(&self) -> Snapshot {
        self.freeze().to_snapshot()
    }
}

impl FrozenTree {
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The view as a snapshot message (every node's data copied into it).
    pub fn to_snapshot(mut self) -> Snapshot {
        self.sort();
        let nodes = self
            .nodes
            .iter()
            .map(|(p, n)| snapshot_node(p, n))
            .collect();
        Snapshot {
            applied_index: self.applied_index,
            nodes,
            sessions: self
                .sessions
                .iter()
                .map(|(id, s)| snapshot_session(*id, s))
                .collect(),
            members: self.members(),
        }
    }

    /// The view encoded as a snapshot message: the bytes of
    /// `to_snapshot().encode_to_vec()`, written one node at a time.
    pub fn encode(mut self) -> Vec<u8> {
        self.sort();
        let mut out = Vec::with_capacity(64 * self.nodes.len());
        self.write(&mut out, usize::MAX, &mut |_| true);
        out
    }

    /// The length of [`FrozenTree::encode`]'s bytes, found by encoding
    /// them a chunk at a time and dropping each (a backup's header
    /// announces it before the first byte is sent).
    pub fn encoded_len(&mut self) -> usize {
        self.sort();
        let mut len = 0;
        let mut out = Vec::with_capacity(2 * STREAM_CHUNK);
        self.write(&mut out, STREAM_CHUNK, &mut |chunk| {
            len += chunk.len();
            chunk.clear();
            true
        });
        len
    }

    /// [`FrozenTree::encode`]'s bytes handed to `sink` in order, in chunks
    /// of about [`STREAM_CHUNK`] (one node more at most), so the whole
    /// encoding is never held at once. Stops early if `sink` returns
    /// false; returns whether every chunk was taken.
    pub fn encode_chunks(self, sink: impl FnMut(Vec<u8>) -> bool) -> bool {
        self.encode_chunks_of(STREAM_CHUNK, sink)
    }

    fn encode_chunks_of(mut self, chunk: usize, mut sink: impl FnMut(Vec<u8>) -> bool) -> bool {
        self.sort();
        let mut out = Vec::with_capacity(2 * chunk);
        self.write(&mut out, chunk, &mut |bytes| {
            sink(std::mem::replace(bytes, Vec::with_capacity(2 * chunk)))
        })
    }

    /// Writes the sorted view into `out`, handing it to `flush` whenever
    /// it holds `chunk` bytes or more, and at the end if not empty
    /// (`flush` takes or clears the bytes; [`FrozenTree::encode`]'s keeps
    /// them, never called before the end). False once `flush` returns
    /// false.
    fn write(
        &self,
        out: &mut Vec<u8>,
        chunk: usize,
        flush: &mut dyn FnMut(&mut Vec<u8>) -> bool,
    ) -> bool {
        use prost::encoding::{message, uint64};
        let mut full = |out: &mut Vec<u8>, last: bool| {
            let due = out.len() >= chunk || (last && !out.is_empty());
            if !due {
                return true;
            }
            flush(out)
        };
        // Fields in number order, as prost writes a whole message.
        if self.applied_index != 0 {
            uint64::encode(1, &self.applied_index, out);
        }
        let mut one = SnapshotNode::default();
        let mut acl_of: Option<&super::SharedAcl> = None;
        for (p, n) in &self.nodes {
            one.path.clear();
            one.path.push_str(p);
            one.data.clear();
            one.data.extend_from_slice(&n.data);
            // Most nodes share a few ACLs: copy one only when it changes.
            if !acl_of.is_some_and(|a| Arc::ptr_eq(a, &n.acl)) {
                one.acl = n.acl.to_vec();
                acl_of = Some(&n.acl);
            }
            one.stat = Some(n.stat());
            one.container = n.container;
            one.ttl_ms = n.ttl_ms;
            one.data_null = n.data_null;
            message::encode(2, &one, out);
            if !full(out, false) {
                return false;
            }
        }
        for (id, s) in &self.sessions {
            message::encode(3, &snapshot_session(*id, s), out);
            if !full(out, false) {
                return false;
            }
        }
        for m in self.members() {
            message::encode(4, &m, out);
        }
        full(out, true)
    }

    fn sort(&mut self) {
        self.nodes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }

    fn members(&self) -> Vec<SnapshotMember> {
        self.members
            .iter()
            .map(|(id, addr)| SnapshotMember {
                id: *id,
                addr: addr.clone(),
            })
            .collect()
    }
}

fn snapshot_node(path: &str, n: &Node) -> SnapshotNode {
    SnapshotNode {
        path: path.to_string(),
        data: n.data.clone(),
        acl: n.acl.to_vec(),
        stat: Some(n.stat()),
        container: n.container,
        ttl_ms: n.ttl_ms,
        data_null: n.data_null,
    }
}

fn snapshot_session(id: u64, s: &SessionInfo) -> SnapshotSession {
    SnapshotSession {
        session_id: id,
        password: s.password.clone(),
        timeout_ms: s.timeout_ms,
        recent: s
            .writes
            .recent
            .iter()
            .map(|(xid, r)| r.to_proto(*xid))
            .collect(),
        applied_xid: s.writes.applied_xid,
        epoch: s.writes.epoch,
        applied_seq: s.writes.applied_seq,
        answers: s
            .writes
            .answers
            .iter()
            .map(|(seq, r)| r.to_proto(*seq))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::proto::{
        txn::Kind, CloseSessionTxn, CreateSessionTxn, CreateTxn, DeleteTxn, SetDataTxn, Txn,
    };

    fn txn(kind: Kind) -> Txn {
        Txn {
            kind: Some(kind),
            ..Default::default()
        }
    }

    fn create(path: &str, owner: u64) -> Kind {
        Kind::Create(CreateTxn {
            path: path.into(),
            data: path.as_bytes().to_vec(),
            ephemeral: owner != 0,
            session_id: owner,
            ..Default::default()
        })
    }

    fn set(path: &str, data: &[u8]) -> Kind {
        Kind::SetData(SetDataTxn {
            ttl_ms: 0,
            data_null: false,
            path: path.into(),
            data: data.to_vec(),
            version: None,
        })
    }

    /// Applies `kinds` from zxid `from` on, each as session 7's write
    /// (so the session records its answers).
    fn apply_all(tree: &mut DataTree, from: u64, kinds: Vec<Kind>) -> u64 {
        let mut zxid = from;
        for kind in kinds {
            zxid += 1;
            let t = Txn {
                session_id: 7,
                xid: zxid,
                ..txn(kind)
            };
            tree.apply(zxid, zxid as i64, &t);
            tree.check_invariants().unwrap();
        }
        zxid
    }

    fn session(id: u64) -> Kind {
        Kind::CreateSession(CreateSessionTxn {
            session_id: id,
            password: vec![1; 16],
            timeout_ms: 10_000,
        })
    }

    #[test]
    fn a_frozen_view_keeps_its_state_while_the_tree_changes() {
        let mut tree = DataTree::new();
        let zxid = apply_all(
            &mut tree,
            0,
            vec![
                session(7),
                session(8),
                create("/a", 0),
                create("/a/b", 0),
                create("/a/c", 0),
                create("/e", 8),
                set("/a/b", b"one"),
            ],
        );
        let expected = tree.to_snapshot();
        let frozen = tree.freeze();
        let frozen_again = tree.freeze();
        // Every kind of change, to nodes the views share: data, a parent's
        // children and counters, a delete, an ephemeral's session closing,
        // a session's recorded answers.
        apply_all(
            &mut tree,
            zxid,
            vec![
                set("/a/b", b"two"),
                create("/a/d", 0),
                Kind::Delete(DeleteTxn {
                    path: "/a/c".into(),
                    version: None,
                }),
                Kind::CloseSession(CloseSessionTxn {
                    session_id: 8,
                    reason: 0,
                }),
                set("/a", b"root of a"),
            ],
        );
        assert_ne!(tree.to_snapshot(), expected, "the tree changed");
        assert_eq!(frozen.applied_index(), zxid);
        assert_eq!(frozen.node_count(), 5);
        assert_eq!(frozen.to_snapshot(), expected);
        assert_eq!(frozen_again.encode(), expected.encode_to_vec());
    }

    #[test]
    fn encode_writes_the_bytes_of_the_snapshot_message() {
        let mut tree = DataTree::new();
        assert_eq!(tree.freeze().encode(), tree.to_snapshot().encode_to_vec());
        let mut kinds = vec![session(7)];
        for i in 0..50 {
            kinds.push(create(&format!("/n{i:02}"), 0));
            kinds.push(create(
                &format!("/n{i:02}/c"),
                if i % 3 == 0 { 7 } else { 0 },
            ));
        }
        apply_all(&mut tree, 0, kinds);
        let encoded = tree.freeze().encode();
        assert_eq!(encoded, tree.to_snapshot().encode_to_vec());
        let decoded = Snapshot::decode(&encoded[..]).unwrap();
        assert_eq!(DataTree::from_snapshot_owned(decoded).unwrap(), tree);
        // In chunks (of 100 bytes or a node more): the same bytes, and
        // the length announced before them.
        let mut view = tree.freeze();
        assert_eq!(view.encoded_len(), encoded.len());
        let mut chunks = Vec::new();
        assert!(view.encode_chunks_of(100, |c| {
            chunks.push(c);
            true
        }));
        assert!(chunks.len() > 10, "{} chunks", chunks.len());
        let (last, full) = chunks.split_last().unwrap();
        assert!(!last.is_empty() && full.iter().all(|c| c.len() >= 100 && c.len() < 400));
        assert_eq!(chunks.concat(), encoded);
        // A sink that stops takes no more.
        let mut taken = 0;
        assert!(!tree.freeze().encode_chunks_of(100, |_| {
            taken += 1;
            taken < 3
        }));
        assert_eq!(taken, 3);
    }
}
