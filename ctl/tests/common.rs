//! Helpers for wardenctl's tests: a real server, and running the binary.

use std::process::{Command, Output, Stdio};

/// A real `warden serve` process (through the shared test helper).
pub struct WardenServer {
    pub addr: String,
    _inner: warden_testkit::Server,
}

impl WardenServer {
    pub fn start() -> WardenServer {
        let inner = warden_testkit::Server::start();
        WardenServer {
            addr: inner.addr().to_string(),
            _inner: inner,
        }
    }
}

/// Runs the `wardenctl` built with these tests against `servers`.
pub fn wardenctl(servers: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .arg("--servers")
        .arg(servers)
        .arg("--timeout-ms")
        .arg("5000")
        .args(args)
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .stdin(Stdio::null())
        .output()
        .expect("run wardenctl")
}

/// Stdout of a run that must have succeeded.
pub fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "wardenctl failed ({}): stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}
