//! Runs real `warden-fenced` processes for the tests: each on an OS-chosen
//! loopback port, ready when it prints `warden-fenced listening http=ADDR`,
//! its stdout and stderr in a log file of its directory. If a test fails,
//! the directory (data and logs) is kept and its path printed.

#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use warden_fenced::StoreClient;

/// How long a store may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
const READY_PREFIX: &str = "warden-fenced listening ";

/// The binary under test, built by cargo for this package's tests.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_warden-fenced")
}

/// One `warden-fenced` process, across restarts, with its own directory.
pub struct Fenced {
    dir: Option<tempfile::TempDir>,
    child: Option<KillOnDrop>,
    addr: String,
    starts: u32,
}

impl Fenced {
    /// Starts a store on a fresh data dir.
    pub fn start() -> Fenced {
        let dir = tempfile::Builder::new()
            .prefix("warden-fenced-test-")
            .tempdir()
            .expect("temp dir");
        let mut f = Fenced {
            dir: Some(dir),
            child: None,
            addr: String::new(),
            starts: 0,
        };
        f.restart();
        f
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the directory is kept").path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn client(&self) -> StoreClient {
        StoreClient::new(self.addr.clone())
    }

    /// Starts it again on the same data dir (on a new port).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill the store first");
        self.starts += 1;
        let log = self.dir().join(format!("fenced-{}.log", self.starts));
        let data = self.data_dir();
        let launched = launch(
            &[
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                data.to_str().expect("utf-8 temp path"),
                "--log-level",
                "debug",
            ],
            &[],
            &log,
        );
        match launched {
            Ok((running, addr)) => {
                self.child = Some(running);
                self.addr = addr;
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// SIGKILL: nothing runs at exit, nothing is flushed.
    pub fn kill9(&mut self) {
        // Dropping the guard kills and reaps the process.
        self.child.take();
    }

    /// SIGTERM and wait for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        let mut running = self.child.take().expect("running");
        let child = &mut running.0;
        warden_testkit::sigterm(child.id());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the store did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Fenced {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("fenced test failed; store kept in {}", dir.keep().display());
            }
        }
    }
}

/// Kills its process when dropped, so that a failing assertion does not
/// leave the process running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `warden-fenced ARGS` with `envs` (and no other WARDEN_*
/// variable), output to `log`; waits for the ready line. Err, with the
/// log, if the process exits (or hangs) first.
pub fn launch(
    args: &[&str],
    envs: &[(&str, &str)],
    log: &Path,
) -> Result<(KillOnDrop, String), String> {
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut cmd = Command::new(binary());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("WARDEN_") {
            cmd.env_remove(name);
        }
    }
    let mut child = cmd
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file.try_clone().expect("log handle")))
        .spawn()
        .expect("spawn warden-fenced");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || forward(stdout, log_file, tx));
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(addr) => Ok((KillOnDrop(child), addr)),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            Err(format!(
                "warden-fenced was not ready (exit: {status:?}); log:\n{log}"
            ))
        }
    }
}

fn forward(stdout: std::process::ChildStdout, mut log: File, ready: mpsc::Sender<String>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "{line}");
        if let Some(addr) = line
            .strip_prefix(READY_PREFIX)
            .and_then(|rest| rest.strip_prefix("http="))
        {
            let _ = ready.send(addr.trim().to_string());
        }
    }
}
