//! The ZooKeeper port driven by a real third-party ZooKeeper client:
//! Python's `kazoo` (from PyPI, installed by this test into a virtual
//! environment under `target/`), running the pytest suite in
//! `tests/zk/test_kazoo.py` against a real single server,
//! `tests/zk/cluster_run.py` against a 3-node cluster whose leader is killed
//! mid-run, and `tests/zk/test_kazoo_cluster.py` (server_version,
//! transactions, LockingQueue, null data, the packet limit, four-letter
//! words and AdminServer commands) against a 3-node cluster; and
//! `tests/zk/differential.py`, the same random operations against Apache
//! ZooKeeper 3.8 and Warden, compared (when Java and Debian's `zookeeper`
//! package are here).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use warden_testkit::{Cluster, Server};

fn zk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk")
}

/// `target/zk-venv`, created once (the pinned packages are
/// `warden_testkit::python::ZK_PACKAGES`).
fn venv() -> PathBuf {
    warden_testkit::python::zk_venv()
}

#[test]
fn kazoo_suite_against_one_server() {
    let venv = venv();
    let server = Server::start();
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(zk_dir().join("test_kazoo.py"))
        .env("WARDEN_ZK_HOSTS", server.zk_addr())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kazoo suite failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    assert!(stdout.contains("passed"), "{stdout}");
}

/// ZooKeeper compatibility on three nodes (`tests/zk/test_kazoo_cluster.py`).
#[test]
fn kazoo_compatibility_suite_against_three_nodes() {
    let venv = venv();
    // The suite asks every word, those that list sessions too.
    let cluster = Cluster::start_with(
        3,
        warden_testkit::ServerOptions {
            extra_args: vec!["--4lw-whitelist".into(), "*".into()],
            ..Default::default()
        },
    );
    let ids = cluster.node_ids();
    let list =
        |f: &dyn Fn(usize) -> String| ids.iter().map(|&i| f(i)).collect::<Vec<_>>().join(",");
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(zk_dir().join("test_kazoo_cluster.py"))
        .env("WARDEN_ZK_HOSTS", cluster.zk_servers())
        .env("WARDEN_ZK_NODES", list(&|i| cluster.zk_addr(i).to_string()))
        .env(
            "WARDEN_HTTP_NODES",
            list(&|i| cluster.http_addr(i).to_string()),
        )
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kazoo compatibility suite failed:\n{stdout}\n{}\nnode logs:\n{}",
        String::from_utf8_lossy(&out.stderr),
        ids.iter()
            .map(|&i| format!("--- node {i}\n{}", cluster.log(i)))
            .collect::<String>()
    );
    assert!(stdout.contains("passed"), "{stdout}");
    println!("{stdout}");
}

/// The leader, as the cluster reports it.
async fn leader_of(cluster: &Cluster) -> usize {
    let admin = warden_client::Client::connect(&cluster.servers(), Default::default())
        .await
        .unwrap();
    let leader = admin.cluster_status().await.unwrap().leader_id as usize;
    assert_ne!(leader, 0);
    leader
}

/// Runs the kazoo script `script` against `hosts`: once it prints
/// `ready`, kills node `victim`, tells the script `killed`, and returns
/// the script's last line, which must start with `ok` (else the test
/// fails with the script's output and node `log_of`'s log).
fn run_through_a_kill(
    cluster: &mut Cluster,
    script: &str,
    hosts: &str,
    victim: usize,
    log_of: usize,
) -> String {
    let mut child = Command::new(venv().join("bin/python"))
        .arg(zk_dir().join(script))
        .env("WARDEN_ZK_HOSTS", hosts)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(first, "ready", "{script} did not start");
    cluster.kill9(victim);
    writeln!(child.stdin.as_mut().expect("stdin"), "killed").unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        status.success() && rest.last().is_some_and(|l| l.starts_with("ok")),
        "{script} failed ({status}):\n{}\n{stderr}\nnode {log_of} log:\n{}",
        rest.join("\n"),
        cluster.log(log_of)
    );
    rest.last().cloned().unwrap_or_default()
}

#[tokio::test]
async fn kazoo_recipes_survive_a_leader_kill_on_three_nodes() {
    let mut cluster = Cluster::start(3);
    let leader = leader_of(&cluster).await;
    let hosts = cluster.zk_servers();
    let survivor = cluster
        .node_ids()
        .into_iter()
        .find(|&i| i != leader)
        .unwrap();
    run_through_a_kill(&mut cluster, "cluster_run.py", &hosts, leader, survivor);
}

/// A ZooKeeper client on a follower writes through a leader kill without
/// retrying anything itself: no write may fail (the follower keeps a write
/// that finds no leader until the next one is known, and proposes again
/// what may have died with the old one, applying it once).
#[tokio::test]
async fn zookeeper_writes_on_a_follower_go_through_a_leader_kill() {
    let mut cluster = Cluster::start(3);
    let leader = leader_of(&cluster).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|&i| i != leader)
        .unwrap();
    let hosts = cluster.zk_addr(follower).to_string();
    let last = run_through_a_kill(&mut cluster, "failover_run.py", &hosts, leader, follower);
    // The figure, for whoever reads the test output (not asserted).
    println!("{last}");
}

#[test]
fn kazoo_over_tls_on_the_secure_zookeeper_port() {
    let venv = venv();
    let certs = warden_testkit::TlsCerts::generate(&["node"], &["alice", "bob"]);
    let server = Server::start_with(warden_testkit::ServerOptions {
        extra_args: certs.server_args("node", &[]),
        ..Default::default()
    });
    let out = Command::new(venv.join("bin/python"))
        .arg(zk_dir().join("tls_run.py"))
        .env("WARDEN_ZK_HOSTS", server.zk_addr())
        .env("WARDEN_TLS_CA", certs.ca())
        .env("WARDEN_TLS_CERT", certs.cert("alice"))
        .env("WARDEN_TLS_KEY", certs.key("alice"))
        .env("WARDEN_TLS_CERT2", certs.cert("bob"))
        .env("WARDEN_TLS_KEY2", certs.key("bob"))
        .output()
        .expect("run tls_run.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "tls_run.py failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let log = server.log();
    // The certificate's subject reached the core through the ZooKeeper door,
    // and the plaintext client was refused with one line.
    assert!(log.contains("subject=CN=alice"), "{log}");
    assert!(
        log.contains(
            r#"connection refused: plaintext connection on a TLS-only port door="zookeeper""#
        ),
        "{log}"
    );
}

/// ZooKeeper's reconfig with kazoo (`tests/zk/reconfig_run.py`) on a
/// 3-node cluster and a spare started with `--join`: refused without
/// ADMIN (NoAuth), for bad input (BadArguments, nothing changed) and a
/// stale version (BadVersion); the spare added as an observer (the config
/// watch fires, it serves), promoted while a member is removed (two raft
/// changes in one reconfig), then the whole membership given at once.
#[test]
fn kazoo_reconfig_on_three_nodes_and_a_spare() {
    let venv = venv();
    let digest = warden_protocol::auth::digest_id("admin:root-pw").unwrap();
    let mut cluster = Cluster::start_with_spares(
        3,
        1,
        warden_testkit::ServerOptions {
            extra_args: vec!["--super-digest".into(), digest],
            ..Default::default()
        },
    );
    cluster.launch_spare(4);
    let ids = cluster.node_ids();
    let list =
        |f: &dyn Fn(usize) -> String| ids.iter().map(|&i| f(i)).collect::<Vec<_>>().join(",");
    let out = Command::new(venv.join("bin/python"))
        .arg(zk_dir().join("reconfig_run.py"))
        .env("WARDEN_ZK_NODES", list(&|i| cluster.zk_addr(i).to_string()))
        .env(
            "WARDEN_PEER_NODES",
            list(&|i| cluster.peer_addr(i).to_string()),
        )
        .env("WARDEN_SUPER", "admin:root-pw")
        .output()
        .expect("run reconfig_run.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ALL PASS"),
        "kazoo reconfig failed:\n{stdout}\n{}\nnode logs:\n{}",
        String::from_utf8_lossy(&out.stderr),
        ids.iter()
            .map(|&i| format!("--- node {i}\n{}", cluster.log(i)))
            .collect::<String>()
    );
    assert_eq!(stdout.matches("PASS ").count(), 8, "{stdout}");
}

/// ACLs and auth through the ZooKeeper port (`tests/zk/test_kazoo_acl.py`):
/// each permission refused then granted, the schemes, AuthFailed, auth
/// replayed by kazoo after a reconnect.
#[test]
fn kazoo_acl_suite() {
    let venv = venv();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let digest = |c: &str| warden_protocol::auth::digest_id(c).unwrap();
    std::fs::write(&users, format!("{}\n", digest("bob:bob-pw"))).unwrap();
    let server = Server::start_with(warden_testkit::ServerOptions {
        extra_args: vec![
            "--super-digest".into(),
            digest("admin:root-pw"),
            "--auth-users".into(),
            users.display().to_string(),
        ],
        ..Default::default()
    });
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(zk_dir().join("test_kazoo_acl.py"))
        .env("WARDEN_ZK_HOSTS", server.zk_addr())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kazoo ACL suite failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    assert!(stdout.contains("passed"), "{stdout}");
}

/// Apache ZooKeeper 3.8 (Debian's `zookeeper` package), standalone on a
/// loopback port, for the differential test; stopped on drop.
struct ZooKeeper {
    child: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl ZooKeeper {
    const JAR: &'static str = "/usr/share/java/zookeeper.jar";

    /// None (the test says why) without Java or the package; a failure
    /// then under `WARDEN_COMPAT_REQUIRED=1` (`compat/run.sh`, CI with
    /// Java).
    fn start() -> Option<ZooKeeper> {
        let java = Command::new("java")
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !java || !Path::new(Self::JAR).exists() {
            let why = "differential test: missing java or Debian's zookeeper package \
                       (bash compat/run.sh installs them)";
            assert!(
                std::env::var("WARDEN_COMPAT_REQUIRED").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = warden_testkit::free_ports(1)[0];
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("zk.log")).unwrap();
        let child = Command::new("java")
            // TTL nodes are an extended type, off by default.
            .args(["-Xmx256m", "-Dzookeeper.extendedTypesEnabled=true", "-cp"])
            .arg(format!(
                "{}:/usr/share/java/slf4j-nop.jar:/etc/zookeeper/conf",
                Self::JAR
            ))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&cfg)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run ZooKeeper");
        let zk = ZooKeeper {
            child,
            addr: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let ruok = || -> bool {
            let Ok(mut s) = std::net::TcpStream::connect(&zk.addr) else {
                return false;
            };
            let mut answer = String::new();
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .is_ok()
                && s.write_all(b"ruok").is_ok()
                && std::io::Read::read_to_string(&mut s, &mut answer).is_ok()
                && answer == "imok"
        };
        warden_testkit::wait_until(std::time::Duration::from_secs(60), "ZooKeeper", ruok);
        Some(zk)
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tests/zk/differential.py`: the same seeded random operations through
/// kazoo against ZooKeeper 3.8 and Warden, every result compared: values,
/// errors, stats, sequential names, ACLs, containers and TTL nodes, multi,
/// watch events (set by one session, fired by others), a second session
/// closed and reopened, a digest-authenticated session.
#[test]
fn differential_against_zookeeper() {
    let Some(zookeeper) = ZooKeeper::start() else {
        return;
    };
    let venv = venv();
    let server = Server::start();
    for seed in ["1", "2"] {
        let out = Command::new(venv.join("bin/python"))
            .arg(zk_dir().join("differential.py"))
            .args(["--zookeeper", &zookeeper.addr, "--warden", server.zk_addr()])
            .args(["--seed", seed, "--ops", "1500"])
            .output()
            .expect("run differential.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            out.status.success() && stdout.starts_with("ok: "),
            "differential test, seed {seed}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
