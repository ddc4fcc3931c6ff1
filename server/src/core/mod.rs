//! The core: the one task that owns the Raft node, the DataTree, the
//! sessions' liveness and every client connection of this server.
//!
//! Connections talk to it over one bounded channel ([`CoreMsg`]); it
//! answers on each connection's own bounded outbound queue. It runs on a
//! thread of its own (a current-thread runtime), so the fsync in the Ready
//! loop blocks no connection task. The links to the other members run on
//! that runtime too, and the core writes their frames to the socket itself
//! ([`crate::raft::transport`]): a frame crosses no thread between the
//! core and the network. Its rooms, each the one owner of its concept:
//!
//! - this file: a turn — a message, peer events or a tick in
//!   ([`Core::handle`], [`Core::on_peer`], [`Core::on_tick`]), then the
//!   Ready loop ([`crate::raft::RaftNode::on_ready`]) and snapshots
//!   ([`Core::end_turn`]); the core does no I/O of its own but through
//!   what it is handed ([`CoreInputs`]: clock, seed, file system; a
//!   [`Net`]);
//! - [`driver`]: the real server's tokio loop around those calls (a
//!   simulator drives the same calls on simulated time);
//! - [`net`]: what the core asks of the network;
//! - [`snapshots`]: snapshots built on a thread of their own from a frozen
//!   view of the tree;
//! - [`installs`]: snapshots a leader streamed here, built off the core,
//!   waiting for raft to install them;
//! - [`requests`]: the handshake and each request turned into a slot of its
//!   connection's queue (answered now, read in turn, or proposed);
//! - [`proposals`]: what this server proposed and who waits for it
//!   (register, complete, expire, propose again after a leader change);
//! - [`reconfig`]: ZooKeeper's reconfig as a checked list of conf changes,
//!   made one after the other;
//! - [`quorum`]: the rule every membership change obeys (no change may
//!   leave fewer voters heard from than a quorum), and who was heard from;
//! - [`peers`]: frames from the other members (who is heard, a closed
//!   link, each frame kind);
//! - [`forwards`]: a follower's proposals on their way to the leader,
//!   held in order while the link is full;
//! - [`leading`]: what this server remembers only while it leads (TTL
//!   deadlines, removals in flight), dropped at every role change;
//! - [`clients`]: the reply pipeline — connections, their in-order queues,
//!   watches and ReadIndex waits;
//! - [`apply`]: what the Ready loop hands the state machine, and what it
//!   means for this server's clients;
//! - [`status`]: this server's and its group's status;
//! - [`admin`]: the figures of ZooKeeper's four-letter words;
//! - [`read_only`]: ZooKeeper's read-only mode (`--zk-read-only`) while
//!   there is no quorum;
//! - sessions' liveness is [`crate::session`]'s, who hears a watch event
//!   [`crate::watch`]'s, and every change to replicated state
//!   [`DataTree::apply`]'s.

pub mod admin;
mod apply;
mod clients;
pub mod driver;
mod forwards;
mod frames;
mod inputs;
mod installs;
mod leading;
mod net;
mod peer_view;
mod peers;
mod proposals;
mod quorum;
pub(crate) mod read_only;
mod reconfig;
mod requests;
mod role;
mod snapshot_schedule;
pub(crate) mod snapshots;
mod status;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use prost::Message as _;
use raft::StateRole;
use rand::rngs::StdRng;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use warden_protocol::pb::{self, ErrorCode};

use crate::clock::Clock;
use crate::config::Config;
use crate::ops::Failure;
use crate::outbound::OutboundTx;
use crate::proto::{self, peer_frame, txn::Kind, CloseReason, PeerFrame, Txn};
use crate::raft::node::{NodeError, RaftTiming};
use crate::raft::snapstream::Descriptor;
use crate::raft::transport::PeerEvent;
use crate::raft::{DiskStorage, RaftNode};
use crate::session::Sessions;
use crate::tree::{DataTree, FrozenTree};
use crate::watch::ConnId;

use clients::Clients;
pub use inputs::CoreInputs;
pub use net::Net;
use proposals::{Proposals, Waiter, PROPOSAL_TIMEOUT};
pub use snapshots::release_freed_memory;

/// Bound of the channel from connections to the core.
pub const CORE_QUEUE_MAX: usize = 4096;
/// Bound of each connection's outbound queue (frames).
pub const OUTBOUND_FRAMES_MAX: usize = 8192;
/// How often (in ticks) the leader looks for empty containers and expired
/// TTL nodes.
const REMOVAL_CHECK_TICKS: u64 = 5;
/// How often (in ticks) every server tells its peers its own status.
const STATUS_TICKS: u64 = 5;
/// Bound of the channel from peer connections to the core. Kept short:
/// frames waiting here are stale by the time the core sees them, and a
/// newer leader's heartbeat waits behind every one of them.
pub const PEER_INBOX_MAX: usize = 1024;

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Native,
    /// ZooKeeper clients restart their xids on every connection, so a
    /// (session, xid) pair does not identify a write: the server numbers
    /// the connection's writes itself (`tree/writes.rs`).
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
    /// In ZooKeeper's read-only mode (`--zk-read-only`, no quorum).
    pub read_only: bool,
    /// Read-only sessions this server made (ZooKeeper's local sessions).
    pub read_only_sessions: usize,
    /// New leaders this server has seen since it started.
    pub leader_changes: u64,
    /// Proposals this server handed to raft.
    pub proposals: u64,
    /// The Ready loop's disk work.
    pub io: crate::raft::node::IoCounters,
    /// Size of the last snapshot this server took (0: none yet).
    pub last_snapshot_bytes: u64,
    pub zk_port: u16,
    /// The ZooKeeper port is TLS only (ZooKeeper's secureClientPort).
    pub zk_tls: bool,
    pub data_dir: std::path::PathBuf,
    /// Connections one client IP may hold (ZooKeeper's maxClientCnxns).
    pub max_client_cnxns: usize,
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
        /// The client accepts a read-only session (ZooKeeper's
        /// canBeReadOnly; see [`read_only`]).
        can_be_read_only: bool,
    },
    /// A request on an open connection.
    Request { conn: ConnId, request: pb::Request },
    /// The ZooKeeper door completed a SASL exchange on `conn` as request
    /// `xid`: the connection gets `user`'s identities (its password
    /// digests to `hash`), answered in its turn.
    SaslAuthenticated {
        conn: ConnId,
        xid: u64,
        user: String,
        hash: String,
    },
    /// The connection is gone.
    Closed { conn: ConnId },
    /// Operator figures.
    Stats { reply: oneshot::Sender<ServerStats> },
    /// A four-letter word's or AdminServer command's figures (and resets).
    Admin {
        ask: admin::AdminAsk,
        reply: oneshot::Sender<admin::AdminReport>,
    },
    /// The member view (`wardenctl cluster status`, HTTP `/status`,
    /// `/health`).
    Cluster {
        reply: oneshot::Sender<pb::ClusterStatusResponse>,
    },
    /// A frozen view of the tree as applied now, with the snapshot
    /// metadata of that index (a backup: `GET /api/v1/snapshot`). The
    /// caller encodes it off the core.
    Freeze {
        reply: oneshot::Sender<Result<Frozen, String>>,
    },
    /// Whether the ACL of some node names the digest identity `id`
    /// (`user:BASE64HASH`): the lock API's gateway opens a session for an
    /// identity no user list vouches for only if the tree knows it.
    DigestKnown {
        id: String,
        reply: oneshot::Sender<bool>,
    },
    /// A page of the recognised locks (`GET /api/v1/locks`).
    Locks {
        query: crate::lockstats::LockQuery,
        reply: oneshot::Sender<crate::lockstats::LockPage>,
    },
}

/// The tree frozen at `meta.index` (see [`CoreMsg::Freeze`]).
pub struct Frozen {
    pub meta: raft::eraftpb::SnapshotMetadata,
    pub view: FrozenTree,
}

impl std::fmt::Debug for Frozen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frozen")
            .field("index", &self.meta.index)
            .field("nodes", &self.view.node_count())
            .finish()
    }
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
    #[error("--force-new-cluster: {0}")]
    ForceNewCluster(String),
}

/// Everything but the raft node: the state machine and its clients (the
/// [`crate::raft::ReadyHandler`] the Ready loop drives).
struct Machine {
    node_id: u64,
    /// Where every decision reads time (see [`crate::clock`]).
    clock: Box<dyn Clock>,
    /// Every random draw the core makes (request ids, session ids and
    /// passwords): seeded by [`CoreInputs`], a CSPRNG.
    rng: StdRng,
    cfg: Config,
    tree: DataTree,
    clients: Clients,
    sessions: Sessions,
    proposals: Proposals,
    /// Leader-only memory: TTL deadlines and removals in flight.
    leading: leading::Leading,
    /// Who leads, as raft last said.
    role: role::RoleView,
    /// The links to the other members.
    net: Box<dyn Net>,
    /// What each peer last said, and heartbeat round trips.
    peers: peer_view::PeerView,
    /// The client address clients use for this server (for status).
    client_addr: String,
    /// Request counts and latencies by operation.
    op_metrics: crate::opmetrics::OpMetrics,
    /// Every recognised lock, and its figures.
    locks: crate::lockstats::LockObserver,
    /// Proposals forwarded to the leader that its link did not take yet.
    forwards: forwards::Forwards,
    /// Reconfigs whose last change applied, to answer with the
    /// membership: (connection, request id, index).
    reconfigs_done: Vec<(ConnId, u64, u64)>,
    /// A reconfig's next change is due: propose it without waiting for
    /// the tick.
    conf_change_due: bool,
    /// ZooKeeper's read-only mode: its state and sessions.
    read_only: read_only::ReadOnlyMode,
    /// When to snapshot and how far to compact the log.
    schedule: snapshot_schedule::SnapshotSchedule,
    /// Snapshots streamed here by a leader.
    installs: installs::Installs,
    /// When each peer (member or not yet) was last heard from.
    contacts: quorum::Contacts,
    /// Native AddMembers waiting for the server they add to call in.
    join_waits: Vec<quorum::JoinWait>,
}

pub struct Core {
    raft: RaftNode,
    m: Machine,
    snapshots: snapshots::Snapshots,
    ticks: u64,
    /// Snapshots are built on this thread as they fall due (see
    /// [`CoreInputs::inline_snapshot_builds`]).
    inline_snapshot_builds: bool,
}

impl Core {
    /// Opens the storage, restores the latest snapshot and starts the node.
    /// `runtime` runs the peer connections (the core's own, in the server);
    /// `inputs` are what the core decides by and does not take from the
    /// world itself (the real server: [`CoreInputs::os`]).
    pub fn open(
        cfg: Config,
        client_addr: SocketAddr,
        mut net: Box<dyn Net>,
        op_metrics: crate::opmetrics::OpMetrics,
        inputs: CoreInputs,
    ) -> Result<Self, CoreError> {
        inputs.files.create_dir_all(&cfg.data_dir).map_err(|e| {
            CoreError::Storage(crate::raft::StorageError::Corrupt {
                what: "data dir",
                detail: format!("{}: {e}", cfg.data_dir.display()),
            })
        })?;
        let mut storage = DiskStorage::open_on(
            inputs.files.clone(),
            inputs.log,
            &cfg.data_dir.join("raft"),
            &cfg.data_dir.join("snapshots"),
        )?;
        storage.set_inline_snapshots(cfg.inline_snapshots);
        if cfg.unsafe_skip_fsync {
            warn!("--unsafe-skip-fsync: the Raft log is acknowledged without fsync and is lost on a power failure; a known-bad mode for testing the test suite only");
            storage.set_unsafe_skip_fsync();
        }
        let tree = match storage.load_snapshot()? {
            Some(snap) => {
                // os-clock: the restore's took_ms, logged only.
                let started = Instant::now();
                let file = storage.snapshot_path().display().to_string();
                let decoded = proto::Snapshot::decode(&snap.data[..])
                    .map_err(|e| CoreError::Snapshot(format!("{file}: {e}")))?;
                drop(snap);
                let tree = DataTree::from_snapshot_owned(decoded)
                    .map_err(|e| CoreError::Snapshot(format!("{file}: {e}")))?;
                snapshots::release_freed_memory();
                storage.remove_older_snapshots()?;
                info!(
                    index = tree.applied_index(),
                    nodes = tree.node_count(),
                    // os-clock: logged only.
                    took_ms = started.elapsed().as_millis() as u64,
                    "restored snapshot"
                );
                tree
            }
            None => DataTree::new(),
        };
        if cfg.force_new_cluster {
            match crate::raft::force_new_cluster::make_sole_voter(&mut storage, cfg.id)
                .map_err(|e| CoreError::ForceNewCluster(e.to_string()))?
            {
                Some(f) => warn!(
                    removed = ?f.removed,
                    promoted = f.promoted,
                    commit = f.commit,
                    "--force-new-cluster: this server is now the only voter of its group, with all its data; start it without the flag from now on, and add servers back empty with --join"
                ),
                None => warn!("--force-new-cluster: this server is already the only voter of its group; nothing changed"),
            }
        }
        let applied = tree.applied_index();
        let voters = cfg.peers.iter().map(|p| p.id).collect();
        let timing = RaftTiming {
            election_ticks: cfg.election_ticks,
            heartbeat_ticks: cfg.heartbeat_ticks,
        };
        let snap_dir = storage.snap_dir().clone();
        let mut rng = inputs.rng();
        let snapshot_every = (cfg.snapshot_entries, cfg.snapshot_bytes);
        let mut raft = RaftNode::open(cfg.id, voters, cfg.join, storage, &timing, applied)?;
        // raft-rs draws its election jitter from thread_rng; drawn from the
        // core's rng instead, a simulated cluster replays from its seed.
        raft.set_election_jitter_seed(rand::Rng::random::<u64>(&mut rng));
        raft.set_io_histograms(
            op_metrics.fsync_seconds.clone(),
            op_metrics.append_batch_entries.clone(),
        );
        for p in &cfg.peers {
            net.add_peer(p.id, &p.addr);
        }
        // Members added later by conf changes override --peers.
        for (id, addr) in tree.members() {
            net.add_peer(*id, addr);
        }
        if cfg.unsafe_skip_read_index {
            warn!("--unsafe-skip-read-index: linearizable reads are served without ReadIndex and may be stale; a known-bad mode for testing the test suite only");
        }
        if cfg.unsafe_bounded_dedup {
            warn!("--unsafe-bounded-dedup: ZooKeeper-port writes proposed again after a leader change may apply twice; a known-bad mode for tests only");
        }
        let clients = Clients::new(cfg.limits, op_metrics.clone());
        let started = inputs.clock.now();
        let proposals = Proposals::new(&mut rng);
        let leading = leading::Leading::new(
            cfg.unsafe_keep_removals_across_roles,
            cfg.unsafe_lose_removal_proposals,
        );
        // What the log holds up to its commit index is replayed, not new.
        let replayed = raft.storage().hard_state().commit;
        let locks = crate::lockstats::LockObserver::new(op_metrics.locks.clone(), &tree, replayed);
        Ok(Self {
            raft,
            m: Machine {
                node_id: cfg.id,
                clock: inputs.clock,
                rng,
                cfg,
                tree,
                clients,
                sessions: Sessions::default(),
                proposals,
                leading,
                role: role::RoleView::default(),
                net,
                peers: peer_view::PeerView::default(),
                client_addr: client_addr.to_string(),
                op_metrics,
                locks,
                forwards: forwards::Forwards::default(),
                reconfigs_done: Vec::new(),
                conf_change_due: false,
                read_only: read_only::ReadOnlyMode::new(started),
                schedule: snapshot_schedule::SnapshotSchedule::new(
                    snapshot_every.0,
                    snapshot_every.1,
                    applied,
                ),
                installs: installs::Installs::new(snap_dir),
                contacts: quorum::Contacts::default(),
                join_waits: Vec::new(),
            },
            snapshots: Default::default(),
            ticks: 0,
            inline_snapshot_builds: inputs.inline_snapshot_builds,
        })
    }

    /// Whether clients may be served: a leader is known and the log is
    /// replayed.
    pub fn is_ready(&self) -> bool {
        self.m.role.leader() != 0
            && self.m.tree.applied_index() >= self.raft.storage().hard_state().commit
    }

    /// Ends a turn of the driver's loop (after a message, peer events or
    /// a tick): the Ready loop until raft has nothing more, snapshots if
    /// due, then whatever the turn queued for peers (forwards, heartbeats,
    /// status) leaves. An error stops the core.
    pub fn end_turn(&mut self) -> Result<(), CoreError> {
        let driven = self.drive();
        self.m.net.flush();
        driven
    }

    /// Stops: every connection's writer drains and closes, the links
    /// close, and raft's storage is synced.
    pub fn stop(&mut self) {
        self.m.clients.close_all();
        self.m.net.shutdown();
        let _ = self.raft.sync();
    }

    /// The core's clock (the driver measures its turns by it).
    pub fn now(&self) -> Instant {
        self.m.clock.now()
    }

    /// How often the driver calls [`Self::on_tick`].
    pub fn tick_interval(&self) -> Duration {
        self.m.cfg.tick
    }

    /// The leader this server knows (0: none).
    pub fn leader_id(&self) -> u64 {
        self.m.role.leader()
    }

    /// The index the tree has applied up to.
    pub fn applied_index(&self) -> u64 {
        self.m.tree.applied_index()
    }

    /// This server's role and term, as raft last said.
    pub fn role_and_term(&self) -> (StateRole, u64) {
        (self.m.role.role(), self.raft.term())
    }

    /// The replicated state as applied (the tree, the sessions, the
    /// members), encoded as a snapshot is: byte for byte the same on every
    /// replica that applied the same entries (a simulator compares them).
    pub fn encoded_state(&self) -> Vec<u8> {
        self.m.tree.freeze().encode()
    }

    /// Runs the Ready loop until raft has nothing more, then snapshots if due.
    fn drive(&mut self) -> Result<(), CoreError> {
        self.snapshot_transfers_ended();
        self.ready_loop()?;
        // A received snapshot stepped into raft was installed by now, or
        // ignored.
        self.m.installs.settle();
        if self.m.role.take_leader_changed() {
            self.repropose_after_leader_change();
            self.ask_reads_again(true);
            self.ready_loop()?;
        }
        if std::mem::take(&mut self.m.conf_change_due) {
            self.propose_due_conf_changes(self.m.clock.now());
            self.ready_loop()?;
        }
        self.answer_reconfigs();
        if let Some(done) = self.snapshots.poll() {
            self.snapshot_built(done?)?;
        }
        let applied = self.m.tree.applied_index();
        let due = self
            .m
            .schedule
            .due(applied, self.raft.storage().snapshot_index());
        let member_added = self.m.schedule.take_member_added();
        if member_added && applied > self.raft.storage().snapshot_index() {
            let meta = self.raft.storage().snapshot_meta_at(applied)?;
            let dir = self.raft.storage().snap_dir().clone();
            let built = snapshots::Snapshots::build_now(&self.m.tree, meta, &dir)?;
            self.m.schedule.started(applied);
            self.snapshot_built(built)?;
        } else if due
            && applied > self.m.schedule.last_index()
            // A leader's snapshot installed here may be as new.
            && applied > self.raft.storage().snapshot_index()
            && !self.snapshots.busy()
        {
            let meta = self.raft.storage().snapshot_meta_at(applied)?;
            let dir = self.raft.storage().snap_dir().clone();
            self.m.schedule.started(applied);
            if self.inline_snapshot_builds {
                let built = snapshots::Snapshots::build_now(&self.m.tree, meta, &dir)?;
                self.snapshot_built(built)?;
            } else {
                let pause = self.snapshots.start(&self.m.tree, meta, dir)?;
                debug!(
                    index = applied,
                    core_us = pause.as_micros() as u64,
                    "snapshot started"
                );
            }
        }
        if member_added {
            // A new member starts empty and must be initialized from this
            // snapshot (the log does not go back to the group's
            // bootstrap): nothing before it stays to be sent instead.
            self.raft.compact_log(applied, 0)?;
        } else if self.m.schedule.take_compaction_due() {
            self.compact_log()?;
        }
        Ok(())
    }

    /// Snapshot transfers to followers that ended: raft resumes
    /// replicating to the follower, or (failed, refused, stalled) probes
    /// it again and sends another snapshot if it still needs one.
    fn snapshot_transfers_ended(&mut self) {
        use crate::raft::snapstream::Outcome;
        for sent in self.m.net.snapshot_results() {
            let took_ms = sent.took.as_millis() as u64;
            let status = match &sent.result {
                Ok(outcome @ (Outcome::Installed | Outcome::NotNeeded)) => {
                    info!(to = sent.to, index = sent.index, took_ms, outcome = ?outcome, "snapshot transfer finished");
                    raft::SnapshotStatus::Finish
                }
                Ok(Outcome::Refused(why)) => {
                    warn!(to = sent.to, index = sent.index, took_ms, error = %why, "snapshot transfer refused by the follower; raft will retry");
                    raft::SnapshotStatus::Failure
                }
                Err(e) => {
                    warn!(to = sent.to, index = sent.index, took_ms, error = %e, "snapshot transfer failed; raft will retry");
                    raft::SnapshotStatus::Failure
                }
            };
            self.raft.report_snapshot(sent.to, status);
        }
    }

    /// A snapshot's file is durable: raft's storage records it (unless one
    /// newer came meanwhile, from the leader or for a new member), and
    /// what it covers may leave the log.
    fn snapshot_built(&mut self, built: snapshots::Built) -> Result<(), CoreError> {
        let index = built.meta.index;
        if self.raft.snapshot_written(built.meta.clone())? {
            self.m.schedule.recorded(built.bytes);
            snapshots::log_taken(&built);
        } else {
            debug!(index, "snapshot superseded by a newer one; dropped");
        }
        Ok(())
    }

    /// Drops the log below what every member has (the leader knows; a
    /// follower goes by what the leader last told it), never past the
    /// latest snapshot, and past that floor only while the log is over
    /// `--max-log-bytes`. A follower that is merely slow so catches up from
    /// the log; only one too far behind is sent a snapshot.
    fn compact_log(&mut self) -> Result<(), CoreError> {
        let floor = self
            .raft
            .matched_by_all()
            .unwrap_or(self.m.schedule.leader_floor());
        if let Some(first) = self.raft.compact_log(floor, self.m.cfg.max_log_bytes)? {
            debug!(
                first,
                floor,
                log_bytes = self.raft.storage().log_bytes(),
                "log compacted"
            );
        }
        Ok(())
    }

    fn ready_loop(&mut self) -> Result<(), CoreError> {
        while self.raft.has_ready() {
            self.raft.on_ready(&mut self.m)?;
            self.m.clients.serve_unblocked_reads(&self.m.tree);
        }
        Ok(())
    }

    /// A tick (every [`Self::tick_interval`]): raft's clock, deadlines,
    /// and the leader's periodic work.
    pub fn on_tick(&mut self) {
        self.raft.tick();
        self.ticks += 1;
        self.m.forwards.flush(self.m.net.as_ref());
        self.m.clients.retry_paused(&self.m.tree);
        self.m.schedule.tick();
        let now = self.m.clock.now();
        self.expire_waiters(now);
        self.m.read_only_tick(now);
        self.ask_reads_again(false);
        self.settle_join_waits();
        // At once on the first tick too: a server started with --join is
        // heard from (and may be added as a voter) without waiting a round.
        if self.ticks == 1 || self.ticks.is_multiple_of(STATUS_TICKS) {
            self.broadcast_status();
        }
        if !self.m.role.is_leader() {
            self.report_touches();
            return;
        }
        for id in self.m.sessions.take_expired(now) {
            debug!(session_id = format_args!("{id:#x}"), "session expired");
            self.m.op_metrics.session_expiries.inc();
            let txn = Txn {
                kind: Some(Kind::CloseSession(proto::CloseSessionTxn {
                    session_id: id,
                    reason: CloseReason::Expired as i32,
                })),
                ..Default::default()
            };
            if self.propose(txn, 0).is_err() {
                self.m.sessions.close_failed(id);
            }
        }
        if self.ticks.is_multiple_of(REMOVAL_CHECK_TICKS) {
            self.m.clock.refresh();
            let now = self.m.clock.now();
            for guarded in self.m.leading.removals_due(&self.m.tree, now) {
                let path = guarded.path.clone();
                let txn = Txn {
                    kind: Some(Kind::GuardedDelete(guarded)),
                    ..Default::default()
                };
                if self.propose(txn, 0).is_err() {
                    self.m.leading.removal_not_proposed(&path);
                }
            }
        }
    }

    /// A follower forwards the sessions it heard from to the leader, which
    /// alone tracks deadlines.
    fn report_touches(&mut self) {
        if self.m.role.leader() == 0 {
            return;
        }
        let session_ids = self.m.sessions.take_touched();
        if session_ids.is_empty() {
            return;
        }
        let frame = PeerFrame {
            from: self.m.node_id,
            kind: Some(peer_frame::Kind::Touch(proto::SessionTouch { session_ids })),
        };
        self.m.net.send(self.m.role.leader(), frame);
    }

    /// Proposes again the membership changes raft has not applied, and
    /// answers the requests raft has not settled within
    /// [`PROPOSAL_TIMEOUT`].
    fn expire_waiters(&mut self, now: Instant) {
        self.propose_due_conf_changes(now);
        for expired in self.m.proposals.take_expired(now) {
            let ms = PROPOSAL_TIMEOUT.as_millis();
            let zxid = self.m.tree.applied_index();
            let failure = if expired.handed {
                Failure::new(
                    ErrorCode::OperationTimeout,
                    format!(
                        "not committed within {ms} ms (no quorum or a leader change); it may or may not be applied"
                    ),
                )
            } else {
                Failure::new(
                    ErrorCode::NotReady,
                    format!("no leader known for {ms} ms (no quorum?); not applied"),
                )
            };
            match expired.waiter {
                Waiter::Connect { conn, .. } => {
                    self.m.clients.refuse_connect(
                        conn,
                        ErrorCode::NotReady,
                        failure.message,
                        zxid,
                        self.m.node_id,
                    );
                }
                // Not an expiry: the client tries again, here or elsewhere.
                Waiter::Resume { conn, .. } => self.m.clients.drop_conn(conn, "resume not bound"),
                Waiter::Request { conn } => {
                    self.m
                        .clients
                        .complete_write(conn, expired.request_id, &self.m.tree, |xid| {
                            frames::error(xid, zxid, failure)
                        });
                }
            }
        }
        self.m.clients.fail_stale_reads(now, &self.m.tree);
    }

    /// Proposes the membership changes that are due: not applied a retry
    /// interval after they were last proposed, or a reconfig's next step.
    fn propose_due_conf_changes(&mut self, now: Instant) {
        for change in self.m.proposals.conf_changes_due(now) {
            let context = change.context.to_vec();
            if let Err(e) = self.raft.propose_conf_change(context, change) {
                debug!(error = %e, "membership change (re-)proposal dropped");
            }
        }
    }

    /// After a leader change, proposals this server made may have died
    /// with the old leader, or were held for want of one. Propose them
    /// (again): a txn that did commit is recognised on its second apply
    /// (session + xid, or an existing session id) and changes nothing.
    fn repropose_after_leader_change(&mut self) {
        let again = self.m.proposals.for_reproposal(self.m.clock.now());
        if !again.is_empty() {
            info!(
                count = again.len(),
                leader = self.m.role.leader(),
                "re-proposing after a leader change"
            );
        }
        for (request_id, p) in again {
            match self.raft.propose(p) {
                Ok(()) => self.m.proposals.handed(request_id),
                Err(e) => debug!(error = %e, "re-proposal dropped"),
            }
        }
    }
}
