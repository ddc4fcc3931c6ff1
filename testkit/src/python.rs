//! Python virtual environments for tests that drive Warden with
//! third-party Python tools (kazoo, openapi-spec-validator): created under
//! `target/` from PyPI on first use, with pinned packages, and kept for
//! later runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a test waits for another one installing the same venv.
const INSTALL_WAIT: Duration = Duration::from_secs(600);

/// `target/<name>`: a venv holding exactly `packages` (pip requirement
/// strings, pinned: `kazoo==2.11.0`), made once. A lock directory keeps
/// tests running at once from building it twice; a marker file names the
/// packages, so a venv made for another list is made anew.
pub fn venv(name: &str, packages: &[&str]) -> PathBuf {
    let target = crate::binary("warden")
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/warden")
        .to_path_buf();
    let venv = target.join(name);
    let ready = venv.join(".installed");
    let wanted = format!("{}\n", packages.join(" "));
    let lock = target.join(format!("{name}.lock"));
    let deadline = Instant::now() + INSTALL_WAIT;
    loop {
        if std::fs::read_to_string(&ready).is_ok_and(|have| have == wanted) {
            return venv;
        }
        if std::fs::create_dir(&lock).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "another test is still installing {} (or a crashed one left {}: remove it)",
            venv.display(),
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Holding the lock: look again (another test may have just finished).
    if std::fs::read_to_string(&ready).is_ok_and(|have| have == wanted) {
        let _ = std::fs::remove_dir(&lock);
        return venv;
    }
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("run python");
        if !out.status.success() {
            let _ = std::fs::remove_dir(&lock);
            panic!(
                "{cmd:?} failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages));
    std::fs::write(&ready, wanted).expect("venv marker");
    let _ = std::fs::remove_dir(&lock);
    venv
}

/// The packages of `target/zk-venv`, the venv of every test that drives
/// the ZooKeeper port with kazoo (one list, so the tests share one venv):
/// kazoo, pytest, and pure-sasl (kazoo's SASL, for DIGEST-MD5).
pub const ZK_PACKAGES: &[&str] = &["kazoo==2.11.0", "pytest==9.2.0", "pure-sasl==0.6.2"];

/// `target/zk-venv` with [`ZK_PACKAGES`], made once.
pub fn zk_venv() -> PathBuf {
    venv("zk-venv", ZK_PACKAGES)
}
