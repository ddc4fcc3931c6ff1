//! SASL DIGEST-MD5 on the ZooKeeper port (`--zk-sasl-jaas`), proved with
//! clients nobody here wrote: kazoo with pure-sasl (`tests/zk/
//! test_kazoo_sasl.py`), and ZooKeeper 3.8's own Java client (zkCli.sh)
//! configured with a JAAS file, as Kafka and HBase configure theirs. The
//! zkCli test needs Java and Debian's `zookeeper` package: it is skipped
//! without them, and fails instead under `WARDEN_COMPAT_REQUIRED=1`
//! (`compat/run.sh`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use warden_testkit::{Server, ServerOptions};

const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";

/// The server's JAAS file: the `Server` section a ZooKeeper ensemble
/// would be given.
const SERVER_JAAS: &str = r#"
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_bob="secret"
    user_alice="alice-pw";
};
"#;

fn zk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk")
}

/// A server with SASL users bob (secret) and alice (alice-pw); the JAAS
/// file lives in `dir`.
fn sasl_server(dir: &Path) -> Server {
    let jaas = dir.join("server-jaas.conf");
    std::fs::write(&jaas, SERVER_JAAS).unwrap();
    Server::start_with(ServerOptions {
        extra_args: vec!["--zk-sasl-jaas".into(), jaas.display().to_string()],
        ..Default::default()
    })
}

#[test]
fn kazoo_sasl_digest_md5() {
    let venv = warden_testkit::python::zk_venv();
    let dir = tempfile::tempdir().unwrap();
    let server = sasl_server(dir.path());
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(zk_dir().join("test_kazoo_sasl.py"))
        .env("WARDEN_ZK_HOSTS", server.zk_addr())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = server.log();
    assert!(
        out.status.success(),
        "kazoo SASL suite failed:\n{stdout}\n{}\nserver log:\n{log}",
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("5 passed"), "{stdout}");
    // The refusals were the server's, for the reasons the test meant.
    assert!(
        log.contains(r#"wrong password for user "bob""#),
        "no wrong-password refusal in the log:\n{log}"
    );
    assert!(
        log.contains(r#"unknown user "mallory""#),
        "no unknown-user refusal in the log:\n{log}"
    );
}

/// Runs zkCli.sh against `server` with `jaas` as its JAAS file (if any)
/// and `commands` on stdin; its stdout and stderr together.
fn zkcli(server: &str, jaas: Option<&Path>, commands: &[&str]) -> String {
    let mut cmd = Command::new(ZKCLI);
    cmd.args(["-server", server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(jaas) = jaas {
        cmd.env(
            "CLIENT_JVMFLAGS",
            format!("-Djava.security.auth.login.config={}", jaas.display()),
        );
    }
    let mut child = cmd.spawn().expect("run zkCli.sh");
    let mut script = commands.join("\n");
    script.push_str("\nquit\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn client_jaas(dir: &Path, name: &str, user: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "Client {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  \
             username=\"{user}\"\n  password=\"{password}\";\n}};\n"
        ),
    )
    .unwrap();
    path
}

/// zkCli.sh with a JAAS `Client` section: bob authenticates, `whoami`
/// names his sasl and digest identities, he creates and reads a node only
/// `sasl:bob` may read; without SASL zkCli is refused it; with a wrong
/// password the client hears AuthFailed.
#[test]
fn zkcli_with_a_jaas_file() {
    let java = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !(java && Path::new(ZKCLI).exists()) {
        let why = "zkCli with a JAAS file: missing java or zkCli.sh (Debian's zookeeper; bash compat/run.sh installs them)";
        assert!(
            std::env::var("WARDEN_COMPAT_REQUIRED").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = sasl_server(dir.path());
    let bob = client_jaas(dir.path(), "bob.conf", "bob", "secret");
    let out = zkcli(
        server.zk_addr(),
        Some(&bob),
        &[
            "whoami",
            "create /zkcli-sasl bob-data sasl:bob:cdrwa",
            "get /zkcli-sasl",
            "getAcl /zkcli-sasl",
        ],
    );
    let has_line = |out: &str, want: &str| out.lines().any(|l| l.trim() == want);
    let log = || server.log();
    for want in ["sasl: bob", "digest: bob", "bob-data", "'sasl,'bob"] {
        assert!(
            has_line(&out, want),
            "zkCli as bob: no line {want:?}\n{out}\nserver log:\n{}",
            log()
        );
    }
    let anon = zkcli(server.zk_addr(), None, &["get /zkcli-sasl"]);
    assert!(
        anon.contains("Insufficient permission : /zkcli-sasl"),
        "zkCli without SASL read the node:\n{anon}"
    );
    let wrong = client_jaas(dir.path(), "wrong.conf", "bob", "guess");
    let refused = zkcli(server.zk_addr(), Some(&wrong), &["get /zkcli-sasl"]);
    assert!(
        refused.contains("state:AuthFailed"),
        "zkCli with a wrong password did not hear AuthFailed:\n{refused}\nserver log:\n{}",
        log()
    );
    assert!(
        !has_line(&refused, "bob-data"),
        "a wrong password read the node:\n{refused}"
    );
    // Refused by the server, not only by the client checking rspauth.
    assert!(
        log().contains(r#"wrong password for user "bob""#),
        "the server did not refuse the wrong password:\n{}",
        log()
    );
}
