//! The one helper integration tests use to run real `warden` processes.
//!
//! - binaries are found next to the test executable (`target/<profile>/`),
//!   or at `$WARDEN_BIN` / `$WARDENCTL_BIN`; `cargo test --workspace` builds
//!   them before any test runs;
//! - each server gets its own temporary data directory and an OS-chosen
//!   port, and is ready when it prints `warden listening client=ADDR`;
//! - its log goes to a file; if the test fails (panics) the directory is
//!   kept and its path printed, so the log can be read afterwards;
//! - [`wait_until`] polls a condition with a deadline instead of sleeping.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of a workspace binary (`warden`, `wardenctl`).
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_uppercase());
    if let Ok(p) = std::env::var(&var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: run `cargo build --workspace` (or `cargo test --workspace`) first, or set ${var}",
        path.display()
    );
    path
}

/// Options for one server process.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub tick_ms: u64,
    pub min_session_timeout_ms: u32,
    pub snapshot_entries: Option<u64>,
    pub extra_args: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            tick_ms: 50,
            min_session_timeout_ms: 500,
            snapshot_entries: None,
            extra_args: Vec::new(),
        }
    }
}

/// A running `warden serve` process with its own data directory.
pub struct Server {
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    addr: String,
    opts: ServerOptions,
    starts: u32,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("warden-test-")
            .tempdir()
            .expect("temp dir");
        let mut s = Server {
            child: None,
            dir: Some(dir),
            addr: "127.0.0.1:0".to_string(),
            opts,
            starts: 0,
        };
        s.spawn();
        s
    }

    /// `host:port` of the client port.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.data_dir().join(format!("server-{}.log", self.starts))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let dir = self.data_dir().to_path_buf();
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let mut cmd = Command::new(binary("warden"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg(&self.addr)
            .arg("--peer-listen")
            .arg("127.0.0.1:0")
            .arg("--tick-ms")
            .arg(self.opts.tick_ms.to_string())
            .arg("--min-session-timeout-ms")
            .arg(self.opts.min_session_timeout_ms.to_string());
        if let Some(n) = self.opts.snapshot_entries {
            cmd.arg("--snapshot-entries").arg(n.to_string());
        }
        cmd.args(&self.opts.extra_args)
            .env(
                "WARDEN_LOG",
                "info,warden_server=debug,fjall=warn,lsm_tree=warn",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("spawn warden");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("warden listening client=") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(addr) => self.addr = addr,
            Err(_) => {
                let _ = child.kill();
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                panic!("warden did not become ready within {READY_TIMEOUT:?}; log:\n{log}");
            }
        }
        self.child = Some(child);
    }

    /// SIGKILL: no shutdown code runs, nothing is flushed that was not
    /// already synced.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: sending a signal to a child we own and have not reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again on the same data directory and port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill the server first");
        self.spawn();
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("warden test failed; server logs kept in {}", kept.display());
            }
        }
    }
}

/// Polls `cond` until it holds or `timeout` passes; panics naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
