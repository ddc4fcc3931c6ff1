//! Command-line flags and their defaults, validated once at start-up.
//! `warden serve` with no flags runs a working single-node service.
//!
//! Every flag can also come from an environment variable (`WARDEN_` and
//! the flag's name, `--tick-ms` is `WARDEN_TICK_MS`) or from a key of the
//! `--config` file (`tick-ms = 50`, see [`file`](mod@file)); a flag beats the
//! environment, which beats the file, which beats the default. The rule
//! is checked for every flag by a test, so a new flag cannot miss it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use warden_protocol::FRAME_BYTES_MAX;

use crate::core::OUTBOUND_FRAMES_MAX;
use crate::limits::{self, Limit, Limits};

pub mod access;
pub mod file;
pub mod switches;
pub mod tls;

/// Flags of `warden serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file: keys are the long flags without
    /// `--` (`tick-ms = 50`, `peers = "1=..."`, `join = true`,
    /// `http-token = ["t=u:p"]`). A flag or an environment variable given
    /// too wins over the file. `warden config check FILE` checks one.
    #[arg(long, value_name = "FILE", env = "WARDEN_CONFIG")]
    pub config: Option<PathBuf>,
    /// This server's id in the Raft group (non-zero, unique).
    #[arg(long, default_value_t = 1, env = "WARDEN_ID")]
    pub id: u64,
    /// Where the Raft log, hard state and snapshots live.
    #[arg(long, default_value = "warden-data", env = "WARDEN_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Address for client connections (native protocol). Port 0 picks one.
    #[arg(long, default_value = "127.0.0.1:7000", env = "WARDEN_LISTEN")]
    pub listen: SocketAddr,
    /// Address for Raft traffic from peers.
    #[arg(long, default_value = "127.0.0.1:7100", env = "WARDEN_PEER_LISTEN")]
    pub peer_listen: SocketAddr,
    /// Address for ZooKeeper clients (ZooKeeper's own protocol); `off`
    /// disables it.
    #[arg(long, default_value = "127.0.0.1:2181", env = "WARDEN_ZK_LISTEN")]
    pub zk_listen: String,
    /// Address for the HTTP API (lock API, `/metrics`, `/health`).
    #[arg(long, default_value = "127.0.0.1:7200", env = "WARDEN_HTTP_LISTEN")]
    pub http_listen: SocketAddr,
    /// Address for the gRPC lock API (`warden.lock.v1.LockService`, see
    /// docs/grpc.md), e.g. `127.0.0.1:7300`; `off` (the default) disables
    /// it. TLS and callers' credentials as on the HTTP port.
    #[arg(long, default_value = "off", env = "WARDEN_GRPC_LISTEN")]
    pub grpc_listen: String,
    /// The Raft group: `ID=HOST:PORT,...` including this server. Empty:
    /// a single-node group of this server alone.
    #[arg(long, default_value = "", env = "WARDEN_PEERS")]
    pub peers: String,
    /// Join an existing group instead of forming one from --peers: the
    /// node starts empty and waits for the leader (after `wardenctl cluster
    /// add`). --peers must still list the members' addresses.
    #[arg(long, env = "WARDEN_JOIN")]
    pub join: bool,
    /// Disaster recovery, when a quorum is lost for good: start as the
    /// only voter of the group, keeping this server's data (its log and
    /// tree). Every other member is removed, durably, before the server
    /// serves; add servers back (empty, with --join) afterwards. Start
    /// with it once, then without it (see docs/operations.md).
    #[arg(long, env = "WARDEN_FORCE_NEW_CLUSTER")]
    pub force_new_cluster: bool,
    /// Raft tick.
    #[arg(long, default_value_t = 100, env = "WARDEN_TICK_MS")]
    pub tick_ms: u64,
    /// Ticks without a leader's heartbeat before a follower starts an
    /// election (randomized between this and twice this).
    #[arg(long, default_value_t = 5, env = "WARDEN_ELECTION_TICKS")]
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats; must be less than
    /// --election-ticks.
    #[arg(long, default_value_t = 1, env = "WARDEN_HEARTBEAT_TICKS")]
    pub heartbeat_ticks: usize,
    /// Smallest session timeout granted to clients.
    #[arg(long, default_value_t = 1000, env = "WARDEN_MIN_SESSION_TIMEOUT_MS")]
    pub min_session_timeout_ms: u32,
    /// Largest session timeout granted to clients.
    #[arg(long, default_value_t = 60_000, env = "WARDEN_MAX_SESSION_TIMEOUT_MS")]
    pub max_session_timeout_ms: u32,
    /// Take a snapshot every this many applied entries (or every
    /// --snapshot-bytes of them, whichever comes first). The log is kept
    /// apart from snapshots: see --max-log-bytes.
    #[arg(long, default_value_t = 100_000, env = "WARDEN_SNAPSHOT_ENTRIES")]
    pub snapshot_entries: u64,
    /// Take a snapshot once this many bytes of entries were applied since
    /// the last one.
    #[arg(long, default_value_t = 64 * 1024 * 1024, env = "WARDEN_SNAPSHOT_BYTES")]
    pub snapshot_bytes: u64,
    /// The log is compacted only below what every member has, so a slow
    /// follower catches up from it; past this many bytes it is compacted up
    /// to the latest snapshot anyway, and a member that far behind is sent
    /// the snapshot.
    #[arg(long, default_value_t = 256 * 1024 * 1024, env = "WARDEN_MAX_LOG_BYTES")]
    pub max_log_bytes: u64,
    /// The hidden switches of tests and the Jepsen selftest.
    #[command(flatten)]
    pub switches: switches::Switches,
    /// TLS on the doors and the peer links.
    #[command(flatten)]
    pub tls: tls::TlsArgs,
    /// Connections one client IP may hold open (native and ZooKeeper doors
    /// together); the next one is refused with LimitExceeded and closed.
    #[arg(long, default_value_t = limits::CONNECTIONS_PER_IP_MAX, env = "WARDEN_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: usize,
    /// Live sessions in the service; a connect asking for a new one beyond
    /// it is refused with LimitExceeded (resuming one is always allowed).
    #[arg(long, default_value_t = limits::SESSIONS_MAX, env = "WARDEN_MAX_SESSIONS")]
    pub max_sessions: usize,
    /// Unanswered requests per connection before the server stops reading
    /// from it (back-pressure).
    #[arg(long, default_value_t = limits::OUTSTANDING_REQUESTS_MAX, env = "WARDEN_MAX_OUTSTANDING_REQUESTS")]
    pub max_outstanding_requests: usize,
    /// Watches one session may hold on this server; a watch beyond it is
    /// refused with LimitExceeded.
    #[arg(long, default_value_t = limits::WATCHES_PER_SESSION_MAX, env = "WARDEN_MAX_WATCHES_PER_SESSION")]
    pub max_watches_per_session: usize,
    /// Bytes queued to a connection that does not read: past half of it its
    /// reads wait, past all of it the connection is dropped.
    #[arg(long, default_value_t = limits::QUEUED_BYTES_PER_CONNECTION_MAX, env = "WARDEN_MAX_QUEUED_BYTES_PER_CONNECTION")]
    pub max_queued_bytes_per_connection: usize,
    /// Largest request frame, on both client doors (ZooKeeper's
    /// jute.maxbuffer).
    #[arg(long, default_value_t = limits::REQUEST_BYTES_MAX, env = "WARDEN_MAX_REQUEST_BYTES")]
    pub max_request_bytes: usize,
    /// Most children one get_children may answer with; a bigger node is
    /// refused with LimitExceeded.
    #[arg(long, default_value_t = limits::CHILDREN_PER_REPLY_MAX, env = "WARDEN_MAX_CHILDREN_PER_REPLY")]
    pub max_children_per_reply: usize,
    /// Largest request packet on the ZooKeeper port (ZooKeeper's
    /// jute.maxbuffer, default 0xfffff): a larger one closes the client's
    /// connection, as ZooKeeper does.
    #[arg(long, default_value_t = limits::ZK_PACKET_BYTES_MAX, env = "WARDEN_ZK_MAX_PACKET_BYTES")]
    pub zk_max_packet_bytes: usize,
    /// Who is who: the super user, digest users, SASL users.
    #[command(flatten)]
    pub credentials: access::Credentials,
    /// ZooKeeper's read-only mode (its `readonlymode.enabled`): while this
    /// server knows no leader, ZooKeeper clients that connect with
    /// canBeReadOnly get a read-only session, served (possibly stale)
    /// reads from this server's tree and NotReadOnly for writes; `isro`
    /// answers `ro`. When a leader is back their connections close, and
    /// they reconnect for a read-write session.
    #[arg(long, env = "WARDEN_ZK_READ_ONLY")]
    pub zk_read_only: bool,
    /// The HTTP lock API's tokens and node ACL, the four-letter words.
    #[command(flatten)]
    pub access: access::AccessArgs,
    /// The shortest lease TTL the lock API (HTTP, gRPC, WebSocket)
    /// accepts, in ms; a shorter `ttl_ms` is refused (400 naming the
    /// field and this minimum). Every lease and waiter rewrites its node
    /// every third of its TTL, so this bounds the writes one caller causes.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = crate::limits::LOCK_TTL_MS_MIN_DEFAULT,
        env = "WARDEN_MIN_LOCK_TTL_MS"
    )]
    pub min_lock_ttl_ms: u64,
}

/// A peer in the Raft group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub addr: String,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub id: u64,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub peer_listen: SocketAddr,
    pub http_listen: SocketAddr,
    /// None: the ZooKeeper door is off.
    pub zk_listen: Option<SocketAddr>,
    /// None: the gRPC door is off.
    pub grpc_listen: Option<SocketAddr>,
    pub peers: Vec<Peer>,
    pub join: bool,
    /// `--force-new-cluster`: start as the only voter, keeping the data.
    pub force_new_cluster: bool,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    pub snapshot_entries: u64,
    pub snapshot_bytes: u64,
    pub max_log_bytes: u64,
    pub clock_offset_ms: i64,
    /// Tests only: re-read the clock offset from this file.
    pub clock_offset_file: Option<std::path::PathBuf>,
    /// Known-bad: linearizable reads without ReadIndex (selftest only).
    pub unsafe_skip_read_index: bool,
    /// Known-bad: removals in flight kept across role changes (selftest
    /// only).
    pub unsafe_keep_removals_across_roles: bool,
    /// Tests only: removal proposals to lose.
    pub unsafe_lose_removal_proposals: u64,
    /// Known-bad: ZooKeeper-port writes deduplicated by the last 64
    /// answers only (tests only).
    pub unsafe_bounded_dedup: bool,
    /// Chunk size of snapshot transfers.
    pub snapshot_chunk_bytes: usize,
    /// Known-bad: snapshot transfers to damage (tests only).
    pub unsafe_corrupt_snapshot_transfers: u64,
    /// Snapshots for followers in one raft message, as before streaming.
    pub inline_snapshots: bool,
    /// Known-bad: the Raft log is never fsynced (selftest only).
    pub unsafe_skip_fsync: bool,
    /// TLS for the doors and the peer links; `None`: plaintext everywhere.
    pub tls: Option<crate::tls::Tls>,
    pub limits: Limits,
    /// Super user and user list for digest auth.
    pub auth: crate::auth::AuthConfig,
    /// SASL users of the ZooKeeper port (`--zk-sasl-jaas`); `None`: SASL
    /// is refused.
    pub zk_sasl: Option<std::sync::Arc<crate::sasl::SaslUsers>>,
    /// `--zk-read-only`: read-only sessions while there is no quorum.
    pub zk_read_only: bool,
    /// HTTP bearer token -> `user:password`.
    pub http_tokens: Vec<(String, String)>,
    /// ACL of the HTTP lock API's nodes; empty: world:anyone.
    pub http_lock_acl: Vec<warden_protocol::pb::Acl>,
    /// `--4lw-whitelist`: the words answered to anyone.
    pub four_letter_whitelist: crate::authority::Whitelist,
    /// Shortest lease TTL of the lock API (`--min-lock-ttl-ms`).
    pub min_lock_ttl_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--id must be non-zero")]
    ZeroId,
    #[error("--tick-ms must be between 1 and 10000, got {0}")]
    Tick(u64),
    #[error(
        "--min-session-timeout-ms ({min}) must be > 0 and <= --max-session-timeout-ms ({max})"
    )]
    SessionTimeouts { min: u32, max: u32 },
    #[error("--heartbeat-ticks ({heartbeat}) must be at least 1 and less than --election-ticks ({election})")]
    Ticks { election: usize, heartbeat: usize },
    #[error("--snapshot-entries must be at least 1")]
    SnapshotEntries,
    #[error("--zk-listen: {0:?} is neither HOST:PORT nor `off`")]
    ZkListen(String),
    #[error("--grpc-listen: {0:?} is neither HOST:PORT nor `off`")]
    GrpcListen(String),
    #[error("--peers: {0}")]
    Peers(String),
    #[error("{0}")]
    TlsFlags(&'static str),
    /// Flags that cannot go together.
    #[error("{0}")]
    Conflict(&'static str),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("--tls-cert: {0}")]
    MemberId(String),
    #[error("{flag} must be between {min} and {max}, got {got}")]
    Limit {
        flag: &'static str,
        min: usize,
        max: usize,
        got: usize,
    },
    #[error("{0}")]
    Auth(String),
}

impl ServeArgs {
    pub fn validate(self) -> Result<Config, ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        if !(1..=10_000).contains(&self.tick_ms) {
            return Err(ConfigError::Tick(self.tick_ms));
        }
        if self.min_session_timeout_ms == 0
            || self.min_session_timeout_ms > self.max_session_timeout_ms
        {
            return Err(ConfigError::SessionTimeouts {
                min: self.min_session_timeout_ms,
                max: self.max_session_timeout_ms,
            });
        }
        if self.heartbeat_ticks == 0 || self.heartbeat_ticks >= self.election_ticks {
            return Err(ConfigError::Ticks {
                election: self.election_ticks,
                heartbeat: self.heartbeat_ticks,
            });
        }
        if self.snapshot_entries == 0 {
            return Err(ConfigError::SnapshotEntries);
        }
        if self.force_new_cluster && self.join {
            return Err(ConfigError::Conflict(
                "--force-new-cluster and --join cannot go together: the first starts a group \
                 of this server alone from its data, the second waits empty to be added",
            ));
        }
        self.switches.check()?;
        let limits = self.limits()?;
        let peers = parse_peers(&self.peers, self.id, &self.peer_listen)?;
        let zk_listen = match self.zk_listen.trim() {
            "off" | "" => None,
            a => Some(
                a.parse()
                    .map_err(|_| ConfigError::ZkListen(a.to_string()))?,
            ),
        };
        let grpc_listen = match self.grpc_listen.trim() {
            "off" | "" => None,
            a => Some(
                a.parse()
                    .map_err(|_| ConfigError::GrpcListen(a.to_string()))?,
            ),
        };
        let tls = tls::tls_files(&self.tls)?
            .map(|files| crate::tls::load(&files))
            .transpose()?;
        let cluster = peers.len() > 1 || self.join;
        if tls.is_some() && self.tls.tls_ca.is_none() && self.tls.peer_tls_ca.is_none() && cluster {
            return Err(ConfigError::TlsFlags(
                "--tls-ca (or --peer-tls-ca) is required for a cluster with TLS: peers prove \
                 they belong with certificates from that CA (mutual TLS), so a process without \
                 one can neither join nor send raft messages",
            ));
        }
        if let Some(tls) = &tls {
            tls::own_member_id(tls, self.id, cluster)?;
        }
        let access = access::Access::check(&self.credentials, &self.access)?;
        let lock_ttl_max = usize::try_from(crate::limits::LOCK_TTL_MS_MAX).unwrap_or(usize::MAX);
        if !(1..=lock_ttl_max)
            .contains(&usize::try_from(self.min_lock_ttl_ms).unwrap_or(usize::MAX))
        {
            return Err(ConfigError::Limit {
                flag: "--min-lock-ttl-ms",
                min: 1,
                max: lock_ttl_max,
                got: usize::try_from(self.min_lock_ttl_ms).unwrap_or(usize::MAX),
            });
        }
        Ok(Config {
            id: self.id,
            data_dir: self.data_dir,
            listen: self.listen,
            peer_listen: self.peer_listen,
            http_listen: self.http_listen,
            zk_listen,
            grpc_listen,
            peers,
            join: self.join,
            force_new_cluster: self.force_new_cluster,
            tick: Duration::from_millis(self.tick_ms),
            election_ticks: self.election_ticks,
            heartbeat_ticks: self.heartbeat_ticks,
            min_session_timeout_ms: self.min_session_timeout_ms,
            max_session_timeout_ms: self.max_session_timeout_ms,
            snapshot_entries: self.snapshot_entries,
            snapshot_bytes: self.snapshot_bytes.max(1),
            max_log_bytes: self.max_log_bytes,
            clock_offset_ms: self.switches.clock_offset_ms,
            clock_offset_file: self.switches.clock_offset_file.clone(),
            unsafe_skip_read_index: self.switches.unsafe_skip_read_index,
            unsafe_keep_removals_across_roles: self.switches.unsafe_keep_removals_across_roles,
            unsafe_lose_removal_proposals: self.switches.unsafe_lose_removal_proposals,
            unsafe_bounded_dedup: self.switches.unsafe_bounded_dedup,
            snapshot_chunk_bytes: self.switches.snapshot_chunk_bytes,
            unsafe_corrupt_snapshot_transfers: self.switches.unsafe_corrupt_snapshot_transfers,
            inline_snapshots: self.switches.inline_snapshots,
            unsafe_skip_fsync: self.switches.unsafe_skip_fsync,
            tls,
            limits,
            auth: access.auth,
            zk_sasl: access.zk_sasl,
            zk_read_only: self.zk_read_only,
            http_tokens: access.http_tokens,
            http_lock_acl: access.http_lock_acl,
            four_letter_whitelist: access.four_letter_whitelist,
            min_lock_ttl_ms: self.min_lock_ttl_ms,
        })
    }

    fn limits(&self) -> Result<Limits, ConfigError> {
        let check = |limit: Limit, got: usize, min: usize, max: usize| {
            if (min..=max).contains(&got) {
                Ok(got)
            } else {
                Err(ConfigError::Limit {
                    flag: limit.flag(),
                    min,
                    max,
                    got,
                })
            }
        };
        Ok(Limits {
            connections_per_ip: check(
                Limit::ConnectionsPerIp,
                self.max_connections_per_ip,
                1,
                usize::MAX,
            )?,
            sessions: check(Limit::Sessions, self.max_sessions, 1, usize::MAX)?,
            // The core keeps every unanswered request of a connection in
            // its queue (this bounds it), and their answers must fit the
            // outbound queue of a client that reads them late.
            outstanding_requests: check(
                Limit::OutstandingRequests,
                self.max_outstanding_requests,
                1,
                OUTBOUND_FRAMES_MAX,
            )?,
            watches_per_session: check(
                Limit::WatchesPerSession,
                self.max_watches_per_session,
                1,
                usize::MAX,
            )?,
            queued_bytes_per_connection: check(
                Limit::QueuedBytesPerConnection,
                self.max_queued_bytes_per_connection,
                1,
                usize::MAX,
            )?,
            // A request becomes one log entry: raft, storage and clients
            // are all built around the frame bound, so it may only shrink.
            request_bytes: check(
                Limit::RequestBytes,
                self.max_request_bytes,
                limits::REQUEST_BYTES_MIN,
                FRAME_BYTES_MAX,
            )?,
            children_per_reply: check(
                Limit::ChildrenPerReply,
                self.max_children_per_reply,
                1,
                usize::MAX,
            )?,
            zk_packet_bytes: check(
                Limit::ZkPacketBytes,
                self.zk_max_packet_bytes,
                limits::REQUEST_BYTES_MIN,
                FRAME_BYTES_MAX,
            )?,
        })
    }
}

fn parse_peers(spec: &str, id: u64, peer_listen: &SocketAddr) -> Result<Vec<Peer>, ConfigError> {
    if spec.trim().is_empty() {
        return Ok(vec![Peer {
            id,
            addr: peer_listen.to_string(),
        }]);
    }
    let mut peers = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (pid, addr) = item
            .split_once('=')
            .ok_or_else(|| ConfigError::Peers(format!("{item:?} is not ID=HOST:PORT")))?;
        let pid: u64 = pid
            .parse()
            .map_err(|_| ConfigError::Peers(format!("{pid:?} is not a numeric id")))?;
        if pid == 0 {
            return Err(ConfigError::Peers("peer ids must be non-zero".into()));
        }
        if peers.iter().any(|p: &Peer| p.id == pid) {
            return Err(ConfigError::Peers(format!("id {pid} appears twice")));
        }
        if addr.is_empty() {
            return Err(ConfigError::Peers(format!("peer {pid} has no address")));
        }
        peers.push(Peer {
            id: pid,
            addr: addr.to_string(),
        });
    }
    if !peers.iter().any(|p| p.id == id) {
        return Err(ConfigError::Peers(format!(
            "this server's id {id} is not listed"
        )));
    }
    peers.sort_by_key(|p| p.id);
    Ok(peers)
}

#[cfg(test)]
mod tests;
