//! The reply pipeline: every client connection of this server, its queue
//! of answers in request order, its watches and its reads waiting for a
//! ReadIndex.
//!
//! Everything a client gets — answers, watch events, session events — is
//! pushed from here onto the connection's bounded outbound queue, which is
//! what orders them:
//!
//! - a session's answers leave in request order: each connection has a FIFO
//!   of slots; a read waits behind the session's earlier writes and is
//!   served from the tree when it reaches the head;
//! - a watch event is queued when its entry applies, so it reaches the
//!   client before the answer to any later request that could see the
//!   change.
//!
//! It never blocks on a connection: a client whose outbound queue is full
//! is disconnected (its session lives on until it resumes or expires).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::ReadState;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use warden_protocol::pb::{self, ErrorCode, SessionState};

use super::admin::{ConnFigures, ConnReport, ServerFigures};
use super::frames;
use super::proposals::PROPOSAL_TIMEOUT;
use super::{Door, OUTBOUND_FRAMES_MAX};
use crate::limits::{self, Limit, Limits};
use crate::opmetrics::OpMetrics;
use crate::ops::{self, Failure, ReadOp};
use crate::outbound::{frame_bytes, OutboundTx, PushError};
use crate::proto::{AuthId, CloseReason};
use crate::tree::{Applied, DataTree};
use crate::watch::{ConnId, WatchRegistry};

/// One slot in a connection's in-order queue.
#[derive(Debug)]
pub(super) enum Slot {
    /// The answer is known; it leaves when it reaches the head.
    Done(pb::ServerFrame),
    /// A read served when at the head and `applied >= min_index`.
    Read {
        xid: u64,
        op: ReadOp,
        /// Waiting for a ReadIndex answer (`ctx`), or the index it gave.
        read_index: ReadIndexWait,
        /// The connection's identities when the read arrived: a later
        /// auth does not reach back to requests sent before it.
        ids: Arc<Vec<AuthId>>,
    },
    /// A write waiting for its entry to apply.
    Write { xid: u64, request_id: u64 },
    /// A heartbeat answered in order.
    Ping { xid: u64 },
}

/// How long a linearizable read's ReadIndex question goes unanswered
/// before this server asks it again. Raft loses such a question without
/// a word: a server that knows no leader drops it, a new leader drops it
/// until it has committed an entry of its term, and a leader that dies or
/// steps down takes the ones it was confirming with it (a leader change
/// asks every question again at once, this is for the rest). A question
/// is answered within one heartbeat round when none is lost, so a second
/// ask is rare; well under [`PROPOSAL_TIMEOUT`], so a read is asked
/// several times before it is answered NotReady.
pub(super) const READ_INDEX_ASK_AGAIN: Duration = Duration::from_millis(500);

/// A linearizable read waiting for the answer to its ReadIndex question.
#[derive(Debug, Clone, Copy)]
struct ReadWaiter {
    conn: ConnId,
    /// When the read arrived: it is answered NotReady
    /// [`PROPOSAL_TIMEOUT`] later.
    since: Instant,
    /// When raft was last asked.
    asked: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadIndexWait {
    None,
    Pending(u64),
    At(u64),
}

/// One client connection.
pub(super) struct Conn {
    pub peer: SocketAddr,
    pub door: Door,
    out: OutboundTx,
    closed: CancellationToken,
    pub session: Option<u64>,
    /// Its session is read-only (ZooKeeper's read-only mode): writes are
    /// refused, never proposed.
    pub read_only: bool,
    /// Its client accepts a read-only session (ZooKeeper's canBeReadOnly).
    pub can_be_read_only: bool,
    /// Who the connection is (ip, x509, and what auth requests added);
    /// checked against ACLs by every request.
    pub ids: Arc<Vec<AuthId>>,
    queue: VecDeque<Slot>,
    /// Per slot of `queue` (same order): the operation and when it reached
    /// the core, for the request metrics.
    timing: VecDeque<(&'static str, Instant)>,
    /// Packets, latencies and last operation (ZooKeeper's `cons`).
    figures: ConnFigures,
    /// The identity of its ZooKeeper-door writes (`tree/writes.rs`).
    writes: ConnWrites,
}

/// Where a connection's write sequence stands: the session's epoch on it
/// (the zxid that bound the session here), the sequence of its latest
/// write, and the highest sequence whose answer is settled.
#[derive(Debug, Clone, Copy, Default)]
struct ConnWrites {
    epoch: u64,
    last_seq: u64,
    acked_seq: u64,
}

impl Conn {
    /// Requests of this connection not answered yet.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

pub(super) struct Clients {
    conns: HashMap<ConnId, Conn>,
    /// The connection each session is on.
    by_session: HashMap<u64, ConnId>,
    watches: WatchRegistry,
    /// ReadIndex contexts in flight.
    read_waiters: HashMap<u64, ReadWaiter>,
    /// Connections with a read whose ReadIndex answer is ahead of what we
    /// have applied, by that index: flushed once `applied` reaches it.
    reads_blocked: BTreeMap<u64, BTreeSet<ConnId>>,
    /// Connections whose reads wait for their outbound queue to drain
    /// (flushed again every tick).
    out_paused: BTreeSet<ConnId>,
    limits: Limits,
    op_metrics: OpMetrics,
    /// Packets and latencies of every connection (ZooKeeper's `srvr`).
    figures: ServerFigures,
    /// Connections to tell once of the next membership change
    /// (`ClusterStatusRequest.watch_config`).
    config_watchers: BTreeSet<ConnId>,
}

impl Clients {
    pub fn new(limits: Limits, op_metrics: OpMetrics) -> Self {
        Self {
            conns: HashMap::new(),
            by_session: HashMap::new(),
            watches: WatchRegistry::with_limit(limits.watches_per_session),
            read_waiters: HashMap::new(),
            reads_blocked: BTreeMap::new(),
            out_paused: BTreeSet::new(),
            limits,
            op_metrics,
            figures: ServerFigures::new(),
            config_watchers: BTreeSet::new(),
        }
    }

    pub fn open(
        &mut self,
        conn: ConnId,
        peer: SocketAddr,
        door: Door,
        out: OutboundTx,
        closed: CancellationToken,
        ids: Vec<AuthId>,
    ) {
        self.conns.insert(
            conn,
            Conn {
                peer,
                door,
                out,
                closed,
                session: None,
                writes: ConnWrites::default(),
                read_only: false,
                can_be_read_only: false,
                ids: Arc::new(ids),
                queue: VecDeque::new(),
                timing: VecDeque::new(),
                // The connect request is its first packet.
                figures: ConnFigures {
                    received: 1,
                    ..ConnFigures::new()
                },
            },
        );
        self.figures.received += 1;
    }

    /// A request `xid` arrived on `conn`.
    pub fn received(&mut self, conn: ConnId, xid: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.figures.received += 1;
            c.figures.last_cxid = Some(xid);
            self.figures.received += 1;
        }
    }

    /// Requests received and not answered yet, on every connection.
    pub fn outstanding(&self) -> usize {
        self.conns.values().map(|c| c.queue.len()).sum()
    }

    pub fn server_figures(&self) -> ServerFigures {
        self.figures
    }

    /// ZooKeeper's `srst`.
    pub fn reset_server_figures(&mut self) {
        self.figures.reset();
    }

    /// ZooKeeper's `crst`.
    pub fn reset_conn_figures(&mut self) {
        for c in self.conns.values_mut() {
            c.figures.reset();
        }
    }

    /// Every connection, oldest first; `timeout_of` gives a session's
    /// timeout.
    pub fn conn_reports(&self, timeout_of: impl Fn(u64) -> u32) -> Vec<ConnReport> {
        let mut out: Vec<(ConnId, ConnReport)> = self
            .conns
            .iter()
            .map(|(id, c)| {
                let session_id = c.session.unwrap_or(0);
                (
                    *id,
                    ConnReport {
                        peer: c.peer,
                        session_id,
                        session_timeout_ms: if session_id == 0 {
                            0
                        } else {
                            timeout_of(session_id)
                        },
                        outstanding: c.queue.len(),
                        figures: c.figures.clone(),
                    },
                )
            })
            .collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// The paths each session watches on this server, by session id.
    pub fn watches_by_session(&self) -> Vec<(u64, Vec<String>)> {
        let mut out: Vec<(u64, Vec<String>)> = self
            .watches
            .paths_by_conn()
            .into_iter()
            .filter_map(|(conn, paths)| {
                let session = self.conns.get(&conn)?.session?;
                Some((session, paths))
            })
            .collect();
        out.sort_unstable();
        out
    }

    pub fn get(&self, conn: ConnId) -> Option<&Conn> {
        self.conns.get(&conn)
    }

    pub fn set_ids(&mut self, conn: ConnId, ids: Vec<AuthId>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.ids = Arc::new(ids);
        }
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }

    /// `session` now lives on `conn`; the connection it was on before, if
    /// another, is dropped. False if `conn` is gone.
    pub fn bind_session(&mut self, conn: ConnId, session: u64) -> bool {
        if !self.conns.contains_key(&conn) {
            return false;
        }
        if let Some(old) = self.by_session.insert(session, conn) {
            if old != conn {
                self.drop_conn(old, "session resumed on another connection");
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(session);
        }
        true
    }

    /// The session on `conn` was bound to it at `epoch`: its writes count
    /// from 1 again.
    pub fn set_epoch(&mut self, conn: ConnId, epoch: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.writes = ConnWrites {
                epoch,
                ..ConnWrites::default()
            };
        }
    }

    /// The identity of `conn`'s next write: (epoch, sequence, acknowledged
    /// sequence).
    pub fn next_write(&mut self, conn: ConnId) -> Option<(u64, u64, u64)> {
        let w = &mut self.conns.get_mut(&conn)?.writes;
        w.last_seq += 1;
        Some((w.epoch, w.last_seq, w.acked_seq))
    }

    /// `conn`'s write `seq` of `epoch` is answered: the tree may forget
    /// its answer (told with the next write).
    pub fn write_settled(&mut self, conn: ConnId, epoch: u64, seq: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.writes.epoch == epoch {
                c.writes.acked_seq = c.writes.acked_seq.max(seq);
            }
        }
    }

    /// The client of `conn` accepts a read-only session.
    pub fn accepts_read_only(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.can_be_read_only = true;
        }
    }

    /// [`Self::bind_session`], read-only: the connection may never write.
    pub fn bind_read_only(&mut self, conn: ConnId, session: u64) -> bool {
        if !self.bind_session(conn, session) {
            return false;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.read_only = true;
        }
        true
    }

    /// Drops every connection `pick` chooses (their sessions live on);
    /// how many.
    pub fn drop_where(&mut self, pick: impl Fn(&Conn) -> bool, why: &str) -> usize {
        let mut picked: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| pick(c))
            .map(|(id, _)| *id)
            .collect();
        // In connection order, not the table's (which differs per process).
        picked.sort_unstable();
        for &conn in &picked {
            self.drop_conn(conn, why);
        }
        picked.len()
    }

    /// Queues `slot` behind the connection's earlier requests.
    pub fn enqueue(&mut self, conn: ConnId, slot: Slot, op: &'static str) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(slot);
            // os-clock: latency for /metrics and four-letter words only.
            c.timing.push_back((op, Instant::now()));
        }
    }

    /// A linearizable read of `conn` waits for the ReadIndex of `ctx`,
    /// asked `now`.
    pub fn await_read_index(&mut self, ctx: u64, conn: ConnId, now: Instant) {
        self.read_waiters.insert(
            ctx,
            ReadWaiter {
                conn,
                since: now,
                asked: now,
            },
        );
    }

    /// The ReadIndex questions to ask raft again now: after a leader
    /// change (`all`) every unanswered one, else those unanswered for
    /// [`READ_INDEX_ASK_AGAIN`]. Asking again never makes a read stale:
    /// every ask of a read is made after it arrived here, and any answer
    /// to any of them is the commit index of a leader that confirmed with
    /// a quorum, after that ask, that it still led; the first answer
    /// serves the read, later ones find no waiter.
    pub fn read_index_asks_due(&mut self, now: Instant, all: bool) -> Vec<u64> {
        let mut due = Vec::new();
        for (ctx, w) in &mut self.read_waiters {
            if all || now.duration_since(w.asked) >= READ_INDEX_ASK_AGAIN {
                w.asked = now;
                due.push(*ctx);
            }
        }
        // Asked in the order the reads came, not the table's.
        due.sort_unstable();
        due
    }

    /// Sends a frame now, outside the queue (handshake answers, events).
    /// A full queue means the client does not read: disconnect it.
    pub fn push(&mut self, conn: ConnId, frame: pb::ServerFrame) {
        self.push_sized(conn, frame, false);
    }

    /// [`Self::push`]; `admitted`: queue it even past the byte bound (the
    /// answer to a read, which waited for room before it was served).
    fn push_sized(&mut self, conn: ConnId, frame: pb::ServerFrame, admitted: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let len = frame_bytes(&frame);
        let queued = c.out.queued_bytes();
        let max = self.limits.queued_bytes_per_connection;
        // One frame alone is always let through, however big.
        if !admitted && queued > 0 && queued + len > max {
            let msg = limits::message(
                Limit::QueuedBytesPerConnection,
                max,
                format!(
                    "connection {conn} from {} does not read: {queued} bytes queued, \
                     {len} more to send; dropping the connection (its session lives on)",
                    c.peer
                ),
            );
            limits::record(&self.op_metrics, Limit::QueuedBytesPerConnection, &msg);
            self.drop_conn(conn, "slow reader: queued bytes over the limit");
            return;
        }
        match c.out.try_send_sized(frame, len) {
            Ok(()) => {
                self.figures.sent += 1;
                c.figures.sent += 1;
            }
            Err(PushError::Full) => {
                let msg = format!(
                    "connection {conn} from {} does not read: {OUTBOUND_FRAMES_MAX} frames \
                     queued; dropping the connection (its session lives on)",
                    c.peer
                );
                limits::record(&self.op_metrics, Limit::QueuedBytesPerConnection, &msg);
                self.drop_conn(conn, "outbound queue full");
            }
            Err(PushError::Closed) => {
                self.drop_conn(conn, "connection closed");
            }
        }
    }

    /// Answers a connect with a refusal and closes the connection once
    /// the answer is out.
    pub fn refuse_connect(
        &mut self,
        conn: ConnId,
        code: ErrorCode,
        message: String,
        zxid: u64,
        server_id: u64,
    ) {
        debug!(conn, code = code.name(), %message, "connect refused");
        let resp = pb::ConnectResponse {
            error: code as i32,
            message,
            zxid,
            server_id,
            ..Default::default()
        };
        self.push(conn, frames::connect(resp));
        // Dropping our sender closes the connection once the answer is out.
        self.drop_conn(conn, "connect refused");
    }

    /// Forgets a connection: its watches go; its session lives on.
    pub fn drop_conn(&mut self, conn: ConnId, why: &str) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        debug!(conn, peer = %c.peer, why, "connection dropped");
        // The connection task stops reading and its writer drains what we
        // queued, then closes the socket.
        c.closed.cancel();
        self.out_paused.remove(&conn);
        self.watches.remove_conn(conn);
        self.config_watchers.remove(&conn);
        if let Some(s) = c.session {
            if self.by_session.get(&s) == Some(&conn) {
                self.by_session.remove(&s);
            }
        }
        self.read_waiters.retain(|_, w| w.conn != conn);
    }

    /// Sends every answer at the head of `conn`'s queue that is ready,
    /// serving reads from `tree` as they reach the head.
    pub fn flush(&mut self, conn: ConnId, tree: &DataTree) {
        let applied = tree.applied_index();
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let ready = match c.queue.front() {
                None => return,
                Some(Slot::Done(_)) | Some(Slot::Ping { .. }) => true,
                Some(Slot::Read { read_index, .. }) => {
                    let due = match read_index {
                        ReadIndexWait::None => true,
                        ReadIndexWait::At(i) => applied >= *i,
                        ReadIndexWait::Pending(_) => false,
                    };
                    // A client that does not read its answers: its reads
                    // wait here (a small request each) instead of piling
                    // up their replies; retried every tick.
                    let soft = self.limits.queued_bytes_per_connection / 2;
                    let queued = c.out.queued_bytes();
                    if due && queued > 0 && queued >= soft {
                        debug!(conn, queued, "reads paused: client is slow to read");
                        self.out_paused.insert(conn);
                        return;
                    }
                    due
                }
                Some(Slot::Write { .. }) => false,
            };
            if !ready {
                return;
            }
            let session_id = c.session.unwrap_or(0);
            let slot = c.queue.pop_front().expect("front checked above");
            if let Some((op, since)) = c.timing.pop_front() {
                // The same duration for /metrics and the four-letter words.
                // os-clock: a measurement, decides nothing.
                let took = since.elapsed();
                self.op_metrics.observe(op, took);
                c.figures.answered(op, applied, took);
                self.figures.latency.observe(took);
            }
            match slot {
                Slot::Done(frame) => self.push(conn, frame),
                Slot::Ping { xid } => self.push(conn, frames::response(xid, applied, Ok(None))),
                Slot::Read { xid, op, ids, .. } => {
                    let (result, events) = ops::read(
                        tree,
                        &mut self.watches,
                        conn,
                        session_id,
                        &ids,
                        &op,
                        &self.limits,
                    );
                    if let Err(f) = &result {
                        if f.code == ErrorCode::LimitExceeded {
                            if let Some(limit) = Limit::named_in(&f.message) {
                                limits::record(&self.op_metrics, limit, &f.message);
                            }
                        }
                    }
                    // Admitted whatever their size: the read waited above
                    // until the queue was below half its bound.
                    for e in events {
                        self.push_sized(conn, frames::event(e), true);
                    }
                    self.push_sized(conn, frames::response(xid, applied, result), true);
                }
                Slot::Write { .. } => unreachable!("not ready"),
            }
        }
    }

    /// Connections whose reads waited for their queue to drain: try again.
    pub fn retry_paused(&mut self, tree: &DataTree) {
        for conn in std::mem::take(&mut self.out_paused) {
            self.flush(conn, tree);
        }
    }

    /// Fills the queue slot of a write that just applied (or failed).
    pub fn complete_write(
        &mut self,
        conn: ConnId,
        request_id: u64,
        tree: &DataTree,
        frame_of: impl FnOnce(u64) -> pb::ServerFrame,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        for slot in c.queue.iter_mut() {
            if let Slot::Write { xid, request_id: r } = slot {
                if *r == request_id {
                    let xid = *xid;
                    *slot = Slot::Done(frame_of(xid));
                    break;
                }
            }
        }
        self.flush(conn, tree);
    }

    /// `conn` hears once of the next change of `/zookeeper/config`.
    pub fn watch_config(&mut self, conn: ConnId) {
        self.config_watchers.insert(conn);
    }

    /// The membership changed at `zxid`, or a member's ZooKeeper address
    /// became known (both change `/zookeeper/config`): a NodeDataChanged on
    /// `/zookeeper/config` (the path the watch was asked on, through the
    /// ZooKeeper port) to each connection watching it, once.
    pub fn config_changed(&mut self, zxid: u64) {
        for conn in std::mem::take(&mut self.config_watchers) {
            self.push(
                conn,
                frames::event(pb::WatchEvent {
                    r#type: pb::EventType::NodeDataChanged as i32,
                    path: crate::zk::reserved::CONFIG.to_string(),
                    zxid,
                }),
            );
        }
    }

    /// Sends the watch events of an entry just applied to `tree` at `zxid`.
    pub fn notify(&mut self, tree: &DataTree, applied: &Applied, zxid: u64) {
        for t in &applied.triggers {
            let conns = &self.conns;
            let heard = self.watches.recipients(tree, applied, t, |conn| {
                conns.get(&conn).map(|c| c.ids.as_slice())
            });
            for conn in heard {
                self.push(
                    conn,
                    frames::event(pb::WatchEvent {
                        r#type: t.event as i32,
                        path: t.path.clone(),
                        zxid,
                    }),
                );
            }
        }
    }

    /// A session's CloseSession applied: its connection, if here, is told
    /// (an expiry) or has its close answered, and goes.
    pub fn session_closed(&mut self, session_id: u64, reason: CloseReason, tree: &DataTree) {
        let Some(conn) = self.by_session.remove(&session_id) else {
            return;
        };
        match reason {
            CloseReason::Expired => {
                self.push(
                    conn,
                    frames::session_event(SessionState::Expired, "session expired"),
                );
                self.drop_conn(conn, "session expired");
            }
            CloseReason::Client => {
                // The close answer was queued by complete_write; anything
                // after it in the queue can no longer be served.
                self.flush(conn, tree);
                self.drop_conn(conn, "session closed");
            }
        }
    }

    /// ReadIndex answers: each read is served once `applied` reaches its
    /// index.
    pub fn read_states(&mut self, states: Vec<ReadState>, tree: &DataTree) {
        for rs in states {
            let Ok(bytes) = <[u8; 8]>::try_from(&rs.request_ctx[..]) else {
                continue;
            };
            let ctx = u64::from_be_bytes(bytes);
            let Some(ReadWaiter { conn, .. }) = self.read_waiters.remove(&ctx) else {
                continue;
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                for slot in c.queue.iter_mut() {
                    if let Slot::Read { read_index, .. } = slot {
                        if *read_index == ReadIndexWait::Pending(ctx) {
                            *read_index = ReadIndexWait::At(rs.index);
                        }
                    }
                }
                self.reads_blocked.entry(rs.index).or_default().insert(conn);
            }
        }
        self.serve_unblocked_reads(tree);
    }

    /// Serves the reads whose ReadIndex the applied index has reached.
    pub fn serve_unblocked_reads(&mut self, tree: &DataTree) {
        let applied = tree.applied_index();
        while let Some(entry) = self.reads_blocked.first_entry() {
            if *entry.key() > applied {
                break;
            }
            for conn in entry.remove() {
                self.flush(conn, tree);
            }
        }
    }

    /// Linearizable reads no leader confirmed within [`PROPOSAL_TIMEOUT`]
    /// are answered NotReady.
    pub fn fail_stale_reads(&mut self, now: Instant, tree: &DataTree) {
        let mut stale: Vec<(u64, ConnId)> = self
            .read_waiters
            .iter()
            .filter(|(_, w)| now.duration_since(w.since) >= PROPOSAL_TIMEOUT)
            .map(|(ctx, w)| (*ctx, w.conn))
            .collect();
        stale.sort_unstable();
        let zxid = tree.applied_index();
        for (ctx, conn) in stale {
            self.read_waiters.remove(&ctx);
            if let Some(c) = self.conns.get_mut(&conn) {
                for slot in c.queue.iter_mut() {
                    if let Slot::Read {
                        xid,
                        read_index: ReadIndexWait::Pending(p),
                        ..
                    } = slot
                    {
                        if *p == ctx {
                            let f = Failure::new(
                                ErrorCode::NotReady,
                                "no leader confirmed the read in time (no quorum?)",
                            );
                            *slot = Slot::Done(frames::error(*xid, zxid, f));
                            break;
                        }
                    }
                }
            }
            self.flush(conn, tree);
        }
    }

    /// The tree jumped from `old` to `new` (a leader's snapshot was
    /// installed). Connections stay where they can, as if the skipped
    /// entries had applied: one-shot watches whose nodes changed fire now,
    /// a session the snapshot closed is told it expired, and reads waiting
    /// in order are served from the new tree. A connection with a
    /// persistent watch is closed (it would have heard of every skipped
    /// change, which cannot be replayed): its client reconnects and
    /// re-reads.
    pub fn after_snapshot(&mut self, old: &DataTree, new: &DataTree) {
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort_unstable();
        let mut closed = 0;
        for &conn in &conns {
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            match c.session {
                Some(s) if new.session(s).is_none() => {
                    self.push(
                        conn,
                        frames::session_event(SessionState::Expired, "session expired"),
                    );
                    self.drop_conn(conn, "session expired (found in a leader snapshot)");
                    closed += 1;
                }
                _ if self.watches.has_persistent(conn) => {
                    self.drop_conn(
                        conn,
                        "a leader snapshot skipped changes its persistent watches would have heard of",
                    );
                    closed += 1;
                }
                _ => {}
            }
        }
        if closed > 0 {
            info!(
                closed,
                kept = self.conns.len(),
                "client connections closed after a leader snapshot"
            );
        }
        let zxid = new.applied_index();
        for (conn, event, path) in self.watches.catch_up(old, new) {
            self.push(
                conn,
                frames::event(pb::WatchEvent {
                    r#type: event as i32,
                    path,
                    zxid,
                }),
            );
        }
        for conn in conns {
            self.flush(conn, new);
        }
    }

    /// Shutting down: every connection's writer drains and closes.
    pub fn close_all(&mut self) {
        for (_, c) in self.conns.drain() {
            c.closed.cancel();
        }
    }

    /// A new session created for `conn` (its CreateSession applied): bind
    /// it and answer the connect.
    pub fn session_created(&mut self, conn: ConnId, resp: pb::ConnectResponse) {
        if !self.bind_session(conn, resp.session_id) {
            return;
        }
        if let Some(c) = self.conns.get(&conn) {
            debug!(
                session_id = format_args!("{:#x}", resp.session_id),
                peer = %c.peer,
                timeout_ms = resp.timeout_ms,
                "session created"
            );
        }
        self.push(conn, frames::connect(resp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(c: u64) -> Vec<u8> {
        c.to_be_bytes().to_vec()
    }

    /// A ReadIndex question is asked again after a leader change at once,
    /// otherwise only once it went unanswered for READ_INDEX_ASK_AGAIN;
    /// an answered one never again.
    #[test]
    fn unanswered_read_index_questions_are_asked_again() {
        let mut clients = Clients::new(Limits::default(), OpMetrics::new());
        let now = Instant::now();
        // Asked in the order the reads came (their ctx), whatever the
        // table's order: what raft is asked must not differ per process.
        let asked = [13, 7, 21, 8, 2, 34, 5];
        for ctx in asked {
            clients.await_read_index(ctx, 1, now);
        }
        let mut sorted = asked.to_vec();
        sorted.sort_unstable();
        assert!(clients.read_index_asks_due(now, false).is_empty());
        assert_eq!(clients.read_index_asks_due(now, true), sorted);
        // Asked again just now: not due until the interval has passed.
        assert!(clients.read_index_asks_due(now, false).is_empty());
        let later = now + READ_INDEX_ASK_AGAIN;
        assert_eq!(clients.read_index_asks_due(later, false), sorted);
        for ctx in [13, 21, 2, 34, 5] {
            clients.read_waiters.remove(&ctx);
        }

        let tree = DataTree::new();
        clients.read_states(
            vec![ReadState {
                index: 0,
                request_ctx: ctx(7),
            }],
            &tree,
        );
        let much_later = later + READ_INDEX_ASK_AGAIN;
        assert_eq!(clients.read_index_asks_due(much_later, true), vec![8]);
    }
}
