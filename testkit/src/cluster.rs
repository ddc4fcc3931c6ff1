//! [`Cluster`]: N `warden serve` processes forming one Raft group.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::front::Front;
use crate::ports::{free_ports, PORT_ATTEMPTS_MAX};
use crate::process::{keep_on_panic, Membership, Process};
use crate::{wait_until, ServerOptions, READY_TIMEOUT};

/// How long [`Cluster::leader`] and its kin wait for a leader.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one `/status` question to a node may take (its core answers
/// within 2 s or the door says it did not).
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

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
        Self::start_fronted(nodes, spares, opts, false).0
    }

    /// Like [`Cluster::start_with`], with a [`Front`] before each node's
    /// peer port (`fronts[i - 1]` before node `i`'s): the other members
    /// reach node `i` only through it, so cutting it cuts node `i` off one
    /// way (it hears no member; what it sends still arrives).
    pub fn start_with_fronts(nodes: usize, opts: ServerOptions) -> (Cluster, Vec<Front>) {
        Self::start_fronted(nodes, 0, opts, true)
    }

    fn start_fronted(
        nodes: usize,
        spares: usize,
        opts: ServerOptions,
        fronted: bool,
    ) -> (Cluster, Vec<Front>) {
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
            let (mut cluster, fronts) = Self::build(&dir, members, nodes, &opts, fronted);
            match cluster.try_restart_many(&(1..=members).collect::<Vec<_>>()) {
                Ok(()) => {
                    cluster.dir = Some(dir);
                    return (cluster, fronts);
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
        fronted: bool,
    ) -> (Cluster, Vec<Front>) {
        // Client, peer, HTTP and ZooKeeper port of each node, all distinct.
        let ports = free_ports(nodes * 4);
        let addr = |port: u16| format!("127.0.0.1:{port}");
        let fronts: Vec<Front> = if fronted {
            (1..=nodes)
                .map(|id| Front::start(&addr(ports[4 * (id - 1) + 1])))
                .collect()
        } else {
            Vec::new()
        };
        // Where the others reach node `id`'s peer port.
        let reach = |id: usize| match fronts.get(id - 1) {
            Some(front) => front.addr().to_string(),
            None => addr(ports[4 * (id - 1) + 1]),
        };
        let peer_list = |ids: std::ops::RangeInclusive<usize>| {
            ids.map(|id| format!("{id}={}", reach(id)))
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
        (
            Cluster {
                nodes: processes,
                dir: None,
            },
            fronts,
        )
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
    /// [`STOP_TIMEOUT`](crate::STOP_TIMEOUT)); its exit status, or `None` if it was not running.
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

    /// The current leader, as any node reports it; waits (up to
    /// [`LEADER_TIMEOUT`]) until one knows one.
    ///
    /// This and its kin ask each node's HTTP `/status` (plain HTTP: not for
    /// nodes started with TLS on that port), which opens no session. They
    /// block the calling thread between questions, as every helper here
    /// does.
    pub fn leader(&self) -> usize {
        self.await_leader(&self.node_ids(), |_| true, "a leader")
    }

    /// The leader as one of the nodes `up` reports it, and one of them
    /// itself (the majority side's leader, say, after others were killed);
    /// waits (up to [`LEADER_TIMEOUT`]).
    pub fn leader_among(&self, up: &[usize]) -> usize {
        self.await_leader(up, |l| up.contains(&l), &format!("a leader among {up:?}"))
    }

    /// The leader as node `i` sees it; waits (up to [`LEADER_TIMEOUT`])
    /// until it knows one.
    pub fn leader_seen_by(&self, i: usize) -> usize {
        self.await_leader(&[i], |_| true, &format!("node {i} to know a leader"))
    }

    /// Asks the nodes `ask` in turn, until one reports a leader that
    /// `accept` takes.
    fn await_leader(&self, ask: &[usize], accept: impl Fn(usize) -> bool, what: &str) -> usize {
        let mut found = None;
        wait_until(LEADER_TIMEOUT, what, || {
            found = ask
                .iter()
                .filter_map(|&i| self.reported_leader(i))
                .find(|&l| accept(l));
            found.is_some()
        });
        found.expect("wait_until returned, so a leader was found")
    }

    /// The leader node `i` reports on `GET /status`: `None` if it knows
    /// none (0) or did not answer (down, starting, its core busy).
    fn reported_leader(&self, i: usize) -> Option<usize> {
        let addr = self.http_addr(i).parse().ok()?;
        let mut stream = TcpStream::connect_timeout(&addr, STATUS_TIMEOUT).ok()?;
        stream.set_read_timeout(Some(STATUS_TIMEOUT)).ok()?;
        stream
            .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        let status: serde_json::Value = serde_json::from_str(body).ok()?;
        match status["leader_id"].as_u64()? {
            0 => None,
            l => usize::try_from(l).ok(),
        }
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

#[cfg(test)]
mod tests {
    //! These start real servers: build the binaries first
    //! (`cargo build --workspace`; `cargo test --workspace` does it).

    use super::*;
    use crate::process::READY_PREFIX;
    use crate::wait_until;
    use std::net::TcpStream;
    use std::time::Duration;

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
    fn leader_is_found_and_found_again_after_it_is_killed() {
        let mut cluster = Cluster::start(3);
        let first = cluster.leader();
        assert!(cluster.node_ids().contains(&first), "leader {first}");
        for i in cluster.node_ids() {
            assert_eq!(cluster.leader_seen_by(i), first, "node {i}'s view");
        }
        cluster.kill9(first);
        let up: Vec<usize> = cluster
            .node_ids()
            .into_iter()
            .filter(|&i| i != first)
            .collect();
        let second = cluster.leader_among(&up);
        assert_ne!(second, first);
        assert!(up.contains(&second));
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
}
