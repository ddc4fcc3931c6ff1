//! `warden local-cluster` end to end: it starts a real 3-node cluster,
//! prints a connect string whose every server accepts connections and
//! serves the same tree, reports a node that dies without restarting it,
//! and on SIGTERM stops every node and exits 0, leaving no process behind.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_testkit::{process_exists, sigkill, sigterm, wait_until};

/// Ports local-cluster uses above its base port: client, peer (+100) and
/// HTTP (+200) ports of up to 3 nodes.
const PORT_OFFSETS: [u16; 12] = [0, 1, 2, 100, 101, 102, 200, 201, 202, 300, 301, 302];
/// Base ports are tried in this range, below Linux's ephemeral ports
/// (32768 and up) so that outgoing connections do not take them.
const BASE_PORT_RANGE: std::ops::Range<u16> = 10_000..30_000;
/// Base ports tried before giving up.
const BASE_PORT_ATTEMPTS: usize = 50;
/// How long local-cluster may take to print `WARDEN_SERVERS=`; longer than
/// its own ready timeout, so that its error is what a failure shows.
const SERVERS_LINE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long local-cluster may take to stop its nodes and exit (its own
/// SIGKILL deadline is 10 s).
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long writes may take to succeed again after a node is killed (a new
/// leader may have to be elected).
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A `warden local-cluster --nodes 3` process in a temporary directory.
struct LocalCluster {
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    servers: Vec<String>,
    /// Further stdout lines, `NAME=value`, read up to the `--tls` lines.
    lines: Vec<String>,
}

impl LocalCluster {
    fn start() -> LocalCluster {
        Self::start_with(&[])
    }

    /// With `--tls` among `extra`, also reads the TLS lines.
    fn start_with(extra: &[&str]) -> LocalCluster {
        let dir = tempfile::Builder::new()
            .prefix("warden-local-cluster-test-")
            .tempdir()
            .expect("temp dir");
        let base_port = free_base_port();
        let stderr =
            std::fs::File::create(dir.path().join("local-cluster.stderr")).expect("stderr file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("local-cluster")
            .arg("--nodes")
            .arg("3")
            .arg("--data-dir")
            .arg(dir.path().join("cluster"))
            .arg("--base-port")
            .arg(base_port.to_string())
            .arg("--tick-ms")
            .arg("50")
            .args(extra)
            .env(
                "WARDEN_LOG",
                "info,warden_server=debug,fjall=warn,lsm_tree=warn",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn warden local-cluster");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        // Built before waiting, so that a failure keeps the logs (Drop).
        let mut cluster = LocalCluster {
            child: Some(child),
            dir: Some(dir),
            servers: Vec::new(),
            lines: Vec::new(),
        };
        let line = match rx.recv_timeout(SERVERS_LINE_TIMEOUT) {
            Ok(line) => line,
            Err(e) => panic!("no line on stdout ({e:?}); stderr:\n{}", cluster.stderr()),
        };
        let servers = line
            .strip_prefix("WARDEN_SERVERS=")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        cluster.servers = servers.split(',').map(str::to_string).collect();
        let expected: Vec<String> = (0..3)
            .map(|i| format!("127.0.0.1:{}", base_port + i))
            .collect();
        assert_eq!(cluster.servers, expected, "{line}");
        // ZOOKEEPER_SERVERS=, then with --tls the CA, certificate and key.
        let more = if extra.contains(&"--tls") { 4 } else { 1 };
        for _ in 0..more {
            match rx.recv_timeout(SERVERS_LINE_TIMEOUT) {
                Ok(line) => cluster.lines.push(line),
                Err(e) => panic!("stdout ended early ({e:?}); stderr:\n{}", cluster.stderr()),
            }
        }
        cluster
    }

    /// The value of stdout line `NAME=value`.
    fn line(&self, name: &str) -> String {
        let prefix = format!("{name}=");
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name}= line in {:?}", self.lines))
            .to_string()
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    fn cluster_dir(&self) -> PathBuf {
        self.dir().join("cluster")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir().join("local-cluster.stderr")).unwrap_or_default()
    }

    /// Pid of node `i`, from the pid file local-cluster keeps.
    fn node_pid(&self, i: usize) -> u32 {
        let path = self.cluster_dir().join(format!("node-{i}.pid"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
    }

    fn is_running(&mut self) -> bool {
        let child = self.child.as_mut().expect("not stopped yet");
        matches!(child.try_wait(), Ok(None))
    }

    /// SIGTERM, then the exit status (within [`EXIT_TIMEOUT`]).
    fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("not stopped yet");
        sigterm(child.id());
        let mut status = None;
        wait_until(EXIT_TIMEOUT, "local-cluster to exit", || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Only on a failed test: stop everything, and do not leave nodes
        // behind even if local-cluster does not stop them.
        if let Some(mut child) = self.child.take() {
            let pids: Vec<u32> = (1..=3)
                .filter_map(|i| {
                    let path = self.cluster_dir().join(format!("node-{i}.pid"));
                    std::fs::read_to_string(path).ok()?.trim().parse().ok()
                })
                .collect();
            sigterm(child.id());
            let deadline = Instant::now() + EXIT_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            for pid in pids {
                sigkill(pid);
            }
        }
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("local-cluster test failed; logs kept in {}", kept.display());
            }
        }
    }
}

/// A base port whose whole block of ports is free right now.
fn free_base_port() -> u16 {
    for _ in 0..BASE_PORT_ATTEMPTS {
        let base = rand::random_range(BASE_PORT_RANGE);
        let held: Result<Vec<TcpListener>, _> = PORT_OFFSETS
            .iter()
            .map(|off| TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], base + off))))
            .collect();
        if held.is_ok() {
            return base;
        }
    }
    panic!("no free block of ports found in {BASE_PORT_RANGE:?}");
}

fn options() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
    }
}

/// Creates `path`, retrying while the cluster is between leaders.
async fn create_eventually(servers: &str, path: &str) {
    let deadline = tokio::time::Instant::now() + RECOVERY_TIMEOUT;
    loop {
        let result = match Client::connect(servers, options()).await {
            Ok(c) => {
                let r = c.create(path, b"x", CreateOptions::default()).await;
                let _ = c.close().await;
                r.map(|_| ())
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return,
            // An earlier attempt that seemed to fail may have applied.
            Err(e) if e.code() == ErrorCode::NodeExists => return,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "create {path} via {servers} still failing after {RECOVERY_TIMEOUT:?}: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the server at `addr` has applied the creation of `path`.
async fn visible_on(addr: &str, path: &str) {
    let c = Client::connect(addr, options())
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let deadline = tokio::time::Instant::now() + RECOVERY_TIMEOUT;
    while c.exists(path).await.expect("exists").is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never showed on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = c.close().await;
}

/// After local-cluster exited: no node process and no open client port.
fn assert_all_gone(cluster: &LocalCluster, pids: &[u32]) {
    for (i, pid) in pids.iter().enumerate() {
        assert!(
            !process_exists(*pid),
            "node {} (pid {pid}) outlived local-cluster",
            i + 1
        );
    }
    for addr in &cluster.servers {
        assert!(
            TcpStream::connect(addr).is_err(),
            "{addr} still accepts connections"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prints_servers_serves_them_and_stops_every_node_on_sigterm() {
    let mut cluster = LocalCluster::start();
    for addr in &cluster.servers {
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    }
    let pids: Vec<u32> = (1..=3).map(|i| cluster.node_pid(i)).collect();
    for (i, pid) in pids.iter().enumerate() {
        assert!(process_exists(*pid), "node {}", i + 1);
        let log =
            std::fs::read_to_string(cluster.cluster_dir().join(format!("node-{}.log", i + 1)))
                .expect("node log");
        assert!(log.contains("warden listening client="), "node {}", i + 1);
    }

    // One tree behind all three: a write through the connect string shows
    // on every node.
    create_eventually(&cluster.servers.join(","), "/local-cluster").await;
    for addr in &cluster.servers {
        visible_on(addr, "/local-cluster").await;
    }

    let status = cluster.terminate();
    let stderr = cluster.stderr();
    assert!(status.success(), "{status:?}\nstderr:\n{stderr}");
    // Every node went on SIGTERM, cleanly: none needed SIGKILL.
    assert!(!stderr.contains("was killed"), "{stderr}");
    assert!(!stderr.contains("stopped with"), "{stderr}");
    assert_all_gone(&cluster, &pids);
    for i in 1..=3 {
        let pid_file = cluster.cluster_dir().join(format!("node-{i}.pid"));
        assert!(!pid_file.exists(), "{} left behind", pid_file.display());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_node_is_reported_not_restarted_and_writes_continue() {
    let mut cluster = LocalCluster::start();
    let pids: Vec<u32> = (1..=3).map(|i| cluster.node_pid(i)).collect();

    sigkill(pids[2]);
    wait_until(
        Duration::from_secs(10),
        "local-cluster to report node 3's exit",
        || cluster.stderr().contains("node 3 exited"),
    );
    let stderr = cluster.stderr();
    assert!(
        stderr.contains("SIGKILL") || stderr.contains("signal: 9"),
        "{stderr}"
    );
    assert!(stderr.contains("node-3.log"), "{stderr}");
    assert!(cluster.is_running(), "local-cluster gave up:\n{stderr}");

    // Two of three are a quorum: writes go on.
    let survivors = cluster.servers[..2].join(",");
    create_eventually(&survivors, "/after-node-3").await;
    for addr in &cluster.servers[..2] {
        visible_on(addr, "/after-node-3").await;
    }
    // Not restarted.
    assert!(!process_exists(pids[2]));
    assert!(TcpStream::connect(&cluster.servers[2]).is_err());

    let status = cluster.terminate();
    assert!(
        status.success(),
        "{status:?}\nstderr:\n{}",
        cluster.stderr()
    );
    assert_all_gone(&cluster, &pids);
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_is_one_flag_away() {
    let mut cluster = LocalCluster::start_with(&["--tls"]);
    let pids: Vec<u32> = (1..=3).map(|i| cluster.node_pid(i)).collect();
    let (ca, cert, key) = (
        cluster.line("WARDEN_TLS_CA"),
        cluster.line("WARDEN_TLS_CERT"),
        cluster.line("WARDEN_TLS_KEY"),
    );
    // The guide shows the wardenctl command line with the TLS flags.
    let guide = cluster.stderr();
    assert!(
        guide.contains(&format!(
            "wardenctl --tls-ca {ca} --tls-cert {cert} --tls-key {key} ls /"
        )),
        "{guide}"
    );
    // wardenctl, given those files (here through the environment it reads).
    let servers = cluster.servers.join(",");
    let ctl = |args: &[&str]| {
        Command::new(warden_testkit::binary("wardenctl"))
            .args(args)
            .env("WARDEN_SERVERS", &servers)
            .env("WARDEN_TLS_CA", &ca)
            .env("WARDEN_TLS_CERT", &cert)
            .env("WARDEN_TLS_KEY", &key)
            .output()
            .expect("run wardenctl")
    };
    let out = ctl(&["create", "/secure", "yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for addr in &cluster.servers {
        let out = ctl(&["--servers", addr, "get", "/secure"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
    }
    // Plaintext is refused on every client port.
    for addr in &cluster.servers {
        let err = Client::connect(addr, options())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLS only"), "{err}");
    }
    let status = cluster.terminate();
    assert!(
        status.success(),
        "{status:?}\nstderr:\n{}",
        cluster.stderr()
    );
    assert_all_gone(&cluster, &pids);
}
