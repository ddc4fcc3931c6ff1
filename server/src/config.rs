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

pub mod file;

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
    /// Tests of clock skew only: add this to this server's wall clock.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        allow_negative_numbers = true,
        env = "WARDEN_CLOCK_OFFSET_MS"
    )]
    pub clock_offset_ms: i64,
    /// Tests of clock jumps only: a file holding a clock offset in ms,
    /// re-read while the server runs (a missing or empty file is 0), so a
    /// test can jump this server's wall clock at run time.
    #[arg(long, hide = true, env = "WARDEN_CLOCK_OFFSET_FILE")]
    pub clock_offset_file: Option<std::path::PathBuf>,
    /// KNOWN-BAD, for the Jepsen selftest only: answer linearizable reads
    /// and `sync` from this server's own tree, without ReadIndex, so a
    /// partitioned or lagging server serves stale data. The suite must
    /// catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_SKIP_READ_INDEX")]
    pub unsafe_skip_read_index: bool,
    /// KNOWN-BAD, for the Jepsen selftest only: TTL and container removals
    /// in flight outlive a role change, so one lost with a leadership is
    /// never proposed again while this server leads (a lease outlives its
    /// TTL). The suite must catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_KEEP_REMOVALS_ACROSS_ROLES")]
    pub unsafe_keep_removals_across_roles: bool,
    /// Tests only: this server's first N removal proposals (expired TTL
    /// nodes, empty containers) are counted in flight but never handed to
    /// raft, as if lost with its leadership.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        env = "WARDEN_UNSAFE_LOSE_REMOVAL_PROPOSALS"
    )]
    pub unsafe_lose_removal_proposals: u64,
    /// KNOWN-BAD, for tests only: tag ZooKeeper-port writes with an xid
    /// this server makes, recognised on a second apply only among the
    /// session's last 64 answers (the scheme before exactly-once writes),
    /// so a write proposed again after a leader change can apply twice.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_BOUNDED_DEDUP")]
    pub unsafe_bounded_dedup: bool,
    /// Bytes per chunk when a snapshot is streamed to a follower (tests
    /// use small chunks to make a small tree take several).
    #[arg(
        long,
        default_value_t = crate::raft::snapstream::CHUNK_BYTES_DEFAULT,
        hide = true,
        env = "WARDEN_SNAPSHOT_CHUNK_BYTES"
    )]
    pub snapshot_chunk_bytes: usize,
    /// KNOWN-BAD, for tests of the follower's check only: the next this
    /// many snapshot transfers from this server get a byte flipped.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        env = "WARDEN_UNSAFE_CORRUPT_SNAPSHOT_TRANSFERS"
    )]
    pub unsafe_corrupt_snapshot_transfers: u64,
    /// Send snapshots to followers the way earlier versions did: the whole
    /// tree in one raft message on the peer link, read on this server's
    /// core and built on the follower's (for comparisons, and for
    /// followers of a version that cannot receive a streamed snapshot).
    #[arg(long, hide = true, env = "WARDEN_INLINE_SNAPSHOTS")]
    pub inline_snapshots: bool,
    /// KNOWN-BAD, for the Jepsen selftest only: the Raft log's sync hands
    /// writes to the OS without fsync, so entries this server acknowledged
    /// are lost when its machine loses power (the suite's `lose-unsynced`
    /// nemesis). The suite must catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_SKIP_FSYNC")]
    pub unsafe_skip_fsync: bool,
    /// This server's certificate chain (PEM). With --tls-key, the client,
    /// ZooKeeper and HTTP ports speak TLS only.
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA certificate(s) (PEM) that client and peer certificates must chain
    /// to. Required for a cluster with TLS (or --peer-tls-ca): peer links
    /// are then mutual TLS, each peer's certificate naming its member id.
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// CA certificate(s) (PEM) for peer links alone, in place of --tls-ca
    /// there: no certificate of the clients' CA can then be a peer's.
    #[arg(long, value_name = "FILE", env = "WARDEN_PEER_TLS_CA")]
    pub peer_tls_ca: Option<PathBuf>,
    /// Whether clients must present a certificate from --tls-ca.
    #[arg(long, value_enum, default_value_t = crate::tls::ClientAuth::Optional, env = "WARDEN_TLS_CLIENT_AUTH")]
    pub tls_client_auth: crate::tls::ClientAuth,
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
    /// The super user, who passes every ACL check: `user:BASE64HASH`, as
    /// ZooKeeper's superDigest (`warden digest user:password` prints it).
    #[arg(long, value_name = "USER:BASE64HASH", env = "WARDEN_SUPER_DIGEST")]
    pub super_digest: Option<String>,
    /// Users whose passwords digest auth checks: a file of `user:BASE64HASH`
    /// lines (`#` comments). Without it any well-formed user:password is
    /// accepted as that digest identity (ZooKeeper's behaviour).
    #[arg(long, value_name = "FILE", env = "WARDEN_AUTH_USERS")]
    pub auth_users: Option<PathBuf>,
    /// SASL DIGEST-MD5 on the ZooKeeper port: a JAAS file whose `Server`
    /// section lists the users (`user_bob="secret"`, ZooKeeper's
    /// DigestLoginModule), the same file a ZooKeeper server reads. A user
    /// who authenticates gets the identities `sasl:USER` and the digest
    /// identity of that user and password.
    #[arg(long, value_name = "FILE", env = "WARDEN_ZK_SASL_JAAS")]
    pub zk_sasl_jaas: Option<PathBuf>,
    /// ZooKeeper's read-only mode (its `readonlymode.enabled`): while this
    /// server knows no leader, ZooKeeper clients that connect with
    /// canBeReadOnly get a read-only session, served (possibly stale)
    /// reads from this server's tree and NotReadOnly for writes; `isro`
    /// answers `ro`. When a leader is back their connections close, and
    /// they reconnect for a read-write session.
    #[arg(long, env = "WARDEN_ZK_READ_ONLY")]
    pub zk_read_only: bool,
    /// A bearer token of the HTTP lock API and the digest identity it
    /// stands for (repeatable).
    /// (WARDEN_HTTP_TOKEN holds one; for several, or to keep tokens off
    /// the command line, use --http-token-file.)
    #[arg(
        long = "http-token",
        value_name = "TOKEN=USER:PASSWORD",
        env = "WARDEN_HTTP_TOKEN"
    )]
    pub http_tokens: Vec<String>,
    /// A file of --http-token values, one `TOKEN=USER:PASSWORD` a line
    /// (`#` comments), added to any --http-token.
    #[arg(long, value_name = "FILE", env = "WARDEN_HTTP_TOKEN_FILE")]
    pub http_token_file: Option<PathBuf>,
    /// The ACL of the nodes the HTTP lock API creates, in zkCli's text
    /// form (`digest:svc:HASH:cdrwa,world:anyone:r`); default
    /// world:anyone:cdrwa.
    #[arg(long, value_name = "ACL", env = "WARDEN_HTTP_LOCK_ACL")]
    pub http_lock_acl: Option<String>,
    /// The four-letter words answered to anyone, as ZooKeeper's
    /// `4lw.commands.whitelist`: a comma list (`ruok,srvr,mntr`), `*` for
    /// all. A word off it answers `WORD is not executed because it is not
    /// in the whitelist.`, and its AdminServer command needs the super
    /// user. Default: the words that show no session, client or path and
    /// change nothing (docs/security.md: Who may do what).
    #[arg(
        long = "4lw-whitelist",
        value_name = "WORDS",
        env = "WARDEN_4LW_WHITELIST"
    )]
    pub four_letter_whitelist: Option<String>,
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
        let chunk_max = crate::raft::snapstream::CHUNK_BYTES_MAX;
        if !(1..=chunk_max).contains(&self.snapshot_chunk_bytes) {
            return Err(ConfigError::Limit {
                flag: "--snapshot-chunk-bytes",
                min: 1,
                max: chunk_max,
                got: self.snapshot_chunk_bytes,
            });
        }
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
        let tls = tls_files(&self)?
            .map(|files| crate::tls::load(&files))
            .transpose()?;
        let cluster = peers.len() > 1 || self.join;
        if tls.is_some() && self.tls_ca.is_none() && self.peer_tls_ca.is_none() && cluster {
            return Err(ConfigError::TlsFlags(
                "--tls-ca (or --peer-tls-ca) is required for a cluster with TLS: peers prove \
                 they belong with certificates from that CA (mutual TLS), so a process without \
                 one can neither join nor send raft messages",
            ));
        }
        if let Some(tls) = &tls {
            own_member_id(tls, self.id, cluster)?;
        }
        let auth =
            crate::auth::AuthConfig::new(self.super_digest.as_deref(), self.auth_users.as_deref())
                .map_err(ConfigError::Auth)?;
        let zk_sasl = match &self.zk_sasl_jaas {
            None => None,
            Some(path) => Some(std::sync::Arc::new(
                crate::sasl::jaas::load(path).map_err(ConfigError::Auth)?,
            )),
        };
        let mut token_specs = self.http_tokens.clone();
        if let Some(path) = &self.http_token_file {
            token_specs.extend(read_token_file(path)?);
        }
        let http_tokens = parse_http_tokens(&token_specs)?;
        let http_lock_acl = match &self.http_lock_acl {
            None => Vec::new(),
            Some(text) => warden_protocol::auth::parse_acl(text)
                .map_err(|e| ConfigError::Auth(format!("--http-lock-acl: {e}")))?,
        };
        let four_letter_whitelist = match &self.four_letter_whitelist {
            None => crate::authority::Whitelist::default(),
            Some(text) => crate::authority::Whitelist::parse(text).map_err(ConfigError::Auth)?,
        };
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
            clock_offset_ms: self.clock_offset_ms,
            clock_offset_file: self.clock_offset_file.clone(),
            unsafe_skip_read_index: self.unsafe_skip_read_index,
            unsafe_keep_removals_across_roles: self.unsafe_keep_removals_across_roles,
            unsafe_lose_removal_proposals: self.unsafe_lose_removal_proposals,
            unsafe_bounded_dedup: self.unsafe_bounded_dedup,
            snapshot_chunk_bytes: self.snapshot_chunk_bytes,
            unsafe_corrupt_snapshot_transfers: self.unsafe_corrupt_snapshot_transfers,
            inline_snapshots: self.inline_snapshots,
            unsafe_skip_fsync: self.unsafe_skip_fsync,
            tls,
            limits,
            auth,
            zk_sasl,
            zk_read_only: self.zk_read_only,
            http_tokens,
            http_lock_acl,
            four_letter_whitelist,
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

/// The TLS flags, checked for consistency; `None`: TLS is off.
fn tls_files(args: &ServeArgs) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            if args.tls_client_auth == crate::tls::ClientAuth::Required && args.tls_ca.is_none() {
                return Err(ConfigError::TlsFlags(
                    "--tls-client-auth required needs --tls-ca (the CA client certificates must chain to)",
                ));
            }
            Ok(Some(crate::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: args.tls_ca.clone(),
                peer_ca: args.peer_tls_ca.clone(),
                client_auth: args.tls_client_auth,
            }))
        }
        (Some(_), None) => Err(ConfigError::TlsFlags("--tls-cert needs --tls-key")),
        (None, Some(_)) => Err(ConfigError::TlsFlags("--tls-key needs --tls-cert")),
        (None, None) if args.tls_ca.is_some() => Err(ConfigError::TlsFlags(
            "--tls-ca needs --tls-cert and --tls-key (this server's own certificate)",
        )),
        (None, None) if args.peer_tls_ca.is_some() => Err(ConfigError::TlsFlags(
            "--peer-tls-ca needs --tls-cert and --tls-key (this server's own certificate)",
        )),
        (None, None) if args.tls_client_auth == crate::tls::ClientAuth::Required => {
            Err(ConfigError::TlsFlags(
                "--tls-client-auth required needs --tls-cert, --tls-key and --tls-ca",
            ))
        }
        (None, None) => Ok(None),
    }
}

/// This server's certificate must speak for its own `--id` on peer links
/// (its peers hold it to the id it names): one naming another member is
/// refused at start; one naming none is refused for a cluster with peer
/// TLS (a single server's peer port admits nobody anyway).
fn own_member_id(tls: &crate::tls::Tls, id: u64, cluster: bool) -> Result<(), ConfigError> {
    match &tls.member_id {
        Ok(named) if *named == id => Ok(()),
        Ok(named) => Err(ConfigError::MemberId(format!(
            "the certificate speaks for member {named} ({}), but this server is --id {id}; \
             each node needs a certificate naming its own id",
            crate::tls::peer_id::node_uri(*named)
        ))),
        Err(e) if cluster && tls.peers.is_some() => Err(ConfigError::MemberId(format!(
            "{e}; peers accept a node's certificate only for the member it names, so this \
             one needs the URI SAN {} (`warden certs --node n{id}` makes one)",
            crate::tls::peer_id::node_uri(id)
        ))),
        Err(_) => Ok(()),
    }
}

/// The `TOKEN=USER:PASSWORD` lines of an --http-token-file (blank lines
/// and `#` comments skipped). Its errors name the file and line, never the
/// secret.
fn read_token_file(path: &std::path::Path) -> Result<Vec<String>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::Auth(format!("--http-token-file {}: {e}", path.display())))?;
    let mut specs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        parse_http_tokens(&[line.to_string()]).map_err(|e| {
            ConfigError::Auth(format!(
                "--http-token-file {} line {}: {}",
                path.display(),
                n + 1,
                e.to_string().trim_start_matches("--http-token: ")
            ))
        })?;
        specs.push(line.to_string());
    }
    Ok(specs)
}

/// `TOKEN=user:password`, each token once.
fn parse_http_tokens(specs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for spec in specs {
        let bad = |why: &str| ConfigError::Auth(format!("--http-token: {why}"));
        let (token, credentials) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected TOKEN=USER:PASSWORD"))?;
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the token must be non-empty, without spaces"));
        }
        warden_protocol::auth::split_credentials(credentials).map_err(|e| bad(&e.0))?;
        if out.iter().any(|(t, _)| t == token) {
            return Err(bad("a token is given twice"));
        }
        out.push((token.to_string(), credentials.to_string()));
    }
    Ok(out)
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
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        let mut all = vec!["warden"];
        all.extend_from_slice(args);
        Cli::parse_from(all).serve.validate()
    }

    #[test]
    fn defaults_make_a_single_node() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.id, 1);
        assert_eq!(
            c.peers,
            vec![Peer {
                id: 1,
                addr: "127.0.0.1:7100".into()
            }]
        );
        assert_eq!(c.tick, Duration::from_millis(100));
        assert_eq!(c.limits, Limits::default());
    }

    #[test]
    fn limits_are_parsed_and_checked() {
        let c = parse(&[
            "--max-connections-per-ip",
            "5000",
            "--max-request-bytes",
            "4096",
        ])
        .unwrap();
        assert_eq!(c.limits.connections_per_ip, 5000);
        assert_eq!(c.limits.request_bytes, 4096);
        let err = parse(&["--max-watches-per-session", "0"]).unwrap_err();
        assert!(
            err.to_string().contains("--max-watches-per-session"),
            "{err}"
        );
        assert!(parse(&["--max-request-bytes", "100000000"]).is_err());
        assert!(parse(&["--max-outstanding-requests", "100000"]).is_err());
    }

    #[test]
    fn peers_are_parsed_and_checked() {
        let c = parse(&["--id", "2", "--peers", "1=a:1, 2=b:2,3=c:3"]).unwrap();
        assert_eq!(c.peers.len(), 3);
        assert!(parse(&["--peers", "2=b:2"])
            .unwrap_err()
            .to_string()
            .contains("id 1 is not listed"));
        assert!(parse(&["--peers", "x=b:2"]).is_err());
        assert!(parse(&["--peers", "1=a:1,1=b:2"]).is_err());
        assert!(parse(&["--id", "0"]).is_err());
        assert_eq!(parse(&["--zk-listen", "off"]).unwrap().zk_listen, None);
        assert!(parse(&["--zk-listen", "nope"]).is_err());
        assert_eq!(parse(&[]).unwrap().grpc_listen, None);
        assert_eq!(
            parse(&["--grpc-listen", "127.0.0.1:7300"])
                .unwrap()
                .grpc_listen,
            Some("127.0.0.1:7300".parse().unwrap())
        );
        assert!(parse(&["--grpc-listen", "nope"])
            .unwrap_err()
            .to_string()
            .contains("--grpc-listen"));
        assert!(parse(&["--election-ticks", "3", "--heartbeat-ticks", "3"]).is_err());
        assert!(parse(&["--super-digest", "nocolon"]).is_err());
        assert!(parse(&["--super-digest", "admin:aGFzaA=="]).is_ok());
        assert!(parse(&["--auth-users", "/nonexistent/users"]).is_err());
        let err = parse(&["--zk-sasl-jaas", "/nonexistent/jaas.conf"]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--zk-sasl-jaas /nonexistent/jaas.conf:"),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let jaas = dir.path().join("jaas.conf");
        std::fs::write(&jaas, "Server { m required user_bob=\"secret\"; };").unwrap();
        let c = parse(&["--zk-sasl-jaas", jaas.to_str().unwrap()]).unwrap();
        assert_eq!(c.zk_sasl.unwrap().password("bob"), Some("secret"));
        assert!(parse(&[]).unwrap().zk_sasl.is_none());
        let c = parse(&["--http-token", "t1=bob:pw", "--http-token", "t2=al:x:y"]).unwrap();
        assert_eq!(c.http_tokens[1], ("t2".to_string(), "al:x:y".to_string()));
        assert!(parse(&["--http-token", "t1"]).is_err());
        assert!(parse(&["--http-token", "t1=bob"]).is_err());
        assert!(parse(&["--http-token", "t=a:b", "--http-token", "t=c:d"]).is_err());
        assert_eq!(
            parse(&["--http-lock-acl", "digest:svc:aA==:cdrwa,world:anyone:r"])
                .unwrap()
                .http_lock_acl
                .len(),
            2
        );
        assert!(parse(&["--http-lock-acl", "bogus"]).is_err());
        assert!(parse(&[
            "--min-session-timeout-ms",
            "5",
            "--max-session-timeout-ms",
            "4"
        ])
        .is_err());
    }

    #[test]
    fn force_new_cluster_and_join_are_refused_together() {
        assert!(parse(&["--force-new-cluster"]).unwrap().force_new_cluster);
        let e = parse(&["--force-new-cluster", "--join"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot go together"), "{e}");
    }

    #[test]
    fn every_flag_has_its_environment_variable() {
        use clap::CommandFactory as _;
        let cmd = Cli::command();
        let mut checked = 0;
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" {
                continue;
            }
            let want = format!("WARDEN_{}", long.to_uppercase().replace('-', "_"));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(want.as_str()),
                "--{long}"
            );
            checked += 1;
        }
        assert!(checked > 30, "{checked}");
    }

    #[test]
    fn http_tokens_come_from_a_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# tokens\n\nt2=carol:pw\n  t3=dan:a:b  \n").unwrap();
        let file = path.to_str().unwrap();
        let c = parse(&["--http-token", "t1=bob:pw", "--http-token-file", file]).unwrap();
        let tokens: Vec<_> = c.http_tokens.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(tokens, ["t1", "t2", "t3"]);
        assert_eq!(c.http_tokens[2].1, "dan:a:b");
        // A token in both places is refused like one given twice.
        assert!(parse(&["--http-token", "t2=x:y", "--http-token-file", file]).is_err());
        // A bad line is named by its number, and the secret is not shown.
        std::fs::write(&path, "t1=bob:pw\nsecret-without-user\n").unwrap();
        let e = parse(&["--http-token-file", file]).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains(file), "{e}");
        assert!(!e.contains("secret-without-user"), "{e}");
        let e = parse(&["--http-token-file", "/nonexistent/tokens"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--http-token-file /nonexistent/tokens"), "{e}");
    }

    #[test]
    fn tls_flags_must_make_sense_together() {
        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(err(&["--tls-cert", "c.pem"]).contains("--tls-cert needs --tls-key"));
        assert!(err(&["--tls-key", "k.pem"]).contains("--tls-key needs --tls-cert"));
        assert!(err(&["--tls-ca", "ca.pem"]).contains("--tls-ca needs --tls-cert"));
        assert!(err(&["--tls-client-auth", "required"]).contains("needs --tls-cert"));
        assert!(err(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-client-auth",
            "required"
        ])
        .contains("needs --tls-ca"));
        // A file that is not there is named, with its flag.
        let e = err(&["--tls-cert", "/nonexistent/c.pem", "--tls-key", "k.pem"]);
        assert!(e.contains("--tls-cert /nonexistent/c.pem"), "{e}");
        assert!(parse(&[]).unwrap().tls.is_none());
    }

    #[test]
    fn a_tls_cluster_needs_a_ca() {
        use crate::tls::certs::{Ca, Role, LOCAL_SANS};
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::open_or_create(dir.path()).unwrap();
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        let node = ca.issue("n1", Role::Node, &sans).unwrap();
        let (cert, key) = (node.cert.to_str().unwrap(), node.key.to_str().unwrap());
        let ca_path = ca.cert_path();
        let ca_path = ca_path.to_str().unwrap();
        let cluster = ["--peers", "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3"];
        let mut args = vec!["--tls-cert", cert, "--tls-key", key];
        // One node: TLS for clients without a CA is fine.
        assert!(parse(&args).unwrap().tls.is_some());
        args.extend(cluster);
        let e = parse(&args).unwrap_err().to_string();
        assert!(
            e.contains("--tls-ca (or --peer-tls-ca) is required for a cluster with TLS"),
            "{e}"
        );
        args.extend(["--tls-ca", ca_path]);
        let tls = parse(&args).unwrap().tls.unwrap();
        assert!(tls.peers.is_some());
        // A key that is not the certificate's.
        let other = ca.issue("n2", Role::Node, &sans).unwrap();
        let e = parse(&[
            "--tls-cert",
            cert,
            "--tls-key",
            other.key.to_str().unwrap(),
            "--tls-ca",
            ca_path,
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("TLS set-up"), "{e}");
    }

    #[test]
    fn a_node_certificate_must_speak_for_its_own_id() {
        use crate::tls::certs::{Ca, Role, LOCAL_SANS};
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::open_or_create(dir.path()).unwrap();
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        let ca_path = ca.cert_path();
        let ca_path = ca_path.to_str().unwrap().to_string();
        let cluster = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3";
        let args = |issued: &crate::tls::certs::Issued, id: &str, peers: Option<&str>| {
            let mut args = vec![
                "--id".to_string(),
                id.to_string(),
                "--tls-cert".to_string(),
                issued.cert.to_str().unwrap().to_string(),
                "--tls-key".to_string(),
                issued.key.to_str().unwrap().to_string(),
                "--tls-ca".to_string(),
                ca_path.clone(),
            ];
            if let Some(p) = peers {
                args.extend(["--peers".to_string(), p.to_string()]);
            }
            args
        };
        let check = |args: Vec<String>| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            parse(&args).map(|_| ()).map_err(|e| e.to_string())
        };
        let n2 = ca.issue("n2", Role::Node, &sans).unwrap();
        check(args(&n2, "2", Some(cluster))).unwrap();
        let e = check(args(&n2, "1", Some(cluster))).unwrap_err();
        assert!(
            e.contains("speaks for member 2") && e.contains("--id 1"),
            "{e}"
        );
        // Alone, too: the certificate is not this server's.
        assert!(check(args(&n2, "1", None)).is_err());
        // A certificate naming no member: a single server's, not a peer's.
        for unnamed in [
            ca.issue("node", Role::Node, &sans).unwrap(),
            ca.issue("alice", Role::Client, &[]).unwrap(),
        ] {
            check(args(&unnamed, "1", None)).unwrap();
            let e = check(args(&unnamed, "1", Some(cluster))).unwrap_err();
            assert!(e.contains("names no member id"), "{e}");
        }
    }
}
