//! The core task: the one owner of the Raft node, the DataTree, the watch
//! registry, the session liveness table and every connection's queue of
//! requests in flight.
//!
//! Connections talk to it over one bounded channel ([`CoreMsg`]) and get
//! everything back — responses, watch events, session events — on their own
//! bounded outbound queue, pushed from this one task. That single path is
//! what gives the ordering guarantees:
//!
//! - a session's answers leave in request order: each connection has a FIFO
//!   of slots; a read waits behind the session's earlier writes and is
//!   served from the tree when it reaches the head;
//! - a watch event is queued when its entry applies, so it reaches the
//!   client before the answer to any later request that could see the change.
//!
//! The core runs on a thread of its own (a current-thread runtime), so the
//! fsync in the Ready loop blocks no connection task.
//!
//! It must never block on a connection: a client whose outbound queue is
//! full is disconnected (its session lives on until it resumes or expires).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, Message as RaftMessage, Snapshot as RaftSnapshot,
};
use raft::{ReadState, SoftState, StateRole};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use warden_protocol::pb::{self, response::Result as Res, ErrorCode, SessionState};

use crate::config::Config;
use crate::limits::{self, Limit};
use crate::ops::{self, Failure, Plan, ReadOp};
use crate::outbound::{frame_bytes, OutboundTx, PushError};
use crate::proto::{
    self, peer_frame, txn::Kind, AuthId, AuthInfo, CloseReason, PeerFrame, Proposal, Txn,
};
use crate::raft::node::{NodeError, RaftTiming};
use crate::raft::transport::Transport;
use crate::raft::{DiskStorage, RaftNode, ReadyHandler, Undelivered};
use crate::session::{self, SessionTracker};
use crate::tree::{Applied, DataTree, TxnResult};
use crate::watch::{ConnId, WatchRegistry};

/// Bound of the channel from connections to the core.
pub const CORE_QUEUE_MAX: usize = 4096;
/// Bound of each connection's outbound queue (frames).
pub const OUTBOUND_FRAMES_MAX: usize = 8192;
/// Most messages handled before the Ready loop runs (one fsync per batch).
const BATCH_MSGS_MAX: usize = 1024;
/// Longest a batch of messages may keep the core from its tick and its
/// other queue: a tick that comes late delays heartbeats, and a leader
/// that does not heartbeat for an election timeout loses its followers.
const BATCH_TIME_MAX: Duration = Duration::from_millis(20);
/// How often (in ticks) the leader looks for empty containers and expired
/// TTL nodes.
const REMOVAL_CHECK_TICKS: u64 = 5;
/// How often (in ticks) every server tells its peers its own status.
const STATUS_TICKS: u64 = 5;
/// How long a write or a linearizable read may wait for raft before it is
/// answered with an error (a leader change or a lost quorum otherwise
/// leaves it waiting for ever). The outcome of such a write is unknown.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Snapshot once this many bytes of entries were applied since the last
/// one, whatever their count: the log stays bounded in size too.
const SNAPSHOT_LOG_BYTES: u64 = 64 * 1024 * 1024;
/// A peer whose status is older than this is reported unreachable.
const PEER_STATUS_FRESH: Duration = Duration::from_secs(3);
/// How often an unapplied membership change is proposed again.
const CONF_CHANGE_RETRY: Duration = Duration::from_secs(1);
/// Bound of the channel from peer connections to the core. Kept short:
/// frames waiting here are stale by the time the core sees them, and a
/// newer leader's heartbeat waits behind every one of them.
pub const PEER_INBOX_MAX: usize = 1024;

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Native,
    /// ZooKeeper clients restart their xids on every connection, so a
    /// (session, xid) pair does not identify a write: no retry dedupe.
    ZooKeeper,
}

/// Figures for operators (four-letter words, status pages).
#[derive(Debug, Clone)]
pub struct ServerStats {
    pub status: proto::NodeStatus,
    pub members: usize,
    pub nodes: usize,
    pub connections: usize,
    pub watches: usize,
    pub ephemerals: usize,
    /// Live sessions in the replicated session table.
    pub sessions: usize,
    /// New leaders this server has seen since it started.
    pub leader_changes: u64,
    /// Proposals this server handed to raft.
    pub proposals: u64,
    /// The Ready loop's disk work.
    pub io: crate::raft::node::IoCounters,
    /// Size of the last snapshot this server took (0: none yet).
    pub last_snapshot_bytes: u64,
    pub zk_port: u16,
    pub tick_ms: u64,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
}

/// A message from a connection task.
#[derive(Debug)]
pub enum CoreMsg {
    /// The handshake: open a new session or resume one.
    Open {
        conn: ConnId,
        peer: SocketAddr,
        door: Door,
        out: OutboundTx,
        /// Cancelled by the core when it is done with the connection.
        closed: CancellationToken,
        connect: pb::ConnectRequest,
        /// The subject of the client's verified TLS certificate (RFC 4514,
        /// e.g. `CN=alice,O=acme`); `None` without TLS or a certificate.
        tls_subject: Option<String>,
    },
    /// A request on an open connection.
    Request { conn: ConnId, request: pb::Request },
    /// The connection is gone.
    Closed { conn: ConnId },
    /// Operator figures.
    Stats { reply: oneshot::Sender<ServerStats> },
    /// The member view (`wardenctl cluster status`, HTTP `/status`,
    /// `/health`).
    Cluster {
        reply: oneshot::Sender<pb::ClusterStatusResponse>,
    },
}

/// What the core reports to whoever started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreState {
    Starting,
    /// A leader is known and the log is replayed: clients may connect.
    Ready,
    Stopped,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("raft: {0}")]
    Node(#[from] NodeError),
    #[error("storage: {0}")]
    Storage(#[from] crate::raft::StorageError),
    #[error("snapshot on disk is unreadable: {0}")]
    Snapshot(String),
}

/// One slot in a connection's in-order queue.
#[derive(Debug)]
enum Slot {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadIndexWait {
    None,
    Pending(u64),
    At(u64),
}

struct Conn {
    peer: SocketAddr,
    door: Door,
    out: OutboundTx,
    closed: CancellationToken,
    session: Option<u64>,
    /// Who the connection is (ip, x509, and what auth requests added);
    /// checked against ACLs by every request.
    ids: Arc<Vec<AuthId>>,
    queue: VecDeque<Slot>,
    /// Per slot of `queue` (same order): the operation and when it reached
    /// the core, for the request metrics.
    timing: VecDeque<(&'static str, Instant)>,
}

/// What an applied entry proposed by this server answers.
#[derive(Debug)]
enum Waiter {
    /// A new session for this connection.
    Connect { conn: ConnId, timeout_ms: u32 },
    /// A write request in `conn`'s queue.
    Request { conn: ConnId },
}

/// A waiter and when its proposal was made.
#[derive(Debug)]
struct Waiting {
    waiter: Waiter,
    since: Instant,
    /// The encoded proposal, when it is safe to propose again after a
    /// leader change (applying it twice changes nothing).
    proposal: Option<Vec<u8>>,
    /// A membership change: raft silently drops one proposed while another
    /// is still pending, so it is proposed again every
    /// [`CONF_CHANGE_RETRY`] until it applies (applying it twice is a no-op).
    conf_change: Option<(ConfChange, Instant)>,
}

/// Everything but the raft node: the state machine and its clients.
struct Machine {
    node_id: u64,
    cfg: Config,
    tree: DataTree,
    watches: WatchRegistry,
    sessions: SessionTracker,
    conns: HashMap<ConnId, Conn>,
    session_conn: HashMap<u64, ConnId>,
    waiters: HashMap<u64, Waiting>,
    /// ReadIndex contexts in flight: ctx -> (connection, asked at).
    read_waiters: HashMap<u64, (ConnId, Instant)>,
    /// Connections with a read whose ReadIndex answer is ahead of what we
    /// have applied, by that index: flushed once `applied` reaches it.
    reads_blocked: BTreeMap<u64, HashSet<ConnId>>,
    /// Guarded deletes proposed and not yet applied (path).
    removals_inflight: HashSet<String>,
    role: StateRole,
    leader_id: u64,
    transport: Transport,
    /// Sessions heard from on this follower since the last report to the
    /// leader.
    touched: HashSet<u64>,
    /// Latest status each peer sent us, and when.
    peer_status: HashMap<u64, (proto::NodeStatus, Instant)>,
    /// The client address clients use for this server (for status).
    client_addr: String,
    /// Set when a new leader became known; the core then re-proposes.
    leader_changed: bool,
    /// How many times a new leader became known (for `/metrics`).
    leader_changes: u64,
    /// Set when a member was added: a snapshot that includes it is taken at
    /// once, so the new member can be initialized from it.
    snapshot_wanted: bool,
    /// Request counts and latencies by operation.
    op_metrics: crate::opmetrics::OpMetrics,
    /// Bytes of entries applied since the last snapshot.
    applied_bytes: u64,
    /// Connections whose reads wait for their outbound queue to drain
    /// (flushed again every tick).
    out_paused: HashSet<ConnId>,
}

pub struct Core {
    raft: RaftNode,
    m: Machine,
    next_request_id: u64,
    last_snapshot_index: u64,
    ticks: u64,
    /// Proposals handed to raft by this server (for `/metrics`).
    proposals: u64,
    /// Size of the last snapshot this server took, in bytes.
    last_snapshot_bytes: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Core {
    /// Opens the storage, restores the latest snapshot and starts the node.
    /// `runtime` runs the peer connections.
    pub fn open(
        cfg: Config,
        client_addr: SocketAddr,
        runtime: tokio::runtime::Handle,
        op_metrics: crate::opmetrics::OpMetrics,
    ) -> Result<Self, CoreError> {
        std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
            CoreError::Storage(crate::raft::StorageError::Corrupt {
                what: "data dir",
                detail: format!("{}: {e}", cfg.data_dir.display()),
            })
        })?;
        let storage = DiskStorage::open(&cfg.data_dir.join("raft"))?;
        let tree = match storage.load_snapshot()? {
            Some(snap) => {
                let decoded = proto::Snapshot::decode(&snap.data[..])
                    .map_err(|e| CoreError::Snapshot(e.to_string()))?;
                let tree = DataTree::from_snapshot(&decoded)
                    .map_err(|e| CoreError::Snapshot(e.to_string()))?;
                info!(
                    index = tree.applied_index(),
                    nodes = tree.node_count(),
                    "restored snapshot"
                );
                tree
            }
            None => DataTree::new(),
        };
        let applied = tree.applied_index();
        let voters = cfg.peers.iter().map(|p| p.id).collect();
        let timing = RaftTiming {
            election_ticks: cfg.election_ticks,
            heartbeat_ticks: cfg.heartbeat_ticks,
        };
        let mut raft = RaftNode::open(cfg.id, voters, cfg.join, storage, &timing, applied)?;
        raft.set_io_histograms(
            op_metrics.fsync_seconds.clone(),
            op_metrics.append_batch_entries.clone(),
        );
        let links = crate::raft::transport::PeerLinks::of(cfg.tls.as_ref());
        let mut transport = Transport::new(cfg.id, runtime, links);
        for p in &cfg.peers {
            transport.add_peer(p.id, &p.addr);
        }
        // Members added later by conf changes override --peers.
        for (id, addr) in tree.members() {
            transport.add_peer(*id, addr);
        }
        let watches = WatchRegistry::with_limit(cfg.limits.watches_per_session);
        Ok(Self {
            raft,
            m: Machine {
                node_id: cfg.id,
                cfg,
                tree,
                watches,
                sessions: SessionTracker::default(),
                conns: HashMap::new(),
                session_conn: HashMap::new(),
                waiters: HashMap::new(),
                read_waiters: HashMap::new(),
                reads_blocked: BTreeMap::new(),
                removals_inflight: HashSet::new(),
                role: StateRole::Follower,
                leader_id: 0,
                transport,
                touched: HashSet::new(),
                peer_status: HashMap::new(),
                client_addr: client_addr.to_string(),
                leader_changed: false,
                leader_changes: 0,
                snapshot_wanted: false,
                op_metrics,
                applied_bytes: 0,
                out_paused: HashSet::new(),
            },
            // Random start: ids stay unique across restarts, so an entry of
            // an earlier life replayed from the log never answers a new
            // request.
            next_request_id: rand::random::<u64>() >> 1,
            last_snapshot_index: applied,
            proposals: 0,
            last_snapshot_bytes: 0,
            ticks: 0,
        })
    }

    /// Runs until `shutdown` fires or every sender is dropped.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<CoreMsg>,
        mut peer_rx: mpsc::Receiver<PeerFrame>,
        state: watch::Sender<CoreState>,
        mut shutdown: oneshot::Receiver<()>,
    ) -> Result<(), CoreError> {
        let mut ticker = tokio::time::interval(self.m.cfg.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                msg = rx.recv() => {
                    let Some(msg) = msg else { break Ok(()) };
                    let started = Instant::now();
                    self.handle(msg);
                    for _ in 0..BATCH_MSGS_MAX {
                        if started.elapsed() >= BATCH_TIME_MAX {
                            break;
                        }
                        match rx.try_recv() {
                            Ok(msg) => self.handle(msg),
                            Err(_) => break,
                        }
                    }
                }
                frame = peer_rx.recv() => {
                    if let Some(frame) = frame {
                        let started = Instant::now();
                        self.on_peer(frame);
                        for _ in 0..BATCH_MSGS_MAX {
                            if started.elapsed() >= BATCH_TIME_MAX {
                                break;
                            }
                            match peer_rx.try_recv() {
                                Ok(frame) => self.on_peer(frame),
                                Err(_) => break,
                            }
                        }
                    }
                }
                _ = ticker.tick() => self.on_tick(),
            }
            if let Err(e) = self.drive() {
                break Err(e);
            }
            if *state.borrow() == CoreState::Starting && self.is_ready() {
                info!(
                    leader = self.m.leader_id,
                    applied = self.m.tree.applied_index(),
                    "ready"
                );
                let _ = state.send(CoreState::Ready);
            }
        };
        if let Err(e) = &result {
            error!(error = %e, "core stopped");
        }
        // Let every connection's writer drain and close.
        for (_, c) in self.m.conns.drain() {
            c.closed.cancel();
        }
        self.m.transport.shutdown();
        let _ = self.raft.storage().sync();
        let _ = state.send(CoreState::Stopped);
        result
    }

    fn is_ready(&self) -> bool {
        self.m.leader_id != 0
            && self.m.tree.applied_index() >= self.raft.storage().hard_state().commit
    }

    /// Runs the Ready loop until raft has nothing more, then snapshots if due.
    fn drive(&mut self) -> Result<(), CoreError> {
        while self.raft.has_ready() {
            self.raft.on_ready(&mut self.m)?;
            self.m.serve_unblocked_reads();
        }
        if std::mem::take(&mut self.m.leader_changed) {
            self.repropose_after_leader_change();
            while self.raft.has_ready() {
                self.raft.on_ready(&mut self.m)?;
                self.m.serve_unblocked_reads();
            }
        }
        let applied = self.m.tree.applied_index();
        let due = applied >= self.last_snapshot_index + self.m.cfg.snapshot_entries
            || self.m.applied_bytes >= SNAPSHOT_LOG_BYTES;
        if (std::mem::take(&mut self.m.snapshot_wanted) || due)
            && applied > self.last_snapshot_index
        {
            let started = Instant::now();
            let data = self.m.tree.to_snapshot().encode_to_vec();
            let bytes = data.len();
            self.last_snapshot_bytes = bytes as u64;
            self.raft.compact(applied, data)?;
            self.last_snapshot_index = applied;
            self.m.applied_bytes = 0;
            info!(
                index = applied,
                bytes,
                took_ms = started.elapsed().as_millis() as u64,
                "snapshot taken, log compacted"
            );
        }
        Ok(())
    }

    fn on_tick(&mut self) {
        self.raft.tick();
        self.ticks += 1;
        for conn in std::mem::take(&mut self.m.out_paused) {
            self.m.flush(conn);
        }
        self.expire_waiters(Instant::now());
        if self.ticks.is_multiple_of(STATUS_TICKS) {
            self.broadcast_status();
        }
        if self.m.role != StateRole::Leader {
            self.report_touches();
            return;
        }
        for id in self.m.sessions.take_expired(Instant::now()) {
            info!(session_id = format_args!("{id:#x}"), "session expired");
            let txn = Txn {
                kind: Some(Kind::CloseSession(proto::CloseSessionTxn {
                    session_id: id,
                    reason: CloseReason::Expired as i32,
                })),
                ..Default::default()
            };
            if self.propose(txn, 0).is_err() {
                self.m.sessions.unmark_closing(id);
            }
        }
        if self.ticks.is_multiple_of(REMOVAL_CHECK_TICKS) {
            for guarded in self.m.tree.removal_candidates(now_ms()) {
                if !self.m.removals_inflight.insert(guarded.path.clone()) {
                    continue;
                }
                debug!(path = %guarded.path, "proposing removal of empty container / expired TTL node");
                let path = guarded.path.clone();
                let txn = Txn {
                    kind: Some(Kind::GuardedDelete(guarded)),
                    ..Default::default()
                };
                if self.propose(txn, 0).is_err() {
                    self.m.removals_inflight.remove(&path);
                }
            }
        }
    }

    /// A frame from a peer.
    ///
    /// Only members (configured peers, or added by a conf change) are
    /// heard: a frame naming another sender is dropped, so an unknown
    /// process can neither grow the peer table nor touch sessions. This is
    /// hygiene, not authentication: without TLS anyone who reaches the peer
    /// port can claim a member's id (mutual TLS is what keeps them out).
    fn on_peer(&mut self, frame: PeerFrame) {
        let from = frame.from;
        if from == self.m.node_id
            || (self.m.transport.addr_of(from).is_none()
                && !self.m.tree.members().contains_key(&from))
        {
            debug!(from, "frame from a node that is not a member; dropped");
            return;
        }
        match frame.kind {
            Some(peer_frame::Kind::Raft(bytes)) => {
                match <RaftMessage as protobuf::Message>::parse_from_bytes(&bytes) {
                    Ok(msg) if msg.from != from || msg.to != self.m.node_id => {
                        debug!(
                            from,
                            msg_from = msg.from,
                            msg_to = msg.to,
                            "raft message with another sender or recipient; dropped"
                        );
                    }
                    Ok(msg) => {
                        if let Err(e) = self.raft.step(msg) {
                            debug!(from = frame.from, error = %e, "raft message refused");
                        }
                    }
                    Err(e) => warn!(from = frame.from, error = %e, "undecodable raft message"),
                }
            }
            Some(peer_frame::Kind::Touch(t)) if self.m.role == StateRole::Leader => {
                let now = Instant::now();
                for id in t.session_ids {
                    self.m.sessions.touch(id, now);
                }
            }
            // A follower that thinks we lead; the next report finds the leader.
            Some(peer_frame::Kind::Touch(_)) => {}
            Some(peer_frame::Kind::Status(st)) => {
                self.m.peer_status.insert(frame.from, (st, Instant::now()));
            }
            None => {}
        }
    }

    /// A follower forwards the sessions it heard from to the leader, which
    /// alone tracks deadlines.
    fn report_touches(&mut self) {
        if self.m.touched.is_empty() || self.m.leader_id == 0 {
            return;
        }
        let mut session_ids: Vec<u64> = self.m.touched.drain().collect();
        session_ids.sort_unstable();
        let frame = PeerFrame {
            from: self.m.node_id,
            kind: Some(peer_frame::Kind::Touch(proto::SessionTouch { session_ids })),
        };
        self.m.transport.send(self.m.leader_id, frame);
    }

    fn own_status(&self) -> proto::NodeStatus {
        proto::NodeStatus {
            id: self.m.node_id,
            role: role_name(self.m.role).to_string(),
            term: self.raft.term(),
            commit_index: self.raft.storage().hard_state().commit,
            applied_index: self.m.tree.applied_index(),
            client_addr: self.m.client_addr.clone(),
            peer_addr: self.m.cfg.peer_listen.to_string(),
            leader_id: self.m.leader_id,
        }
    }

    fn broadcast_status(&mut self) {
        let status = self.own_status();
        let peers: Vec<u64> = self.m.transport.peer_ids().collect();
        for id in peers {
            let frame = PeerFrame {
                from: self.m.node_id,
                kind: Some(peer_frame::Kind::Status(status.clone())),
            };
            self.m.transport.send(id, frame);
        }
    }

    /// Answers the requests raft has not settled within PROPOSAL_TIMEOUT.
    fn expire_waiters(&mut self, now: Instant) {
        let mut retry = Vec::new();
        for w in self.m.waiters.values_mut() {
            if let Some((change, last)) = &mut w.conf_change {
                if now.duration_since(*last) >= CONF_CHANGE_RETRY {
                    *last = now;
                    retry.push(change.clone());
                }
            }
        }
        for change in retry {
            let context = change.context.to_vec();
            if let Err(e) = self.raft.propose_conf_change(context, change) {
                debug!(error = %e, "membership change re-proposal dropped");
            }
        }
        let expired: Vec<u64> = self
            .m
            .waiters
            .iter()
            .filter(|(_, w)| now.duration_since(w.since) >= PROPOSAL_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for request_id in expired {
            let Some(w) = self.m.waiters.remove(&request_id) else {
                continue;
            };
            let msg = format!(
                "not committed within {} ms (no quorum or a leader change); it may or may not be applied",
                PROPOSAL_TIMEOUT.as_millis()
            );
            match w.waiter {
                Waiter::Connect { conn, .. } => {
                    self.m.refuse_connect(conn, ErrorCode::NotReady, msg);
                }
                Waiter::Request { conn } => {
                    let zxid = self.m.tree.applied_index();
                    self.m.complete_write(conn, request_id, |xid| {
                        error_frame(xid, zxid, Failure::new(ErrorCode::OperationTimeout, msg))
                    });
                }
            }
        }
        let stale_reads: Vec<(u64, ConnId)> = self
            .m
            .read_waiters
            .iter()
            .filter(|(_, (_, since))| now.duration_since(*since) >= PROPOSAL_TIMEOUT)
            .map(|(ctx, (conn, _))| (*ctx, *conn))
            .collect();
        for (ctx, conn) in stale_reads {
            self.m.read_waiters.remove(&ctx);
            let zxid = self.m.tree.applied_index();
            if let Some(c) = self.m.conns.get_mut(&conn) {
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
                            *slot = Slot::Done(error_frame(*xid, zxid, f));
                            break;
                        }
                    }
                }
            }
            self.m.flush(conn);
        }
    }

    /// Proposes `txn`; returns the encoded proposal (kept for re-proposal
    /// after a leader change).
    fn propose(&mut self, txn: Txn, request_id: u64) -> Result<Vec<u8>, Failure> {
        let proposal = Proposal {
            origin_node: self.m.node_id,
            request_id,
            time_ms: now_ms(),
            txn: Some(txn),
        }
        .encode_to_vec();
        self.proposals += 1;
        self.raft.propose(proposal.clone()).map_err(|e| {
            debug!(error = %e, "proposal dropped");
            Failure::new(
                ErrorCode::NotReady,
                format!("no leader to accept the write ({e})"),
            )
        })?;
        Ok(proposal)
    }

    /// After a leader change, proposals this server made may have died
    /// with the old leader. Propose them again: a txn that did commit is
    /// recognised on its second apply (session + xid, or an existing
    /// session id) and changes nothing.
    fn repropose_after_leader_change(&mut self) {
        let mut again = Vec::new();
        for w in self.m.waiters.values_mut() {
            if let Some(p) = &w.proposal {
                w.since = Instant::now();
                again.push(p.clone());
            }
        }
        if !again.is_empty() {
            info!(
                count = again.len(),
                leader = self.m.leader_id,
                "re-proposing after a leader change"
            );
        }
        for p in again {
            if let Err(e) = self.raft.propose(p) {
                debug!(error = %e, "re-proposal dropped");
            }
        }
    }

    fn new_request_id(&mut self) -> u64 {
        self.next_request_id = self.next_request_id.wrapping_add(1).max(1);
        self.next_request_id
    }

    fn handle(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Open {
                conn,
                peer,
                door,
                out,
                closed,
                connect,
                tls_subject,
            } => {
                if let Some(subject) = &tls_subject {
                    debug!(conn, %subject, "client certificate verified");
                }
                self.open_conn(conn, peer, door, out, closed, connect);
                // Before any request of the connection can arrive (this
                // task handles them, in order).
                if let Some(c) = self.m.conns.get_mut(&conn) {
                    c.ids = Arc::new(crate::auth::connection_ids(peer, tls_subject.as_deref()));
                }
            }
            CoreMsg::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
            CoreMsg::Cluster { reply } => {
                let _ = reply.send(self.cluster_status());
            }
            CoreMsg::Request { conn, request } => self.request(conn, request),
            CoreMsg::Closed { conn } => self.m.drop_conn(conn, "connection closed"),
        }
    }

    fn open_conn(
        &mut self,
        conn: ConnId,
        peer: SocketAddr,
        door: Door,
        out: OutboundTx,
        closed: CancellationToken,
        c: pb::ConnectRequest,
    ) {
        let m = &mut self.m;
        m.conns.insert(
            conn,
            Conn {
                peer,
                door,
                out,
                closed,
                session: None,
                ids: Arc::new(Vec::new()),
                queue: VecDeque::new(),
                timing: VecDeque::new(),
            },
        );
        let applied = m.tree.applied_index();
        if c.last_zxid_seen > applied {
            m.refuse_connect(
                conn,
                ErrorCode::ServerBehind,
                format!(
                    "this server has applied zxid {applied}, the client has seen {}",
                    c.last_zxid_seen
                ),
            );
            return;
        }
        let timeout_ms = session::negotiate_timeout(
            c.timeout_ms,
            m.cfg.min_session_timeout_ms,
            m.cfg.max_session_timeout_ms,
        );
        if c.session_id == 0 {
            // Sessions this server is still creating count too. Creates in
            // flight on other servers do not: the bound is exact per server
            // and may be passed by what other servers create meanwhile.
            let creating = m
                .waiters
                .values()
                .filter(|w| matches!(w.waiter, Waiter::Connect { .. }))
                .count();
            let live = m.tree.session_count() + creating;
            let max = m.cfg.limits.sessions;
            if live >= max {
                let msg = limits::message(
                    Limit::Sessions,
                    max,
                    format!("{live} sessions are open, no new one is accepted"),
                );
                limits::record(&m.op_metrics, Limit::Sessions, &msg);
                m.refuse_connect(conn, ErrorCode::LimitExceeded, msg);
                return;
            }
            let session_id = session::new_session_id(m.node_id);
            let request_id = self.new_request_id();
            let txn = Txn {
                kind: Some(Kind::CreateSession(proto::CreateSessionTxn {
                    session_id,
                    password: session::new_password(),
                    timeout_ms,
                })),
                ..Default::default()
            };
            match self.propose(txn, request_id) {
                Ok(proposal) => {
                    self.m.waiters.insert(
                        request_id,
                        Waiting {
                            waiter: Waiter::Connect { conn, timeout_ms },
                            since: Instant::now(),
                            proposal: Some(proposal),
                            conf_change: None,
                        },
                    );
                }
                Err(f) => self.m.refuse_connect(conn, f.code, f.message),
            }
            return;
        }
        // Resume.
        let id = c.session_id;
        let known = m
            .tree
            .session(id)
            .map(|s| (s.password == c.password, s.timeout_ms));
        match known {
            Some((true, timeout_ms)) => {
                if let Some(old) = m.session_conn.insert(id, conn) {
                    if old != conn {
                        m.drop_conn(old, "session resumed on another connection");
                    }
                }
                if let Some(cn) = m.conns.get_mut(&conn) {
                    cn.session = Some(id);
                }
                m.touch(id);
                debug!(session_id = format_args!("{id:#x}"), %peer, "session resumed");
                let resp = pb::ConnectResponse {
                    error: ErrorCode::Ok as i32,
                    message: String::new(),
                    session_id: id,
                    password: c.password,
                    timeout_ms,
                    zxid: m.tree.applied_index(),
                    server_id: m.node_id,
                };
                m.push(conn, frame_connect(resp));
            }
            Some((false, _)) | None => m.refuse_connect(
                conn,
                ErrorCode::SessionExpired,
                format!("session {id:#x} has expired or never existed"),
            ),
        }
    }

    fn request(&mut self, conn: ConnId, request: pb::Request) {
        let Some(c) = self.m.conns.get(&conn) else {
            return;
        };
        let xid = request.xid;
        let door = c.door;
        let ids = c.ids.clone();
        let Some(session_id) = c.session else {
            // Requests before the session is established are out of order.
            let f = Failure::new(
                ErrorCode::MarshallingError,
                "request before the session was established",
            );
            self.m
                .enqueue(conn, Slot::Done(error_frame(xid, 0, f)), "invalid");
            self.m.flush(conn);
            return;
        };
        // A backstop: the connection task stops reading at this many
        // unanswered requests, so the queue never gets here.
        let inflight_max = self.m.cfg.limits.outstanding_requests;
        if c.queue.len() >= inflight_max {
            let f = Failure::new(
                ErrorCode::Throttled,
                format!("more than {inflight_max} requests in flight on one connection"),
            );
            let zxid = self.m.tree.applied_index();
            self.m
                .enqueue(conn, Slot::Done(error_frame(xid, zxid, f)), "throttled");
            self.m.flush(conn);
            return;
        }
        self.m.touch(session_id);
        let Some(op) = request.op else {
            let f = Failure::new(ErrorCode::BadArguments, "request has no operation");
            let zxid = self.m.tree.applied_index();
            self.m
                .enqueue(conn, Slot::Done(error_frame(xid, zxid, f)), "invalid");
            self.m.flush(conn);
            return;
        };
        let op_name = crate::opmetrics::op_name(&op);
        if let pb::request::Op::Auth(a) = op {
            let slot = self.auth(conn, xid, a);
            self.m.enqueue(conn, slot, op_name);
            self.m.flush(conn);
            return;
        }
        let slot = match ops::plan(op, session_id, &ids) {
            Plan::Reject(f) => Slot::Done(error_frame(xid, self.m.tree.applied_index(), f)),
            Plan::Ping => Slot::Ping { xid },
            Plan::ClusterStatus => {
                let status = self.cluster_status();
                let zxid = self.m.tree.applied_index();
                Slot::Done(response_frame(
                    xid,
                    zxid,
                    Ok(Some(Res::ClusterStatus(status))),
                ))
            }
            Plan::AddMember(_) | Plan::RemoveMember(_)
                if !crate::tree::acl::allowed(
                    self.m.tree.node_acl("/").unwrap_or(&[]),
                    &ids,
                    warden_protocol::perms::ADMIN,
                ) =>
            {
                // Membership is the cluster's, guarded by ADMIN on the
                // root. Checked on this server's tree: a conf change is
                // not a Txn the tree applies.
                let f = Failure::new(
                    ErrorCode::NoAuth,
                    crate::tree::acl::no_auth_message("/", warden_protocol::perms::ADMIN, &ids),
                );
                Slot::Done(error_frame(xid, self.m.tree.applied_index(), f))
            }
            Plan::AddMember(r) => {
                let change_type = if r.learner {
                    ConfChangeType::AddLearnerNode
                } else {
                    ConfChangeType::AddNode
                };
                self.conf_change_slot(conn, xid, change_type, r.id, r.addr)
            }
            Plan::RemoveMember(r) if r.id == self.m.node_id => {
                // This server would never learn that its own removal
                // committed (the group stops talking to it), so the answer
                // could not come.
                let f = Failure::new(
                    ErrorCode::BadArguments,
                    format!("server {} cannot remove itself: ask another member", r.id),
                );
                Slot::Done(error_frame(xid, self.m.tree.applied_index(), f))
            }
            Plan::RemoveMember(r) => {
                self.conf_change_slot(conn, xid, ConfChangeType::RemoveNode, r.id, String::new())
            }
            Plan::Read { op, linearizable } => {
                let read_index = if linearizable {
                    let ctx = self.new_request_id();
                    self.m.read_waiters.insert(ctx, (conn, Instant::now()));
                    self.raft.read_index(ctx.to_be_bytes().to_vec());
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
                if door == Door::Native {
                    txn.xid = xid;
                }
                self.write_slot(conn, xid, txn)
            }
            Plan::Close => {
                let txn = Txn {
                    kind: Some(Kind::CloseSession(proto::CloseSessionTxn {
                        session_id,
                        reason: CloseReason::Client as i32,
                    })),
                    ..Default::default()
                };
                self.write_slot(conn, xid, txn)
            }
        };
        self.m.enqueue(conn, slot, op_name);
        self.m.flush(conn);
    }

    /// An auth request: adds identities to the connection, answered in
    /// its turn. A refusal (AuthFailed) changes nothing; what to do about
    /// it is the door's choice (the ZooKeeper door closes the connection,
    /// as ZooKeeper does).
    fn auth(&mut self, conn: ConnId, xid: u64, a: pb::AuthRequest) -> Slot {
        let zxid = self.m.tree.applied_index();
        let Some(c) = self.m.conns.get_mut(&conn) else {
            return Slot::Done(response_frame(xid, zxid, Ok(None)));
        };
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
                debug!(conn, peer = %c.peer, ids = %crate::tree::acl::describe(&ids), "auth added");
                c.ids = Arc::new(ids);
                Slot::Done(response_frame(xid, zxid, Ok(None)))
            }
            Err(why) => {
                info!(conn, peer = %c.peer, scheme = %a.scheme.escape_debug(), %why, "auth refused");
                let f = Failure::new(ErrorCode::AuthFailed, why);
                Slot::Done(error_frame(xid, zxid, f))
            }
        }
    }

    fn conf_change_slot(
        &mut self,
        conn: ConnId,
        xid: u64,
        change_type: ConfChangeType,
        node_id: u64,
        addr: String,
    ) -> Slot {
        let request_id = self.new_request_id();
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
                self.m.waiters.insert(
                    request_id,
                    Waiting {
                        waiter: Waiter::Request { conn },
                        since: Instant::now(),
                        proposal: None,
                        conf_change: Some((change, Instant::now())),
                    },
                );
                Slot::Write { xid, request_id }
            }
            Err(e) => {
                let f = Failure::new(
                    ErrorCode::NotReady,
                    format!("membership change for {node_id} refused: {e}"),
                );
                Slot::Done(error_frame(xid, self.m.tree.applied_index(), f))
            }
        }
    }

    fn stats(&self) -> ServerStats {
        let conf = self.raft.conf_state();
        ServerStats {
            status: self.own_status(),
            members: conf.voters.len() + conf.learners.len(),
            nodes: self.m.tree.node_count(),
            connections: self.m.conns.len(),
            watches: self.m.watches.len(),
            ephemerals: self
                .m
                .tree
                .sessions()
                .map(|(id, _)| self.m.tree.ephemerals(id).len())
                .sum(),
            sessions: self.m.tree.sessions().count(),
            leader_changes: self.m.leader_changes,
            proposals: self.proposals,
            io: self.raft.io_counters(),
            last_snapshot_bytes: self.last_snapshot_bytes,
            zk_port: self.m.cfg.zk_listen.map(|a| a.port()).unwrap_or(0),
            tick_ms: self.m.cfg.tick.as_millis() as u64,
            min_session_timeout_ms: self.m.cfg.min_session_timeout_ms,
            max_session_timeout_ms: self.m.cfg.max_session_timeout_ms,
        }
    }

    /// Every member of the group as this server sees it.
    fn cluster_status(&self) -> pb::ClusterStatusResponse {
        let conf = self.raft.conf_state();
        let me = self.own_status();
        let commit = self.raft.commit_index();
        let mut ids: Vec<(u64, bool)> = conf.voters.iter().map(|id| (*id, true)).collect();
        ids.extend(conf.learners.iter().map(|id| (*id, false)));
        ids.sort_unstable();
        let now = Instant::now();
        let members = ids
            .into_iter()
            .map(|(id, voter)| {
                let learner_role = |role: &str| {
                    if voter {
                        role.to_string()
                    } else {
                        "learner".to_string()
                    }
                };
                if id == self.m.node_id {
                    return pb::MemberStatus {
                        id,
                        addr: me.peer_addr.clone(),
                        client_addr: me.client_addr.clone(),
                        role: learner_role(&me.role),
                        term: me.term,
                        commit_index: me.commit_index,
                        applied_index: me.applied_index,
                        lag: commit.saturating_sub(me.applied_index),
                        voter,
                        reachable: true,
                    };
                }
                let addr = self.m.transport.addr_of(id).unwrap_or_default().to_string();
                match self.m.peer_status.get(&id) {
                    Some((st, at)) => pb::MemberStatus {
                        id,
                        addr,
                        client_addr: st.client_addr.clone(),
                        role: learner_role(&st.role),
                        term: st.term,
                        commit_index: st.commit_index,
                        applied_index: st.applied_index,
                        lag: commit.saturating_sub(st.applied_index),
                        voter,
                        reachable: now.duration_since(*at) < PEER_STATUS_FRESH,
                    },
                    None => pb::MemberStatus {
                        id,
                        addr,
                        role: "unknown".to_string(),
                        voter,
                        reachable: false,
                        ..Default::default()
                    },
                }
            })
            .collect();
        pb::ClusterStatusResponse {
            server_id: self.m.node_id,
            leader_id: self.m.leader_id,
            members,
        }
    }

    fn write_slot(&mut self, conn: ConnId, xid: u64, txn: Txn) -> Slot {
        let request_id = self.new_request_id();
        let idempotent = txn.session_id != 0 && txn.xid != 0;
        match self.propose(txn, request_id) {
            Ok(proposal) => {
                self.m.waiters.insert(
                    request_id,
                    Waiting {
                        waiter: Waiter::Request { conn },
                        since: Instant::now(),
                        proposal: idempotent.then_some(proposal),
                        conf_change: None,
                    },
                );
                Slot::Write { xid, request_id }
            }
            Err(f) => Slot::Done(error_frame(xid, self.m.tree.applied_index(), f)),
        }
    }
}

fn frame_connect(resp: pb::ConnectResponse) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Connect(resp)),
    }
}

fn response_frame(xid: u64, zxid: u64, result: Result<Option<Res>, Failure>) -> pb::ServerFrame {
    let response = match result {
        Ok(result) => pb::Response {
            xid,
            zxid,
            error: ErrorCode::Ok as i32,
            message: String::new(),
            result,
        },
        Err(f) => pb::Response {
            xid,
            zxid,
            error: f.code as i32,
            message: f.message,
            result: f.detail.map(|d| *d),
        },
    };
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Response(response)),
    }
}

/// The same answer, for the request `xid` (a retry carries the xid of the
/// original, but the frame is addressed to whoever waits now).
fn with_xid(mut frame: pb::ServerFrame, xid: u64) -> pb::ServerFrame {
    if let Some(pb::server_frame::Kind::Response(r)) = &mut frame.kind {
        r.xid = xid;
    }
    frame
}

fn error_frame(xid: u64, zxid: u64, f: Failure) -> pb::ServerFrame {
    response_frame(xid, zxid, Err(f))
}

fn event_frame(event: pb::WatchEvent) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::WatchEvent(event)),
    }
}

fn session_event_frame(state: SessionState, message: &str) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::SessionEvent(pb::SessionEvent {
            state: state as i32,
            message: message.to_string(),
        })),
    }
}

impl Machine {
    /// The session was heard from: the leader pushes its deadline out, a
    /// follower reports it to the leader on its next tick.
    fn touch(&mut self, session_id: u64) {
        if self.role == StateRole::Leader {
            self.sessions.touch(session_id, Instant::now());
        } else {
            self.touched.insert(session_id);
        }
    }

    fn enqueue(&mut self, conn: ConnId, slot: Slot, op: &'static str) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(slot);
            c.timing.push_back((op, Instant::now()));
        }
    }

    /// Sends a frame now, outside the queue (handshake answers, events).
    /// A full queue means the client does not read: disconnect it.
    fn push(&mut self, conn: ConnId, frame: pb::ServerFrame) {
        self.push_sized(conn, frame, false);
    }

    /// [`Self::push`]; `admitted`: queue it even past the byte bound (the
    /// answer to a read, which waited for room before it was served).
    fn push_sized(&mut self, conn: ConnId, frame: pb::ServerFrame, admitted: bool) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let len = frame_bytes(&frame);
        let queued = c.out.queued_bytes();
        let max = self.cfg.limits.queued_bytes_per_connection;
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
            Ok(()) => {}
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

    fn refuse_connect(&mut self, conn: ConnId, code: ErrorCode, message: String) {
        debug!(conn, code = code.name(), %message, "connect refused");
        let resp = pb::ConnectResponse {
            error: code as i32,
            message,
            zxid: self.tree.applied_index(),
            server_id: self.node_id,
            ..Default::default()
        };
        self.push(conn, frame_connect(resp));
        // Dropping our sender closes the connection once the answer is out.
        self.drop_conn(conn, "connect refused");
    }

    /// Forgets a connection: its watches go; its session lives on.
    fn drop_conn(&mut self, conn: ConnId, why: &str) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        debug!(conn, peer = %c.peer, why, "connection dropped");
        // The connection task stops reading and its writer drains what we
        // queued, then closes the socket.
        c.closed.cancel();
        self.out_paused.remove(&conn);
        self.watches.remove_conn(conn);
        if let Some(s) = c.session {
            if self.session_conn.get(&s) == Some(&conn) {
                self.session_conn.remove(&s);
            }
        }
        self.read_waiters.retain(|_, (c, _)| *c != conn);
    }

    /// Sends every answer at the head of `conn`'s queue that is ready,
    /// serving reads as they reach the head.
    fn flush(&mut self, conn: ConnId) {
        loop {
            let applied = self.tree.applied_index();
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
                    let soft = self.cfg.limits.queued_bytes_per_connection / 2;
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
                self.op_metrics.observe(op, since.elapsed());
            }
            match slot {
                Slot::Done(frame) => self.push(conn, frame),
                Slot::Ping { xid } => self.push(conn, response_frame(xid, applied, Ok(None))),
                Slot::Read { xid, op, ids, .. } => {
                    let (result, events) = ops::read(
                        &self.tree,
                        &mut self.watches,
                        conn,
                        session_id,
                        &ids,
                        &op,
                        &self.cfg.limits,
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
                        self.push_sized(conn, event_frame(e), true);
                    }
                    self.push_sized(conn, response_frame(xid, applied, result), true);
                }
                Slot::Write { .. } => unreachable!("not ready"),
            }
        }
    }

    /// Fills the queue slot of a write that just applied.
    fn complete_write(
        &mut self,
        conn: ConnId,
        request_id: u64,
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
        self.flush(conn);
    }

    fn fire(&mut self, applied: &Applied, zxid: u64) {
        for t in &applied.triggers {
            let (mut conns, below) = self.watches.fire_split(t.event, &t.path);
            // Heard only through a recursive watch on an ancestor: only if
            // the client may read the node (ZooKeeper 3.8.4), judged by the
            // ACL it has now, or had when it was deleted.
            if !below.is_empty() {
                let deleted = || {
                    applied
                        .deleted_acls
                        .iter()
                        .rev()
                        .find(|(p, _)| *p == t.path)
                        .map(|(_, acl)| acl.as_slice())
                };
                let acl = match t.event {
                    pb::EventType::NodeDeleted => deleted(),
                    _ => self.tree.node_acl(&t.path).or_else(deleted),
                }
                .map(<[_]>::to_vec);
                for conn in below {
                    // A node found nowhere (cannot happen) is not revealed.
                    let may_read = acl.as_ref().is_some_and(|acl| {
                        self.conns.get(&conn).is_some_and(|c| {
                            crate::tree::acl::allowed(acl, &c.ids, warden_protocol::perms::READ)
                        })
                    });
                    if may_read {
                        conns.insert(conn);
                    }
                }
            }
            for conn in conns {
                self.push(
                    conn,
                    event_frame(pb::WatchEvent {
                        r#type: t.event as i32,
                        path: t.path.clone(),
                        zxid,
                    }),
                );
            }
        }
    }

    fn session_closed(&mut self, session_id: u64, reason: CloseReason) {
        self.sessions.remove(session_id);
        let Some(conn) = self.session_conn.remove(&session_id) else {
            return;
        };
        match reason {
            CloseReason::Expired => {
                self.push(
                    conn,
                    session_event_frame(SessionState::Expired, "session expired"),
                );
                self.drop_conn(conn, "session expired");
            }
            CloseReason::Client => {
                // The close answer was queued by complete_write; anything
                // after it in the queue can no longer be served.
                self.flush(conn);
                self.drop_conn(conn, "session closed");
            }
        }
    }

    /// Serves the reads whose ReadIndex the applied index has reached.
    fn serve_unblocked_reads(&mut self) {
        let applied = self.tree.applied_index();
        while let Some(entry) = self.reads_blocked.first_entry() {
            if *entry.key() > applied {
                break;
            }
            for conn in entry.remove() {
                self.flush(conn);
            }
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
            let frame = PeerFrame {
                from: self.node_id,
                kind: Some(peer_frame::Kind::Raft(bytes)),
            };
            if !self.transport.send(to, frame) {
                debug!(to, "peer queue full or unknown; raft message dropped");
                undelivered.extend(Undelivered::of(&m));
            }
        }
        undelivered
    }

    fn apply(&mut self, entry: &Entry) {
        let zxid = entry.index;
        self.applied_bytes += entry.data.len() as u64;
        if entry.data.is_empty() {
            self.tree.skip(zxid);
            return;
        }
        let proposal = match Proposal::decode(&entry.data[..]) {
            Ok(p) => p,
            Err(e) => {
                // Every replica sees the same bytes and skips them alike.
                error!(zxid, error = %e, "undecodable log entry skipped");
                self.tree.skip(zxid);
                return;
            }
        };
        let txn = proposal.txn.unwrap_or_default();
        let applied = self.tree.apply(zxid, proposal.time_ms, &txn);
        self.fire(&applied, zxid);

        match (&txn.kind, &applied.result) {
            (Some(Kind::CreateSession(cs)), _) if self.role == StateRole::Leader => {
                self.sessions.arm(
                    cs.session_id,
                    Duration::from_millis(u64::from(cs.timeout_ms)),
                    Instant::now(),
                );
            }
            (Some(Kind::GuardedDelete(g)), _) => {
                self.removals_inflight.remove(&g.path);
            }
            _ => {}
        }

        // The answer to a client write: a duplicate gets the stored one;
        // a first apply stores its own, on every replica alike.
        let answer = match &applied.result {
            TxnResult::Duplicate { response } => {
                debug!(
                    zxid,
                    session_id = format_args!("{:#x}", txn.session_id),
                    xid = txn.xid,
                    "retried write answered from its first apply"
                );
                pb::Response::decode(&response[..])
                    .ok()
                    .map(|r| pb::ServerFrame {
                        kind: Some(pb::server_frame::Kind::Response(r)),
                    })
            }
            _ if txn.session_id != 0 && txn.xid != 0 => {
                let result = ops::write_response(applied.result.clone(), &txn);
                let frame = response_frame(txn.xid, zxid, result);
                if let Some(pb::server_frame::Kind::Response(r)) = &frame.kind {
                    self.tree
                        .record_result(txn.session_id, txn.xid, r.encode_to_vec());
                }
                Some(frame)
            }
            _ => None,
        };
        let waiter = if proposal.origin_node == self.node_id && proposal.request_id != 0 {
            self.waiters.remove(&proposal.request_id).map(|w| w.waiter)
        } else {
            None
        };
        match waiter {
            Some(Waiter::Connect { conn, timeout_ms }) => {
                if let Some(Kind::CreateSession(cs)) = &txn.kind {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.session = Some(cs.session_id);
                        self.session_conn.insert(cs.session_id, conn);
                        info!(session_id = format_args!("{:#x}", cs.session_id), peer = %c.peer, timeout_ms, "session created");
                        let resp = pb::ConnectResponse {
                            error: ErrorCode::Ok as i32,
                            message: String::new(),
                            session_id: cs.session_id,
                            password: cs.password.clone(),
                            timeout_ms,
                            zxid,
                            server_id: self.node_id,
                        };
                        self.push(conn, frame_connect(resp));
                    }
                }
            }
            Some(Waiter::Request { conn }) => {
                let frame = answer.unwrap_or_else(|| {
                    let result = ops::write_response(applied.result.clone(), &txn);
                    response_frame(txn.xid, zxid, result)
                });
                self.complete_write(conn, proposal.request_id, |xid| with_xid(frame, xid));
            }
            None => {}
        }

        if let (Some(Kind::CloseSession(cs)), TxnResult::SessionClosed { .. }) =
            (&txn.kind, &applied.result)
        {
            let reason = CloseReason::try_from(cs.reason).unwrap_or(CloseReason::Client);
            self.session_closed(cs.session_id, reason);
        }
    }

    fn restore(&mut self, snapshot: &RaftSnapshot) {
        match proto::Snapshot::decode(&snapshot.data[..])
            .map_err(|e| e.to_string())
            .and_then(|s| DataTree::from_snapshot(&s).map_err(|e| e.to_string()))
        {
            Ok(tree) => {
                info!(
                    index = tree.applied_index(),
                    "state machine replaced by leader snapshot"
                );
                self.tree = tree;
                // The watches registered here were armed against the tree we
                // just threw away, and the changes between it and the
                // snapshot fired none of them. Like ZooKeeper, close every
                // client connection: each client reconnects and its
                // SetWatches (with the last zxid it saw) fires what it missed
                // and re-arms the rest. Answers still owed on those
                // connections are lost with them; the clients retry.
                let conns: Vec<ConnId> = self.conns.keys().copied().collect();
                if !conns.is_empty() {
                    info!(
                        connections = conns.len(),
                        "closing client connections after a leader snapshot"
                    );
                }
                for conn in conns {
                    self.drop_conn(conn, "state replaced by a leader snapshot");
                }
            }
            Err(e) => error!(error = %e, "leader snapshot unreadable"),
        }
    }

    fn read_states(&mut self, states: Vec<ReadState>) {
        for rs in states {
            let Ok(bytes) = <[u8; 8]>::try_from(&rs.request_ctx[..]) else {
                continue;
            };
            let ctx = u64::from_be_bytes(bytes);
            let Some((conn, _)) = self.read_waiters.remove(&ctx) else {
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
        self.serve_unblocked_reads();
    }

    fn conf_changed(&mut self, index: u64, change: &ConfChange, conf: &ConfState) {
        let ctx = proto::ConfChangeContext::decode(&change.context[..]).unwrap_or_default();
        let id = change.node_id;
        match change.get_change_type() {
            _ if id == 0 => self.tree.skip(index),
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                // An empty address: a promotion of a member we already know.
                let addr = if ctx.addr.is_empty() {
                    self.tree
                        .members()
                        .get(&id)
                        .cloned()
                        .or_else(|| self.transport.addr_of(id).map(str::to_string))
                } else {
                    Some(ctx.addr.clone())
                };
                self.tree.apply_member_change(index, id, addr.as_deref());
                if let Some(a) = &addr {
                    self.transport.add_peer(id, a);
                }
                self.snapshot_wanted = true;
            }
            ConfChangeType::RemoveNode => {
                self.tree.apply_member_change(index, id, None);
                self.transport.remove_peer(id);
                self.peer_status.remove(&id);
            }
        }
        info!(index, node_id = id, change = ?change.get_change_type(), voters = ?conf.voters, learners = ?conf.learners, "membership changed");
        if ctx.origin_node == self.node_id && ctx.request_id != 0 {
            if let Some(w) = self.waiters.remove(&ctx.request_id) {
                if let Waiter::Request { conn } = w.waiter {
                    self.complete_write(conn, ctx.request_id, |xid| {
                        response_frame(xid, index, Ok(None))
                    });
                }
            }
        }
    }

    fn role_changed(&mut self, ss: &SoftState) {
        let was_leader = self.role == StateRole::Leader;
        self.role = ss.raft_state;
        if ss.leader_id != 0 && ss.leader_id != self.leader_id {
            self.leader_changed = true;
            self.leader_changes += 1;
        }
        self.leader_id = ss.leader_id;
        self.touched.clear();
        info!(role = ?ss.raft_state, leader = ss.leader_id, "raft role changed");
        if self.role == StateRole::Leader && !was_leader {
            let sessions: Vec<(u64, Duration)> = self
                .tree
                .sessions()
                .map(|(id, s)| (id, Duration::from_millis(u64::from(s.timeout_ms))))
                .collect();
            self.sessions.rearm_all(sessions, Instant::now());
        } else if self.role != StateRole::Leader {
            self.sessions.clear();
        }
    }
}

fn role_name(role: StateRole) -> &'static str {
    match role {
        StateRole::Leader => "leader",
        StateRole::Follower => "follower",
        StateRole::Candidate | StateRole::PreCandidate => "candidate",
    }
}
