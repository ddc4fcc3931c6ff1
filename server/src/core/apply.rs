//! Apply: what the Ready loop hands the state machine — committed entries,
//! a leader's snapshot, conf changes, ReadIndex answers, role changes, and
//! messages for peers — and what each means for this server's clients.
//!
//! Replicated state changes only in [`DataTree::apply`]; everything here
//! is per server: answering the request that waits for an entry, sending
//! watch events, arming session deadlines on the leader.

use std::time::{Duration, Instant};

use prost::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, Message as RaftMessage, MessageType,
    Snapshot as RaftSnapshot,
};
use raft::{ReadState, SoftState};
use tracing::{debug, error, info, warn};
use warden_protocol::pb::{self, ErrorCode};

use super::frames;
use super::proposals::{ConfApplied, Settled, Waiter};
use super::Machine;
use crate::proto::{self, peer_frame, txn::Kind, CloseReason, PeerFrame, Proposal, Txn};
use crate::raft::snapstream::Descriptor;
use crate::raft::{ReadyHandler, Undelivered};
use crate::tree::{Applied, DataTree, TxnResult};

impl Machine {
    /// The tree's record of a conf change at `index` (an addition without
    /// an address keeps the one known; the transport learns the peer).
    fn member_change(&mut self, index: u64, change: &ConfChange, ctx: &proto::ConfChangeContext) {
        let id = change.node_id;
        let removed = change.get_change_type() == ConfChangeType::RemoveNode;
        let txn = Txn {
            kind: Some(Kind::MemberChange(proto::MemberChangeTxn {
                id,
                addr: ctx.addr.clone(),
                removed,
            })),
            ..Default::default()
        };
        self.tree.apply(index, 0, &txn);
        if removed {
            self.net.remove_peer(id);
            self.peers.forget(id);
        } else {
            let addr = self
                .tree
                .members()
                .get(&id)
                .cloned()
                .or_else(|| self.net.addr_of(id).map(str::to_string));
            if let Some(a) = &addr {
                self.net.add_peer(id, a);
            }
            // A snapshot that includes the new member is taken at once, so
            // it can be initialized from it.
            self.schedule.member_added();
        }
    }

    /// A resume's bind applied: the session lives on `conn` from this
    /// epoch on, or the connect is refused (the session is gone, or was
    /// bound elsewhere meanwhile: the client tries again).
    fn bound(
        &mut self,
        conn: crate::watch::ConnId,
        session_id: u64,
        timeout_ms: u32,
        applied: &Applied,
    ) {
        let zxid = self.tree.applied_index();
        let (TxnResult::SessionBound { epoch: Some(epoch) }, Some(s)) =
            (&applied.result, self.tree.session(session_id))
        else {
            if self.tree.session(session_id).is_none() {
                let message = format!("session {session_id:#x} has expired or never existed");
                self.clients.refuse_connect(
                    conn,
                    ErrorCode::SessionExpired,
                    message,
                    zxid,
                    self.node_id,
                );
            } else {
                // Bound elsewhere meanwhile: not an expiry; the client
                // tries again.
                self.clients
                    .drop_conn(conn, "session bound to another connection meanwhile");
            }
            return;
        };
        let resp = pb::ConnectResponse {
            error: ErrorCode::Ok as i32,
            message: String::new(),
            session_id,
            password: s.password.clone(),
            timeout_ms,
            zxid,
            server_id: self.node_id,
            read_only: false,
        };
        if self.clients.bind_session(conn, session_id) {
            self.clients.set_epoch(conn, *epoch);
            self.sessions.touch(session_id, self.clock.now());
            debug!(
                session_id = format_args!("{session_id:#x}"),
                epoch, "session resumed"
            );
            self.clients.push(conn, frames::connect(resp));
        }
    }
}

impl ReadyHandler for Machine {
    fn send(&mut self, msgs: Vec<RaftMessage>) -> Vec<Undelivered> {
        let mut undelivered = Vec::new();
        for m in msgs {
            let to = m.to;
            let bytes = match protobuf::Message::write_to_bytes(&m) {
                Ok(b) => b,
                Err(e) => {
                    error!(to, error = %e, "raft message does not encode");
                    continue;
                }
            };
            if m.get_msg_type() == MessageType::MsgSnapshot {
                if let Some(descriptor) = Descriptor::parse(m.get_snapshot().get_data()) {
                    // Streamed on a connection of its own, off the core.
                    let meta = m.get_snapshot().get_metadata();
                    let path = self.installs.dir().path_of(meta.index, meta.term);
                    let started = descriptor
                        .and_then(|d| self.net.send_snapshot(to, meta.index, bytes, &path, d));
                    match started {
                        Ok(()) => info!(to, index = meta.index, "snapshot transfer started"),
                        Err(e) => {
                            warn!(to, index = meta.index, error = %e, "snapshot transfer not started");
                            undelivered.extend(Undelivered::of(&m));
                        }
                    }
                    continue;
                }
            }
            let frame = PeerFrame {
                from: self.node_id,
                kind: Some(peer_frame::Kind::Raft(bytes)),
            };
            if m.get_msg_type() == MessageType::MsgHeartbeat {
                self.peers.heartbeat_sent(to, self.clock.now());
            }
            if m.get_msg_type() == MessageType::MsgPropose {
                // Raft never sends a forward again: held, not dropped.
                self.forwards.send(self.net.as_ref(), to, frame);
            } else if !self.net.send(to, frame) {
                debug!(to, "peer queue full or unknown; raft message dropped");
                undelivered.extend(Undelivered::of(&m));
            }
        }
        // On the wire now: a leader's appends before its own fsync starts,
        // a follower's ack as soon as its fsync ended.
        self.net.flush();
        undelivered
    }

    fn apply(&mut self, entry: &Entry) -> Result<(), String> {
        let zxid = entry.index;
        self.schedule.applied(entry.data.len() as u64);
        if entry.data.is_empty() {
            self.tree.skip(zxid);
            return Ok(());
        }
        // An entry this server cannot read may be local corruption: other
        // replicas may read it fine, so skipping it would diverge.
        let proposal = Proposal::decode(&entry.data[..]).map_err(|e| {
            format!(
                "undecodable ({e}); this server's log is corrupt or from a newer version: \
                 wipe its data dir and add it again (docs/operations.md: Storage faults)"
            )
        })?;
        let txn = proposal.txn.unwrap_or_default();
        if matches!(txn.kind, Some(Kind::MemberChange(_))) {
            // Membership changes only through raft's conf change entries;
            // no server proposes this.
            error!(zxid, "member change in a normal log entry skipped");
            self.tree.skip(zxid);
            return Ok(());
        }
        let applied = self.tree.apply(zxid, proposal.time_ms, &txn);
        self.locks
            .observe(&self.tree, &txn, &applied, zxid, proposal.time_ms);
        self.clients.notify(&self.tree, &applied, zxid);

        match &txn.kind {
            Some(Kind::CreateSession(cs)) => self.sessions.created(
                cs.session_id,
                Duration::from_millis(u64::from(cs.timeout_ms)),
                self.clock.now(),
            ),
            Some(Kind::GuardedDelete(g)) => self.leading.removal_applied(&g.path),
            _ => {}
        }
        match applied.result {
            TxnResult::Duplicate { .. } => {
                self.op_metrics.duplicate_writes.inc();
                debug!(
                    zxid,
                    session_id = format_args!("{:#x}", txn.session_id),
                    xid = txn.xid,
                    seq = txn.seq,
                    "a write's second copy answered from its first apply"
                );
            }
            TxnResult::Stale { .. } | TxnResult::Moved { .. } | TxnResult::SessionGone => {
                self.op_metrics.refused_writes.inc();
                debug!(
                    zxid,
                    session_id = format_args!("{:#x}", txn.session_id),
                    xid = txn.xid,
                    seq = txn.seq,
                    "a write out of its session's order, or of an ended session, refused"
                );
            }
            _ => {}
        }

        let waiter = if proposal.origin_node == self.node_id && proposal.request_id != 0 {
            self.proposals.complete(proposal.request_id)
        } else {
            None
        };
        match waiter {
            Some(Waiter::Connect { conn, timeout_ms }) => {
                if let Some(Kind::CreateSession(cs)) = &txn.kind {
                    let epoch = self
                        .tree
                        .session(cs.session_id)
                        .map_or(0, |s| s.writes.epoch);
                    self.clients.session_created(
                        conn,
                        pb::ConnectResponse {
                            error: ErrorCode::Ok as i32,
                            message: String::new(),
                            session_id: cs.session_id,
                            password: cs.password.clone(),
                            timeout_ms,
                            zxid,
                            server_id: self.node_id,
                            read_only: false,
                        },
                    );
                    self.clients.set_epoch(conn, epoch);
                }
            }
            Some(Waiter::Resume { conn, timeout_ms }) => {
                if let Some(Kind::BindSession(b)) = &txn.kind {
                    self.bound(conn, b.session_id, timeout_ms, &applied);
                }
            }
            Some(Waiter::Request { conn }) => {
                if txn.seq != 0 {
                    self.clients.write_settled(conn, txn.epoch, txn.seq);
                }
                let frame =
                    frames::of_response(crate::ops::write_answer(&txn, zxid, &applied.result));
                self.clients
                    .complete_write(conn, proposal.request_id, &self.tree, |xid| {
                        frames::with_xid(frame, xid)
                    });
            }
            None => {}
        }

        if let (Some(Kind::CloseSession(cs)), TxnResult::SessionClosed { .. }) =
            (&txn.kind, &applied.result)
        {
            let reason = CloseReason::try_from(cs.reason).unwrap_or(CloseReason::Client);
            self.sessions.closed(cs.session_id);
            self.clients
                .session_closed(cs.session_id, reason, &self.tree);
        }
        Ok(())
    }

    fn restore(&mut self, snapshot: &RaftSnapshot) -> Result<Option<std::path::PathBuf>, String> {
        // os-clock: the install's took_ms, logged only.
        let started = Instant::now();
        let meta = snapshot.get_metadata();
        let (tree, file, received) = match Descriptor::parse(&snapshot.data) {
            // Streamed: received, checked and built off the core.
            Some(_) => {
                let p = self.installs.take(meta.index, meta.term).ok_or_else(|| {
                    "a streamed snapshot without its received file; not installed".to_string()
                })?;
                (p.tree, Some(p.path), p.took)
            }
            // Old-style: the tree is the message's data, built here.
            None => {
                let tree = proto::Snapshot::decode(&snapshot.data[..])
                    .map_err(|e| e.to_string())
                    .and_then(|s| DataTree::from_snapshot_owned(s).map_err(|e| e.to_string()))
                    .map_err(|e| format!("unreadable ({e}); not installed"))?;
                (tree, None, Duration::ZERO)
            }
        };
        self.op_metrics.snapshot_installs.inc();
        // Bytes applied since the latest snapshot: this one.
        self.schedule.installed();
        let old = std::mem::replace(&mut self.tree, tree);
        self.locks.rebuild(&self.tree);
        self.clients.after_snapshot(&old, &self.tree);
        super::installs::drop_off_core(old);
        // Writes of this server whose entries the snapshot holds: answered
        // from what the tree recorded for them.
        for (request_id, waiter, answer) in self.proposals.settled_in(&self.tree) {
            match (waiter, answer) {
                (Waiter::Connect { conn, timeout_ms }, Settled::Session(id, password)) => {
                    let epoch = self.tree.session(id).map_or(0, |s| s.writes.epoch);
                    self.clients.session_created(
                        conn,
                        pb::ConnectResponse {
                            error: ErrorCode::Ok as i32,
                            message: String::new(),
                            session_id: id,
                            password,
                            timeout_ms,
                            zxid: self.tree.applied_index(),
                            server_id: self.node_id,
                            read_only: false,
                        },
                    );
                    self.clients.set_epoch(conn, epoch);
                }
                (Waiter::Request { conn }, Settled::Answer(response)) => {
                    let frame = frames::of_response(response);
                    self.clients
                        .complete_write(conn, request_id, &self.tree, |xid| {
                            frames::with_xid(frame, xid)
                        });
                }
                _ => {}
            }
        }
        info!(
            index = self.tree.applied_index(),
            nodes = self.tree.node_count(),
            streamed = file.is_some(),
            received_ms = received.as_millis() as u64,
            // os-clock: logged only.
            took_ms = started.elapsed().as_millis() as u64,
            "state machine replaced by leader snapshot"
        );
        Ok(file)
    }

    fn read_states(&mut self, states: Vec<ReadState>) {
        self.clients.read_states(states, &self.tree);
    }

    fn conf_changed(&mut self, index: u64, change: &ConfChange, conf: &ConfState) {
        let ctx = proto::ConfChangeContext::decode(&change.context[..]).unwrap_or_default();
        if change.node_id == 0 {
            self.tree.skip(index);
        } else {
            self.member_change(index, change, &ctx);
            self.clients.config_changed(index);
        }
        info!(index, node_id = change.node_id, change = ?change.get_change_type(), voters = ?conf.voters, learners = ?conf.learners, "membership changed");
        if ctx.origin_node == self.node_id && ctx.request_id != 0 {
            match self
                .proposals
                .conf_change_applied(ctx.request_id, change, self.clock.now())
            {
                ConfApplied::Done {
                    waiter: Waiter::Request { conn },
                    reconfig: false,
                } => {
                    self.clients
                        .complete_write(conn, ctx.request_id, &self.tree, |xid| {
                            frames::response(xid, index, Ok(None))
                        });
                }
                // Answered with the membership, which the core knows.
                ConfApplied::Done {
                    waiter: Waiter::Request { conn },
                    reconfig: true,
                } => self.reconfigs_done.push((conn, ctx.request_id, index)),
                ConfApplied::Next => self.conf_change_due = true,
                ConfApplied::Done { .. } | ConfApplied::Unknown => {}
            }
        }
    }

    fn role_changed(&mut self, ss: &SoftState) {
        let change = self.role.update(ss.raft_state, ss.leader_id);
        let was_leader = change.was_leader;
        if change.new_leader {
            self.forwards.clear();
        }
        info!(role = ?ss.raft_state, leader = ss.leader_id, "raft role changed");
        let leader = self.role.is_leader();
        // Leader-only memory (see `super::leading`) goes at every role
        // change: a new leader builds it again from the tree, so whatever
        // died with an earlier leadership of this server is proposed again.
        if !leader || !was_leader {
            self.leading.role_changed();
        }
        if !leader {
            self.peers.stopped_leading();
        }
        if leader && !was_leader {
            let sessions: Vec<(u64, Duration)> = self
                .tree
                .sessions()
                .map(|(id, s)| (id, Duration::from_millis(u64::from(s.timeout_ms))))
                .collect();
            self.sessions.promote(sessions, self.clock.now());
        } else if !leader {
            self.sessions.demote();
        }
        self.read_only_role_changed(self.clock.now());
    }
}
