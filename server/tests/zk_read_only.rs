//! ZooKeeper's read-only mode (`--zk-read-only`) on a 3-node cluster,
//! driven by kazoo (`tests/zk/read_only_run.py`): with two nodes down, the
//! one left serves reads to a `read_only=True` client, answers its writes
//! NotReadOnly and `isro` with `ro`, and gives no session to a client that
//! did not ask for read-only; once the others are back, `isro` says `rw`
//! and a new connection gets a read-write session that writes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use warden_testkit::{wait_until, Cluster, ServerOptions};

/// ZooKeeper's `isro` four-letter word at `addr`: `ro`, `rw` or `null`.
fn isro(addr: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"isro");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn kazoo_read_only_mode_on_a_cut_off_server() {
    let venv = warden_testkit::python::zk_venv();
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            extra_args: vec!["--zk-read-only".into()],
            ..Default::default()
        },
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk/read_only_run.py");
    // kazoo logs every refused connect: to a file, shown on failure.
    let stderr_path = cluster.dir().join("kazoo.stderr");
    let mut child = Command::new(venv.join("bin/python"))
        .arg(&script)
        .env("WARDEN_ZK_HOSTS", cluster.zk_servers())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).expect("kazoo.stderr"))
        .spawn()
        .expect("run read_only_run.py");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = |want: &str, cluster: &Cluster| {
        let line = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(
            line,
            want,
            "read_only_run.py (stderr in {})\nnode logs:\n{}",
            cluster.dir().join("kazoo.stderr").display(),
            [1, 2, 3]
                .iter()
                .map(|&i| format!("--- node {i}\n{}", cluster.log(i)))
                .collect::<String>()
        );
    };
    next("ready", &cluster);

    // Node 1 alone: whatever its role was, it loses its leader (or its
    // followers) and, after the grace period, serves read-only.
    let alone = cluster.zk_addr(1).to_string();
    assert_eq!(isro(&alone), "rw");
    cluster.kill9(2);
    cluster.kill9(3);
    wait_until(Duration::from_secs(30), "node 1 to say isro = ro", || {
        isro(&alone) == "ro"
    });
    writeln!(stdin, "cut {alone}").unwrap();
    next("read-only ok", &cluster);
    let log = cluster.log(1);
    assert!(log.contains("read-only mode begins"), "{log}");

    cluster.restart_many(&[2, 3]);
    wait_until(Duration::from_secs(30), "node 1 to say isro = rw", || {
        isro(&alone) == "rw"
    });
    writeln!(stdin, "healed").unwrap();
    next("ok", &cluster);
    assert!(child.wait().unwrap().success());
    let log = cluster.log(1);
    assert!(log.contains("read-only mode ends"), "{log}");
}
