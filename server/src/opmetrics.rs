//! Request counts and latencies by operation, for every door (native and
//! ZooKeeper): observed by the core when it sends each answer, exported by
//! the HTTP door's `/metrics`. Counters and histograms are atomic, so the
//! core records without locking or waiting.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use warden_protocol::pb::request::Op;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug)]
pub struct OpMetrics {
    requests: Family<OpLabel, Counter>,
    /// Clients refused or dropped by a limit (see `crate::limits`).
    limit_hits: Family<LimitLabel, Counter>,
    latency: Family<OpLabel, Histogram, fn() -> Histogram>,
    /// Observed by the Ready loop: each fsync's duration, and how many
    /// entries each appending Ready wrote (the group-commit batch size).
    pub fsync_seconds: Histogram,
    pub append_batch_entries: Histogram,
    /// Sessions the leader closed because their client went quiet past
    /// the session timeout (counted by the leader that expired them).
    pub session_expiries: Counter,
    /// Leader snapshots this server installed in place of its log.
    pub snapshot_installs: Counter,
    /// Client writes whose entry this server applied as a second copy of
    /// an applied write (proposed again after a leader change, or a
    /// native retry), changing nothing (`tree/writes.rs`).
    pub duplicate_writes: Counter,
    /// Client writes this server applied as refused: sent on a
    /// connection the session has left, or after a later write of the
    /// session applied (a lost place, or a copy of a write applied long
    /// before). Nothing changed.
    pub refused_writes: Counter,
    /// Raft heartbeat round trips to each peer, as the leader sees them.
    peer_rtt: Family<PeerLabel, Histogram, fn() -> Histogram>,
    /// Every recognised lock's figures, recorded where entries apply
    /// (see `crate::lockstats`).
    pub locks: crate::lockstats::LockMetrics,
    /// Peer connections and frames refused (see `crate::raft::peer_auth`).
    peer_refused: Family<ReasonLabel, Counter>,
    /// Admin actions refused (see `crate::authority`).
    pub authority_refusals: crate::authority::RefusalCounter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabel {
    peer: String,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Default for OpMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            limit_hits: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            fsync_seconds: latency_histogram(),
            // 1 .. 32768 entries.
            append_batch_entries: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            session_expiries: Counter::default(),
            snapshot_installs: Counter::default(),
            duplicate_writes: Counter::default(),
            refused_writes: Counter::default(),
            peer_rtt: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            locks: Default::default(),
            peer_refused: Family::default(),
            authority_refusals: Default::default(),
        }
    }
}

impl OpMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the families to `registry`. Every limit's hit counter starts
    /// at 0, so alerts on its rate work before the first hit.
    pub fn register(&self, registry: &mut Registry) {
        for limit in crate::limits::ALL {
            let _ = self.limit_hits.get_or_create(&LimitLabel {
                limit: limit.name().to_string(),
            });
        }
        registry.register(
            "requests",
            "Client requests answered, by operation (native and ZooKeeper doors)",
            self.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request reaching the core to its answer, by operation",
            self.latency.clone(),
        );
        registry.register(
            "limit_hits",
            "Clients refused, paused or dropped by a resource limit, by limit",
            self.limit_hits.clone(),
        );
        registry.register(
            "fsync_duration_seconds",
            "Duration of each fsync of the Raft log (one per Ready that wrote)",
            self.fsync_seconds.clone(),
        );
        registry.register(
            "append_batch_entries",
            "Entries written by each appending Ready (group-commit batch size)",
            self.append_batch_entries.clone(),
        );
        registry.register(
            "session_expiries",
            "Sessions expired by this server as leader (no heartbeat within the session timeout)",
            self.session_expiries.clone(),
        );
        registry.register(
            "snapshot_installs",
            "Leader snapshots this server installed in place of its log (it had fallen too far behind, or was new)",
            self.snapshot_installs.clone(),
        );
        registry.register(
            "duplicate_writes",
            "Client writes applied here as a second copy of an applied write (proposed again after a leader change, or retried), answered from the first and changing nothing",
            self.duplicate_writes.clone(),
        );
        registry.register(
            "refused_writes",
            "Client writes applied here as refused, changing nothing: sent on a connection the session has left, after a later write of the session applied, or after the session ended",
            self.refused_writes.clone(),
        );
        registry.register(
            "peer_rtt_seconds",
            "Round trip of the leader's Raft heartbeats to each peer, through the peer links and the peer's core",
            self.peer_rtt.clone(),
        );
        for refusal in crate::raft::peer_auth::REFUSALS {
            let _ = self.peer_refused.get_or_create(&ReasonLabel {
                reason: refusal.name().to_string(),
            });
        }
        registry.register(
            "peer_refused",
            "Peer connections and frames refused, by reason: certificate (names no member id), sender (not the member the link is bound to), wrong_peer (a dialled peer proved another id), non_member, connections (past the peer port's connection caps), frame (oversized or undecodable)",
            self.peer_refused.clone(),
        );
        self.locks.register(registry);
        self.authority_refusals.register(registry);
    }

    /// One peer connection or frame refused, for `reason`.
    pub fn peer_refused(&self, reason: &'static str) {
        self.peer_refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// One heartbeat round trip to `peer`.
    pub fn peer_rtt(&self, peer: u64, took: Duration) {
        self.peer_rtt
            .get_or_create(&PeerLabel {
                peer: peer.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// One answered request of kind `op` that took `took`.
    pub fn observe(&self, op: &'static str, took: Duration) {
        let label = OpLabel { op: op.to_string() };
        self.requests.get_or_create(&label).inc();
        self.latency
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }
}

impl OpMetrics {
    /// One hit of the limit named `limit`.
    pub fn limit_hit(&self, limit: &'static str) {
        self.limit_hits
            .get_or_create(&LimitLabel {
                limit: limit.to_string(),
            })
            .inc();
    }
}

/// The label of a request.
pub fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Create(_) => "create",
        Op::Delete(_) => "delete",
        Op::SetData(_) => "set_data",
        Op::GetData(_) => "get_data",
        Op::Exists(_) => "exists",
        Op::GetChildren(_) => "get_children",
        Op::Multi(_) => "multi",
        Op::Sync(_) => "sync",
        Op::Ping(_) => "ping",
        Op::Close(_) => "close",
        Op::GetAcl(_) => "get_acl",
        Op::SetAcl(_) => "set_acl",
        Op::AddWatch(_) => "add_watch",
        Op::RemoveWatches(_) => "remove_watches",
        Op::SetWatches(_) => "set_watches",
        Op::ClusterStatus(_) => "cluster_status",
        Op::AddMember(_) => "add_member",
        Op::RemoveMember(_) => "remove_member",
        Op::GetEphemerals(_) => "get_ephemerals",
        Op::CountDescendants(_) => "count_descendants",
        Op::CheckWatches(_) => "check_watches",
        Op::MultiRead(_) => "multi_read",
        Op::Auth(_) => "auth",
        Op::WhoAmI(_) => "who_am_i",
        Op::Reconfig(_) => "reconfig",
    }
}
