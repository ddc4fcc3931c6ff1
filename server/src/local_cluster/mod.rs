//! `warden local-cluster`: a whole Warden cluster on this machine, for
//! trying things out, demos and failure drills.
//!
//! # What it runs
//!
//! `--nodes` (3 or 5) `warden serve` processes, children running this same
//! binary, wired into one Raft group on 127.0.0.1. With `P` = `--base-port`
//! (7000) and `DIR` = `--data-dir` (`./warden-local-cluster`), node `i`
//! (1-based) gets:
//!
//! | what | where |
//! |---|---|
//! | client port | `P + i - 1` |
//! | peer (Raft) port | `P + 100 + i - 1` |
//! | HTTP port | `P + 200 + i - 1` (so nodes never share `serve`'s default) |
//! | ZooKeeper port | `P + 300 + i - 1` |
//! | data | `DIR/node-i/` |
//! | stdout and stderr | `DIR/node-i.log` (appended to across runs) |
//! | process id | `DIR/node-i.pid`, while it runs |
//!
//! With `--tls`, `DIR/tls` gets a throwaway CA (kept across runs), a
//! certificate per node (`node-i.pem`, valid for `localhost` and
//! `127.0.0.1`) and one for wardenctl (`client.pem`); every node serves TLS
//! only on its client, ZooKeeper and HTTP ports, with mutual TLS between
//! peers, and the guide prints the wardenctl line with the `--tls-*` flags.
//!
//! A node prints its ready line (`warden listening client=ADDR`) only once a
//! leader is elected and it has caught up, and that needs a quorum of the
//! group. So every process is started first and only then are the ready
//! lines awaited: waiting for node 1 before starting node 2 would wait
//! forever. When all are ready, one line goes to stdout,
//! `WARDEN_SERVERS=127.0.0.1:7000,...`, the connect string that clients and
//! `wardenctl` take, and a short guide goes to stderr.
//!
//! # What it owns, and what it must never do
//!
//! It owns the child processes, and nothing in them: it never reads or
//! changes a node's data, and it never restarts a node. A node that exits on
//! its own is reported (id, exit status, log) and left down, because the
//! operator may be testing exactly that failure; the others keep running.
//!
//! On Ctrl-C or SIGTERM every node gets SIGTERM and [`STOP_TIMEOUT`] to exit
//! cleanly, then SIGKILL; a second signal skips the wait. Once every node is
//! gone it exits 0. The nodes run in their own process group, so a Ctrl-C
//! typed in the terminal reaches the supervisor alone and shutdown happens
//! in one order, its own. The price: if the supervisor itself is SIGKILLed,
//! its nodes keep running; their pids are in the `.pid` files.
//!
//! # Shape
//!
//! One task per node owns its [`Child`](tokio::process::Child): it waits for the exit, and signals
//! the child when told to stop. A second task per node copies the child's
//! stdout into the log and spots the ready line. Both report to [`run`] on
//! one bounded channel; [`run`] tells the node tasks to stop through a watch
//! channel. Nothing is shared, nothing is locked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

mod guide;
mod node;
mod plan;

use guide::announce;
use node::{spawn_node, supervise};
use plan::prepare;
pub use plan::{LocalClusterArgs, NodePlan, Plan};

/// Cluster sizes offered: 3 survives one failed node, 5 survives two.
/// (Even sizes tolerate no more failures than the odd size below them.)
pub const NODE_COUNTS: [usize; 2] = [3, 5];

/// Node `i`'s client port is `base + i - 1`.
pub const BASE_PORT_DEFAULT: u16 = 7000;

/// Node `i`'s peer (Raft) port is `base + PEER_PORT_OFFSET + i - 1`.
pub const PEER_PORT_OFFSET: u16 = 100;

/// Node `i`'s HTTP port is `base + HTTP_PORT_OFFSET + i - 1`.
pub const HTTP_PORT_OFFSET: u16 = 200;

/// Node `i`'s ZooKeeper-protocol port is `base + ZK_PORT_OFFSET + i - 1`.
pub const ZK_PORT_OFFSET: u16 = 300;

/// Start of the line `local-cluster` prints on stderr with the ZooKeeper
/// connect string.
pub const ZK_SERVERS_LINE_PREFIX: &str = "ZOOKEEPER_SERVERS=";

/// How long the whole cluster may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a node has to exit after SIGTERM before it is SIGKILLed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Start of the line `warden serve` prints on stdout when it is ready (see
/// `main.rs`).
pub const READY_LINE_PREFIX: &str = "warden listening client=";

/// The client address of `warden serve`'s ready line, in either form: text
/// (`warden listening client=ADDR ...`) or, with `--log-format json`
/// (which a node inherits as `WARDEN_LOG_FORMAT`), a JSON object with
/// `"message": "warden listening"` and `"client"`.
pub fn ready_line_client(line: &str) -> Option<String> {
    if let Some(rest) = line.strip_prefix(READY_LINE_PREFIX) {
        return Some(rest.split_whitespace().next().unwrap_or("").to_string());
    }
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    if value.get("message")?.as_str()? != "warden listening" {
        return None;
    }
    value.get("client")?.as_str().map(str::to_string)
}

/// Start of the one line `local-cluster` prints on stdout.
pub const SERVERS_LINE_PREFIX: &str = "WARDEN_SERVERS=";

/// With `--tls`, stdout also names the CA and wardenctl's certificate and
/// key in lines starting with these (the environment variables wardenctl
/// reads).
pub const TLS_CA_LINE_PREFIX: &str = "WARDEN_TLS_CA=";
pub const TLS_CERT_LINE_PREFIX: &str = "WARDEN_TLS_CERT=";
pub const TLS_KEY_LINE_PREFIX: &str = "WARDEN_TLS_KEY=";

/// Events one node can report: a ready line, then an exit.
const EVENTS_PER_NODE: usize = 2;

/// With `--tls`, the certificates live in `DIR/tls`.
pub const TLS_DIR: &str = "tls";
/// The client certificate `--tls` makes for wardenctl (`DIR/tls/client.pem`).
pub const CLIENT_CERT_NAME: &str = "client";

/// Node `id`'s certificate is `DIR/tls/node-ID.pem`.
fn node_cert_name(id: u64) -> String {
    format!("node-{id}")
}

/// Prefix of every line the supervisor itself writes to stderr.
const ME: &str = "warden local-cluster";

#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error("--nodes must be 3 or 5 (3 survives one failed node, 5 survives two), got {0}")]
    Nodes(usize),
    #[error(
        "--base-port {base} does not fit {nodes} nodes: ports {base}..={last} must be between 1 and 65535"
    )]
    BasePort { base: u16, nodes: usize, last: u32 },
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot use {addr} (node {id}'s {what} port): {source}; is another cluster running? pick another --base-port"
    )]
    Port {
        id: u64,
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen for Ctrl-C and SIGTERM: {0}")]
    Signals(std::io::Error),
    #[error("cannot find this program's path to start the nodes: {0}")]
    CurrentExe(std::io::Error),
    #[error("cannot write node {id}'s log {}: {source}", path.display())]
    Log {
        id: u64,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start node {id}: {source}")]
    Spawn { id: u64, source: std::io::Error },
    #[error("node {id} exited before the cluster was ready ({status}); see {}", log.display())]
    NodeFailed {
        id: u64,
        status: String,
        log: PathBuf,
    },
    #[error(
        "the cluster was not ready within {timeout:?}: no ready line yet from node(s) {waiting:?}; see their logs in {}", dir.display()
    )]
    NotReady {
        timeout: Duration,
        waiting: Vec<u64>,
        dir: PathBuf,
    },
    #[error("every node has exited; their logs are in {}", dir.display())]
    AllExited { dir: PathBuf },
    #[error("cannot make the TLS certificates: {0}")]
    Certs(#[from] crate::tls::certs::CertError),
}

/// What the per-node tasks tell [`run`].
#[derive(Debug)]
enum Event {
    Ready { id: u64, client: String },
    Exited { id: u64, status: String },
}

/// What [`run`] asks of the node tasks; only ever raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stop {
    Run,
    /// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`].
    Term,
    /// SIGKILL now.
    Kill,
}

/// How a node task ended.
#[derive(Debug)]
struct NodeEnd {
    id: u64,
    status: String,
    how: EndedBy,
}

#[derive(Debug, PartialEq, Eq)]
enum EndedBy {
    /// Exited while nobody asked (already reported).
    Itself,
    /// Exited after SIGTERM.
    Term { clean: bool },
    /// Needed SIGKILL.
    Kill,
}

/// Runs the cluster until Ctrl-C or SIGTERM. `Ok` after a requested
/// shutdown; `Err` if the cluster could not start or every node died.
pub async fn run(plan: Plan) -> Result<(), LocalClusterError> {
    // Installed before any child exists, so that a signal sent the moment
    // a node is up is never lost to the default action.
    let mut signals = Signals::install().map_err(LocalClusterError::Signals)?;
    prepare(&plan)?;
    let exe = std::env::current_exe().map_err(LocalClusterError::CurrentExe)?;

    let (events_tx, mut events) = mpsc::channel(plan.nodes.len() * EVENTS_PER_NODE);
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let mut nodes = JoinSet::new();
    let mut pids = BTreeMap::new();
    for node in &plan.nodes {
        match spawn_node(&exe, &plan, node, events_tx.clone()) {
            Ok((child, forwarder)) => {
                pids.insert(node.id, child.id());
                nodes.spawn(supervise(
                    node.clone(),
                    child,
                    forwarder,
                    stop_rx.clone(),
                    events_tx.clone(),
                ));
            }
            Err(e) => {
                shutdown(&plan, &stop_tx, &mut nodes, &mut signals).await;
                return Err(e);
            }
        }
    }
    // Only the tasks hold senders now: `recv` returning `None` means every
    // node task is done.
    drop(events_tx);

    // Phase 1: every node ready, or give up.
    eprintln!(
        "{ME}: started {} nodes in {}; waiting for a leader...",
        plan.nodes.len(),
        plan.dir.display()
    );
    let mut ready: BTreeMap<u64, String> = BTreeMap::new();
    let deadline = tokio::time::sleep(READY_TIMEOUT);
    tokio::pin!(deadline);
    while ready.len() < plan.nodes.len() {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Ready { id, client }) => {
                    ready.insert(id, client);
                }
                Some(Event::Exited { id, status }) => {
                    shutdown(&plan, &stop_tx, &mut nodes, &mut signals).await;
                    return Err(LocalClusterError::NodeFailed {
                        id,
                        status,
                        log: node_plan(&plan, id).log.clone(),
                    });
                }
                None => return Err(LocalClusterError::AllExited { dir: plan.dir.clone() }),
            },
            () = &mut deadline => {
                shutdown(&plan, &stop_tx, &mut nodes, &mut signals).await;
                return Err(LocalClusterError::NotReady {
                    timeout: READY_TIMEOUT,
                    waiting: plan.nodes.iter().map(|n| n.id).filter(|id| !ready.contains_key(id)).collect(),
                    dir: plan.dir.clone(),
                });
            }
            () = signals.recv() => {
                shutdown(&plan, &stop_tx, &mut nodes, &mut signals).await;
                return Ok(());
            }
        }
    }
    announce(&plan, &ready, &pids);

    // Phase 2: supervise until told to stop.
    let mut running = plan.nodes.len();
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Exited { id, status }) => {
                    running -= 1;
                    eprintln!(
                        "{ME}: node {id} exited ({status}); log: {}. \
                         It is not restarted; {running} node(s) still running.",
                        node_plan(&plan, id).log.display()
                    );
                    if running == 0 {
                        return Err(LocalClusterError::AllExited { dir: plan.dir.clone() });
                    }
                }
                Some(Event::Ready { .. }) => {}
                None => return Err(LocalClusterError::AllExited { dir: plan.dir.clone() }),
            },
            () = signals.recv() => {
                shutdown(&plan, &stop_tx, &mut nodes, &mut signals).await;
                return Ok(());
            }
        }
    }
}

fn node_plan(plan: &Plan, id: u64) -> &NodePlan {
    plan.nodes
        .iter()
        .find(|n| n.id == id)
        .expect("events only come from planned nodes")
}

/// Tells every node task to stop and waits for all of them; a second signal
/// escalates to SIGKILL.
async fn shutdown(
    plan: &Plan,
    stop: &watch::Sender<Stop>,
    nodes: &mut JoinSet<NodeEnd>,
    signals: &mut Signals,
) {
    eprintln!(
        "{ME}: stopping the nodes (SIGTERM; SIGKILL after {STOP_TIMEOUT:?}, or at once on a second Ctrl-C)"
    );
    stop.send_replace(Stop::Term);
    let mut escalated = false;
    loop {
        tokio::select! {
            joined = nodes.join_next() => match joined {
                None => break,
                Some(Ok(end)) => match end.how {
                    EndedBy::Term { clean: true } | EndedBy::Itself => {}
                    EndedBy::Term { clean: false } => {
                        eprintln!("{ME}: node {} stopped with {}", end.id, end.status);
                    }
                    EndedBy::Kill => eprintln!("{ME}: node {} was killed ({})", end.id, end.status),
                },
                Some(Err(e)) => eprintln!("{ME}: a node task failed: {e}"),
            },
            () = signals.recv(), if !escalated => {
                escalated = true;
                eprintln!("{ME}: second signal: killing the nodes now");
                stop.send_replace(Stop::Kill);
            }
        }
    }
    eprintln!(
        "{ME}: all nodes stopped; data and logs kept in {}",
        plan.dir.display()
    );
}

/// Ctrl-C and SIGTERM, as one stream of "stop" requests.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Completes on the next Ctrl-C or SIGTERM.
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ready_lines_are_read_in_both_formats() {
        use super::ready_line_client;
        let text = "warden listening client=127.0.0.1:7000 zk=127.0.0.1:2181 http=127.0.0.1:7200";
        assert_eq!(ready_line_client(text).as_deref(), Some("127.0.0.1:7000"));
        let json = r#"{"message":"warden listening","client":"127.0.0.1:7001","zk":null}"#;
        assert_eq!(ready_line_client(json).as_deref(), Some("127.0.0.1:7001"));
        for other in [
            r#"{"message":"ready","client":"127.0.0.1:7001"}"#,
            "warden starting client=127.0.0.1:7000",
            "",
        ] {
            assert_eq!(ready_line_client(other), None, "{other}");
        }
    }
}
