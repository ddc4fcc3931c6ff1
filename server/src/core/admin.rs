//! Figures for ZooKeeper's four-letter words and AdminServer commands:
//! packets, latencies and last operations per connection and for the
//! whole server, and the listings (connections, watches, sessions, the
//! tree's digest) the words print.
//!
//! The reply pipeline ([`super::clients`]) counts as it goes: a request
//! received, a frame sent, an answer and how long it took (observed at the
//! same point, with the same duration, as the `/metrics` latency
//! histogram). `srst` resets the server's figures and `crst` every
//! connection's, as in ZooKeeper; the Prometheus counters are never reset.
//! The words themselves are rendered by [`crate::zk::fourletter`] (text)
//! and [`crate::http::admin`] (JSON).

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Core, ServerStats};

/// Request latencies, ZooKeeper's way: min, max, and the mean over a
/// count, kept in microseconds and reported in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    pub count: u64,
    pub sum_us: u64,
    pub min_us: u64,
    pub max_us: u64,
    pub last_us: u64,
}

impl Latency {
    pub fn observe(&mut self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.min_us = if self.count == 0 {
            us
        } else {
            self.min_us.min(us)
        };
        self.max_us = self.max_us.max(us);
        self.sum_us = self.sum_us.saturating_add(us);
        self.last_us = us;
        self.count += 1;
    }

    pub fn min_ms(&self) -> u64 {
        self.min_us / 1000
    }

    pub fn max_ms(&self) -> u64 {
        self.max_us / 1000
    }

    pub fn last_ms(&self) -> u64 {
        self.last_us / 1000
    }

    /// Mean in milliseconds (0 with no request).
    pub fn avg_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64 / 1000.0
        }
    }
}

/// Milliseconds since the Unix epoch, for operators' figures (a
/// connection's `cons` line) that decide nothing.
pub fn now_ms() -> i64 {
    // os-clock: operators' figures only.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One connection's figures (ZooKeeper's `cons` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnFigures {
    /// When the connection was opened, ms since the epoch (not reset).
    pub established_ms: i64,
    pub received: u64,
    pub sent: u64,
    /// ZooKeeper's four-letter name of the last operation answered
    /// (`GETD`, `CREA`, ...); `NA` before the first.
    pub last_op: &'static str,
    /// The xid of the last request received.
    pub last_cxid: Option<u64>,
    /// The zxid of the last answer.
    pub last_zxid: u64,
    /// When the last answer left, ms since the epoch (0: none yet).
    pub last_response_ms: i64,
    pub latency: Latency,
}

impl ConnFigures {
    pub fn new() -> Self {
        ConnFigures {
            established_ms: now_ms(),
            received: 0,
            sent: 0,
            last_op: "NA",
            last_cxid: None,
            last_zxid: 0,
            last_response_ms: 0,
            latency: Latency::default(),
        }
    }

    /// `crst`: everything but when the connection was opened.
    pub fn reset(&mut self) {
        *self = ConnFigures {
            established_ms: self.established_ms,
            ..ConnFigures::new()
        };
    }

    /// An answer to a request of kind `op` (a native op label) left at
    /// `zxid` after `took`.
    pub fn answered(&mut self, op: &'static str, zxid: u64, took: Duration) {
        self.last_op = zk_op_name(op);
        self.last_zxid = zxid;
        self.last_response_ms = now_ms();
        self.latency.observe(took);
    }
}

impl Default for ConnFigures {
    fn default() -> Self {
        Self::new()
    }
}

/// The server's figures since it started or since the last `srst`.
#[derive(Debug, Clone, Copy)]
pub struct ServerFigures {
    pub received: u64,
    pub sent: u64,
    pub latency: Latency,
    /// When the core started (not reset).
    pub started: Instant,
}

impl ServerFigures {
    pub fn new() -> Self {
        ServerFigures {
            received: 0,
            sent: 0,
            latency: Latency::default(),
            // os-clock: uptime for operators' figures only.
            started: Instant::now(),
        }
    }

    pub fn reset(&mut self) {
        *self = ServerFigures {
            started: self.started,
            ..ServerFigures::new()
        };
    }
}

impl Default for ServerFigures {
    fn default() -> Self {
        Self::new()
    }
}

/// ZooKeeper's name for an operation in `cons` (`lop=`), from its
/// FinalRequestProcessor; `NA` for what ZooKeeper has no name for.
pub fn zk_op_name(op: &str) -> &'static str {
    match op {
        "create" => "CREA",
        "delete" => "DELE",
        "set_data" => "SETD",
        "get_data" => "GETD",
        "exists" => "EXIS",
        "get_children" => "GETC",
        "multi" => "MULT",
        "multi_read" => "MLTR",
        "sync" => "SYNC",
        "ping" => "PING",
        "close" => "CLOS",
        "get_acl" => "GETA",
        "set_acl" => "SETA",
        "add_watch" => "ADDW",
        "remove_watches" => "REMW",
        "check_watches" => "CHKW",
        "set_watches" => "SETW",
        "get_ephemerals" => "GETE",
        "count_descendants" => "GCNT",
        "add_member" | "remove_member" | "reconfig" => "RECO",
        "auth" => "AUTH",
        _ => "NA",
    }
}

/// What a word or command needs from the core beyond [`ServerStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdminAsk {
    pub connections: bool,
    pub watches: bool,
    pub sessions: bool,
    pub digest: bool,
    /// `srst`: reset the server's figures (after reading them).
    pub reset_server: bool,
    /// `crst`: reset every connection's figures.
    pub reset_connections: bool,
}

/// One client connection, for `cons` and `stat`.
#[derive(Debug, Clone)]
pub struct ConnReport {
    pub peer: SocketAddr,
    pub session_id: u64,
    pub session_timeout_ms: u32,
    /// Requests received and not answered yet.
    pub outstanding: usize,
    pub figures: ConnFigures,
}

/// One live session, for `dump`.
#[derive(Debug, Clone)]
pub struct SessionReport {
    pub session_id: u64,
    pub timeout_ms: u32,
    pub ephemerals: Vec<String>,
}

/// The tree's digest at a zxid, for `hash`: the same tree gives the same
/// digest on every replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub zxid: u64,
    pub digest: u64,
}

/// Everything a four-letter word or AdminServer command prints.
#[derive(Debug, Clone)]
pub struct AdminReport {
    pub stats: ServerStats,
    pub server: ServerFigures,
    /// Requests received and not answered yet, all connections together.
    pub outstanding: usize,
    /// Bytes of every node's path and data.
    pub data_bytes: u64,
    /// This server is a Raft learner (ZooKeeper's observer).
    pub learner: bool,
    /// On the leader: other members heard from lately, and of those the
    /// voters and the learners (ZooKeeper's learners, synced followers
    /// and synced non-voting followers).
    pub learners: usize,
    pub synced_followers: usize,
    pub synced_non_voting: usize,
    /// Filled as asked.
    pub connections: Vec<ConnReport>,
    /// Per session with watches on this server: its watched paths, sorted.
    pub watches: Vec<(u64, Vec<String>)>,
    pub sessions: Vec<SessionReport>,
    pub digest: Option<Digest>,
}

impl Core {
    pub(super) fn admin(&mut self, ask: AdminAsk) -> AdminReport {
        if ask.reset_connections {
            self.m.clients.reset_conn_figures();
        }
        let stats = self.stats();
        let leader = self.m.role.is_leader();
        let (mut learners, mut synced_followers, mut synced_non_voting) = (0, 0, 0);
        if leader {
            for m in self.cluster_status().members {
                if m.id == self.m.node_id || !m.reachable {
                    continue;
                }
                learners += 1;
                if m.voter {
                    synced_followers += 1;
                } else {
                    synced_non_voting += 1;
                }
            }
        }
        let tree = &self.m.tree;
        let report = AdminReport {
            stats,
            server: self.m.clients.server_figures(),
            outstanding: self.m.clients.outstanding(),
            data_bytes: tree.data_bytes(),
            learner: self.raft.conf_state().learners.contains(&self.m.node_id),
            learners,
            synced_followers,
            synced_non_voting,
            connections: if ask.connections {
                self.m
                    .clients
                    .conn_reports(|s| tree.session(s).map_or(0, |info| info.timeout_ms))
            } else {
                Vec::new()
            },
            watches: if ask.watches {
                self.m.clients.watches_by_session()
            } else {
                Vec::new()
            },
            sessions: if ask.sessions {
                tree.sessions()
                    .map(|(id, info)| SessionReport {
                        session_id: id,
                        timeout_ms: info.timeout_ms,
                        ephemerals: tree.ephemerals(id),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            digest: ask.digest.then(|| Digest {
                zxid: tree.applied_index(),
                digest: tree.digest(),
            }),
        };
        if ask.reset_server {
            self.m.clients.reset_server_figures();
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_keeps_min_max_and_mean_in_ms() {
        let mut l = Latency::default();
        assert_eq!((l.min_ms(), l.avg_ms(), l.max_ms()), (0, 0.0, 0));
        l.observe(Duration::from_micros(1500));
        l.observe(Duration::from_micros(500));
        l.observe(Duration::from_micros(7000));
        assert_eq!((l.min_ms(), l.max_ms(), l.last_ms()), (0, 7, 7));
        assert!((l.avg_ms() - 3.0).abs() < 1e-9, "{}", l.avg_ms());
    }

    #[test]
    fn a_connection_reset_keeps_when_it_was_opened() {
        let mut c = ConnFigures::new();
        c.received = 3;
        c.answered("get_data", 9, Duration::from_millis(2));
        assert_eq!(c.last_op, "GETD");
        let opened = c.established_ms;
        c.reset();
        assert_eq!(c.received, 0);
        assert_eq!(c.last_op, "NA");
        assert_eq!(c.latency, Latency::default());
        assert_eq!(c.established_ms, opened);
    }
}
