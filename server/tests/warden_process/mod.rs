//! A `warden` process of this build, for tests of what the binary itself
//! does (flags, config files, logs): started with only the WARDEN_*
//! variables a test names, its stdout read line by line, its stderr kept.

#![allow(dead_code)] // each test file uses part of it

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a start or a stop may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// `serve` on free loopback ports with its data in `dir`.
pub fn serve_args(dir: &Path) -> Vec<String> {
    [
        "serve",
        "--data-dir",
        dir.join("data").to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--peer-listen",
        "127.0.0.1:0",
        "--zk-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--tick-ms",
        "20",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub struct Warden {
    child: Option<Child>,
    stdout: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Stdout lines read so far.
    pub lines: Vec<String>,
}

/// What a process left when it ended.
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: String,
}

impl Warden {
    /// Starts `warden ARGS` in `dir` (stderr goes to `dir/stderr-N`), with
    /// the caller's WARDEN_* variables removed and `env` set.
    pub fn start(dir: &Path, args: &[String], env: &[(&str, &str)]) -> Warden {
        let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        let stderr = dir.join(format!("stderr-{n}"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
        cmd.args(args).current_dir(dir);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("WARDEN_") {
                cmd.env_remove(name);
            }
        }
        cmd.envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        let mut child = cmd.spawn().expect("spawn warden");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Warden {
            child: Some(child),
            stdout: rx,
            stderr,
            lines: Vec::new(),
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The first stdout line (a server's ready line); panics with stderr
    /// if the process ends first or the deadline passes.
    pub fn ready_line(&mut self) -> String {
        match self.stdout.recv_timeout(DEADLINE) {
            Ok(line) => {
                self.lines.push(line.clone());
                line
            }
            Err(e) => {
                let stderr = self.stderr();
                self.kill();
                panic!("warden printed no ready line ({e:?}); stderr:\n{stderr}");
            }
        }
    }

    /// Waits for the process to exit by itself.
    pub fn wait(mut self) -> Ended {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("warden did not exit in time; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends at EOF, after the last line.
        while let Ok(line) = self.stdout.recv_timeout(DEADLINE) {
            self.lines.push(line);
        }
        Ended {
            status,
            stdout: std::mem::take(&mut self.lines),
            stderr: self.stderr(),
        }
    }

    /// SIGTERM, then [`Warden::wait`].
    pub fn stop(self) -> Ended {
        let pid = self.child.as_ref().expect("running").id();
        // Not reaped yet, so the pid is still this child's.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        self.wait()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Warden {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `warden ARGS` to its end (a command that exits by itself).
pub fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ended {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    Warden::start(dir, &args, env).wait()
}

/// `field=value` of a text ready line.
pub fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
}

/// The client address of a ready line, text or JSON.
pub fn client_addr(ready: &str) -> String {
    field(ready, "client")
        .or_else(|| {
            let v: serde_json::Value = serde_json::from_str(ready).ok()?;
            v["client"].as_str().map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no client address in {ready:?}"))
}

/// Opens (and drops) one session on `client`, so that per-session lines
/// have a reason to appear.
pub fn one_session(client: &str) {
    let mut conn = warden_testkit::raw::RawConn::connect(client);
    let hello = conn.connect_request(warden_protocol::pb::ConnectRequest {
        protocol_version: 1,
        timeout_ms: 5000,
        ..Default::default()
    });
    assert_eq!(hello.error, 0, "{hello:?}");
}
