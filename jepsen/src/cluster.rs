//! Cluster control: N real `warden serve` processes, each with its own data
//! directory and log, every port reached through the harness's proxies
//! ([`crate::proxy`]). Nodes are killed, paused, restarted, removed from
//! and re-added to the Raft group from here; the nemesis decides when.

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Client, ConnectOptions};

use crate::proxy::Net;

/// How long a started node may take to accept connections.
pub const NODE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fresh cluster may take to elect a leader and catch up.
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one admin request (cluster status, membership change).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// A member this close to the commit index counts as caught up (status
/// reports are periodic, so under load a healthy member lags a little).
pub const CAUGHT_UP_LAG: u64 = 1000;
/// Where the `lose-unsynced` nemesis leaves its durability markers.
pub const MARKER_ROOT: &str = "/jepsen-durability";
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(50);

/// How to run the nodes.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    pub nodes: usize,
    /// The `warden` binary.
    pub bin: PathBuf,
    /// Where node data and logs go (`node-<id>/`, `node-<id>.log`).
    pub dir: PathBuf,
    pub tick_ms: u64,
    /// `--snapshot-entries` (small values exercise snapshot transfer).
    pub snapshot_entries: u64,
    /// Start the servers in a known-bad mode (`--unsafe-skip-read-index`),
    /// for the selftest.
    pub unsafe_server: bool,
    /// Start the servers in the known-bad `--unsafe-skip-fsync` mode (the
    /// Raft log never fsynced), for the selftest.
    pub unsafe_skip_fsync: bool,
    /// Start the servers in the known-bad
    /// `--unsafe-keep-removals-across-roles` mode (a TTL or container
    /// removal lost with a leadership is never proposed again by that
    /// server), for the selftest.
    pub unsafe_keep_removals: bool,
    /// Keep each node's data dir on a [`crate::faultfs`] layer (over
    /// `node-<id>.disk/`), so that [`Cluster::lose_unsynced`] can drop what
    /// it did not fsync: for the `lose-unsynced` nemesis.
    pub faultfs: bool,
}

/// One node: its ports and its process.
#[derive(Debug)]
pub struct Node {
    pub id: u64,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    /// The node's own ports (only proxies connect to these).
    pub client_port: u16,
    pub peer_port: u16,
    /// The node's HTTP port (`--http-listen`: lease locks over REST).
    pub http_port: u16,
    /// What clients and peers connect to.
    pub client_proxy: SocketAddr,
    pub peer_proxy: SocketAddr,
    /// What HTTP clients connect to (a client link, like `client_proxy`).
    pub http_proxy: SocketAddr,
    /// The node's ZooKeeper-compatible port, and what ZooKeeper clients
    /// connect to (a client link).
    pub zk_port: u16,
    pub zk_proxy: SocketAddr,
    child: Option<Child>,
    paused: bool,
    /// Started with `--join` (re-added by the membership nemesis); every
    /// later start joins too.
    joined: bool,
}

/// The running cluster.
pub struct Cluster {
    pub net: Net,
    opts: ClusterOpts,
    nodes: Vec<Node>,
    /// The nodes' faultfs layers (with `opts.faultfs`), by node id;
    /// unmounted after the nodes are killed on drop.
    layers: std::collections::HashMap<u64, crate::faultfs::Layer>,
}

/// Why cluster control failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("node {id}: {message} (log: {log})")]
    Node {
        id: u64,
        message: String,
        log: String,
    },
    #[error("{0}")]
    Other(String),
}

type Result<T> = std::result::Result<T, ClusterError>;

impl Cluster {
    /// Starts `opts.nodes` nodes behind fresh proxies and waits until they
    /// have a leader and every member is caught up.
    pub async fn start(opts: ClusterOpts) -> Result<Cluster> {
        std::fs::create_dir_all(&opts.dir)?;
        let net = Net::new();
        let mut nodes = Vec::new();
        let ports = free_ports(opts.nodes * 4);
        for i in 0..opts.nodes {
            let id = i as u64 + 1;
            let client_port = ports[4 * i];
            let peer_port = ports[4 * i + 1];
            let http_port = ports[4 * i + 2];
            let zk_port = ports[4 * i + 3];
            let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
            let client_proxy = net
                .listen(id, false, ([127, 0, 0, 1], client_port).into(), any)
                .await?;
            let peer_proxy = net
                .listen(id, true, ([127, 0, 0, 1], peer_port).into(), any)
                .await?;
            let http_proxy = net
                .listen(id, false, ([127, 0, 0, 1], http_port).into(), any)
                .await?;
            let zk_proxy = net
                .listen(id, false, ([127, 0, 0, 1], zk_port).into(), any)
                .await?;
            nodes.push(Node {
                id,
                data_dir: opts.dir.join(format!("node-{id}")),
                log_path: opts.dir.join(format!("node-{id}.log")),
                client_port,
                peer_port,
                http_port,
                client_proxy,
                peer_proxy,
                http_proxy,
                zk_port,
                zk_proxy,
                child: None,
                paused: false,
                joined: false,
            });
        }
        let mut layers = std::collections::HashMap::new();
        if opts.faultfs {
            for node in &nodes {
                let backing = opts.dir.join(format!("node-{}.disk", node.id));
                let layer = crate::faultfs::Layer::mount(&backing, &node.data_dir)
                    .map_err(ClusterError::Other)?;
                layers.insert(node.id, layer);
            }
        }
        let mut cluster = Cluster {
            net,
            opts,
            nodes,
            layers,
        };
        for id in cluster.ids() {
            cluster.spawn(id)?;
        }
        for id in cluster.ids() {
            cluster.await_listening(id).await?;
        }
        cluster.await_healthy(CLUSTER_READY_TIMEOUT).await?;
        Ok(cluster)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// Client addresses (through the proxies), node 1 first.
    pub fn client_addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.client_proxy.to_string())
            .collect()
    }

    /// HTTP addresses (through the proxies), node 1 first.
    pub fn http_addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.http_proxy.to_string())
            .collect()
    }

    /// ZooKeeper-port addresses (through the proxies), node 1 first.
    pub fn zk_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.zk_proxy.to_string()).collect()
    }

    /// `--peers` for every node: the peer proxies.
    fn peers_flag(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.peer_proxy))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether node `id`'s process is running (and not paused).
    pub fn is_up(&mut self, id: u64) -> bool {
        let node = self.node_mut(id);
        let running = match node.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        };
        running && !node.paused
    }

    /// Jumps node `id`'s wall clock to `offset_ms` off the real time (0:
    /// back to it). The node re-reads its offset every few ticks.
    pub fn set_clock_offset(&self, id: u64, offset_ms: i64) -> Result<()> {
        std::fs::write(clock_file(&self.opts.dir, id), offset_ms.to_string())?;
        Ok(())
    }

    /// Starts node `id`'s process (its data directory as it is).
    fn spawn(&mut self, id: u64) -> Result<()> {
        let peers = self.peers_flag();
        let opts = self.opts.clone();
        let node = self.node_mut(id);
        std::fs::create_dir_all(&node.data_dir)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)?;
        let mut cmd = Command::new(&opts.bin);
        cmd.arg("serve")
            .arg("--id")
            .arg(id.to_string())
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.client_port))
            .arg("--peer-listen")
            .arg(format!("127.0.0.1:{}", node.peer_port))
            .arg("--zk-listen")
            .arg(format!("127.0.0.1:{}", node.zk_port))
            .arg("--http-listen")
            .arg(format!("127.0.0.1:{}", node.http_port))
            .arg("--peers")
            .arg(&peers)
            .arg("--tick-ms")
            .arg(opts.tick_ms.to_string())
            .arg("--snapshot-entries")
            .arg(opts.snapshot_entries.to_string())
            // The clock nemesis jumps a node's wall clock through this file.
            .arg("--clock-offset-file")
            .arg(clock_file(&opts.dir, id))
            .env("WARDEN_LOG", "info,warden_server=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if node.joined {
            cmd.arg("--join");
        }
        if opts.unsafe_server {
            cmd.arg("--unsafe-skip-read-index");
        }
        if opts.unsafe_skip_fsync {
            cmd.arg("--unsafe-skip-fsync");
        }
        if opts.unsafe_keep_removals {
            cmd.arg("--unsafe-keep-removals-across-roles");
        }
        let child = cmd.spawn().map_err(|e| ClusterError::Node {
            id,
            message: format!("cannot start {}: {e}", opts.bin.display()),
            log: node.log_path.display().to_string(),
        })?;
        self.net.set_pid(id, child.id());
        let node = self.node_mut(id);
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// Waits until node `id` accepts connections on its client port.
    async fn await_listening(&mut self, id: u64) -> Result<()> {
        let deadline = Instant::now() + NODE_START_TIMEOUT;
        loop {
            let port = self.node(id).client_port;
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            let node = self.node_mut(id);
            if let Some(c) = node.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(self.node_error(id, format!("exited at start ({status})")));
                }
            }
            if Instant::now() > deadline {
                return Err(self.node_error(id, "did not start listening in time".into()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn node_error(&self, id: u64, message: String) -> ClusterError {
        let node = self.node(id);
        ClusterError::Node {
            id,
            message,
            log: node.log_path.display().to_string(),
        }
    }

    /// Waits until some node reports a leader and every member reachable
    /// with its applied index caught up.
    pub async fn await_healthy(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            for id in self.ids() {
                match self.status_from(id).await {
                    Ok(s) => {
                        let all = s.members.len() == self.nodes.len()
                            && s.members
                                .iter()
                                .all(|m| m.reachable && m.lag < CAUGHT_UP_LAG);
                        if s.leader_id != 0 && all {
                            return Ok(());
                        }
                        last = format!(
                            "node {id}: leader {} members {:?}",
                            s.leader_id,
                            s.members
                                .iter()
                                .map(|m| (m.id, m.reachable, m.lag, m.voter))
                                .collect::<Vec<_>>()
                        );
                    }
                    Err(e) => last = format!("node {id}: {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(ClusterError::Other(format!(
            "cluster not healthy within {timeout:?}: {last}"
        )))
    }

    /// The group's members as the first node that answers sees them, each
    /// with its own HTTP address (not its proxy); every node when none
    /// answers.
    pub async fn member_http_addrs(&self) -> Vec<(u64, String)> {
        let mut ids = self.ids();
        for id in self.ids() {
            if let Ok(s) = self.status_from(id).await {
                ids = s.members.iter().map(|m| m.id).collect();
                break;
            }
        }
        ids.into_iter()
            .filter(|id| self.nodes.iter().any(|n| n.id == *id))
            .map(|id| (id, format!("127.0.0.1:{}", self.node(id).http_port)))
            .collect()
    }

    /// Cluster status as node `id` sees it (a short-lived session there).
    pub async fn status_from(&self, id: u64) -> Result<warden_client::ClusterStatus> {
        let addr = self.node(id).client_proxy.to_string();
        let work = async {
            let c = admin_client(&addr).await?;
            let s = c.cluster_status().await;
            let _ = c.close().await;
            s
        };
        match tokio::time::timeout(ADMIN_TIMEOUT, work).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(ClusterError::Other(e.to_string())),
            Err(_) => Err(ClusterError::Other("timed out".into())),
        }
    }

    /// Whether `path` exists, read linearizably at node `id` (a short-lived
    /// session there).
    pub async fn exists_on(&self, id: u64, path: &str) -> Result<bool> {
        let addr = self.node(id).client_proxy.to_string();
        let work = async {
            let c = admin_client(&addr).await?;
            let s = c.exists_linearizable(path).await;
            let _ = c.close().await;
            s
        };
        match tokio::time::timeout(ADMIN_TIMEOUT, work).await {
            Ok(Ok(s)) => Ok(s.is_some()),
            Ok(Err(e)) => Err(ClusterError::Other(e.to_string())),
            Err(_) => Err(ClusterError::Other("timed out".into())),
        }
    }

    /// The current leader, as the live nodes report it (the claim with the
    /// highest term wins); `None` when no node answers with one.
    pub async fn leader(&mut self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for id in self.ids() {
            if !self.is_up(id) {
                continue;
            }
            if let Ok(s) = self.status_from(id).await {
                if s.leader_id == 0 {
                    continue;
                }
                let term = s
                    .members
                    .iter()
                    .find(|m| m.id == s.server_id)
                    .map(|m| m.term)
                    .unwrap_or(0);
                if best.is_none_or(|(t, _)| term > t) {
                    best = Some((term, s.leader_id));
                }
            }
        }
        best.map(|(_, l)| l)
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        node.paused = false;
    }

    /// Starts a killed node again on its data.
    pub async fn restart(&mut self, id: u64) -> Result<()> {
        if self.node(id).child.is_some() {
            return Ok(());
        }
        self.spawn(id)?;
        self.await_listening(id).await
    }

    /// Starts a killed node whose files may be damaged: `Err` with why
    /// (and its log's last lines) when it exits instead of serving; the
    /// process is then reaped, so it does not count as a crash.
    pub async fn try_restart(&mut self, id: u64) -> std::result::Result<(), String> {
        if self.node(id).child.is_some() {
            return Ok(());
        }
        self.spawn(id).map_err(|e| e.to_string())?;
        self.await_started(id).await
    }

    /// [`Self::try_restart`] for several killed nodes at once: all are
    /// started before any is waited for (a lone node of a stopped majority
    /// may not answer until the others are up).
    pub async fn try_restart_all(
        &mut self,
        ids: &[u64],
    ) -> Vec<(u64, std::result::Result<(), String>)> {
        // `None`: spawned, to be waited for.
        let mut spawned: Vec<(u64, Option<std::result::Result<(), String>>)> = Vec::new();
        for &id in ids {
            let r = if self.node(id).child.is_some() {
                Some(Ok(()))
            } else {
                self.spawn(id).err().map(|e| Err(e.to_string()))
            };
            spawned.push((id, r));
        }
        let mut out = Vec::new();
        for (id, r) in spawned {
            let r = match r {
                Some(done) => done,
                None => self.await_started(id).await,
            };
            out.push((id, r));
        }
        out
    }

    /// Waits until a just spawned node answers (see [`Self::try_restart`]);
    /// kills it and says why when it does not.
    async fn await_started(&mut self, id: u64) -> std::result::Result<(), String> {
        // Listening is not enough: a server binds its ports before it
        // opens its storage. It has started once it answers a request on
        // its own port (not the proxy, which a partition may cut).
        let started = match self.await_listening(id).await {
            Err(e) => Err(e.to_string()),
            Ok(()) => {
                let addr = format!("127.0.0.1:{}", self.node(id).client_port);
                let deadline = Instant::now() + NODE_START_TIMEOUT;
                loop {
                    let exited = match self.node_mut(id).child.as_mut() {
                        Some(c) => c.try_wait().ok().flatten(),
                        None => None,
                    };
                    if let Some(status) = exited {
                        break Err(format!("node {id} exited at start ({status})"));
                    }
                    let answered = async {
                        let c = admin_client(&addr).await?;
                        let r = c.cluster_status().await;
                        let _ = c.close().await;
                        r
                    };
                    if let Ok(Ok(_)) = tokio::time::timeout(ADMIN_TIMEOUT, answered).await {
                        break Ok(());
                    }
                    if Instant::now() > deadline {
                        break Err(format!(
                            "node {id} did not answer within {NODE_START_TIMEOUT:?}"
                        ));
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        };
        started.map_err(|e| {
            self.kill(id);
            format!("{e}; log ends: {}", self.log_tail(id, 3))
        })
    }

    /// The last `n` lines of node `id`'s log, joined with ` | ` (without
    /// the frames of a panic's backtrace, so the panic's message shows).
    pub fn log_tail(&self, id: u64, n: usize) -> String {
        let text = std::fs::read_to_string(&self.node(id).log_path).unwrap_or_default();
        let frame = |l: &str| {
            let t = l.trim_start();
            t.starts_with("at ")
                || t == "stack backtrace:"
                || t.starts_with("note: Some details are omitted")
                || t.split_once(": ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        };
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !frame(l))
            .collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }

    /// Drops every write node `id` did not fsync, as a power failure would
    /// (the node must be down: call it between [`Self::kill`] and a
    /// restart). `Err` when the cluster runs without the layer.
    pub fn lose_unsynced(&mut self, id: u64) -> Result<crate::faultfs::Lost> {
        if self.node(id).child.is_some() {
            return Err(ClusterError::Other(format!(
                "node {id} is running: kill it before dropping its unsynced writes"
            )));
        }
        match self.layers.get(&id) {
            Some(layer) => Ok(layer.crash()),
            None => Err(ClusterError::Other(
                "the nodes do not run on the faultfs layer (it is mounted only for \
                 runs with the lose-unsynced nemesis)"
                    .into(),
            )),
        }
    }

    /// Creates the durability marker `name` (a znode under [`MARKER_ROOT`])
    /// through the first live node that acknowledges it, on the nodes' own
    /// ports: a write the cluster has promised to keep. `Err` if none did.
    pub async fn write_marker(&mut self, name: &str) -> Result<String> {
        let path = format!("{MARKER_ROOT}/{name}");
        let mut last = String::from("no live node");
        for id in self.ids() {
            if !self.is_up(id) {
                continue;
            }
            let addr = format!("127.0.0.1:{}", self.node(id).client_port);
            let work = async {
                let c = admin_client(&addr).await?;
                let _ = c
                    .create(MARKER_ROOT, b"", warden_client::CreateOptions::persistent())
                    .await;
                let r = c
                    .create(&path, b"", warden_client::CreateOptions::persistent())
                    .await;
                let _ = c.close().await;
                r
            };
            match tokio::time::timeout(ADMIN_TIMEOUT, work).await {
                Ok(Ok(_)) => return Ok(path),
                Ok(Err(e)) => last = format!("node {id}: {e}"),
                Err(_) => last = format!("node {id}: timed out"),
            }
        }
        Err(ClusterError::Other(format!(
            "durability marker not written: {last}"
        )))
    }

    /// Whether the znode `path` exists, by a linearizable read on the first
    /// live node that answers within `timeout` (retried until then).
    pub async fn marker_exists(&mut self, path: &str, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no live node");
        loop {
            for id in self.ids() {
                if !self.is_up(id) {
                    continue;
                }
                let addr = format!("127.0.0.1:{}", self.node(id).client_port);
                let work = async {
                    let c = admin_client(&addr).await?;
                    let r = c.exists_linearizable(path).await;
                    let _ = c.close().await;
                    r
                };
                match tokio::time::timeout(ADMIN_TIMEOUT, work).await {
                    Ok(Ok(stat)) => return Ok(stat.is_some()),
                    Ok(Err(e)) => last = format!("node {id}: {e}"),
                    Err(_) => last = format!("node {id}: timed out"),
                }
            }
            if Instant::now() > deadline {
                return Err(ClusterError::Other(format!("cannot read {path}: {last}")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes node `id`'s data (the node must be down). On the layer the
    /// mount point stays and only what is in it goes.
    fn wipe(&self, id: u64) {
        let dir = &self.node(id).data_dir;
        if self.layers.contains_key(&id) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    let p = e.path();
                    let _ = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// SIGSTOP.
    pub fn pause(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(c) = &node.child {
            signal(c.id(), libc::SIGSTOP);
            node.paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(c) = &node.child {
            signal(c.id(), libc::SIGCONT);
        }
        node.paused = false;
    }

    /// Removes `id` from the Raft group (asked of another live node), then
    /// kills it and wipes its data, as an operator retiring a server would.
    pub async fn remove_member(&mut self, id: u64) -> Result<()> {
        let mut last = String::new();
        for other in self.ids() {
            if other == id || !self.is_up(other) {
                continue;
            }
            let addr = self.node(other).client_proxy.to_string();
            let work = async {
                let c = admin_client(&addr).await?;
                let r = c.remove_member(id).await;
                let _ = c.close().await;
                r
            };
            match tokio::time::timeout(ADMIN_TIMEOUT * 2, work).await {
                Ok(Ok(())) => {
                    self.kill(id);
                    self.wipe(id);
                    return Ok(());
                }
                Ok(Err(e)) => last = format!("asked node {other}: {e}"),
                Err(_) => last = format!("asked node {other}: timed out"),
            }
        }
        Err(ClusterError::Other(format!(
            "cannot remove node {id}: {last}"
        )))
    }

    /// Starts `id` empty with `--join` and adds it back: as a learner, and
    /// once it has caught up, as a voter.
    pub async fn add_member(&mut self, id: u64) -> Result<()> {
        self.kill(id);
        self.wipe(id);
        self.node_mut(id).joined = true;
        self.spawn(id)?;
        self.await_listening(id).await?;
        let addr = self.node(id).peer_proxy.to_string();
        for learner in [true, false] {
            let mut done = false;
            let mut last = String::new();
            let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
            while !done && Instant::now() < deadline {
                for other in self.ids() {
                    if other == id || !self.is_up(other) {
                        continue;
                    }
                    let client_addr = self.node(other).client_proxy.to_string();
                    let work = async {
                        let c = admin_client(&client_addr).await?;
                        let r = c.add_member(id, &addr, learner).await;
                        let _ = c.close().await;
                        r
                    };
                    match tokio::time::timeout(ADMIN_TIMEOUT * 2, work).await {
                        Ok(Ok(())) => {
                            done = true;
                            break;
                        }
                        Ok(Err(e)) => last = format!("asked node {other}: {e}"),
                        Err(_) => last = format!("asked node {other}: timed out"),
                    }
                }
                if !done {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            if !done {
                return Err(ClusterError::Other(format!(
                    "cannot add node {id} (learner: {learner}): {last}"
                )));
            }
            if learner {
                self.await_caught_up(id, CLUSTER_READY_TIMEOUT).await?;
            }
        }
        Ok(())
    }

    /// Waits until `id` reports itself caught up with the leader.
    async fn await_caught_up(&self, id: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for other in self.ids() {
                if let Ok(s) = self.status_from(other).await {
                    if s.members
                        .iter()
                        .any(|m| m.id == id && m.reachable && m.lag < CAUGHT_UP_LAG)
                    {
                        return Ok(());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(ClusterError::Other(format!(
            "node {id} did not catch up within {timeout:?}"
        )))
    }

    /// Ends every fault: resumes paused nodes, restarts killed ones, heals
    /// the network.
    pub async fn heal_all(&mut self) -> Result<()> {
        self.net.heal();
        for id in self.ids() {
            if self.node(id).paused {
                self.resume(id);
            }
            let dead = match self.node_mut(id).child.as_mut() {
                Some(c) => !matches!(c.try_wait(), Ok(None)),
                None => true,
            };
            if dead {
                self.node_mut(id).child = None;
                self.restart(id).await?;
            }
        }
        Ok(())
    }

    /// Nodes whose process died on its own (not killed by the harness):
    /// each with its exit status.
    pub fn crashed(&mut self) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for node in &mut self.nodes {
            if let Some(c) = node.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    out.push((node.id, status.to_string()));
                }
            }
        }
        out
    }

    /// Stops every node (SIGCONT first for paused ones, then kill) and the
    /// proxies.
    pub fn shutdown(&mut self) {
        for id in self.ids() {
            if self.node(id).paused {
                self.resume(id);
            }
            let node = self.node_mut(id);
            if let Some(mut c) = node.child.take() {
                signal(c.id(), libc::SIGTERM);
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                loop {
                    if !matches!(c.try_wait(), Ok(None)) {
                        break;
                    }
                    if std::time::Instant::now() > deadline {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        self.net.shutdown();
    }

    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut c) = node.child.take() {
                signal(c.id(), libc::SIGCONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.net.shutdown();
    }
}

/// A session for one admin request.
async fn admin_client(addr: &str) -> warden_client::Result<Client> {
    Client::connect(
        addr,
        ConnectOptions {
            session_timeout: Duration::from_secs(5),
            connect_timeout: ADMIN_TIMEOUT,
            request_timeout: ADMIN_TIMEOUT,
        },
    )
    .await
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// `n` distinct free ports below the ephemeral range (so that a restarted
/// node finds its ports free again: no outgoing connection gets them).
fn free_ports(n: usize) -> Vec<u16> {
    use rand::Rng;
    let mut rng = rand::rng();
    let mut held = Vec::new();
    while held.len() < n {
        let port: u16 = rng.random_range(20_000..32_000);
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    held.iter()
        .map(|l| l.local_addr().expect("bound listener").port())
        .collect()
}

/// Where node `id` reads its test clock offset (`--clock-offset-file`).
fn clock_file(dir: &std::path::Path, id: u64) -> PathBuf {
    dir.join(format!("clock-offset-{id}"))
}
