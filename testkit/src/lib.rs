//! The one helper integration tests use to run real `warden` processes.
//!
//! - binaries are found next to the test executable (`target/<profile>/`),
//!   or at `$WARDEN_BIN` / `$WARDENCTL_BIN`; `cargo test --workspace` builds
//!   them before any test runs;
//! - each server gets its own temporary data directory and an OS-chosen
//!   port, and is ready when it prints `warden listening client=ADDR`;
//! - its log goes to a file; if the test fails (panics) the directory is
//!   kept and its path printed, so the log can be read afterwards;
//! - [`wait_until`] polls a condition with a deadline instead of sleeping.
//!
//! Two shapes share one process type underneath ([`Process`], private):
//!
//! - [`Server`]: one single-node `warden serve`;
//! - [`Cluster`]: N `warden serve` processes forming one Raft group, each
//!   with its own data directory under one temporary directory, addressed
//!   by 1-based node ids.
//!
//! A cluster node prints its ready line only once a leader is elected and
//! it has caught up, which needs a quorum of the group up. So a cluster is
//! started in two steps: launch every process, then wait for every ready
//! line against one deadline. Waiting for node 1 before launching node 2
//! would wait forever. The same holds when bringing nodes back: see
//! [`Cluster::restart_many`].

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod debian;
pub mod python;
pub mod raw;
pub mod tls;

pub use tls::TlsCerts;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How many sets of ports a cluster start tries before giving up.
const PORT_ATTEMPTS_MAX: u32 = 3;

/// How long a server may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Server::stop`] and [`Cluster::stop`] wait for a clean exit
/// after SIGTERM before they SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How often a stopping process is checked for having exited.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The line `warden serve` prints on stdout when clients can connect.
const READY_PREFIX: &str = "warden listening ";

/// Log filter given to every server started here.
const SERVER_LOG_FILTER: &str = "info,warden_server=debug,fjall=warn,lsm_tree=warn";

/// Path of a workspace binary (`warden`, `wardenctl`).
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_uppercase());
    if let Ok(p) = std::env::var(&var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: run `cargo build --workspace` (or `cargo test --workspace`) first, or set ${var}",
        path.display()
    );
    path
}

/// Options for one server process (for a [`Cluster`], for every node).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub tick_ms: u64,
    pub min_session_timeout_ms: u32,
    pub snapshot_entries: Option<u64>,
    pub extra_args: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            tick_ms: 50,
            min_session_timeout_ms: 500,
            snapshot_entries: None,
            extra_args: Vec::new(),
        }
    }
}

/// A node's place in a Raft group: the flags that make `warden serve` a
/// member of a cluster rather than a group of one.
#[derive(Debug, Clone)]
struct Membership {
    id: usize,
    /// `ID=HOST:PORT,...` of every member, this one included.
    peers: String,
    /// This node's own entry in `peers`.
    peer_listen: String,
    /// Its own HTTP port, so that nodes on one host never collide on
    /// `warden serve`'s default.
    http_listen: String,
    /// A spare: started with `--join`, it waits to be added to the group.
    join: bool,
}

/// One `warden serve` process, across restarts: where it keeps its data
/// and logs, the flags it is started with, and the running child if any.
///
/// Starting is split in two ([`Process::launch`], [`Process::await_ready`])
/// so that a cluster can launch every node before waiting for any.
struct Process {
    /// Data in `dir/data`, the log of the n-th start in `dir/server-n.log`.
    dir: PathBuf,
    /// Client address: `127.0.0.1:0` until the first ready line says which
    /// port the OS chose; fixed from then on, so a restart keeps it.
    listen: String,
    /// ZooKeeper-protocol address, fixed like `listen` after the first start.
    zk_listen: String,
    /// HTTP address, fixed like `listen` after the first start.
    http_listen: String,
    /// The gRPC door's address from the last ready line, if the extra
    /// flags turned it on (`--grpc-listen 127.0.0.1:0`).
    grpc: Option<String>,
    membership: Option<Membership>,
    opts: ServerOptions,
    child: Option<Child>,
    /// Receives the addresses from the ready line of the launched child.
    ready: Option<mpsc::Receiver<ReadyLine>>,
    starts: u32,
}

impl Process {
    fn new(
        dir: PathBuf,
        listen: String,
        membership: Option<Membership>,
        opts: ServerOptions,
    ) -> Self {
        Process {
            dir,
            listen,
            zk_listen: "127.0.0.1:0".to_string(),
            http_listen: membership
                .as_ref()
                .map(|m| m.http_listen.clone())
                .unwrap_or_else(|| "127.0.0.1:0".to_string()),
            grpc: None,
            membership,
            opts,
            child: None,
            ready: None,
            starts: 0,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("server-{}.log", self.starts))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn name(&self) -> String {
        match &self.membership {
            Some(m) => format!("warden node {}", m.id),
            None => "warden".to_string(),
        }
    }

    /// Starts the process; does not wait for it to be ready.
    fn launch(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name());
        self.starts += 1;
        std::fs::create_dir_all(&self.dir).expect("server directory");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let mut cmd = Command::new(binary("warden"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--listen")
            .arg(&self.listen)
            .arg("--zk-listen")
            .arg(&self.zk_listen)
            .arg("--http-listen")
            .arg(&self.http_listen)
            .arg("--tick-ms")
            .arg(self.opts.tick_ms.to_string())
            .arg("--min-session-timeout-ms")
            .arg(self.opts.min_session_timeout_ms.to_string());
        if let Some(n) = self.opts.snapshot_entries {
            cmd.arg("--snapshot-entries").arg(n.to_string());
        }
        if let Some(m) = &self.membership {
            cmd.arg("--id")
                .arg(m.id.to_string())
                .arg("--peers")
                .arg(&m.peers)
                .arg("--peer-listen")
                .arg(&m.peer_listen);
            if m.join {
                cmd.arg("--join");
            }
        } else {
            // A lone server: its peer port is never dialled, so any free
            // one will do (tests run many servers side by side).
            cmd.arg("--peer-listen").arg("127.0.0.1:0");
        }
        // Every flag of `warden serve` has a WARDEN_* variable: a test's
        // server takes only what the test passes, not the caller's.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("WARDEN_") {
                cmd.env_remove(name);
            }
        }
        cmd.args(&self.opts.extra_args)
            .env("WARDEN_LOG", SERVER_LOG_FILTER)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.try_clone().expect("log file handle")));
        let mut child = cmd.spawn().expect("spawn warden");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        // Copies stdout into the log (so the ready line is in it too) and
        // reports the ready line. Ends when the process closes stdout.
        std::thread::spawn(move || forward_stdout(stdout, log, tx));
        self.child = Some(child);
        self.ready = Some(rx);
    }

    /// Waits until the launched process prints its ready line; panics
    /// with its log if it exits first or `deadline` passes.
    fn await_ready(&mut self, deadline: Instant) {
        if let Err(e) = self.try_await_ready(deadline) {
            panic!("{e}");
        }
    }

    /// Like `await_ready`, but says why instead of panicking.
    fn try_await_ready(&mut self, deadline: Instant) -> Result<(), String> {
        let rx = self.ready.take().expect("launch before await_ready");
        let timeout = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(timeout) {
            Ok(line) => {
                self.listen = line.client;
                if let Some(zk) = line.zk {
                    self.zk_listen = zk;
                }
                if let Some(http) = line.http {
                    self.http_listen = http;
                }
                self.grpc = line.grpc;
                Ok(())
            }
            Err(e) => {
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => {
                        format!("did not become ready within {READY_TIMEOUT:?}")
                    }
                    mpsc::RecvTimeoutError::Disconnected => {
                        "exited before it was ready".to_string()
                    }
                };
                self.kill9();
                Err(format!("{} {why}; log:\n{}", self.name(), self.log()))
            }
        }
    }

    fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.ready = None;
    }

    fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        self.ready = None;
        // Not reaped yet, so the pid is still this child's.
        sigterm(child.id());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(STOP_POLL_INTERVAL);
        }
    }

    /// Launches again (same flags, data and ports) and waits for ready.
    fn restart(&mut self) {
        assert!(
            !self.is_running(),
            "{} is running: stop or kill it first",
            self.name()
        );
        // Reap a child that exited on its own before starting another.
        self.kill9();
        self.launch();
        self.await_ready(Instant::now() + READY_TIMEOUT);
    }
}

/// The addresses a ready line names.
struct ReadyLine {
    client: String,
    zk: Option<String>,
    http: Option<String>,
    grpc: Option<String>,
}

fn forward_stdout(
    stdout: std::process::ChildStdout,
    mut log: File,
    ready: mpsc::Sender<ReadyLine>,
) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        // The log is for reading after a failure; losing a line of it
        // must not stop the ready line from being seen.
        let _ = writeln!(log, "{line}");
        if let Some(fields) = line.strip_prefix(READY_PREFIX) {
            let field = |name: &str| {
                fields
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix(name))
                    .map(str::to_string)
            };
            if let Some(client) = field("client=") {
                let _ = ready.send(ReadyLine {
                    client,
                    zk: field("zk="),
                    http: field("http="),
                    grpc: field("grpc="),
                });
            }
        }
    }
}

/// A running `warden serve` process with its own data directory.
pub struct Server {
    process: Process,
    dir: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("warden-test-")
            .tempdir()
            .expect("temp dir");
        // Ports below the ephemeral range, so that a restart finds its
        // ports free again (see `free_ports`); a port taken between the
        // check and the bind means another try on new ports.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ports = free_ports(3);
            let mut process = Process::new(
                dir.path().to_path_buf(),
                format!("127.0.0.1:{}", ports[0]),
                None,
                opts.clone(),
            );
            process.zk_listen = format!("127.0.0.1:{}", ports[1]);
            process.http_listen = format!("127.0.0.1:{}", ports[2]);
            let mut s = Server { process, dir: None };
            s.process.launch();
            match s.process.try_await_ready(Instant::now() + READY_TIMEOUT) {
                Ok(()) => {
                    s.dir = Some(dir);
                    return s;
                }
                Err(e) if attempt < PORT_ATTEMPTS_MAX && e.contains("Address already in use") => {
                    drop(s);
                    let _ = std::fs::remove_dir_all(dir.path().join("data"));
                }
                Err(e) => {
                    // Keep the log: Drop keeps the directory of a failing test.
                    s.dir = Some(dir);
                    panic!("{e}");
                }
            }
        }
    }

    /// `host:port` of the ZooKeeper-protocol port.
    pub fn zk_addr(&self) -> &str {
        &self.process.zk_listen
    }

    /// `host:port` of the HTTP port.
    pub fn http_addr(&self) -> &str {
        &self.process.http_listen
    }

    /// `host:port` of the gRPC port, if the server was started with one
    /// (`--grpc-listen` in [`ServerOptions::extra_args`]).
    pub fn grpc_addr(&self) -> Option<&str> {
        self.process.grpc.as_deref()
    }

    /// `host:port` of the client port.
    pub fn addr(&self) -> &str {
        &self.process.listen
    }

    pub fn data_dir(&self) -> &Path {
        &self.process.dir
    }

    pub fn log_path(&self) -> PathBuf {
        self.process.log_path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGKILL: no shutdown code runs, nothing is flushed that was not
    /// already synced.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop()
    }

    /// Starts the server again on the same data directory and port.
    pub fn restart(&mut self) {
        assert!(
            self.process.child.is_none(),
            "stop or kill the server first"
        );
        self.process.restart();
    }

    /// Starts the server again on the same data directory and port; says
    /// why (with its log) if it exits or hangs before it is ready.
    pub fn try_restart(&mut self) -> Result<(), String> {
        assert!(
            self.process.child.is_none(),
            "stop or kill the server first"
        );
        self.process.launch();
        self.process.try_await_ready(Instant::now() + READY_TIMEOUT)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.kill9();
        keep_on_panic(&mut self.dir, "server");
    }
}

/// N `warden serve` processes forming one Raft group on 127.0.0.1, each
/// with its own ports and data directory (`<temp>/node-i/`), addressed by
/// node id `1..=N`.
///
/// Ports are chosen by the OS (bind port 0, then release) and kept for the
/// cluster's life, so a restarted node comes back at the same addresses.
pub struct Cluster {
    /// `nodes[i - 1]` is node `i`.
    nodes: Vec<Process>,
    dir: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Starts `nodes` servers with [`ServerOptions::default`] and waits
    /// until every one is ready.
    pub fn start(nodes: usize) -> Cluster {
        Self::start_with(nodes, ServerOptions::default())
    }

    /// Starts `nodes` servers, all with `opts`, and waits until every one
    /// is ready (at most [`READY_TIMEOUT`] in all).
    pub fn start_with(nodes: usize, opts: ServerOptions) -> Cluster {
        Self::start_with_spares(nodes, 0, opts)
    }

    /// Like [`Cluster::start_with`], plus `spares` more nodes (ids after the
    /// members') that are not started: [`Cluster::launch_spare`] starts one
    /// with `--join`, to be added with a membership change.
    pub fn start_with_spares(nodes: usize, spares: usize, opts: ServerOptions) -> Cluster {
        assert!(nodes >= 1, "a cluster needs at least one node");
        let members = nodes;
        let nodes = members + spares;
        let dir = tempfile::Builder::new()
            .prefix("warden-cluster-")
            .tempdir()
            .expect("temp dir");
        // A port checked free can still be taken before the node binds it
        // (by another test's server): then start again on new ports.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut cluster = Self::build(&dir, members, nodes, &opts);
            match cluster.try_restart_many(&(1..=members).collect::<Vec<_>>()) {
                Ok(()) => {
                    cluster.dir = Some(dir);
                    return cluster;
                }
                Err(e) if attempt < PORT_ATTEMPTS_MAX && e.contains("Address already in use") => {
                    drop(cluster);
                    for id in 1..=nodes {
                        let _ = std::fs::remove_dir_all(dir.path().join(format!("node-{id}")));
                    }
                }
                Err(e) => {
                    cluster.dir = Some(dir);
                    panic!("{e}");
                }
            }
        }
    }

    fn build(
        dir: &tempfile::TempDir,
        members: usize,
        nodes: usize,
        opts: &ServerOptions,
    ) -> Cluster {
        // Client, peer, HTTP and ZooKeeper port of each node, all distinct.
        let ports = free_ports(nodes * 4);
        let addr = |port: u16| format!("127.0.0.1:{port}");
        let peer_list = |ids: std::ops::RangeInclusive<usize>| {
            ids.map(|id| format!("{id}={}", addr(ports[4 * (id - 1) + 1])))
                .collect::<Vec<_>>()
                .join(",")
        };
        // Members bootstrap the group from their --peers, so it lists the
        // members only; a spare's lists everyone, itself included.
        let member_peers = peer_list(1..=members);
        let all_peers = peer_list(1..=nodes);
        let processes = (1..=nodes)
            .map(|id| {
                let base = 4 * (id - 1);
                let membership = Membership {
                    id,
                    peers: if id > members {
                        all_peers.clone()
                    } else {
                        member_peers.clone()
                    },
                    peer_listen: addr(ports[base + 1]),
                    http_listen: addr(ports[base + 2]),
                    join: id > members,
                };
                let mut process = Process::new(
                    dir.path().join(format!("node-{id}")),
                    addr(ports[base]),
                    Some(membership),
                    opts.clone(),
                );
                process.zk_listen = addr(ports[base + 3]);
                process
            })
            .collect();
        Cluster {
            nodes: processes,
            dir: None,
        }
    }

    /// Replaces node `i`'s extra flags (from [`ServerOptions::extra_args`])
    /// for its next start: a node unlike the others (another certificate,
    /// say).
    pub fn set_extra_args(&mut self, i: usize, extra_args: Vec<String>) {
        self.node_mut(i).opts.extra_args = extra_args;
    }

    /// Starts spare node `i` with `--join`, without waiting: it becomes
    /// ready only once the group has added it ([`Cluster::await_ready`]).
    pub fn launch_spare(&mut self, i: usize) {
        self.node_mut(i).launch();
    }

    /// Waits (up to [`READY_TIMEOUT`]) for a launched node's ready line.
    pub fn await_ready(&mut self, i: usize) {
        let deadline = Instant::now() + READY_TIMEOUT;
        self.node_mut(i).await_ready(deadline);
    }

    /// `host:port` of node `i`'s peer (raft) port.
    pub fn peer_addr(&self, i: usize) -> &str {
        &self
            .node(i)
            .membership
            .as_ref()
            .expect("cluster nodes have a membership")
            .peer_listen
    }

    /// Node ids, `1..=N`.
    pub fn node_ids(&self) -> Vec<usize> {
        (1..=self.nodes.len()).collect()
    }

    /// The connect string: every node's client address, comma-separated,
    /// in node id order.
    pub fn servers(&self) -> String {
        self.nodes
            .iter()
            .map(|p| p.listen.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host:port` of node `i`'s ZooKeeper-protocol port.
    pub fn zk_addr(&self, i: usize) -> &str {
        &self.node(i).zk_listen
    }

    /// `host:port` of node `i`'s HTTP port.
    pub fn http_addr(&self, i: usize) -> &str {
        &self.node(i).http_listen
    }

    /// The ZooKeeper connect string: every node's ZooKeeper address.
    pub fn zk_servers(&self) -> String {
        self.nodes
            .iter()
            .map(|p| p.zk_listen.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host:port` of node `i`'s client port.
    pub fn addr(&self, i: usize) -> &str {
        &self.node(i).listen
    }

    /// The temporary directory holding every node's directory.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    /// Node `i`'s directory: data in `data/`, logs in `server-<start>.log`.
    pub fn node_dir(&self, i: usize) -> &Path {
        &self.node(i).dir
    }

    /// The log file of node `i`'s current (or last) start.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.node(i).log_path()
    }

    /// Node `i`'s log so far, of its current (or last) start.
    pub fn log(&self, i: usize) -> String {
        self.node(i).log()
    }

    /// Process id of node `i`, unless it was stopped or killed (by this
    /// helper; a node that crashed keeps its pid until restarted).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.node(i).pid()
    }

    /// Whether node `i`'s process is alive (started, and neither stopped,
    /// killed nor exited on its own).
    pub fn is_running(&mut self, i: usize) -> bool {
        self.node_mut(i).is_running()
    }

    /// SIGKILL node `i`: no shutdown code runs, nothing is flushed that was
    /// not already synced.
    pub fn kill9(&mut self, i: usize) {
        self.node_mut(i).kill9();
    }

    /// SIGTERM node `i` and wait for it to exit (SIGKILL after
    /// [`STOP_TIMEOUT`]); its exit status, or `None` if it was not running.
    pub fn stop(&mut self, i: usize) -> Option<ExitStatus> {
        self.node_mut(i).stop()
    }

    /// Starts node `i` again with the same ports and data directory, and
    /// waits (up to [`READY_TIMEOUT`]) for its ready line, which comes only
    /// once it has caught up with a leader: a quorum of the other nodes
    /// must be up. To bring back several nodes that are needed for a
    /// quorum, use [`Cluster::restart_many`].
    pub fn restart(&mut self, i: usize) {
        self.restart_many(&[i]);
    }

    /// Starts nodes `ids` again, all at once, then waits for every one to
    /// be ready (at most [`READY_TIMEOUT`] in all). Panics if one of them
    /// is still running.
    pub fn restart_many(&mut self, ids: &[usize]) {
        if let Err(e) = self.try_restart_many(ids) {
            panic!("{e}");
        }
    }

    fn try_restart_many(&mut self, ids: &[usize]) -> Result<(), String> {
        for &i in ids {
            let node = self.node_mut(i);
            assert!(
                !node.is_running(),
                "node {i} is running: stop or kill it first"
            );
            // Reap a child that exited on its own before starting another.
            node.kill9();
            node.launch();
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for &i in ids {
            self.node_mut(i).try_await_ready(deadline)?;
        }
        Ok(())
    }

    fn node(&self, i: usize) -> &Process {
        let n = self.nodes.len();
        assert!((1..=n).contains(&i), "node ids are 1..={n}, got {i}");
        &self.nodes[i - 1]
    }

    fn node_mut(&mut self, i: usize) -> &mut Process {
        let n = self.nodes.len();
        assert!((1..=n).contains(&i), "node ids are 1..={n}, got {i}");
        &mut self.nodes[i - 1]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill9();
        }
        keep_on_panic(&mut self.dir, "cluster");
    }
}

/// If the test is failing, keeps `dir` (and the logs in it) and says where.
fn keep_on_panic(dir: &mut Option<tempfile::TempDir>, what: &str) {
    if std::thread::panicking() {
        if let Some(dir) = dir.take() {
            let kept = dir.keep();
            eprintln!("warden test failed; {what} logs kept in {}", kept.display());
        }
    }
}

/// `n` distinct ports that were free a moment ago: all are bound at once
/// (so the OS cannot hand out one twice), then released for the servers to
/// take. Another process could grab one in between; for tests on one
/// machine that risk is accepted.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    // Below Linux's ephemeral range (32768..), so that no outgoing
    // connection of a concurrently running test can be handed one of these
    // between our check and the server's bind.
    const LOW: u32 = 20_000;
    const HIGH: u32 = 32_000;
    let mut seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    while listeners.len() < n {
        // xorshift: plenty for spreading picks over the range.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = (LOW + (seed % u64::from(HIGH - LOW)) as u32) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr of a bound socket").port())
        .collect()
}

/// Sends SIGTERM to `pid`.
pub fn sigterm(pid: u32) {
    signal(pid, libc::SIGTERM);
}

/// Sends SIGKILL to `pid`.
pub fn sigkill(pid: u32) {
    signal(pid, libc::SIGKILL);
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // A failure (the process is already gone) is not an error for tests.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether a process with this pid exists (a zombie counts: it has not
/// been reaped yet).
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; no memory of
    // ours is touched.
    let rc = unsafe { libc::kill(pid, 0) };
    // EPERM: it exists but belongs to someone else.
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Polls `cond` until it holds or `timeout` passes; panics naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    //! These start real servers: build the binaries first
    //! (`cargo build --workspace`; `cargo test --workspace` does it).

    use super::*;
    use std::net::TcpStream;

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(30);
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 30);
        assert!(!ports.contains(&0));
    }

    #[test]
    fn server_stops_and_restarts_on_its_port() {
        let mut server = Server::start();
        let addr = server.addr().to_string();
        assert!(TcpStream::connect(&addr).is_ok());
        let status = server.stop().expect("was running");
        assert!(status.success(), "{status:?}\n{}", server.log());
        server.restart();
        assert_eq!(server.addr(), addr);
        assert!(TcpStream::connect(&addr).is_ok());
    }

    #[test]
    fn cluster_of_three_survives_a_node_and_takes_it_back() {
        let mut cluster = Cluster::start(3);
        assert_eq!(cluster.node_ids(), vec![1, 2, 3]);
        let servers = cluster.servers();
        assert_eq!(servers.split(',').count(), 3);
        for i in cluster.node_ids() {
            assert!(cluster.is_running(i));
            assert!(servers.contains(cluster.addr(i)));
            assert!(TcpStream::connect(cluster.addr(i)).is_ok(), "node {i}");
            assert!(cluster.log(i).contains(READY_PREFIX), "node {i}");
        }

        // One node down: the other two are still a quorum and stay up.
        cluster.kill9(3);
        assert!(!cluster.is_running(3));
        assert_eq!(cluster.pid(3), None);
        let addr3 = cluster.addr(3).to_string();
        wait_until(Duration::from_secs(5), "node 3's port to close", || {
            TcpStream::connect(&addr3).is_err()
        });
        for i in [1, 2] {
            assert!(cluster.is_running(i), "node {i}");
        }

        // Back on the same port, caught up.
        cluster.restart(3);
        assert!(cluster.is_running(3));
        assert_eq!(cluster.addr(3), addr3);
        assert!(TcpStream::connect(&addr3).is_ok());

        let status = cluster.stop(2).expect("node 2 was running");
        assert!(status.success(), "{status:?}\n{}", cluster.log(2));
        assert_eq!(cluster.stop(2), None);
        cluster.restart(2);
        assert!(cluster.is_running(2));
    }

    #[test]
    fn cluster_comes_back_from_losing_its_quorum() {
        let mut cluster = Cluster::start(3);
        cluster.kill9(1);
        cluster.kill9(2);
        // Neither would be ready alone: start both, then wait.
        cluster.restart_many(&[1, 2]);
        for i in cluster.node_ids() {
            assert!(cluster.is_running(i), "node {i}");
            assert!(TcpStream::connect(cluster.addr(i)).is_ok(), "node {i}");
        }
    }

    #[test]
    fn process_exists_follows_a_child() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        assert!(process_exists(child.id()));
        sigkill(child.id());
        let _ = child.wait();
        assert!(!process_exists(child.id()));
    }
}
