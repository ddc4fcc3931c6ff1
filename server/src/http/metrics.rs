//! `/metrics`: Prometheus text, from `prometheus-client`.
//!
//! Request counts and latencies are recorded by the door as requests pass;
//! the core's figures (raft indexes, znodes, watches, connections) are read
//! from it at scrape time.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::sync::oneshot;
use warden_protocol::pb;

use super::{error, health, CallerAddr, Http};
use crate::core::{CoreMsg, ServerStats};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteCode {
    route: String,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Waited {
    waited: String,
}

pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RouteCode, Counter>,
    latency: Family<Route, Histogram>,
    lock_grants: Family<Waited, Counter>,
    lock_refusals: Counter,
    lock_wait: Histogram,
    gateway: super::gateway::GatewayCounters,
    raft_term: Gauge,
    raft_commit_index: Gauge,
    raft_applied_index: Gauge,
    raft_leader_changes: Counter,
    sessions: Gauge,
    // The core owns these running totals; each scrape advances the
    // counters to them (see `catch_up`).
    proposals: Counter,
    fsyncs: Counter,
    fsync_seconds: Counter<f64, AtomicU64>,
    append_batches: Counter,
    appended_entries: Counter,
    snapshot_bytes: Gauge,
    /// One scrape at a time advances the counters (two at once would add
    /// the same difference twice).
    scrape: Mutex<()>,
    znodes: Gauge,
    watches: Gauge,
    connections: Gauge,
    ephemerals: Gauge,
    members: Gauge,
    is_leader: Gauge,
    has_leader: Gauge,
    member_lag: Family<MemberLabel, Gauge>,
    member_reachable: Family<MemberLabel, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: String,
    revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabel {
    member: String,
}

impl Metrics {
    pub(crate) fn new(op_metrics: &crate::opmetrics::OpMetrics) -> Self {
        // Warden's own metrics are `warden_*`; the process collector's keep
        // the standard `process_*` names.
        let mut root = Registry::default();
        root.register_collector(Box::new(super::process_metrics::ProcessCollector));
        let registry = root.sub_registry_with_prefix("warden");
        op_metrics.register(registry);
        let requests = Family::<RouteCode, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        let latency = Family::<Route, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            latency.clone(),
        );
        let lock_grants = Family::<Waited, Counter>::default();
        registry.register(
            "lock_acquisitions",
            "Locks granted through the HTTP API (waited: whether the request allowed a wait)",
            lock_grants.clone(),
        );
        let lock_wait = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "lock_acquire_wait_seconds",
            "Time from an HTTP acquire to its grant (waiting plus hand-off)",
            lock_wait.clone(),
        );
        for waited in ["false", "true"] {
            let _ = lock_grants.get_or_create(&Waited {
                waited: waited.to_string(),
            });
        }
        let lock_refusals = Counter::default();
        registry.register(
            "lock_wait_timeouts",
            "Acquires through the HTTP API not granted within their wait timeout",
            lock_refusals.clone(),
        );
        let gateway = super::gateway::GatewayCounters::default();
        registry.register(
            "gateway_sessions_opened",
            "Loopback sessions the lock API's gateway opened for its callers' identities \
             (each a Raft write, and another when it is let go)",
            gateway.sessions_opened.clone(),
        );
        registry.register(
            "gateway_credentials_refused",
            "Lock API credentials refused before any session was opened for them (a wrong \
             password, or an identity nobody vouches for)",
            gateway.credentials_refused.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
            registry.register(name, help, g.clone());
            g
        };
        let raft_term = gauge(registry, "raft_term", "This server's Raft term");
        let raft_commit_index = gauge(registry, "raft_commit_index", "Raft commit index");
        let raft_applied_index = gauge(registry, "raft_applied_index", "Raft applied index");
        let raft_leader_changes = Counter::<u64, AtomicU64>::default();
        registry.register(
            "raft_leader_changes",
            "New leaders this server has seen since it started",
            raft_leader_changes.clone(),
        );
        let znodes = gauge(registry, "znodes", "Znodes in the tree");
        let watches = gauge(registry, "watches", "Watches registered on this server");
        let connections = gauge(registry, "connections", "Client connections");
        let ephemerals = gauge(registry, "ephemerals", "Ephemeral znodes");
        let members = gauge(registry, "members", "Members of the Raft group");
        let sessions = gauge(registry, "sessions", "Live client sessions");
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::<u64, AtomicU64>::default();
            registry.register(name, help, c.clone());
            c
        };
        let proposals = counter(
            registry,
            "raft_proposals",
            "Proposals this server handed to raft",
        );
        let fsyncs = counter(registry, "raft_fsyncs", "fsyncs of the raft log");
        let fsync_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "raft_fsync_seconds",
            "Time spent in raft log fsyncs; divided by raft_fsyncs: the mean fsync latency",
            fsync_seconds.clone(),
        );
        let append_batches = counter(
            registry,
            "raft_append_batches",
            "Ready batches that appended entries to the raft log",
        );
        let appended_entries = counter(
            registry,
            "raft_appended_entries",
            "Entries appended to the raft log; divided by raft_append_batches: the group-commit batch size",
        );
        let snapshot_bytes = gauge(
            registry,
            "snapshot_bytes",
            "Size of the last snapshot this server took (0: none yet)",
        );
        let build_info = Family::<BuildLabel, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the labels say which build this server runs",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabel {
                version: env!("CARGO_PKG_VERSION").to_string(),
                revision: warden_log::REVISION.to_string(),
            })
            .set(1);
        let is_leader = gauge(
            registry,
            "is_leader",
            "1 while this server is the Raft leader, else 0",
        );
        let has_leader = gauge(
            registry,
            "has_leader",
            "1 while this server knows a leader (itself or another), else 0",
        );
        let member_lag = Family::<MemberLabel, Gauge>::default();
        registry.register(
            "member_lag_entries",
            "How far each member's applied index is behind this server's commit index (the leader's view is the authoritative one)",
            member_lag.clone(),
        );
        let member_reachable = Family::<MemberLabel, Gauge>::default();
        registry.register(
            "member_reachable",
            "1 when this server heard from the member within the last few seconds",
            member_reachable.clone(),
        );
        Metrics {
            registry: root,
            is_leader,
            has_leader,
            member_lag,
            member_reachable,
            requests,
            latency,
            lock_grants,
            lock_refusals,
            gateway,
            lock_wait,
            raft_term,
            raft_commit_index,
            raft_applied_index,
            raft_leader_changes,
            sessions,
            proposals,
            fsyncs,
            fsync_seconds,
            append_batches,
            appended_entries,
            snapshot_bytes,
            scrape: Mutex::new(()),
            znodes,
            watches,
            connections,
            ephemerals,
            members,
        }
    }

    pub(crate) fn observe_request(&self, route: &str, code: u16, took: Duration) {
        self.requests
            .get_or_create(&RouteCode {
                route: route.to_string(),
                code,
            })
            .inc();
        self.latency
            .get_or_create(&Route {
                route: route.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// A grant after `took` (the wait, plus the hand-off from the previous
    /// holder when there was one).
    pub(crate) fn lock_granted(&self, waited: bool, took: Duration) {
        self.lock_grants
            .get_or_create(&Waited {
                waited: waited.to_string(),
            })
            .inc();
        self.lock_wait.observe(took.as_secs_f64());
    }

    /// The gateway's counters (shared: the gateway counts, `/metrics`
    /// shows).
    pub(crate) fn gateway_counters(&self) -> super::gateway::GatewayCounters {
        self.gateway.clone()
    }

    pub(crate) fn lock_refused(&self) {
        self.lock_refusals.inc();
    }

    pub(crate) fn record_cluster(&self, s: &pb::ClusterStatusResponse) {
        if let Some(me) = s.members.iter().find(|m| m.id == s.server_id) {
            self.raft_term.set(me.term as i64);
            self.raft_commit_index.set(me.commit_index as i64);
            self.raft_applied_index.set(me.applied_index as i64);
        }
        self.members.set(s.members.len() as i64);
        self.is_leader
            .set(i64::from(s.leader_id != 0 && s.leader_id == s.server_id));
        self.has_leader.set(i64::from(s.leader_id != 0));
        // Members that left are dropped, not left at their last value.
        let _one_at_a_time = self.scrape.lock().expect("metrics mutex");
        self.member_lag.clear();
        self.member_reachable.clear();
        for m in &s.members {
            let label = MemberLabel {
                member: m.id.to_string(),
            };
            self.member_lag.get_or_create(&label).set(m.lag as i64);
            self.member_reachable
                .get_or_create(&label)
                .set(i64::from(m.reachable));
        }
    }

    fn record_stats(&self, stats: &ServerStats) {
        self.znodes.set(stats.nodes as i64);
        self.watches.set(stats.watches as i64);
        self.connections.set(stats.connections as i64);
        self.ephemerals.set(stats.ephemerals as i64);
        self.sessions.set(stats.sessions as i64);
        self.snapshot_bytes.set(stats.last_snapshot_bytes as i64);
        let _one_at_a_time = self.scrape.lock().expect("metrics mutex");
        catch_up(&self.raft_leader_changes, stats.leader_changes);
        catch_up(&self.proposals, stats.proposals);
        catch_up(&self.fsyncs, stats.io.fsyncs);
        catch_up(&self.append_batches, stats.io.append_batches);
        catch_up(&self.appended_entries, stats.io.appended_entries);
        let spent = stats.io.fsync_time.as_secs_f64();
        let seen = self.fsync_seconds.get();
        if spent > seen {
            self.fsync_seconds.inc_by(spent - seen);
        }
    }
}

/// Advances `counter` to the core's running `total`.
fn catch_up(counter: &Counter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

/// `GET /metrics`: everyone's ([`crate::authority`]: counts and
/// latencies, no session id or path).
pub(crate) async fn metrics(
    State(http): State<Arc<Http>>,
    ConnectInfo(CallerAddr(from)): ConnectInfo<CallerAddr>,
) -> Response {
    let ids = crate::auth::connection_ids(from, None);
    let caller = crate::authority::Caller {
        ids: &ids,
        addr: from.ip(),
    };
    let asked = crate::authority::Action::Metrics;
    if let Err(why) = http
        .authority
        .check(asked, crate::authority::Door::Http, &caller)
    {
        return error(StatusCode::FORBIDDEN, why.to_string());
    }
    if let Some(s) = health::cluster_status(&http).await {
        http.metrics.record_cluster(&s);
    }
    let (tx, rx) = oneshot::channel();
    if http.core.send(CoreMsg::Stats { reply: tx }).await.is_ok() {
        if let Ok(Ok(stats)) = tokio::time::timeout(health::CORE_ANSWER_TIMEOUT, rx).await {
            http.metrics.record_stats(&stats);
        }
    }
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &http.metrics.registry) {
        return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
