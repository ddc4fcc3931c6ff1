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
//! One task per node owns its [`Child`]: it waits for the exit, and signals
//! the child when told to stop. A second task per node copies the child's
//! stdout into the log and spots the ready line. Both report to [`run`] on
//! one bounded channel; [`run`] tells the node tasks to stop through a watch
//! channel. Nothing is shared, nothing is locked.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

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

/// Flags of `warden local-cluster`.
#[derive(Debug, Clone, Args)]
pub struct LocalClusterArgs {
    /// How many nodes: 3 (survives one failure) or 5 (survives two).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Node i keeps its data in DIR/node-i and its log in DIR/node-i.log.
    #[arg(long, value_name = "DIR", default_value = "warden-local-cluster")]
    pub data_dir: PathBuf,
    /// Node i listens for clients on P+i-1, for peers on P+100+i-1 and for
    /// HTTP on P+200+i-1 and for ZooKeeper clients on P+300+i-1, all on
    /// 127.0.0.1.
    #[arg(long, value_name = "P", default_value_t = BASE_PORT_DEFAULT)]
    pub base_port: u16,
    /// Raft tick of every node (default: that of `warden serve`).
    #[arg(long)]
    pub tick_ms: Option<u64>,
    /// TLS everywhere: a throwaway CA and certificates in DIR/tls (node-i
    /// for each node, `client` for wardenctl), every port TLS only, peer
    /// links mutual TLS.
    #[arg(long)]
    pub tls: bool,
}

/// Everything about the cluster decided before anything starts.
#[derive(Debug, Clone)]
pub struct Plan {
    pub dir: PathBuf,
    /// Passed through to every node; `warden serve` checks the range, so
    /// the rule lives in one place.
    pub tick_ms: Option<u64>,
    pub nodes: Vec<NodePlan>,
    /// With `--tls`: where the CA and certificates go (`DIR/tls`).
    pub tls_dir: Option<PathBuf>,
}

/// One node's addresses and files.
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub id: u64,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub http: SocketAddr,
    /// ZooKeeper-protocol address.
    pub zk: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub pid_file: PathBuf,
}

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

impl LocalClusterArgs {
    pub fn validate(self) -> Result<Plan, LocalClusterError> {
        if !NODE_COUNTS.contains(&self.nodes) {
            return Err(LocalClusterError::Nodes(self.nodes));
        }
        let base = self.base_port;
        // The highest port handed out: the last node's ZooKeeper port.
        let last = u32::from(base) + u32::from(ZK_PORT_OFFSET) + self.nodes as u32 - 1;
        if base == 0 || last > u32::from(u16::MAX) {
            return Err(LocalClusterError::BasePort {
                base,
                nodes: self.nodes,
                last,
            });
        }
        let at = |offset: u16, i: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, base + offset + i));
        let nodes = (1..=self.nodes as u16)
            .map(|id| NodePlan {
                id: u64::from(id),
                client: at(0, id - 1),
                peer: at(PEER_PORT_OFFSET, id - 1),
                http: at(HTTP_PORT_OFFSET, id - 1),
                zk: at(ZK_PORT_OFFSET, id - 1),
                data_dir: self.data_dir.join(format!("node-{id}")),
                log: self.data_dir.join(format!("node-{id}.log")),
                pid_file: self.data_dir.join(format!("node-{id}.pid")),
            })
            .collect();
        Ok(Plan {
            tls_dir: self.tls.then(|| self.data_dir.join(TLS_DIR)),
            dir: self.data_dir,
            tick_ms: self.tick_ms,
            nodes,
        })
    }
}

impl Plan {
    /// `--peers` of every node: `1=127.0.0.1:7100,2=...`.
    pub fn peers(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The arguments after `warden` that start `node`.
    pub fn serve_args(&self, node: &NodePlan) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "serve".into(),
            "--id".into(),
            node.id.to_string().into(),
            "--peers".into(),
            self.peers().into(),
            "--peer-listen".into(),
            node.peer.to_string().into(),
            "--listen".into(),
            node.client.to_string().into(),
            "--http-listen".into(),
            node.http.to_string().into(),
            "--zk-listen".into(),
            node.zk.to_string().into(),
            "--data-dir".into(),
            node.data_dir.clone().into(),
        ];
        if let Some(tick_ms) = self.tick_ms {
            args.extend(["--tick-ms".into(), tick_ms.to_string().into()]);
        }
        if let Some(tls) = &self.tls_dir {
            let name = node_cert_name(node.id);
            args.extend([
                "--tls-cert".into(),
                tls.join(format!("{name}.pem")).into(),
                "--tls-key".into(),
                tls.join(format!("{name}-key.pem")).into(),
                "--tls-ca".into(),
                tls.join(crate::tls::certs::CA_FILE).into(),
            ]);
        }
        args
    }

    /// With `--tls`: the certificate wardenctl presents (`client.pem`).
    pub fn client_cert(&self) -> Option<crate::tls::certs::Issued> {
        self.tls_dir.as_ref().map(|tls| crate::tls::certs::Issued {
            cert: tls.join(format!("{CLIENT_CERT_NAME}.pem")),
            key: tls.join(format!("{CLIENT_CERT_NAME}-key.pem")),
        })
    }
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

/// Creates the directory and checks every port is free, so that a clash
/// (another cluster still running, say) is one clear error up front rather
/// than nodes failing one by one. The HTTP ports are not checked: nothing
/// binds them yet.
fn prepare(plan: &Plan) -> Result<(), LocalClusterError> {
    std::fs::create_dir_all(&plan.dir).map_err(|source| LocalClusterError::CreateDir {
        path: plan.dir.clone(),
        source,
    })?;
    if let Some(tls) = &plan.tls_dir {
        use crate::tls::certs::{Ca, Role, LOCAL_SANS};
        // The CA is kept across runs of the same directory; the node and
        // client certificates are made anew each time.
        let ca = Ca::open_or_create(tls)?;
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        for node in &plan.nodes {
            ca.issue(&node_cert_name(node.id), Role::Node, &sans)?;
        }
        ca.issue(CLIENT_CERT_NAME, Role::Client, &[])?;
    }
    let mut held = Vec::new();
    for node in &plan.nodes {
        for (what, addr) in [
            ("client", node.client),
            ("peer", node.peer),
            ("ZooKeeper", node.zk),
        ] {
            let listener =
                StdTcpListener::bind(addr).map_err(|source| LocalClusterError::Port {
                    id: node.id,
                    what,
                    addr,
                    source,
                })?;
            // Held until all are checked, then released for the nodes.
            held.push(listener);
        }
    }
    Ok(())
}

/// Starts one node: a child running `warden serve` with its stderr in the
/// log and its stdout copied there by a forwarding task (returned).
fn spawn_node(
    exe: &Path,
    plan: &Plan,
    node: &NodePlan,
    events: mpsc::Sender<Event>,
) -> Result<(Child, JoinHandle<()>), LocalClusterError> {
    let log_err = |source| LocalClusterError::Log {
        id: node.id,
        path: node.log.clone(),
        source,
    };
    let args = plan.serve_args(node);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(log_err)?;
    let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    writeln!(
        log,
        "=== {ME}: starting node {}: {} {}",
        node.id,
        exe.display(),
        shown.join(" ")
    )
    .map_err(log_err)?;
    let stderr = log.try_clone().map_err(log_err)?;

    let mut cmd = Command::new(exe);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Only matters if the supervisor fails in an unplanned way; every
        // planned path stops and reaps the child itself.
        .kill_on_drop(true);
    // Own process group: a terminal's Ctrl-C goes to the supervisor only
    // (see the module docs).
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|source| LocalClusterError::Spawn {
        id: node.id,
        source,
    })?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let forwarder = tokio::spawn(forward_stdout(
        node.id,
        stdout,
        tokio::fs::File::from_std(log),
        node.log.clone(),
        events,
    ));
    if let Some(pid) = child.id() {
        if let Err(e) = std::fs::write(&node.pid_file, format!("{pid}\n")) {
            eprintln!(
                "{ME}: warning: cannot write {}: {e}",
                node.pid_file.display()
            );
        }
    }
    Ok((child, forwarder))
}

/// Copies a node's stdout into its log line by line and reports the first
/// ready line. Runs until the child closes stdout (it exits).
async fn forward_stdout(
    id: u64,
    stdout: ChildStdout,
    mut log: tokio::fs::File,
    log_path: PathBuf,
    events: mpsc::Sender<Event>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut ready_seen = false;
    let mut log_ok = true;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                eprintln!("{ME}: node {id}: cannot read its stdout: {e}");
                break;
            }
        };
        if log_ok {
            let written = async {
                log.write_all(line.as_bytes()).await?;
                log.write_all(b"\n").await?;
                log.flush().await
            };
            if let Err(e) = written.await {
                // Keep reading regardless: a child blocked on a full pipe
                // would stall.
                eprintln!(
                    "{ME}: node {id}: cannot write {}: {e}; its stdout is dropped from now on",
                    log_path.display()
                );
                log_ok = false;
            }
        }
        if !ready_seen {
            if let Some(client) = ready_line_client(&line) {
                ready_seen = true;
                // Capacity is reserved for this event; a send error means
                // `run` is gone, and then nobody needs it.
                let _ = events.send(Event::Ready { id, client }).await;
            }
        }
    }
}

/// Owns one node's child until it is gone: reports an unasked exit, or
/// stops it when [`run`] raises the stop level.
async fn supervise(
    node: NodePlan,
    mut child: Child,
    forwarder: JoinHandle<()>,
    mut stop: watch::Receiver<Stop>,
    events: mpsc::Sender<Event>,
) -> NodeEnd {
    let exited = tokio::select! {
        status = child.wait() => Some(status),
        () = requested(&mut stop, Stop::Term) => None,
    };
    let (status, how) = match exited {
        Some(status) => (describe(status), EndedBy::Itself),
        None => terminate(&mut child, &mut stop).await,
    };
    // The child is dead, so its stdout is closed and the forwarder ends
    // soon; waiting for it keeps a ready line ahead of the exit.
    let _ = forwarder.await;
    if how == EndedBy::Itself {
        let _ = events
            .send(Event::Exited {
                id: node.id,
                status: status.clone(),
            })
            .await;
    }
    match std::fs::remove_file(&node.pid_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => eprintln!(
            "{ME}: warning: cannot remove {}: {e}",
            node.pid_file.display()
        ),
        _ => {}
    }
    NodeEnd {
        id: node.id,
        status,
        how,
    }
}

/// SIGTERM, then wait up to [`STOP_TIMEOUT`] (or until [`Stop::Kill`]),
/// then SIGKILL.
async fn terminate(child: &mut Child, stop: &mut watch::Receiver<Stop>) -> (String, EndedBy) {
    let kill_now = *stop.borrow() >= Stop::Kill;
    if !kill_now {
        // `id()` is `None` once the child is reaped; until then its pid
        // cannot have been reused, so the signal reaches our child.
        if let Some(pid) = child.id() {
            if let Err(e) = sys::terminate(pid) {
                eprintln!("{ME}: cannot send SIGTERM to pid {pid}: {e}");
            }
        }
        let clean = tokio::select! {
            status = child.wait() => Some(status),
            () = tokio::time::sleep(STOP_TIMEOUT) => None,
            () = requested(stop, Stop::Kill) => None,
        };
        if let Some(status) = clean {
            let clean = matches!(&status, Ok(s) if s.success());
            return (describe(status), EndedBy::Term { clean });
        }
    }
    // Fails only if the child is already gone; `wait` then has its status.
    let _ = child.start_kill();
    (describe(child.wait().await), EndedBy::Kill)
}

/// Completes once the stop level is at least `level`. A dropped sender
/// means [`run`] is gone, which is taken as a request too.
async fn requested(stop: &mut watch::Receiver<Stop>, level: Stop) {
    // The guard is dropped at once: holding it would block the sender.
    let _ = stop.wait_for(|s| *s >= level).await.map(drop);
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("exit status unknown: {e}"),
    }
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

/// The stdout line, and a short guide on stderr.
fn announce(plan: &Plan, ready: &BTreeMap<u64, String>, pids: &BTreeMap<u64, Option<u32>>) {
    let servers = ready.values().cloned().collect::<Vec<_>>().join(",");
    let zk_servers = plan
        .nodes
        .iter()
        .map(|n| n.zk.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // With TLS, absolute paths, so the lines work from any directory.
    let absolute = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let tls = plan
        .client_cert()
        .zip(plan.tls_dir.clone())
        .map(|(client, dir)| {
            (
                absolute(dir.join(crate::tls::certs::CA_FILE)),
                absolute(client.cert),
                absolute(client.key),
            )
        });
    let mut stdout = std::io::stdout().lock();
    let tls_lines = |out: &mut std::io::StdoutLock<'_>| match &tls {
        None => Ok(()),
        Some((ca, cert, key)) => writeln!(
            out,
            "{TLS_CA_LINE_PREFIX}{}\n{TLS_CERT_LINE_PREFIX}{}\n{TLS_KEY_LINE_PREFIX}{}",
            ca.display(),
            cert.display(),
            key.display()
        ),
    };

    let mut guide = format!("{ME}: {} nodes ready\n", plan.nodes.len());
    for node in &plan.nodes {
        let pid = pids
            .get(&node.id)
            .copied()
            .flatten()
            .map_or_else(|| "?".to_string(), |p| p.to_string());
        guide += &format!(
            "  node {}  client {}  zookeeper {}  peer {}  pid {pid}  log {}\n",
            node.id,
            node.client,
            node.zk,
            node.peer,
            node.log.display()
        );
    }
    let last = plan.nodes.last().map_or(1, |n| n.id);
    let wardenctl = match &tls {
        None => "wardenctl".to_string(),
        Some((ca, cert, key)) => format!(
            "wardenctl --tls-ca {} --tls-cert {} --tls-key {}",
            ca.display(),
            cert.display(),
            key.display()
        ),
    };
    if tls.is_some() {
        guide +=
            "TLS everywhere: client, ZooKeeper and HTTP ports speak TLS only, peers mutual TLS\n";
    }
    guide += &format!(
        "Use it from another shell:\n  \
           export {SERVERS_LINE_PREFIX}{servers}\n  \
           {wardenctl} ls /\n\
         Fail a node:  kill -9 $(cat {})  (nodes are not restarted)\n\
         Ctrl-C stops the cluster; data and logs stay in {}",
        plan.dir.join(format!("node-{last}.pid")).display(),
        plan.dir.display()
    );
    // The guide goes out before the lines scripts wait for, so whoever
    // has read those lines finds the guide already written.
    eprintln!("{guide}");
    if let Err(e) = writeln!(stdout, "{SERVERS_LINE_PREFIX}{servers}")
        .and_then(|()| writeln!(stdout, "{ZK_SERVERS_LINE_PREFIX}{zk_servers}"))
        .and_then(|()| tls_lines(&mut stdout))
        .and_then(|()| stdout.flush())
    {
        // Stdout may be a closed pipe; the cluster is still worth running.
        eprintln!("{ME}: warning: cannot write to stdout: {e}");
    }
    drop(stdout);
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

/// Sending SIGTERM to a child (`std` and `tokio` can only SIGKILL).
#[cfg(unix)]
mod sys {
    pub fn terminate(pid: u32) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| std::io::Error::other(format!("pid {pid} out of range")))?;
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Elsewhere there is no SIGTERM; stopping means killing.
#[cfg(not(unix))]
mod sys {
    pub fn terminate(_pid: u32) -> std::io::Result<()> {
        Err(std::io::Error::other("SIGTERM needs Unix"))
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

    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LocalClusterArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, LocalClusterError> {
        let mut all = vec!["warden"];
        all.extend_from_slice(args);
        Cli::parse_from(all).args.validate()
    }

    #[test]
    fn defaults_lay_out_three_nodes() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.dir, PathBuf::from("warden-local-cluster"));
        let n2 = &p.nodes[1];
        assert_eq!(n2.id, 2);
        assert_eq!(n2.client.to_string(), "127.0.0.1:7001");
        assert_eq!(n2.peer.to_string(), "127.0.0.1:7101");
        assert_eq!(n2.http.to_string(), "127.0.0.1:7201");
        assert_eq!(n2.data_dir, PathBuf::from("warden-local-cluster/node-2"));
        assert_eq!(n2.log, PathBuf::from("warden-local-cluster/node-2.log"));
        assert_eq!(
            p.peers(),
            "1=127.0.0.1:7100,2=127.0.0.1:7101,3=127.0.0.1:7102"
        );
    }

    #[test]
    fn serve_args_name_this_node_and_all_peers() {
        let p = plan(&[
            "--nodes",
            "5",
            "--base-port",
            "9000",
            "--data-dir",
            "/d",
            "--tick-ms",
            "20",
        ])
        .unwrap();
        let args: Vec<String> = p
            .serve_args(&p.nodes[4])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let flag = |name: &str| {
            let i = args.iter().position(|a| a == name).unwrap();
            args[i + 1].clone()
        };
        assert_eq!(args[0], "serve");
        assert_eq!(flag("--id"), "5");
        assert_eq!(flag("--listen"), "127.0.0.1:9004");
        assert_eq!(flag("--peer-listen"), "127.0.0.1:9104");
        assert!(flag("--peers").ends_with(",5=127.0.0.1:9104"));
        assert_eq!(flag("--peers").split(',').count(), 5);
        assert_eq!(flag("--data-dir"), "/d/node-5");
        assert_eq!(flag("--tick-ms"), "20");
        assert!(!plan(&[])
            .unwrap()
            .serve_args(&p.nodes[0])
            .contains(&"--tick-ms".into()));
    }

    #[test]
    fn only_three_or_five_nodes() {
        for n in ["0", "1", "2", "4", "6", "7"] {
            let e = plan(&["--nodes", n]).unwrap_err();
            assert!(e.to_string().contains("--nodes must be 3 or 5"), "{e}");
        }
        assert_eq!(plan(&["--nodes", "5"]).unwrap().nodes.len(), 5);
    }

    #[test]
    fn ports_must_fit() {
        assert!(plan(&["--base-port", "0"]).is_err());
        // 65233 + 300 + 2 = 65535 is the last usable layout for 3 nodes.
        assert!(plan(&["--base-port", "65233"]).is_ok());
        let e = plan(&["--base-port", "65234"]).unwrap_err();
        assert!(e.to_string().contains("65234..=65536"), "{e}");
    }
}
