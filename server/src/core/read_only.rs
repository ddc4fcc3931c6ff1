//! ZooKeeper's read-only mode (`--zk-read-only`, ZooKeeper's
//! `readonlymode.enabled`): a server cut off from the majority keeps
//! serving reads to the clients that asked for it (canBeReadOnly).
//!
//! - The mode begins when this server has known no leader for
//!   [`READ_ONLY_GRACE`] (an ordinary election passes unnoticed, as
//!   ZooKeeper waits before starting its read-only server). Connections of
//!   clients that accept read-only sessions but hold a read-write one are
//!   closed then, as ZooKeeper closes every connection when it loses its
//!   quorum: they reconnect and get a read-only one.
//! - A read-only connect gets a session of
//!   [`crate::session::ReadOnlySessions`]: never proposed, never
//!   replicated. Its reads are served from this server's tree (stale reads
//!   are the point of the mode); its writes, `sync` included, are answered
//!   NotReadOnly before they reach raft; its close is answered here.
//! - The mode ends the moment a leader is known: every read-only
//!   connection is closed and every read-only session forgotten, so their
//!   clients reconnect for a read-write session (ZooKeeper clients look
//!   for a read-write server themselves).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tracing::{debug, info};
use warden_protocol::pb::{self, ErrorCode};

use super::clients::Slot;
use super::{frames, Core, Machine};
use crate::ops::{Failure, Plan};
use crate::proto::CloseReason;
use crate::session::{Handshake, ReadOnlySessions, SessionBounds};
use crate::watch::ConnId;

/// How long without a leader before the mode begins (ZooKeeper waits
/// max(2 s, tickTime)).
pub const READ_ONLY_GRACE: Duration = Duration::from_secs(2);

/// The mode's state on this server.
#[derive(Debug)]
pub struct ReadOnlyMode {
    active: bool,
    /// Since when no leader has been known; `None` while one is.
    leaderless_since: Option<Instant>,
    sessions: ReadOnlySessions,
}

impl ReadOnlyMode {
    /// A server starts knowing no leader.
    pub fn new(now: Instant) -> Self {
        Self {
            active: false,
            leaderless_since: Some(now),
            sessions: ReadOnlySessions::default(),
        }
    }

    /// Read-only connects are answered now.
    pub fn active(&self) -> bool {
        self.active
    }

    /// A read-only session was heard from.
    pub fn touch(&mut self, session_id: u64, now: Instant) {
        self.sessions.touch(session_id, now);
    }

    /// Local read-only sessions.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// Whether a server in `role` that knows `leader_id` serves read-write.
impl Machine {
    /// The role or the leader changed: a known leader ends the mode at
    /// once; losing it starts the grace period.
    pub(super) fn read_only_role_changed(&mut self, now: Instant) {
        if self.role.has_leader() {
            self.read_only.leaderless_since = None;
            if self.read_only.active {
                self.read_only.active = false;
                self.read_only.sessions.clear();
                let closed = self.clients.drop_where(
                    |c| c.read_only,
                    "a leader is back: reconnect for a read-write session",
                );
                info!(
                    leader = self.role.leader(),
                    closed, "a leader is back: read-only mode ends, its connections are closed"
                );
            }
        } else if self.read_only.leaderless_since.is_none() {
            self.read_only.leaderless_since = Some(now);
        }
    }

    /// Every tick: begin the mode once the grace period is over, and
    /// expire read-only sessions unheard for their timeout.
    pub(super) fn read_only_tick(&mut self, now: Instant) {
        if !self.cfg.zk_read_only {
            return;
        }
        let leaderless = self
            .read_only
            .leaderless_since
            .is_some_and(|since| now.duration_since(since) >= READ_ONLY_GRACE);
        if leaderless && !self.read_only.active {
            self.read_only.active = true;
            let closed = self.clients.drop_where(
                |c| c.can_be_read_only && !c.read_only,
                "no quorum: reconnect for a read-only session",
            );
            info!(
                closed,
                "no leader for {} ms: read-only mode begins (reads only, for clients that accept it)",
                READ_ONLY_GRACE.as_millis()
            );
        }
        for id in self.read_only.sessions.take_expired(now) {
            debug!(
                session_id = format_args!("{id:#x}"),
                "read-only session expired"
            );
            self.clients
                .session_closed(id, CloseReason::Expired, &self.tree);
        }
    }
}

impl Core {
    /// A connect from a client that accepts a read-only session, while
    /// the mode is on.
    pub(super) fn open_read_only(
        &mut self,
        conn: ConnId,
        peer: SocketAddr,
        c: &pb::ConnectRequest,
    ) {
        let bounds = SessionBounds {
            min_timeout_ms: self.m.cfg.min_session_timeout_ms,
            max_timeout_ms: self.m.cfg.max_session_timeout_ms,
            max_sessions: self.m.cfg.limits.sessions,
        };
        let now = self.m.clock.now();
        let handshake = self.m.read_only.sessions.handshake(
            &self.m.tree,
            self.m.node_id,
            bounds,
            c,
            now,
            &mut self.m.rng,
        );
        match handshake {
            Handshake::Resume(resp) => {
                let id = resp.session_id;
                if self.m.clients.bind_read_only(conn, id) {
                    info!(session_id = format_args!("{id:#x}"), %peer, "read-only session");
                    self.m.clients.push(conn, frames::connect(resp));
                }
            }
            Handshake::Refuse {
                code,
                message,
                limit,
            } => {
                if let Some(limit) = limit {
                    crate::limits::record(&self.m.op_metrics, limit, &message);
                }
                self.refuse_connect(conn, code, message);
            }
            Handshake::Create(_) => unreachable!("read-only sessions are never proposed"),
        }
    }

    /// A request on a read-only connection: true when it was answered
    /// here (a write refused NotReadOnly, or the session's close), false
    /// when it goes on as usual (reads, pings, watches, auth).
    pub(super) fn read_only_request(
        &mut self,
        conn: ConnId,
        xid: u64,
        session_id: u64,
        plan: &Plan,
        op_name: &'static str,
    ) -> bool {
        let zxid = self.m.tree.applied_index();
        match plan {
            Plan::Write(_)
            | Plan::AddMember(_)
            | Plan::RemoveMember(_)
            | Plan::Read {
                linearizable: true, ..
            } => {
                let f = Failure::new(
                    ErrorCode::NotReadOnly,
                    "this server has no quorum and serves reads only (read-only session)",
                );
                self.answer(conn, Slot::Done(frames::error(xid, zxid, f)), op_name);
                true
            }
            Plan::Close => {
                // Nothing to propose: a local session is forgotten, a
                // replicated one is left to the majority's clock.
                self.m.read_only.sessions.close(session_id);
                self.answer(
                    conn,
                    Slot::Done(frames::response(xid, zxid, Ok(None))),
                    op_name,
                );
                self.m
                    .clients
                    .session_closed(session_id, CloseReason::Client, &self.m.tree);
                true
            }
            _ => false,
        }
    }
}
