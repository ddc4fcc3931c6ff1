//! Resource limits: what one client may take from the server, each a named
//! default with a flag (`warden serve --max-...`).
//!
//! A limit protects the other clients, so hitting one refuses *that* client
//! only, with `LimitExceeded` and a message naming the limit and its flag
//! (on the ZooKeeper door: QuotaExceeded, or a closed connection where
//! ZooKeeper closes one). Every hit is counted for operators
//! (`warden_limit_hits_total{limit=...}` on `/metrics`) and logged at `warn`,
//! at most once a second per limit so that a flood cannot flood the log.
//!
//! Where each is enforced:
//! - connections per client IP: when a connection starts, in both client
//!   doors ([`Limiter::admit`], counted across the two doors);
//! - sessions: the core, when a connect asks for a new session;
//! - outstanding requests: the connection task stops reading the socket
//!   (back-pressure, no error);
//! - watches per session: the watch registry, when a read, AddWatch or
//!   SetWatches would add one;
//! - bytes queued to a slow reader: the core's push to the connection's
//!   outbound queue ([`crate::outbound`]);
//! - request size: the frame decoders, before allocating for the body
//!   (on the ZooKeeper door also `--zk-max-packet-bytes`, ZooKeeper's
//!   jute.maxbuffer: a larger packet closes the connection, as there);
//! - children per reply: get_children.
//!
//! The peer port and the accept loops have bounds of their own below
//! (constants, not flags: they follow from how members talk, not from a
//! deployment's load).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, warn};
use warden_protocol::FRAME_BYTES_MAX;

use crate::opmetrics::OpMetrics;

/// Connections one client IP may hold open, both client doors together.
/// ZooKeeper's `maxClientCnxns` default.
pub const CONNECTIONS_PER_IP_MAX: usize = 60;
/// Live sessions in the whole service. Each costs every replica memory
/// (and its ephemerals), and sessions nobody closes live until they time
/// out: this stops a reconnect loop from growing the table without end.
pub const SESSIONS_MAX: usize = 100_000;
/// Requests one connection may have unanswered before the server stops
/// reading from it. ZooKeeper's `globalOutstandingLimit` default.
pub const OUTSTANDING_REQUESTS_MAX: usize = 1000;
/// Answers of ZooKeeper-door writes one session keeps in the replicated
/// tree until the server that sent them acknowledges them
/// (`tree/writes.rs`): room for several full pipelines of
/// [`OUTSTANDING_REQUESTS_MAX`]. Only a backstop: a server acknowledges
/// with every write. Past it the oldest answers go; the writes still
/// never apply twice. A constant, not a flag: every replica must drop
/// the same answers.
pub const SESSION_ANSWERS_MAX: usize = 4 * OUTSTANDING_REQUESTS_MAX;
/// Watches one session may hold on this server. High enough for a cache of
/// a large tree (Curator's TreeCache holds two per node); each watch costs
/// ~200 bytes, so one session stays within ~20 MiB.
pub const WATCHES_PER_SESSION_MAX: usize = 100_000;
/// Bytes of answers and events queued to a connection that does not read
/// them. Past half of it the connection's reads wait (they are served when
/// it drains); past all of it the connection is dropped.
pub const QUEUED_BYTES_PER_CONNECTION_MAX: usize = 16 * 1024 * 1024;
/// Largest request frame (ZooKeeper's `jute.maxbuffer`): the frame bound
/// both sides have always used.
pub const REQUEST_BYTES_MAX: usize = FRAME_BYTES_MAX;
/// Most children one get_children answers with. ZooKeeper has no such
/// limit; ours keeps one reply (built in memory, then encoded) well inside
/// the frame bound for names of up to ~150 bytes.
pub const CHILDREN_PER_REPLY_MAX: usize = 100_000;
/// Largest request packet on the ZooKeeper door: ZooKeeper's
/// `jute.maxbuffer` default (0xfffff). ZooKeeper closes the connection of
/// a client that sends a larger one, and its clients expect exactly that
/// (ConnectionLoss), so the ZooKeeper door does the same.
pub const ZK_PACKET_BYTES_MAX: usize = 0xfffff;
/// Peers whose last frame a server remembers, for the quorum rule of
/// membership changes (members, and servers calling in before they are
/// added). Far above any real group; the bound stops made-up sender ids on
/// an open peer port from growing the record.
pub const PEER_CONTACTS_MAX: usize = 256;
/// Smallest --max-request-bytes: room for a ConnectRequest and a short
/// path.
pub const REQUEST_BYTES_MIN: usize = 1024;

// The lock service (the HTTP, gRPC and WebSocket doors, `crate::http`):
// what one caller of the lock API may ask of the cluster. Each is checked
// where the request is parsed, and refused with a 400 (gRPC
// INVALID_ARGUMENT) naming the field and the bound.

/// The longest lease one request may ask for: 24 hours. A lease outlives
/// its holder by its TTL, so a longer one would keep a crashed holder's
/// lock from everyone for days.
pub const LOCK_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The shortest lease one request may ask for unless `--min-lock-ttl-ms`
/// says otherwise: 1 s. Every lease and every waiter rewrites its node
/// (a Raft write) every third of its TTL; at `ttl_ms=1` one waiting
/// acquire alone is a write a millisecond for as long as it waits.
pub const LOCK_TTL_MS_MIN_DEFAULT: u64 = 1000;
/// The longest one acquire may wait: 5 minutes. A waiter holds a queue
/// node and a gateway task; a caller wanting longer asks again.
pub const LOCK_WAIT_MS_MAX: u64 = 5 * 60 * 1000;
/// Lock names: one path segment of `[A-Za-z0-9._-]`, at most this long
/// (the name is a znode name under the lock root).
pub const LOCK_NAME_LEN_MAX: usize = 128;
/// Client ids: at most this many bytes, no control characters (a client
/// id is hashed into its lease node; this bounds the work and the bodies).
pub const LOCK_CLIENT_ID_LEN_MAX: usize = 256;
/// Most loopback sessions the lock API's gateway keeps, one per caller
/// identity (the anonymous one included); beyond it the least recently
/// used is let go (its leases are persistent nodes and live on). Each
/// costs a session on every replica and two Raft writes (open, close).
pub const GATEWAY_SESSIONS_MAX: usize = 64;
/// Most of those sessions the callers from one source address may hold:
/// past it, a new identity from that source lets go of that source's
/// least recently used session, not another source's, so one source
/// cycling through identities cannot push every other caller out.
pub const GATEWAY_SESSIONS_PER_SOURCE_MAX: usize = 16;
/// The longest grace period a push wait (SSE, WebSocket) may ask for: 5
/// minutes. A wait keeps its place in line that long after its last
/// stream went, holding a queue node and a task for nobody.
pub const PUSH_GRACE_MS_MAX: u64 = 5 * 60 * 1000;
/// Most push waits one server keeps at once (attached or in their grace):
/// each is a task, a queue node and a session's watch (503 past it).
pub const PUSH_WAITS_MAX: usize = 10_000;
/// Most locks one server watches for holder streams at once: each is a
/// recipe watch and a history (503 past it).
pub const WATCH_HUBS_MAX: usize = 1024;
/// Changes a lock watch keeps for resuming streams: 256 holder states of
/// ~200 bytes each per watched lock.
pub const WATCH_HISTORY_MAX: usize = 256;

// The peer port (`--peer-listen`, `crate::raft::transport`): what any
// process that reaches it may take. A member needs little: one link to
// each other member, one snapshot transfer at a time from the leader,
// and for a moment a second link while it dials again.

/// Inbound peer connections one source address may hold open. A member
/// holds one link to us, one snapshot transfer, and for a moment the link
/// it is replacing: 3. The bound leaves room for ten members on one host
/// (a cluster on one machine, as the tests and `warden local` run).
/// Past it a new connection from that address is closed at once, counted
/// (`warden_peer_refused_total{reason="connections"}`) and logged.
pub const PEER_CONNECTIONS_PER_SOURCE_MAX: usize = 32;
/// Inbound peer connections from all sources together: room for 40
/// members' links (ZooKeeper and etcd advise 3 to 7), so that many
/// sources together still cannot take every file descriptor.
pub const PEER_CONNECTIONS_MAX: usize = 128;
/// How long an inbound or outbound peer connection may take from its
/// first byte to a verified TLS handshake. A member's handshake is a few
/// round trips on a local network; one that has not finished by then is
/// a stalled or hostile one, and gives its place back.
pub const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest log entry a server proposes for a client's write. A request
/// (at most [`FRAME_BYTES_MAX`], ZooKeeper's packets too) becomes one
/// entry: its txn plus the connection's identities (at most
/// `auth::CONN_IDS_MAX`, of at most 1 KiB each). A txn is about its
/// request's size, but can be far larger: an `auth` ACL entry becomes one
/// entry per identity of the connection, and a node's ACL may hold 31 of
/// them (one per permission set), on each of a multi's 1000 creates: a
/// request of a few KiB can make a txn of hundreds of MiB. Twice the
/// request bound is room for every write a client means; a write whose
/// entry would be larger is refused (`LimitExceeded`, naming the sizes)
/// before raft holds it, so that every entry fits a peer frame: one that
/// no follower could receive would stop the cluster for good.
pub const ENTRY_BYTES_MAX: usize = 2 * FRAME_BYTES_MAX;
/// What raft and the peer frame add around one entry or snapshot chunk
/// (the raft message's term, indexes and commit, the frame's sender): a
/// few hundred bytes; the rest is margin.
pub const PEER_FRAME_OVERHEAD_BYTES: usize = 1024 * 1024;
/// Largest frame on the peer port (a frame's length is read before its
/// body, and a larger one closes the connection before anything is
/// allocated). What a member sends: raft appends (at most 64 KiB of
/// entries, or one entry of at most [`ENTRY_BYTES_MAX`]), snapshot chunks
/// (at most `--snapshot-chunk-bytes`, 16 MiB), heartbeats, status and
/// session touches (a few bytes per session). Was 1 GiB, when a snapshot
/// was one frame; a server older than streamed snapshots sending one
/// larger than this is refused (the transfer fails; upgrade it).
pub const PEER_FRAME_BYTES_MAX: usize = ENTRY_BYTES_MAX + PEER_FRAME_OVERHEAD_BYTES;

// Every door's accept loop (client, ZooKeeper, HTTP, gRPC, peer).

/// Pause after a failed accept (out of file descriptors: EMFILE, ENFILE,
/// or out of memory) before the next try: the failure lasts until a
/// connection closes, and trying again at once would spin a core while
/// the connection waiting in the backlog makes every try fail.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// At most one `warn` line per door for failed accepts in this interval
/// (with how many failed since the last line): a flood cannot flood the
/// log.
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The limits in force (validated flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connections_per_ip: usize,
    pub sessions: usize,
    pub outstanding_requests: usize,
    pub watches_per_session: usize,
    pub queued_bytes_per_connection: usize,
    pub request_bytes: usize,
    pub children_per_reply: usize,
    /// The ZooKeeper door's packet bound (the smaller of this and
    /// `request_bytes` applies there).
    pub zk_packet_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections_per_ip: CONNECTIONS_PER_IP_MAX,
            sessions: SESSIONS_MAX,
            outstanding_requests: OUTSTANDING_REQUESTS_MAX,
            watches_per_session: WATCHES_PER_SESSION_MAX,
            queued_bytes_per_connection: QUEUED_BYTES_PER_CONNECTION_MAX,
            request_bytes: REQUEST_BYTES_MAX,
            children_per_reply: CHILDREN_PER_REPLY_MAX,
            zk_packet_bytes: ZK_PACKET_BYTES_MAX,
        }
    }
}

/// Which limit was hit (the metric label and the flag that tunes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    ConnectionsPerIp,
    Sessions,
    OutstandingRequests,
    WatchesPerSession,
    QueuedBytesPerConnection,
    RequestBytes,
    ChildrenPerReply,
    ZkPacketBytes,
}

const LIMITS: usize = 8;
/// Every limit, in `index` order.
pub const ALL: [Limit; LIMITS] = [
    Limit::ConnectionsPerIp,
    Limit::Sessions,
    Limit::OutstandingRequests,
    Limit::WatchesPerSession,
    Limit::QueuedBytesPerConnection,
    Limit::RequestBytes,
    Limit::ChildrenPerReply,
    Limit::ZkPacketBytes,
];

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::ConnectionsPerIp => "connections_per_ip",
            Limit::Sessions => "sessions",
            Limit::OutstandingRequests => "outstanding_requests",
            Limit::WatchesPerSession => "watches_per_session",
            Limit::QueuedBytesPerConnection => "queued_bytes_per_connection",
            Limit::RequestBytes => "request_bytes",
            Limit::ChildrenPerReply => "children_per_reply",
            Limit::ZkPacketBytes => "zk_packet_bytes",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Limit::ConnectionsPerIp => "--max-connections-per-ip",
            Limit::Sessions => "--max-sessions",
            Limit::OutstandingRequests => "--max-outstanding-requests",
            Limit::WatchesPerSession => "--max-watches-per-session",
            Limit::QueuedBytesPerConnection => "--max-queued-bytes-per-connection",
            Limit::RequestBytes => "--max-request-bytes",
            Limit::ChildrenPerReply => "--max-children-per-reply",
            Limit::ZkPacketBytes => "--zk-max-packet-bytes",
        }
    }

    /// The limit whose flag `message` names (every refusal names one).
    pub fn named_in(message: &str) -> Option<Limit> {
        ALL.into_iter().find(|l| message.contains(l.flag()))
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Last time (ms since the epoch) a hit of each limit was logged at `warn`.
static LAST_WARN_MS: [AtomicU64; LIMITS] = [const { AtomicU64::new(0) }; LIMITS];
/// At most one `warn` line per limit in this interval; the rest at `debug`
/// (the metric counts them all).
const WARN_INTERVAL_MS: u64 = 1000;

/// Counts a hit of `limit` and logs it for operators. `what` says who hit it
/// and how (it is the client's message too).
pub fn record(metrics: &OpMetrics, limit: Limit, what: &str) {
    metrics.limit_hit(limit.name());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let last = &LAST_WARN_MS[limit.index()];
    let prev = last.load(Ordering::Relaxed);
    if now.saturating_sub(prev) >= WARN_INTERVAL_MS
        && last
            .compare_exchange(prev, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        warn!(
            limit = limit.name(),
            flag = limit.flag(),
            "limit hit: {what}"
        );
    } else {
        debug!(limit = limit.name(), "limit hit: {what}");
    }
}

/// Open connections per source address (and in all), for one door or a
/// group of doors: what a connection cap counts.
#[derive(Debug, Clone, Default)]
pub struct SourceCounts {
    counts: Arc<Mutex<Counts>>,
}

#[derive(Debug, Default)]
struct Counts {
    per_ip: HashMap<IpAddr, usize>,
    total: usize,
}

/// Why [`SourceCounts::admit`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The source already holds this many.
    Source(usize),
    /// All sources together hold this many.
    Total(usize),
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct IpPermit {
    ip: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for IpPermit {
    fn drop(&mut self) {
        let mut c = self.counts.lock().expect("per-IP table lock");
        c.total -= 1;
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

impl SourceCounts {
    /// Admits one more connection from `ip` if it holds fewer than
    /// `per_source` and all together fewer than `total`.
    pub fn admit(&self, ip: IpAddr, per_source: usize, total: usize) -> Result<IpPermit, Full> {
        let mut c = self.counts.lock().expect("per-IP table lock");
        if c.total >= total {
            return Err(Full::Total(c.total));
        }
        let n = c.per_ip.entry(ip).or_insert(0);
        if *n >= per_source {
            return Err(Full::Source(*n));
        }
        *n += 1;
        c.total += 1;
        Ok(IpPermit {
            ip,
            counts: self.counts.clone(),
        })
    }

    /// Open connections from `ip`.
    pub fn from(&self, ip: IpAddr) -> usize {
        let c = self.counts.lock().expect("per-IP table lock");
        c.per_ip.get(&ip).copied().unwrap_or(0)
    }

    /// Open connections from every source.
    pub fn total(&self) -> usize {
        self.counts.lock().expect("per-IP table lock").total
    }
}

/// What the connection tasks of both client doors share: the limits, the
/// open connections per client IP, and the metric.
#[derive(Debug, Clone)]
pub struct Limiter {
    pub limits: Limits,
    per_ip: SourceCounts,
    metrics: OpMetrics,
}

impl Limiter {
    pub fn new(limits: Limits, metrics: OpMetrics) -> Self {
        Self {
            limits,
            per_ip: SourceCounts::default(),
            metrics,
        }
    }

    /// Admits one more connection from `ip`, or says why not (the message
    /// for the client; the hit is already recorded).
    pub fn admit(&self, ip: IpAddr) -> Result<IpPermit, String> {
        let max = self.limits.connections_per_ip;
        if let Ok(permit) = self.per_ip.admit(ip, max, usize::MAX) {
            return Ok(permit);
        }
        let msg = format!(
            "{ip} already has {max} connections open; the limit is {max} ({})",
            Limit::ConnectionsPerIp.flag()
        );
        self.record(Limit::ConnectionsPerIp, &msg);
        Err(msg)
    }

    pub fn record(&self, limit: Limit, what: &str) {
        record(&self.metrics, limit, what);
    }

    /// Open connections from `ip` (for tests and status).
    pub fn connections_from(&self, ip: IpAddr) -> usize {
        self.per_ip.from(ip)
    }
}

/// The message for a refused request: what, the limit, and its flag.
pub fn message(limit: Limit, max: usize, what: impl std::fmt::Display) -> String {
    format!("{what}; the limit is {max} ({})", limit.flag())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_permits_are_counted_and_freed() {
        let limiter = Limiter::new(
            Limits {
                connections_per_ip: 2,
                ..Limits::default()
            },
            OpMetrics::new(),
        );
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = limiter.admit(a).unwrap();
        let _p2 = limiter.admit(a).unwrap();
        let err = limiter.admit(a).unwrap_err();
        assert!(err.contains("--max-connections-per-ip"), "{err}");
        assert!(err.contains("10.0.0.1"), "{err}");
        // Another address is not affected.
        let _p3 = limiter.admit(b).unwrap();
        drop(p1);
        assert_eq!(limiter.connections_from(a), 1);
        let _p4 = limiter.admit(a).unwrap();
        assert_eq!(limiter.connections_from(a), 2);
    }

    #[test]
    fn source_counts_bound_each_source_and_the_total() {
        let counts = SourceCounts::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let a1 = counts.admit(a, 2, 3).unwrap();
        let _a2 = counts.admit(a, 2, 3).unwrap();
        assert_eq!(counts.admit(a, 2, 3).unwrap_err(), Full::Source(2));
        let _b1 = counts.admit(b, 2, 3).unwrap();
        assert_eq!(counts.admit(c, 2, 3).unwrap_err(), Full::Total(3));
        drop(a1);
        assert_eq!((counts.from(a), counts.total()), (1, 2));
        let _c1 = counts.admit(c, 2, 3).unwrap();
        assert_eq!(counts.total(), 3);
    }

    #[test]
    fn every_limit_names_its_flag() {
        for l in ALL {
            assert!(l.index() < LIMITS);
            assert_eq!(Limit::named_in(&message(l, 1, "x")), Some(l));
            // `--max-request-bytes` is request_bytes, and the ZooKeeper
            // door's `--zk-max-packet-bytes` zk_packet_bytes.
            assert_eq!(
                l.flag()
                    .trim_start_matches("--")
                    .replace("max-", "")
                    .replace('-', "_"),
                l.name()
            );
        }
    }
}
