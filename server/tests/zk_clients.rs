//! The ZooKeeper port driven by clients nobody here wrote, as Debian ships
//! them: Apache Curator's recipes (`compat/curator/*.java`,
//! compiled with javac against `libcurator-*-java` and ZooKeeper 3.8's
//! Java client) on three nodes across a leader kill -9; ZooKeeper's C
//! client (`compat/c/zk_basics.c`, compiled with gcc against
//! `libzookeeper-mt`); and zkCli.sh's command set.
//!
//! `compat/run.sh` installs what they need (apt-get) and runs this file
//! with `WARDEN_COMPAT_REQUIRED=1`, under which a missing tool fails the
//! test; otherwise (a plain `cargo test` on a machine without Java or the
//! packages) each test says what is missing and is skipped.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use warden_testkit::{Cluster, Server};

/// Debian's jars: Curator's recipes and framework, ZooKeeper's Java
/// client, and what they load (Guava, SLF4J with its simple logger).
const CURATOR_JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
];
const JAVA_DIR: &str = "/usr/share/java";
const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";
const ZK_C_HEADER: &str = "/usr/include/zookeeper/zookeeper.h";

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../compat")
}

/// Whether every needed thing is there; if not, fails under
/// `WARDEN_COMPAT_REQUIRED=1` and otherwise prints why the test is skipped.
fn have(test: &str, needs: &[(&str, bool)]) -> bool {
    let missing: Vec<&str> = needs
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(what, _)| *what)
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test}: missing {} (bash compat/run.sh installs it)",
        missing.join(", ")
    );
    assert!(
        std::env::var("WARDEN_COMPAT_REQUIRED").as_deref() != Ok("1"),
        "{why}"
    );
    eprintln!("skipped: {why}");
    false
}

fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The leader's id, as the cluster reports it.
async fn leader_of(cluster: &Cluster) -> usize {
    let admin = warden_client::Client::connect(&cluster.servers(), Default::default())
        .await
        .unwrap();
    let leader = admin.cluster_status().await.unwrap().leader_id as usize;
    assert_ne!(leader, 0);
    leader
}

/// Curator's recipes against a 3-node cluster: mutex, read-write lock,
/// semaphore, leader latch and selector, barriers, atomic long,
/// CuratorCache, NodeCache, PersistentNode, transactions; then the mutex
/// and a latch across a kill -9 of the Raft leader. Any recipe's FAIL
/// line, or a connection dropped outside the kill, fails the test.
#[tokio::test(flavor = "multi_thread")]
async fn curator_recipes_on_three_nodes_across_a_leader_kill() {
    let jars: Vec<PathBuf> = CURATOR_JARS
        .iter()
        .map(|j| Path::new(JAVA_DIR).join(j))
        .collect();
    let mut needs = vec![
        ("javac (openjdk-17-jdk-headless)", runs("javac", "-version")),
        ("java", runs("java", "-version")),
    ];
    for jar in &jars {
        needs.push((jar.to_str().unwrap(), jar.exists()));
    }
    if !have("Curator recipes", &needs) {
        return;
    }
    let classpath = jars
        .iter()
        .map(|j| j.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let work = tempfile::tempdir().unwrap();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(compat_dir().join("curator"))
        .expect("compat/curator")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    sources.sort();
    let javac = Command::new("javac")
        .args(["-Xlint:all,-path", "-Werror", "-d"])
        .arg(work.path())
        .arg("-cp")
        .arg(&classpath)
        .args(&sources)
        .output()
        .expect("run javac");
    assert!(
        javac.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&javac.stderr)
    );

    let mut cluster = Cluster::start(3);
    let leader = leader_of(&cluster).await;
    let stderr_path = work.path().join("java.stderr");
    let mut child = Command::new("java")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{}:{classpath}", work.path().display()))
        .arg("warden.compat.CuratorCompat")
        .arg(cluster.zk_servers())
        .env("WARDEN_ZK_LEADER", cluster.zk_addr(leader))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // To a file: a chatty client must never block on a full pipe.
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("run java");
    let mut killed = None;
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        println!("{line}");
        if line.starts_with("KILL-LEADER") {
            // Whoever leads now (it may have moved since the start).
            let now = leader_of(&cluster).await;
            cluster.kill9(now);
            let addr = cluster.zk_addr(now).to_string();
            writeln!(child.stdin.as_mut().unwrap(), "killed {addr}").unwrap();
            killed = Some(now);
        }
        lines.push(line);
    }
    let status = child.wait().unwrap();
    let failed: Vec<&String> = lines.iter().filter(|l| l.starts_with("FAIL")).collect();
    let passed = lines.iter().filter(|l| l.starts_with("PASS")).count();
    let report = || {
        let survivor = cluster
            .node_ids()
            .into_iter()
            .find(|&i| Some(i) != killed)
            .unwrap();
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let tail: String = stderr
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        format!(
            "{}\n--- java stderr (tail)\n{tail}\n--- node {survivor} log\n{}",
            lines.join("\n"),
            cluster.log(survivor)
        )
    };
    assert!(
        status.success() && failed.is_empty() && lines.last().is_some_and(|l| l == "ALL PASS"),
        "Curator recipes failed ({status}): {failed:?}\n{}",
        report()
    );
    assert!(killed.is_some(), "the program never asked for the kill");
    assert_eq!(passed, 18, "every recipe reported:\n{}", report());
}

/// ZooKeeper's C client (libzookeeper-mt): create, get, set, delete, ls,
/// data/child/exists watches, multi, auth + ACL, getconfig.
#[test]
fn c_client_basics() {
    let needs = [
        ("gcc", runs("gcc", "--version")),
        (
            "libzookeeper-mt-dev (zookeeper/zookeeper.h)",
            Path::new(ZK_C_HEADER).exists(),
        ),
    ];
    if !have("C client", &needs) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let program = work.path().join("zk_basics");
    let gcc = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&program)
        .arg(compat_dir().join("c/zk_basics.c"))
        .arg("-lzookeeper_mt")
        .output()
        .expect("run gcc");
    assert!(
        gcc.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    let server = Server::start();
    let out = Command::new(&program)
        .arg(server.zk_addr())
        .output()
        .expect("run zk_basics");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ALL PASS"),
        "C client failed ({}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let passed = stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert_eq!(passed, 28, "{stdout}");
}

/// Runs zkCli.sh against `server` with `commands` on stdin (one per
/// line); its stdout and stderr.
fn zkcli(server: &str, commands: &[&str]) -> (String, String) {
    let mut child = Command::new(ZKCLI)
        .args(["-server", server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zkCli.sh");
    let mut script = commands.join("\n");
    script.push_str("\nquit\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// zkCli.sh's reconfig (ZooKeeper's ZooKeeperAdmin) on a 3-node cluster
/// and a spare started with `--join`: refused before `addauth` as the
/// super user (NoAuth), for a stale `-v` (BadVersion) and a bad server
/// line (BadArguments); `-add` makes the spare an observer, `config`
/// shows it, `-remove` takes it out again.
#[test]
fn zkcli_reconfig() {
    let needs = [
        ("zkCli.sh (Debian's zookeeper)", Path::new(ZKCLI).exists()),
        ("java", runs("java", "-version")),
    ];
    if !have("zkCli reconfig", &needs) {
        return;
    }
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
    let line4 = format!(
        "server.4={}:3888:observer;{}",
        cluster.peer_addr(4),
        cluster.zk_addr(4)
    );
    let add = format!("reconfig -add {line4}");
    let (out, err) = zkcli(
        cluster.zk_addr(1),
        &[
            "reconfig -remove 3",
            "addauth digest admin:root-pw",
            "reconfig -v 1 -remove 3",
            "reconfig -add server.5=nohost",
            &add,
            "config",
            "reconfig -remove 4",
        ],
    );
    let all = format!("{out}\n{err}");
    let has = |want: &str| all.contains(want);
    let server4 = format!("server.4={}:0:observer", cluster.peer_addr(4));
    // Each "Committed new configuration:" is followed by the config.
    let committed: Vec<&str> = out.split("Committed new configuration:").skip(1).collect();
    let checks: Vec<(&str, bool)> = vec![
        ("NoAuth before addauth", has("Insufficient permission")),
        // zkCli's words for BadVersion and BadArguments.
        ("stale -v: BadVersion", has("version No is not valid")),
        ("bad line: BadArguments", has("Arguments are not valid")),
        ("two reconfigs committed", committed.len() == 2),
        (
            "-add: the spare is an observer",
            committed.first().is_some_and(|c| c.contains(&server4)),
        ),
        (
            "config shows it",
            all.lines().filter(|l| l.starts_with(&server4)).count() >= 2,
        ),
        (
            "-remove: gone again",
            committed
                .get(1)
                .is_some_and(|c| !c.contains("server.4=") && c.contains("server.3=")),
        ),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        failed.is_empty(),
        "zkCli reconfig checks failed: {failed:?}\n--- stdout\n{out}\n--- stderr\n{err}\n--- node 1 log\n{}",
        cluster.log(1)
    );
}

/// zkCli.sh's quota commands on a 3-node cluster, with ZooKeeper 3.8's
/// semantics: `setquota` (soft and hard, merged into one limits node),
/// `listquota` with the stats the servers keep, a create past the hard
/// count refused (QuotaExceeded) while the soft byte limit lets writes
/// through, `delquota -N` lifting the hard limit, `setquota -B` refusing
/// a setData, `delquota` removing the quota; the stats are the same on
/// another member.
#[test]
fn zkcli_quotas() {
    let needs = [
        ("zkCli.sh (Debian's zookeeper)", Path::new(ZKCLI).exists()),
        ("java", runs("java", "-version")),
    ];
    if !have("zkCli quotas", &needs) {
        return;
    }
    let cluster = Cluster::start(3);
    let (out, err) = zkcli(
        cluster.zk_addr(1),
        &[
            "create /app a",
            "create /app/x bb",
            "setquota -N 3 /app",
            "setquota -b 4 /app",
            "listquota /app",
            "create /app/y ccc",
            "create /app/z d",
            "listquota /app",
            "setquota -n 1 /app/x",
            "delquota -N /app",
            "create /app/z d",
            "listquota /app",
            "setquota -B 8 /app",
            "set /app/x bbbb",
            "listquota /app",
        ],
    );
    let (out2, err2) = zkcli(cluster.zk_addr(2), &["sync /app", "listquota /app"]);
    let (out3, err3) = zkcli(
        cluster.zk_addr(3),
        &[
            "delquota /app",
            "listquota /app",
            "ls /zookeeper/quota",
            "create /app/w e",
        ],
    );
    let all = format!("{out}\n{err}");
    let has = |want: &str| all.contains(want);
    let checks: Vec<(&str, bool)> = vec![
        (
            "setquota -N, -b merged",
            has("Output quota for /app count=-1,bytes=4=;byteHardLimit=-1;countHardLimit=3"),
        ),
        (
            "stats kept: /app and /app/x",
            has("Output stat for /app count=2,bytes=3"),
        ),
        ("hard count: refused", has("Quota has exceeded : /app/z")),
        (
            "soft bytes: let through",
            has("Output stat for /app count=3,bytes=6"),
        ),
        (
            "nested quota refused by zkCli",
            has("/app/x has a parent /app which has a quota"),
        ),
        (
            "delquota -N: hard limit lifted",
            has("Output quota for /app count=-1,bytes=4=;byteHardLimit=-1;countHardLimit=-1")
                && has("Output stat for /app count=4,bytes=7"),
        ),
        (
            "setquota -B: hard bytes refused",
            has("Quota has exceeded : /app/x")
                && has("Output quota for /app count=-1,bytes=4=;byteHardLimit=8;countHardLimit=-1"),
        ),
        (
            "the same stats on another member",
            out2.contains("Output stat for /app count=4,bytes=7"),
        ),
        (
            "delquota: gone",
            format!("{out3}\n{err3}").contains("quota for /app does not exist.")
                && out3.lines().any(|l| l.trim() == "[]"),
        ),
        (
            "no quota, no limit",
            format!("{out3}\n{err3}").contains("Created /app/w"),
        ),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        failed.is_empty(),
        "zkCli quota checks failed: {failed:?}\n--- stdout\n{out}\n--- stderr\n{err}\n--- node 2\n{out2}\n{err2}\n--- node 3\n{out3}\n{err3}\n--- node 1 log\n{}",
        cluster.log(1)
    );
}

/// zkCli.sh's commands, ZooKeeper 3.8's own client: the 3.6+ ones
/// (addWatch, getAllChildrenNumber, getEphemerals, removewatches, whoami,
/// config, sync), the everyday ones, the quota commands and reconfig
/// (refused: the server it removes is no member); `zkcli_quotas` and `zkcli_reconfig`
/// go further.
#[test]
fn zkcli_command_set() {
    let needs = [
        ("zkCli.sh (Debian's zookeeper)", Path::new(ZKCLI).exists()),
        ("java", runs("java", "-version")),
    ];
    if !have("zkCli", &needs) {
        return;
    }
    let server = Server::start();
    let (out, err) = zkcli(
        server.zk_addr(),
        &[
            "create /q d",
            "create /q/a x",
            "create -e /q/e1 eph",
            "create -s /q/seq- s",
            "create -c /q/box",
            "create -t 60000 /q/ttl t",
            "create /p",
            "addWatch -m PERSISTENT /p",
            "set /p 1",
            "set /p 2",
            "create /p/c",
            "create /p/c/below",
            "addWatch -m PERSISTENT_RECURSIVE /q",
            "set /q/a y",
            "create /q/a/deep z",
            "getAllChildrenNumber /q",
            "getEphemerals /q",
            "whoami",
            "addauth digest carol:carol-pw",
            "whoami",
            "config",
            "sync /q",
            "get -s /q/a",
            "set -v 7 /q/a stale",
            "stat /q/box",
            "ls -R /q",
            "getAcl /q",
            "removewatches /q -a",
            "set /q/a after-removal",
            "get /q/a",
            "setquota -n 10 /q",
            "listquota /q",
            "delquota /q",
            "reconfig -remove 3",
            "delete /q/a",
            "deleteall /q/a",
            "ls /q/a",
        ],
    );
    let all = format!("{out}\n{err}");
    let has_line = |want: &str| all.lines().any(|l| l.trim() == want);
    let has = |want: &str| all.contains(want);
    let checks: Vec<(&str, bool)> = vec![
        ("create", has_line("Created /q/a")),
        ("create -s", has_line("Created /q/seq-0000000002")),
        (
            "addWatch: a change below",
            has("WatchedEvent state:SyncConnected type:NodeDataChanged path:/q/a"),
        ),
        (
            "addWatch: recursive",
            has("WatchedEvent state:SyncConnected type:NodeCreated path:/q/a/deep"),
        ),
        // A persistent watch fires every time, for the node and its
        // children, not for grandchildren.
        (
            "addWatch -m PERSISTENT: fires again",
            all.matches("type:NodeDataChanged path:/p\n").count() == 2,
        ),
        (
            "addWatch -m PERSISTENT: children",
            has("type:NodeChildrenChanged path:/p\n") && !has("path:/p/c/below"),
        ),
        // a, e1, seq-, box, ttl, a/deep
        ("getAllChildrenNumber", has_line("6")),
        ("getEphemerals", has_line("[/q/e1]")),
        ("whoami", has_line("ip: 127.0.0.1")),
        ("whoami after addauth", has_line("digest: carol")),
        (
            "config",
            all.lines()
                .any(|l| l.starts_with("server.1=127.0.0.1:") && l.contains(":0:participant;")),
        ),
        ("sync", has_line("Sync is OK")),
        ("get -s", has_line("dataVersion = 1")),
        ("set -v (stale)", has("version No is not valid : /q/a")),
        // As ZooKeeper 3.8 shows a container: owner 0.
        ("stat of a container", has_line("ephemeralOwner = 0x0")),
        ("ls -R", has_line("/q/a/deep")),
        ("getAcl", has_line("'world,'anyone")),
        (
            "removewatches",
            has("WatchedEvent state:SyncConnected type:PersistentWatchRemoved path:/q"),
        ),
        // Only `set /q/a y` fires: not the refused set, not the one
        // after the watch was removed.
        (
            "no event after removewatches",
            all.matches("type:NodeDataChanged path:/q/a").count() == 1,
        ),
        (
            "setquota, listquota",
            has("Output quota for /q count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=-1"),
        ),
        // q, a, e1, seq-, box, ttl, a/deep
        ("listquota: the stats", has("Output stat for /q count=7,")),
        ("delquota: found", !has("Quota does not exist for /q")),
        // A server without --super-digest takes a caller on its own host
        // as the admin (server/src/authority.rs), so the reconfig reaches
        // the membership check, which refuses removing a server that is
        // no member (ZooKeeper's BadArguments; zkcli_reconfig and the
        // attack tests have the rest).
        ("reconfig: not a member", has("Arguments are not valid")),
        ("delete non-empty", has("Node not empty: /q/a")),
        ("deleteall", has("Node does not exist: /q/a")),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        failed.is_empty(),
        "zkCli checks failed: {failed:?}\n--- stdout\n{out}\n--- stderr\n{err}\n--- server log\n{}",
        server.log()
    );
}
