//! ZooKeeper's read-only mode (`--zk-read-only`) on a 3-node cluster,
//! driven by kazoo (`tests/zk/read_only_run.py`): with two nodes down, the
//! one left serves reads to a `read_only=True` client, answers its writes
//! NotReadOnly and `isro` with `ro`, and gives no session to a client that
//! did not ask for read-only; ZooKeeper's Java client (`zkCli.sh -r`)
//! connects read-only there too, reads, and is refused its create; once
//! the others are back, `isro` says `rw` and a new connection gets a
//! read-write session that writes.

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

const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";

/// ZooKeeper's own Java client in read-only mode (`zkCli.sh -r`) against
/// the cut-off server: it connects read-only, reads, and its create is
/// refused NotReadOnly. Skipped without Java and Debian's `zookeeper`
/// (a failure instead under `WARDEN_COMPAT_REQUIRED=1`).
fn zkcli_read_only(alone: &str, cluster: &Cluster) {
    let java = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !(java && Path::new(ZKCLI).exists()) {
        let why = "zkCli -r: missing java or zkCli.sh (Debian's zookeeper; bash compat/run.sh installs them)";
        assert!(
            std::env::var("WARDEN_COMPAT_REQUIRED").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let mut child = Command::new(ZKCLI)
        .args(["-server", alone, "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zkCli.sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"get /ro/data\ncreate /ro/java x\nquit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // "Not a read-only call" is the Java client's text for NotReadOnly.
    for want in [
        "state:ConnectedReadOnly",
        "before",
        "Not a read-only call: /ro/java",
    ] {
        assert!(
            all.contains(want),
            "zkCli -r: no {want:?} in\n{all}\nnode 1 log:\n{}",
            cluster.log(1)
        );
    }
    assert!(!all.contains("Created /ro/java"), "{all}");
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
    zkcli_read_only(&alone, &cluster);

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
