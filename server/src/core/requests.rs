//! Requests from connections: the handshake, and each request turned into
//! a slot of its connection's queue — answered at once, served from the
//! tree in its turn, or proposed to raft and answered when it applies.

use std::net::SocketAddr;

use prost::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType};
use tracing::{debug, info};
use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::clients::{ReadIndexWait, Slot};
use super::frames;
use super::proposals::Waiter;
use super::{Core, CoreMsg, Door};
use crate::authority::{Action, Authority, Caller};
use crate::limits;
use crate::ops::{self, Failure, Plan};
use crate::proto::{self, txn::Kind, AuthInfo, CloseReason, Txn};
use crate::session::{self, Handshake, SessionBounds};
use crate::tree::SERVER_XID_BIT;
use crate::watch::ConnId;

impl Core {
    /// A message from a connection (or an operator's question).
    pub fn handle(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Open {
                conn,
                peer,
                door,
                out,
                closed,
                connect,
                tls_subject,
                can_be_read_only,
            } => {
                if let Some(subject) = &tls_subject {
                    debug!(conn, %subject, "client certificate verified");
                }
                // Before any request of the connection can arrive (this
                // task handles them, in order).
                let ids = crate::auth::connection_ids(peer, tls_subject.as_deref());
                self.m.clients.open(conn, peer, door, out, closed, ids);
                if can_be_read_only {
                    self.m.clients.accepts_read_only(conn);
                }
                if can_be_read_only && self.m.read_only.active() {
                    self.open_read_only(conn, peer, &connect);
                } else {
                    self.open_session(conn, peer, &connect);
                }
            }
            CoreMsg::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
            CoreMsg::Admin { ask, reply } => {
                let _ = reply.send(self.admin(ask));
            }
            CoreMsg::Cluster { reply } => {
                let _ = reply.send(self.cluster_status());
            }
            CoreMsg::Freeze { reply } => {
                let applied = self.m.tree.applied_index();
                let frozen = self
                    .raft
                    .storage()
                    .snapshot_meta_at(applied)
                    .map(|meta| super::Frozen {
                        meta,
                        view: self.m.tree.freeze(),
                    })
                    .map_err(|e| e.to_string());
                let _ = reply.send(frozen);
            }
            CoreMsg::DigestKnown { id, reply } => {
                let _ = reply.send(self.m.tree.acl_names("digest", &id));
            }
            CoreMsg::Locks { query, reply } => {
                let _ = reply.send(self.m.locks.list(&self.m.tree, &query));
            }
            CoreMsg::Request { conn, request } => self.request(conn, request),
            CoreMsg::SaslAuthenticated {
                conn,
                xid,
                user,
                hash,
            } => self.sasl_authenticated(conn, xid, &user, &hash),
            CoreMsg::Closed { conn } => self.m.clients.drop_conn(conn, "connection closed"),
        }
    }

    fn open_session(&mut self, conn: ConnId, peer: SocketAddr, c: &pb::ConnectRequest) {
        let bounds = SessionBounds {
            min_timeout_ms: self.m.cfg.min_session_timeout_ms,
            max_timeout_ms: self.m.cfg.max_session_timeout_ms,
            max_sessions: self.m.cfg.limits.sessions,
        };
        let creating = self.m.proposals.connects_pending();
        match session::handshake(
            &self.m.tree,
            self.m.node_id,
            bounds,
            c,
            creating,
            &mut self.m.rng,
        ) {
            Handshake::Refuse {
                code,
                message,
                limit,
            } => {
                if let Some(limit) = limit {
                    limits::record(&self.m.op_metrics, limit, &message);
                }
                self.refuse_connect(conn, code, message);
            }
            Handshake::Create(cs) => {
                let request_id = self.m.proposals.next_id();
                let timeout_ms = cs.timeout_ms;
                let txn = Txn {
                    kind: Some(Kind::CreateSession(cs)),
                    ..Default::default()
                };
                match self.propose(txn, request_id) {
                    // Creating a session twice changes nothing: safe to
                    // propose again after a leader change.
                    Ok(proposal) => self.m.proposals.register(
                        request_id,
                        Waiter::Connect { conn, timeout_ms },
                        Some(proposal),
                        true,
                        self.m.clock.now(),
                    ),
                    Err(f) => self.refuse_connect(conn, f.code, f.message),
                }
            }
            Handshake::Resume(resp) if self.binds_on_resume(conn) => {
                self.bind_resumed(conn, resp);
            }
            Handshake::Resume(resp) => {
                let id = resp.session_id;
                self.m.clients.bind_session(conn, id);
                self.m.sessions.touch(id, self.m.clock.now());
                debug!(session_id = format_args!("{id:#x}"), %peer, "session resumed");
                self.m.clients.push(conn, frames::connect(resp));
            }
        }
    }

    /// Whether a resume on `conn` binds the session to it through the
    /// log: on the ZooKeeper door, whose writes the tree tells apart by the
    /// epoch of the connection they came on (`tree/writes.rs`). Native
    /// clients number their writes over the whole session themselves.
    fn binds_on_resume(&self, conn: ConnId) -> bool {
        !self.m.cfg.unsafe_bounded_dedup
            && self
                .m
                .clients
                .get(conn)
                .is_some_and(|c| c.door == Door::ZooKeeper)
    }

    /// Proposes to bind the resumed session to `conn`; the connect is
    /// answered when the bind applies (`resp` is what the tree holds now).
    /// From then on, a write the session sent on the connection it left is
    /// refused, however late it comes.
    fn bind_resumed(&mut self, conn: ConnId, resp: pb::ConnectResponse) {
        let session_id = resp.session_id;
        let expected_epoch = self
            .m
            .tree
            .session(session_id)
            .map_or(0, |s| s.writes.epoch);
        let request_id = self.m.proposals.next_id();
        let txn = Txn {
            kind: Some(Kind::BindSession(proto::BindSessionTxn {
                session_id,
                expected_epoch,
            })),
            ..Default::default()
        };
        // As a write: held for the next leader when none is known, and
        // proposed again after a leader change (a second copy finds the
        // epoch changed and changes nothing).
        let proposal =
            self.m
                .proposals
                .encode(self.m.node_id, request_id, txn, self.m.clock.wall_ms());
        let handed = match self.raft.propose(proposal.clone()) {
            Ok(()) => true,
            Err(e) => {
                debug!(error = %e, "no leader for a resume; it waits for the next one");
                false
            }
        };
        self.m.proposals.register(
            request_id,
            Waiter::Resume {
                conn,
                timeout_ms: resp.timeout_ms,
            },
            Some(proposal),
            handed,
            self.m.clock.now(),
        );
    }

    pub(super) fn refuse_connect(&mut self, conn: ConnId, code: ErrorCode, message: String) {
        let zxid = self.m.tree.applied_index();
        self.m
            .clients
            .refuse_connect(conn, code, message, zxid, self.m.node_id);
    }

    /// Queues `slot` for `conn` and sends what is ready.
    pub(super) fn answer(&mut self, conn: ConnId, slot: Slot, op: &'static str) {
        self.m.clients.enqueue(conn, slot, op);
        self.m.clients.flush(conn, &self.m.tree);
    }

    fn request(&mut self, conn: ConnId, request: pb::Request) {
        let xid = request.xid;
        self.m.clients.received(conn, xid);
        let Some(c) = self.m.clients.get(conn) else {
            return;
        };
        let door = c.door;
        let peer = c.peer;
        let read_only = c.read_only;
        let ids = c.ids.clone();
        let zxid = self.m.tree.applied_index();
        let Some(session_id) = c.session else {
            // Requests before the session is established are out of order.
            let f = Failure::new(
                ErrorCode::MarshallingError,
                "request before the session was established",
            );
            self.answer(conn, Slot::Done(frames::error(xid, 0, f)), "invalid");
            return;
        };
        // A backstop: the connection task stops reading at this many
        // unanswered requests, so the queue never gets here.
        let inflight_max = self.m.cfg.limits.outstanding_requests;
        if c.in_flight() >= inflight_max {
            let f = Failure::new(
                ErrorCode::Throttled,
                format!("more than {inflight_max} requests in flight on one connection"),
            );
            self.answer(conn, Slot::Done(frames::error(xid, zxid, f)), "throttled");
            return;
        }
        if read_only {
            self.m.read_only.touch(session_id, self.m.clock.now());
        } else {
            self.m.sessions.touch(session_id, self.m.clock.now());
        }
        let Some(op) = request.op else {
            let f = Failure::new(ErrorCode::BadArguments, "request has no operation");
            self.answer(conn, Slot::Done(frames::error(xid, zxid, f)), "invalid");
            return;
        };
        let op_name = crate::opmetrics::op_name(&op);
        if let pb::request::Op::Auth(a) = op {
            let slot = self.auth(conn, xid, a);
            self.answer(conn, slot, op_name);
            return;
        }
        let plan = ops::plan(op, session_id, &ids);
        if matches!(
            plan,
            Plan::AddMember(_) | Plan::RemoveMember(_) | Plan::Reconfig(_)
        ) {
            // The authority decides, before anything else looks at it.
            let caller = Caller {
                ids: &ids,
                addr: peer.ip(),
            };
            let checked = self
                .authority()
                .check(Action::MembershipChange, door.into(), &caller);
            if let Err(why) = checked {
                let f = Failure::new(ErrorCode::NoAuth, why.to_string());
                self.answer(conn, Slot::Done(frames::error(xid, zxid, f)), op_name);
                return;
            }
        }
        if read_only && self.read_only_request(conn, xid, session_id, &plan, op_name) {
            return;
        }
        let slot = match plan {
            Plan::Reject(f) => Slot::Done(frames::error(xid, zxid, f)),
            Plan::Ping => Slot::Ping { xid },
            Plan::ClusterStatus { watch_config } => {
                if watch_config {
                    self.m.clients.watch_config(conn);
                }
                let status = self.cluster_status();
                Slot::Done(frames::response(
                    xid,
                    zxid,
                    Ok(Some(Res::ClusterStatus(status))),
                ))
            }
            Plan::AddMember(r) => {
                let change_type = if r.learner {
                    ConfChangeType::AddLearnerNode
                } else {
                    ConfChangeType::AddNode
                };
                self.member_change_slot(conn, xid, change_type, r.id, r.addr, r.force)
            }
            Plan::RemoveMember(r) if r.id == self.m.node_id => {
                // This server would never learn that its own removal
                // committed (the group stops talking to it), so the answer
                // could not come.
                let f = Failure::new(
                    ErrorCode::BadArguments,
                    format!("server {} cannot remove itself: ask another member", r.id),
                );
                Slot::Done(frames::error(xid, zxid, f))
            }
            Plan::RemoveMember(r) => self.member_change_slot(
                conn,
                xid,
                ConfChangeType::RemoveNode,
                r.id,
                String::new(),
                r.force,
            ),
            Plan::Reconfig(r) => self.reconfig_slot(conn, xid, r),
            Plan::Read { op, linearizable } => {
                // `--unsafe-skip-read-index` (selftest only) answers from the
                // local tree: a known-bad mode the Jepsen suite must catch.
                let read_index = if linearizable && !self.m.cfg.unsafe_skip_read_index {
                    let ctx = self.m.proposals.next_id();
                    self.m
                        .clients
                        .await_read_index(ctx, conn, self.m.clock.now());
                    self.ask_read_index(ctx);
                    ReadIndexWait::Pending(ctx)
                } else {
                    ReadIndexWait::None
                };
                Slot::Read {
                    xid,
                    op,
                    read_index,
                    ids,
                }
            }
            Plan::Write(mut txn) => {
                // Tagged so that a retry of this xid is applied at most once.
                txn.session_id = session_id;
                // Checked against the ACLs where the txn applies.
                txn.auth = Some(AuthInfo {
                    ids: ids.as_ref().clone(),
                });
                let request_id = self.m.proposals.next_id();
                // Tagged so that a retry of this xid, or a proposal made
                // again after a leader change, is applied at most once
                // (`tree/writes.rs`): a native client's own xid, or the
                // connection's epoch and the write's sequence on it.
                match door {
                    Door::Native => txn.xid = xid,
                    // `--unsafe-bounded-dedup` (tests only): the old
                    // scheme, a server-made xid only the session's last
                    // answers recognise.
                    Door::ZooKeeper if self.m.cfg.unsafe_bounded_dedup => {
                        txn.xid = SERVER_XID_BIT | request_id;
                    }
                    Door::ZooKeeper => {
                        let Some((epoch, seq, acked_seq)) = self.m.clients.next_write(conn) else {
                            return;
                        };
                        (txn.epoch, txn.seq, txn.acked_seq) = (epoch, seq, acked_seq);
                    }
                }
                self.write_slot(conn, xid, request_id, txn)
            }
            Plan::Close => {
                let request_id = self.m.proposals.next_id();
                let txn = Txn {
                    kind: Some(Kind::CloseSession(proto::CloseSessionTxn {
                        session_id,
                        reason: CloseReason::Client as i32,
                    })),
                    session_id,
                    xid: SERVER_XID_BIT | request_id,
                    ..Default::default()
                };
                self.write_slot(conn, xid, request_id, txn)
            }
        };
        self.answer(conn, slot, op_name);
    }

    /// Asks raft to confirm, through the leader, the commit index a
    /// linearizable read waiting on `ctx` must see (ReadIndex).
    fn ask_read_index(&mut self, ctx: u64) {
        self.raft.read_index(ctx.to_be_bytes().to_vec());
    }

    /// Asks again the ReadIndex questions raft may have lost (see
    /// [`super::clients::READ_INDEX_ASK_AGAIN`]): after a leader change
    /// (`all`) every unanswered one, since the old leader took those it
    /// was confirming with it; else those unanswered for a while. Not
    /// while no leader is known: raft would drop them, and the leader
    /// change that ends that asks them all.
    pub(super) fn ask_reads_again(&mut self, all: bool) {
        if self.m.role.leader() == 0 {
            return;
        }
        let due = self.m.clients.read_index_asks_due(self.m.clock.now(), all);
        if !due.is_empty() {
            debug!(
                count = due.len(),
                leader = self.m.role.leader(),
                after_leader_change = all,
                "linearizable reads' ReadIndex asked again"
            );
        }
        for ctx in due {
            self.ask_read_index(ctx);
        }
    }

    /// Who may do what ([`crate::authority`]): this server's admin and
    /// whitelist, refusals counted in its metrics.
    fn authority(&self) -> Authority {
        Authority::new(
            &self.m.cfg.auth,
            self.m.cfg.four_letter_whitelist.clone(),
            &self.m.op_metrics,
        )
    }

    /// An auth request: adds identities to the connection, answered in
    /// its turn. A refusal (AuthFailed) changes nothing; what to do about
    /// it is the door's choice (the ZooKeeper door closes the connection,
    /// as ZooKeeper does).
    fn auth(&mut self, conn: ConnId, xid: u64, a: pb::AuthRequest) -> Slot {
        let zxid = self.m.tree.applied_index();
        let Some(c) = self.m.clients.get(conn) else {
            return Slot::Done(frames::response(xid, zxid, Ok(None)));
        };
        let peer = c.peer;
        let added = self
            .m
            .cfg
            .auth
            .authenticate(&a.scheme, &a.auth)
            .and_then(|new| {
                let mut ids = c.ids.as_ref().clone();
                crate::auth::add_ids(&mut ids, new)?;
                Ok(ids)
            });
        match added {
            Ok(ids) => {
                debug!(conn, %peer, ids = %crate::tree::acl::describe(&ids), "auth added");
                self.m.clients.set_ids(conn, ids);
                Slot::Done(frames::response(xid, zxid, Ok(None)))
            }
            Err(why) => {
                info!(conn, %peer, scheme = %a.scheme.escape_debug(), %why, "auth refused");
                let f = Failure::new(ErrorCode::AuthFailed, why);
                Slot::Done(frames::error(xid, zxid, f))
            }
        }
    }

    /// A SASL exchange the ZooKeeper door completed: the connection gets
    /// the user's identities, in order with its other requests. Refused
    /// (AuthFailed) only when the connection holds too many identities.
    fn sasl_authenticated(&mut self, conn: ConnId, xid: u64, user: &str, hash: &str) {
        self.m.clients.received(conn, xid);
        let zxid = self.m.tree.applied_index();
        let Some(c) = self.m.clients.get(conn) else {
            return;
        };
        let peer = c.peer;
        let mut ids = c.ids.as_ref().clone();
        let slot = match crate::auth::add_ids(&mut ids, self.m.cfg.auth.sasl_ids(user, hash)) {
            Ok(()) => {
                info!(conn, %peer, user = %user.escape_debug(), "SASL DIGEST-MD5 authenticated");
                self.m.clients.set_ids(conn, ids);
                Slot::Done(frames::response(xid, zxid, Ok(None)))
            }
            Err(why) => {
                info!(conn, %peer, %why, "SASL identities refused");
                Slot::Done(frames::error(
                    xid,
                    zxid,
                    Failure::new(ErrorCode::AuthFailed, why),
                ))
            }
        };
        self.answer(conn, slot, "auth");
    }

    /// Proposes one membership change for `conn`'s request `request_id`
    /// (checked already: [`super::quorum`]); answered when it applies.
    pub(super) fn propose_member_change(
        &mut self,
        conn: ConnId,
        request_id: u64,
        change_type: ConfChangeType,
        node_id: u64,
        addr: String,
    ) -> Result<(), Failure> {
        let context = proto::ConfChangeContext {
            origin_node: self.m.node_id,
            request_id,
            addr,
        }
        .encode_to_vec();
        // The context travels inside the ConfChange itself (the entry's own
        // context field is not handed back on apply).
        let change = ConfChange {
            change_type,
            node_id,
            context: context.clone().into(),
            ..Default::default()
        };
        match self.raft.propose_conf_change(context, change.clone()) {
            Ok(()) => {
                info!(node_id, ?change_type, "membership change proposed");
                self.m
                    .proposals
                    .register_conf_change(request_id, conn, change, self.m.clock.now());
                Ok(())
            }
            Err(e) => Err(Failure::new(
                ErrorCode::NotReady,
                format!("membership change for {node_id} refused: {e}"),
            )),
        }
    }

    /// Proposes a client's write, tagged with its session and its identity
    /// (the client's xid, or the connection's epoch and sequence): it is
    /// recognised on a second apply, so it is proposed again after a
    /// leader change, and one that
    /// raft refuses now (no leader known: an election) waits for the next
    /// leader instead of failing, within [`super::PROPOSAL_TIMEOUT`].
    fn write_slot(&mut self, conn: ConnId, xid: u64, request_id: u64, txn: Txn) -> Slot {
        debug_assert!(
            txn.session_id != 0 && (txn.xid != 0 || txn.seq != 0),
            "untagged client write"
        );
        let proposal =
            self.m
                .proposals
                .encode(self.m.node_id, request_id, txn, self.m.clock.wall_ms());
        if proposal.len() > limits::ENTRY_BYTES_MAX {
            // No follower could receive it (it would not fit a peer
            // frame): refused here, before raft holds it.
            let message = format!(
                "this write's log entry would be {} bytes (the request with the \
                 connection's {} identities); the limit is {} bytes",
                proposal.len(),
                self.m.clients.get(conn).map_or(0, |c| c.ids.len()),
                limits::ENTRY_BYTES_MAX
            );
            debug!(conn, "{message}");
            let zxid = self.m.tree.applied_index();
            return Slot::Done(frames::error(
                xid,
                zxid,
                Failure::new(ErrorCode::LimitExceeded, message),
            ));
        }
        let handed = match self.raft.propose(proposal.clone()) {
            Ok(()) => true,
            Err(e) => {
                debug!(error = %e, "no leader for a write; it waits for the next one");
                false
            }
        };
        self.m.proposals.register(
            request_id,
            Waiter::Request { conn },
            Some(proposal),
            handed,
            self.m.clock.now(),
        );
        Slot::Write { xid, request_id }
    }

    /// Proposes `txn`; returns the encoded proposal (kept for re-proposal
    /// after a leader change).
    pub(super) fn propose(&mut self, txn: Txn, request_id: u64) -> Result<Vec<u8>, Failure> {
        let proposal =
            self.m
                .proposals
                .encode(self.m.node_id, request_id, txn, self.m.clock.wall_ms());
        self.raft.propose(proposal.clone()).map_err(|e| {
            debug!(error = %e, "proposal dropped");
            Failure::new(
                ErrorCode::NotReady,
                format!("no leader to accept the write ({e})"),
            )
        })?;
        Ok(proposal)
    }
}
