//! One `warden serve` process across restarts ([`Process`]), shared by
//! [`Server`](crate::Server) and [`Cluster`](crate::Cluster): the binary
//! it runs, the flags it is started with, its log, and its ready line.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::sigterm;

/// How long a server may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Server::stop`](crate::Server::stop) and
/// [`Cluster::stop`](crate::Cluster::stop) wait for a clean exit
/// after SIGTERM before they SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How often a stopping process is checked for having exited.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The line `warden serve` prints on stdout when clients can connect.
pub(crate) const READY_PREFIX: &str = "warden listening ";

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

/// In [`ServerOptions::extra_args`], stands for the node's id (1 for a
/// lone server): a cluster's nodes each get their own certificate from one
/// list of flags (`certs/n{id}.pem`).
pub const NODE_ID: &str = "{id}";

/// Options for one server process (for a [`Cluster`](crate::Cluster), for every node).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub tick_ms: u64,
    pub min_session_timeout_ms: u32,
    pub snapshot_entries: Option<u64>,
    /// More flags; [`NODE_ID`] in one is replaced by the node's id.
    pub extra_args: Vec<String>,
    /// The address a lone [`Server`](crate::Server)'s client, ZooKeeper
    /// and HTTP ports bind: 127.0.0.1, or another address of this host so
    /// that its callers are not on loopback (a test's own veth in a network
    /// namespace it made).
    pub listen_ip: String,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            tick_ms: 50,
            min_session_timeout_ms: 500,
            snapshot_entries: None,
            extra_args: Vec::new(),
            listen_ip: "127.0.0.1".to_string(),
        }
    }
}

/// A node's place in a Raft group: the flags that make `warden serve` a
/// member of a cluster rather than a group of one.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    pub(crate) id: usize,
    /// `ID=HOST:PORT,...` of every member, this one included.
    pub(crate) peers: String,
    /// This node's own entry in `peers`.
    pub(crate) peer_listen: String,
    /// Its own HTTP port, so that nodes on one host never collide on
    /// `warden serve`'s default.
    pub(crate) http_listen: String,
    /// A spare: started with `--join`, it waits to be added to the group.
    pub(crate) join: bool,
}

/// One `warden serve` process, across restarts: where it keeps its data
/// and logs, the flags it is started with, and the running child if any.
///
/// Starting is split in two ([`Process::launch`], [`Process::await_ready`])
/// so that a cluster can launch every node before waiting for any.
pub(crate) struct Process {
    /// Data in `dir/data`, the log of the n-th start in `dir/server-n.log`.
    pub(crate) dir: PathBuf,
    /// Client address: `127.0.0.1:0` until the first ready line says which
    /// port the OS chose; fixed from then on, so a restart keeps it.
    pub(crate) listen: String,
    /// ZooKeeper-protocol address, fixed like `listen` after the first start.
    pub(crate) zk_listen: String,
    /// HTTP address, fixed like `listen` after the first start.
    pub(crate) http_listen: String,
    /// The gRPC door's address from the last ready line, if the extra
    /// flags turned it on (`--grpc-listen 127.0.0.1:0`).
    pub(crate) grpc: Option<String>,
    pub(crate) membership: Option<Membership>,
    pub(crate) opts: ServerOptions,
    pub(crate) child: Option<Child>,
    /// Receives the addresses from the ready line of the launched child.
    ready: Option<mpsc::Receiver<ReadyLine>>,
    starts: u32,
}

impl Process {
    pub(crate) fn new(
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

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join(format!("server-{}.log", self.starts))
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn name(&self) -> String {
        match &self.membership {
            Some(m) => format!("warden node {}", m.id),
            None => "warden".to_string(),
        }
    }

    /// Starts the process; does not wait for it to be ready.
    pub(crate) fn launch(&mut self) {
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
        let id = self.membership.as_ref().map_or(1, |m| m.id).to_string();
        cmd.args(self.opts.extra_args.iter().map(|a| a.replace(NODE_ID, &id)))
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
    pub(crate) fn await_ready(&mut self, deadline: Instant) {
        if let Err(e) = self.try_await_ready(deadline) {
            panic!("{e}");
        }
    }

    /// Like `await_ready`, but says why instead of panicking.
    pub(crate) fn try_await_ready(&mut self, deadline: Instant) -> Result<(), String> {
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

    pub(crate) fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.ready = None;
    }

    pub(crate) fn stop(&mut self) -> Option<ExitStatus> {
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
    pub(crate) fn restart(&mut self) {
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

/// If the test is failing, keeps `dir` (and the logs in it) and says where.
pub(crate) fn keep_on_panic(dir: &mut Option<tempfile::TempDir>, what: &str) {
    if std::thread::panicking() {
        if let Some(dir) = dir.take() {
            let kept = dir.keep();
            eprintln!("warden test failed; {what} logs kept in {}", kept.display());
        }
    }
}
