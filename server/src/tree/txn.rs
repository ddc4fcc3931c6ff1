//! `DataTree::apply`: one committed log entry in, one result and the watch
//! triggers it fires out.
//!
//! This file owns every change to the tree. Each operation first checks
//! everything that can fail, against the current state and without
//! changing it, and only then mutates; every mutation records how to undo
//! itself. A single operation therefore needs no undo (it fails before it
//! changes anything), and a multi undoes the ops before a failing one by
//! replaying their undo records backwards, which restores the exact prior
//! state (stats, sequence counters, indexes) without cloning the tree.
//!
//! It must never panic on the content of a `Txn`: a bad path, an unknown
//! session, an empty multi op are all answered with an error result. It
//! must never read a clock or randomness: the time and the zxid are
//! arguments.

use std::fmt;

use warden_protocol::pb::{Acl, ErrorCode, EventType, Stat};
use warden_protocol::{path, perms, DATA_BYTES_MAX};

use super::node::Node;
use super::outcome::Recorded;
use super::writes::{SessionWrites, Verdict};
use super::{DataTree, ROOT};
use crate::proto::{
    multi_txn_op, txn, AuthId, BindSessionTxn, CheckTxn, CloseSessionTxn, CreateSessionTxn,
    CreateTxn, DeleteTxn, GuardedDeleteTxn, MultiTxn, SetAclTxn, SetDataTxn, Txn,
};

/// Why an operation was refused, naming the path it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeError {
    pub code: ErrorCode,
    pub path: String,
}

impl TreeError {
    pub(super) fn new(code: ErrorCode, path: &str) -> TreeError {
        TreeError {
            code,
            path: path.to_string(),
        }
    }
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path may be whatever a client sent (InvalidPath): escape it so
        // that a control character cannot garble a terminal or a log line.
        write!(f, "{}: {}", self.code.name(), self.path.escape_debug())
    }
}

impl std::error::Error for TreeError {}

/// A watch trigger produced by `apply`: `event` happened at `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub path: String,
    pub event: EventType,
}

/// What applying one entry did: its result (for the waiting request, on the
/// origin server, whose door shapes the answer from it) and the watch
/// triggers it fired, in order (for every server's watch registry).
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub result: TxnResult,
    pub triggers: Vec<Trigger>,
    /// The ACL each deleted node had (path, ACL), in order: who may hear of
    /// a deletion through a recursive watch is judged by it.
    pub deleted_acls: Vec<(String, super::SharedAcl)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    SessionCreated,
    /// The ephemeral nodes removed, sorted. Closing an unknown session is a
    /// no-op with an empty list.
    SessionClosed {
        deleted: Vec<String>,
    },
    /// The created path (with its sequence suffix, if any) and its stat.
    Create(Result<(String, Stat), TreeError>),
    Delete(Result<(), TreeError>),
    SetData(Result<Stat, TreeError>),
    SetAcl(Result<Stat, TreeError>),
    Multi(MultiOutcome),
    /// Whether the guard held and the node was removed.
    GuardedDelete {
        deleted: bool,
    },
    /// The session already applied this write (same xid, or same epoch
    /// and sequence): nothing changed; `first` is what its first apply
    /// did, as the session recorded it (replicated state: a copy gets the
    /// same answer on whichever server it lands).
    Duplicate {
        first: Box<Recorded>,
    },
    /// The session already applied a later write (`latest_xid`: its xid,
    /// or its sequence on the connection): this one arrived out of order
    /// — a request left behind on a server the session moved away from
    /// (its client was told the connection was lost), one that lost its
    /// place in a leader change, or a copy of a write applied so long ago
    /// that its answer is no longer kept. Applying it now would reorder
    /// the session's writes (and could, say, make a lock contender node
    /// nobody waits on); nothing changed.
    Stale {
        latest_xid: u64,
    },
    /// A ZooKeeper-door write sent on a connection the session has left
    /// (it was bound to another at `epoch` since): nothing changed.
    Moved {
        epoch: u64,
    },
    /// A client write of a session that had ended when it was applied (a
    /// copy proposed again after a leader change, landing after its
    /// session expired or closed): nothing changed.
    SessionGone,
    /// A bind applied: the session's new epoch; `None`: not bound (the
    /// session is gone, or moved since the resuming server looked).
    SessionBound {
        epoch: Option<u64>,
    },
    Noop,
}

/// The result of one op of a successful multi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutcome {
    Create { path: String, stat: Stat },
    Delete,
    SetData { stat: Stat },
    Check,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOutcome {
    /// Every op applied; one outcome per op, in order.
    Ok(Vec<OpOutcome>),
    /// Op `index` failed with `error`; nothing was applied.
    Failed { index: usize, error: TreeError },
}

/// How to reverse one mutation. Replayed newest first, these restore the
/// tree exactly as it was before the first of them.
#[derive(Debug)]
pub(super) enum Undo {
    /// A node was inserted at `path`: remove it (and its index entries).
    Inserted { path: String },
    /// A childless node was removed from `path`: put it back.
    Removed {
        path: String,
        node: std::sync::Arc<Node>,
    },
    /// A child was added or removed under `path`: restore its child
    /// counter (the next sequence number) and pzxid.
    ChildCounters {
        path: String,
        cversion: i32,
        pzxid: u64,
    },
    /// `path`'s data was replaced: restore the old data, its counters and
    /// TTL (a set_data may change a TTL node's TTL).
    Data {
        path: String,
        data: Vec<u8>,
        data_null: bool,
        version: i32,
        mzxid: u64,
        mtime_ms: i64,
        ttl_ms: u64,
    },
    /// `path`'s ACL was replaced.
    Acl {
        path: String,
        acl: super::SharedAcl,
        aversion: i32,
    },
}

/// The state of one `apply` call that the operations share.
pub(super) struct Ctx {
    pub(super) zxid: u64,
    pub(super) time_ms: i64,
    pub(super) undo: Vec<Undo>,
    triggers: Vec<Trigger>,
    /// The requester's identities; `None`: not checked (see `Txn.auth`).
    auth: Option<Vec<AuthId>>,
}

impl Ctx {
    pub(super) fn trigger(&mut self, path: &str, event: EventType) {
        self.triggers.push(Trigger {
            path: path.to_string(),
            event,
        });
    }

    /// NoAuth at `path` unless the requester holds `perm` under `acl`.
    /// Checked here, where the write applies, against this replica's own
    /// state, so a server with a stale view cannot let through what the
    /// log's order refuses.
    pub(super) fn authorize(&self, acl: &[Acl], perm: u32, path: &str) -> Result<(), TreeError> {
        match &self.auth {
            Some(ids) if !super::acl::allowed(acl, ids, perm) => {
                Err(TreeError::new(ErrorCode::NoAuth, path))
            }
            _ => Ok(()),
        }
    }
}

/// Fails with `code` at `path` when `expected` is given and differs from
/// `actual` (an absent expectation matches any version).
fn check_version(
    expected: Option<i32>,
    actual: i32,
    code: ErrorCode,
    path: &str,
) -> Result<(), TreeError> {
    match expected {
        Some(v) if v != actual => Err(TreeError::new(code, path)),
        _ => Ok(()),
    }
}

/// Checks a path that must name an existing node (not a create's path).
fn valid_path(p: &str) -> Result<(), TreeError> {
    path::validate(p).map_err(|_| TreeError::new(ErrorCode::InvalidPath, p))
}

impl DataTree {
    /// Applies the committed log entry `zxid`, proposed at `time_ms`.
    ///
    /// `zxid` must be greater than every zxid applied before (it is the
    /// entry's Raft log index). Never panics on `txn`'s content: whatever it
    /// holds, the answer is a result, possibly an error.
    pub fn apply(&mut self, zxid: u64, time_ms: i64, txn: &Txn) -> Applied {
        debug_assert!(
            zxid > self.applied_index,
            "zxid {zxid} applied after {}",
            self.applied_index
        );
        let mut ctx = Ctx {
            zxid,
            time_ms,
            undo: Vec::new(),
            triggers: Vec::new(),
            auth: txn.auth.as_ref().map(|a| a.ids.clone()),
        };
        match self.judge(txn) {
            Verdict::New => {}
            Verdict::Duplicate(first) => {
                self.applied_index = zxid;
                return Applied {
                    result: TxnResult::Duplicate {
                        first: Box::new(first),
                    },
                    triggers: Vec::new(),
                    deleted_acls: Vec::new(),
                };
            }
            Verdict::Stale { latest } => {
                return self.refused(zxid, TxnResult::Stale { latest_xid: latest })
            }
            Verdict::Moved { epoch } => return self.refused(zxid, TxnResult::Moved { epoch }),
            Verdict::Gone => return self.refused(zxid, TxnResult::SessionGone),
        }
        let result = match &txn.kind {
            None | Some(txn::Kind::Noop(_)) => TxnResult::Noop,
            Some(txn::Kind::CreateSession(t)) => self.create_session(zxid, t),
            Some(txn::Kind::BindSession(t)) => self.bind_session(zxid, t),
            Some(txn::Kind::CloseSession(t)) => self.close_session(&mut ctx, t),
            Some(txn::Kind::Create(t)) => TxnResult::Create(self.create(&mut ctx, t)),
            Some(txn::Kind::Delete(t)) => TxnResult::Delete(self.delete(&mut ctx, t)),
            Some(txn::Kind::SetData(t)) => TxnResult::SetData(self.set_data(&mut ctx, t)),
            Some(txn::Kind::SetAcl(t)) => TxnResult::SetAcl(self.set_acl(&mut ctx, t)),
            Some(txn::Kind::Multi(t)) => TxnResult::Multi(self.multi(&mut ctx, t)),
            Some(txn::Kind::GuardedDelete(t)) => TxnResult::GuardedDelete {
                deleted: self.guarded_delete(&mut ctx, t),
            },
            Some(txn::Kind::MemberChange(t)) => {
                self.member_change(t);
                TxnResult::Noop
            }
        };
        // Outside a multi an operation fails before it changes anything, so
        // its undo records are simply dropped here.
        self.applied_index = zxid;
        // What is left of the undo log is what this entry did (a failed
        // multi has replayed and emptied it).
        let deleted_acls = ctx
            .undo
            .iter()
            .filter_map(|u| match u {
                Undo::Removed { path, node } => Some((path.clone(), node.acl.clone())),
                _ => None,
            })
            .collect();
        self.record(zxid, txn, &result);
        Applied {
            result,
            triggers: ctx.triggers,
            deleted_acls,
        }
    }

    /// A client write the session's record refuses: nothing changes. It
    /// is not recorded: its retry is refused just the same.
    fn refused(&mut self, zxid: u64, result: TxnResult) -> Applied {
        self.applied_index = zxid;
        Applied {
            result,
            triggers: Vec::new(),
            deleted_acls: Vec::new(),
        }
    }

    /// What the session's record makes of `txn`: new for a txn of no
    /// session; a client write of a session the tree no longer has is
    /// refused (its record went with it, so a copy could not be told from
    /// a new write); the session's own life-cycle entries go on to apply.
    fn judge(&self, txn: &Txn) -> Verdict {
        if txn.session_id == 0 {
            return Verdict::New;
        }
        match self.sessions.get(&txn.session_id) {
            Some(s) => s.writes.judge(txn),
            None => match &txn.kind {
                Some(
                    txn::Kind::Create(_)
                    | txn::Kind::Delete(_)
                    | txn::Kind::SetData(_)
                    | txn::Kind::SetAcl(_)
                    | txn::Kind::Multi(_)
                    | txn::Kind::GuardedDelete(_),
                ) => Verdict::Gone,
                _ => Verdict::New,
            },
        }
    }

    /// Records what a client write tagged with its identity (an xid or a
    /// sequence) did, in its session, so that a copy of it gets the same
    /// answer. Every replica records the same outcome, so this stays
    /// deterministic.
    fn record(&mut self, zxid: u64, txn: &Txn, result: &TxnResult) {
        if txn.session_id == 0 || (txn.xid == 0 && txn.seq == 0) {
            return;
        }
        if let Some(s) = self.session_mut(txn.session_id) {
            s.writes.applied(txn, Recorded::of(zxid, result));
        }
    }

    /// What the session's write `txn` did, if it is kept (what a copy of
    /// it is answered from).
    pub fn recorded(&self, txn: &Txn) -> Option<Recorded> {
        let s = self.sessions.get(&txn.session_id)?;
        s.writes.answer_of(txn).cloned()
    }

    /// Records a log entry that carries no `Txn` (an empty or configuration
    /// entry): the tree does not change, only the applied index moves.
    pub fn skip(&mut self, zxid: u64) {
        debug_assert!(
            zxid > self.applied_index,
            "zxid {zxid} skipped after {}",
            self.applied_index
        );
        self.applied_index = zxid;
    }

    fn create_session(&mut self, zxid: u64, t: &CreateSessionTxn) -> TxnResult {
        // Id 0 means "not ephemeral" in `ephemeral_owner`, so a session with
        // that id could own nodes nobody would ever remove. The leader never
        // hands it out; if a log carries it anyway, ignore it.
        if t.session_id == 0 {
            return TxnResult::Noop;
        }
        // A CreateSession proposed twice (re-proposed after a leader change)
        // must not reset the session's state.
        self.sessions.entry(t.session_id).or_insert_with(|| {
            std::sync::Arc::new(super::SessionInfo {
                password: t.password.clone(),
                timeout_ms: t.timeout_ms,
                writes: SessionWrites::new(zxid),
            })
        });
        TxnResult::SessionCreated
    }

    /// Binds the session to a new connection if it is still as the
    /// resuming server saw it (see [`BindSessionTxn`]).
    fn bind_session(&mut self, zxid: u64, t: &BindSessionTxn) -> TxnResult {
        let epoch = match self.session_mut(t.session_id) {
            Some(s) if s.writes.epoch == t.expected_epoch => {
                s.writes.bind(zxid);
                Some(zxid)
            }
            _ => None,
        };
        TxnResult::SessionBound { epoch }
    }

    fn close_session(&mut self, ctx: &mut Ctx, t: &CloseSessionTxn) -> TxnResult {
        if self.sessions.remove(&t.session_id).is_none() {
            return TxnResult::SessionClosed {
                deleted: Vec::new(),
            };
        }
        // Sorted (a BTreeSet), so every replica fires the same triggers in
        // the same order. Ephemerals have no children, so any order works.
        let deleted = self.ephemerals(t.session_id);
        for p in &deleted {
            let childless = self
                .nodes
                .get(p.as_str())
                .is_some_and(|n| n.children.is_empty());
            debug_assert!(childless, "{p}: ephemeral with children");
            if childless {
                self.remove_unchecked(ctx, p);
            }
        }
        debug_assert!(!self.ephemerals.contains_key(&t.session_id));
        TxnResult::SessionClosed { deleted }
    }

    fn create(&mut self, ctx: &mut Ctx, t: &CreateTxn) -> Result<(String, Stat), TreeError> {
        let requested = t.path.as_str();
        let fail = |code| Err(TreeError::new(code, requested));
        if path::validate_create(requested, t.sequential).is_err() {
            return fail(ErrorCode::InvalidPath);
        }
        if t.data.len() > DATA_BYTES_MAX {
            return fail(ErrorCode::DataTooLarge);
        }
        // A container is removed by the leader once emptied; combined with a
        // session's lifetime, a unique name or a TTL its fate is ambiguous.
        if t.container && (t.ephemeral || t.sequential || t.ttl_ms > 0) {
            return fail(ErrorCode::BadArguments);
        }
        if t.ephemeral && !self.sessions.contains_key(&t.session_id) {
            return fail(ErrorCode::SessionExpired);
        }
        // For a sequential path ending in '/', this is the path without it:
        // the child is named by its sequence number alone.
        let parent_path = path::parent(requested);
        // The first quota node brings ZooKeeper's /zookeeper/quota into the
        // tree; the create then cannot fail (open ACL, no children).
        self.quota_root_for(ctx, requested);
        let Some(parent) = self.nodes.get(parent_path) else {
            return fail(ErrorCode::NoNode);
        };
        // Before the existence checks, as in ZooKeeper: who may not create
        // here learns nothing about what is there.
        ctx.authorize(&parent.acl, perms::CREATE, requested)?;
        if parent.ephemeral_owner != 0 {
            return fail(ErrorCode::NoChildrenForEphemerals);
        }
        // ZooKeeper's rule: the suffix is the number of children the parent
        // has had created so far (ZooKeeper keeps exactly that as its
        // internal cversion and reports creates + deletes), printed like C's
        // "%010d" (which Rust's `{:010}` matches, sign included). Our
        // cversion is the reported one, creates + deletes, and
        // num_children = creates - deletes, so creates = (cversion +
        // num_children) / 2. Numbers under one parent only ever grow (until
        // the i32 wraps); the differential test against ZooKeeper checks it.
        let new_path = if t.sequential {
            let creates = ((i64::from(parent.cversion) + parent.children.len() as i64) / 2) as i32;
            format!("{requested}{creates:010}")
        } else {
            requested.to_string()
        };
        if self.nodes.contains_key(new_path.as_str()) {
            return Err(TreeError::new(ErrorCode::NodeExists, &new_path));
        }
        let data_len = t.data.len() as i64;
        self.quota_check(&new_path, 1, data_len)?;

        self.bump_child_counters(ctx, parent_path);
        let acl = if t.acl.is_empty() {
            self.acls.intern(&warden_protocol::open_acl())
        } else {
            self.acls.intern(&t.acl)
        };
        let node = Node {
            data: t.data.clone(),
            acl,
            czxid: ctx.zxid,
            mzxid: ctx.zxid,
            pzxid: ctx.zxid,
            ctime_ms: ctx.time_ms,
            mtime_ms: ctx.time_ms,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: if t.ephemeral { t.session_id } else { 0 },
            container: t.container,
            ttl_ms: t.ttl_ms,
            children: Default::default(),
            data_null: t.data_null && t.data.is_empty(),
        };
        let stat = node.stat();
        self.insert_node(new_path.as_str().into(), std::sync::Arc::new(node));
        ctx.undo.push(Undo::Inserted {
            path: new_path.clone(),
        });
        ctx.trigger(&new_path, EventType::NodeCreated);
        ctx.trigger(parent_path, EventType::NodeChildrenChanged);
        self.quota_account(ctx, &new_path, 1, data_len);
        debug_assert_eq!(self.check_node(&new_path), Ok(()));
        Ok((new_path, stat))
    }

    fn delete(&mut self, ctx: &mut Ctx, t: &DeleteTxn) -> Result<(), TreeError> {
        let p = t.path.as_str();
        valid_path(p)?;
        if p == ROOT {
            return Err(TreeError::new(ErrorCode::BadArguments, p));
        }
        // DELETE is the parent's to grant, and is checked before the node
        // is looked up, as in ZooKeeper.
        let Some(parent) = self.nodes.get(path::parent(p)) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };
        ctx.authorize(&parent.acl, perms::DELETE, p)?;
        let Some(node) = self.nodes.get(p) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };
        check_version(t.version, node.version, ErrorCode::BadVersion, p)?;
        if !node.children.is_empty() {
            return Err(TreeError::new(ErrorCode::NotEmpty, p));
        }
        self.remove_unchecked(ctx, p);
        Ok(())
    }

    /// The request-level checks (path, size) come before the state checks
    /// (existence, version), as for create: a request that could never
    /// succeed says so whatever the tree holds.
    fn set_data(&mut self, ctx: &mut Ctx, t: &SetDataTxn) -> Result<Stat, TreeError> {
        let p = t.path.as_str();
        valid_path(p)?;
        if t.data.len() > DATA_BYTES_MAX {
            return Err(TreeError::new(ErrorCode::DataTooLarge, p));
        }
        let Some(node) = self.nodes.get(p) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };
        ctx.authorize(&node.acl, perms::WRITE, p)?;
        check_version(t.version, node.version, ErrorCode::BadVersion, p)?;
        // A new TTL only for a TTL node, so the TTL index stays as it is.
        if t.ttl_ms > 0 && node.ttl_ms == 0 {
            return Err(TreeError::new(ErrorCode::BadArguments, p));
        }
        let bytes_diff = t.data.len() as i64 - node.data.len() as i64;
        self.quota_check(p, 0, bytes_diff)?;
        let Some(node) = self.node_mut(p) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };

        let old_data = std::mem::replace(&mut node.data, t.data.clone());
        let old_null = std::mem::replace(&mut node.data_null, t.data_null && t.data.is_empty());
        let replaced = old_data.len() as u64;
        ctx.undo.push(Undo::Data {
            path: p.to_string(),
            data: old_data,
            data_null: old_null,
            version: node.version,
            mzxid: node.mzxid,
            mtime_ms: node.mtime_ms,
            ttl_ms: node.ttl_ms,
        });
        if t.ttl_ms > 0 {
            node.ttl_ms = t.ttl_ms;
        }
        node.version = node.version.wrapping_add(1);
        node.mzxid = ctx.zxid;
        node.mtime_ms = ctx.time_ms;
        let stat = node.stat();
        self.data_bytes = self.data_bytes + t.data.len() as u64 - replaced;
        ctx.trigger(p, EventType::NodeDataChanged);
        self.quota_account(ctx, p, 0, bytes_diff);
        debug_assert_eq!(self.check_node(p), Ok(()));
        Ok(stat)
    }

    /// Changes only the ACL and aversion: not mzxid, not version, and fires
    /// no watch (as in ZooKeeper).
    fn set_acl(&mut self, ctx: &mut Ctx, t: &SetAclTxn) -> Result<Stat, TreeError> {
        let p = t.path.as_str();
        valid_path(p)?;
        if t.acl.is_empty() {
            return Err(TreeError::new(ErrorCode::InvalidAcl, p));
        }
        let new_acl = self.acls.intern(&t.acl);
        let Some(node) = self.node_mut(p) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };
        ctx.authorize(&node.acl, perms::ADMIN, p)?;
        check_version(t.aversion, node.aversion, ErrorCode::BadVersion, p)?;

        let old_acl = std::mem::replace(&mut node.acl, new_acl);
        ctx.undo.push(Undo::Acl {
            path: p.to_string(),
            acl: old_acl,
            aversion: node.aversion,
        });
        node.aversion = node.aversion.wrapping_add(1);
        Ok(node.stat())
    }

    /// A multi's version check reads the node: READ, as in ZooKeeper.
    fn check(&self, ctx: &Ctx, t: &CheckTxn) -> Result<(), TreeError> {
        let p = t.path.as_str();
        valid_path(p)?;
        let Some(node) = self.nodes.get(p) else {
            return Err(TreeError::new(ErrorCode::NoNode, p));
        };
        ctx.authorize(&node.acl, perms::READ, p)?;
        check_version(t.version, node.version, ErrorCode::BadVersion, p)
    }

    /// All or nothing: ops apply in order, each seeing the ones before it;
    /// if one fails, the undo records of the earlier ones are replayed
    /// backwards and their triggers dropped.
    fn multi(&mut self, ctx: &mut Ctx, t: &MultiTxn) -> MultiOutcome {
        debug_assert!(ctx.undo.is_empty() && ctx.triggers.is_empty());
        let mut outcomes = Vec::with_capacity(t.ops.len());
        for (index, op) in t.ops.iter().enumerate() {
            let outcome = match &op.op {
                Some(multi_txn_op::Op::Create(c)) => self
                    .create(ctx, c)
                    .map(|(path, stat)| OpOutcome::Create { path, stat }),
                Some(multi_txn_op::Op::Delete(d)) => {
                    self.delete(ctx, d).map(|()| OpOutcome::Delete)
                }
                Some(multi_txn_op::Op::SetData(s)) => self
                    .set_data(ctx, s)
                    .map(|stat| OpOutcome::SetData { stat }),
                Some(multi_txn_op::Op::Check(c)) => self.check(ctx, c).map(|()| OpOutcome::Check),
                // An op with no kind (a newer proposer, or a corrupt entry)
                // cannot be applied, so neither can the multi.
                None => Err(TreeError::new(ErrorCode::BadArguments, "")),
            };
            match outcome {
                Ok(outcome) => outcomes.push(outcome),
                Err(error) => {
                    self.rollback(std::mem::take(&mut ctx.undo));
                    ctx.triggers.clear();
                    return MultiOutcome::Failed { index, error };
                }
            }
        }
        MultiOutcome::Ok(outcomes)
    }

    /// Removes `t.path` only if it is exactly as the leader saw it when it
    /// decided to: present, childless, same mzxid and pzxid. Anything else
    /// (a write, a child created or deleted, a bad path) makes it a no-op.
    fn guarded_delete(&mut self, ctx: &mut Ctx, t: &GuardedDeleteTxn) -> bool {
        let p = t.path.as_str();
        let guard_holds = p != ROOT
            && path::validate(p).is_ok()
            && self.nodes.get(p).is_some_and(|n| {
                n.children.is_empty() && n.mzxid == t.expected_mzxid && n.pzxid == t.expected_pzxid
            });
        if guard_holds {
            self.remove_unchecked(ctx, p);
        }
        guard_holds
    }

    /// Removes the existing, childless, non-root node at `p`, as every
    /// successful delete does: bumps the parent's counters and fires
    /// NodeDeleted and the parent's NodeChildrenChanged.
    fn remove_unchecked(&mut self, ctx: &mut Ctx, p: &str) {
        let parent_path = path::parent(p);
        self.bump_child_counters(ctx, parent_path);
        let mut bytes = 0;
        match self.remove_node(p) {
            Some(node) => {
                bytes = node.data.len() as i64;
                ctx.undo.push(Undo::Removed {
                    path: p.to_string(),
                    node,
                })
            }
            None => debug_assert!(false, "{p}: removed but absent"),
        }
        ctx.trigger(p, EventType::NodeDeleted);
        ctx.trigger(parent_path, EventType::NodeChildrenChanged);
        self.quota_account(ctx, p, -1, -bytes);
        debug_assert_eq!(self.check_node(parent_path), Ok(()));
    }

    /// A child of `parent_path` is being created or deleted: cversion + 1
    /// (which is also the next sequence number) and pzxid = this zxid.
    /// mzxid and version stay: the parent's own data did not change.
    pub(super) fn bump_child_counters(&mut self, ctx: &mut Ctx, parent_path: &str) {
        let Some(parent) = self.node_mut(parent_path) else {
            debug_assert!(false, "{parent_path}: parent vanished");
            return;
        };
        ctx.undo.push(Undo::ChildCounters {
            path: parent_path.to_string(),
            cversion: parent.cversion,
            pzxid: parent.pzxid,
        });
        parent.cversion = parent.cversion.wrapping_add(1);
        parent.pzxid = ctx.zxid;
    }

    /// Replays undo records newest first. Each record was written right
    /// where its mutation happened, so reversing them in order meets every
    /// node in exactly the state the mutation left it in.
    fn rollback(&mut self, undo: Vec<Undo>) {
        for entry in undo.into_iter().rev() {
            match entry {
                Undo::Inserted { path } => {
                    let removed = self.remove_node(&path);
                    debug_assert!(removed.is_some(), "{path}: undo of an absent insert");
                }
                Undo::Removed { path, node } => self.insert_node(path.into(), node),
                Undo::ChildCounters {
                    path,
                    cversion,
                    pzxid,
                } => {
                    if let Some(node) = self.node_mut(&path) {
                        node.cversion = cversion;
                        node.pzxid = pzxid;
                    }
                }
                Undo::Data {
                    path,
                    data,
                    data_null,
                    version,
                    mzxid,
                    mtime_ms,
                    ttl_ms,
                } => {
                    if let Some(node) = self.node_mut(&path) {
                        let (restored, replaced) = (data.len() as u64, node.data.len() as u64);
                        node.data = data;
                        node.data_null = data_null;
                        node.version = version;
                        node.mzxid = mzxid;
                        node.mtime_ms = mtime_ms;
                        node.ttl_ms = ttl_ms;
                        self.data_bytes = self.data_bytes + restored - replaced;
                    }
                }
                Undo::Acl {
                    path,
                    acl,
                    aversion,
                } => {
                    if let Some(node) = self.node_mut(&path) {
                        node.acl = acl;
                        node.aversion = aversion;
                    }
                }
            }
        }
    }
}
