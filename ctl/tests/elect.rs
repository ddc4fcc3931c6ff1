//! `wardenctl elect` end to end: two candidates, SIGTERM the leader, the
//! other one leads; a leader that loses its node exits non-zero.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{ok_stdout, wardenctl, WardenServer};

/// Longest wait for a line or an exit.
const DEADLINE: Duration = Duration::from_secs(20);

/// A running `wardenctl elect`, its stdout lines arriving on a channel.
struct Candidate {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Candidate {
    fn start(servers: &str, name: &str, id: &str) -> Candidate {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
            .args([
                "--servers",
                servers,
                "--timeout-ms",
                "5000",
                "elect",
                name,
                id,
            ])
            .env_remove("WARDEN_LOG")
            .env_remove("WARDEN_LOG_LEVEL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wardenctl elect");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Candidate { child, lines }
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("a line from wardenctl elect")
    }

    fn sigterm(&self) {
        warden_testkit::sigterm(self.child.id());
    }

    /// Waits for the exit; returns (success, stderr).
    fn wait(mut self) -> (bool, String) {
        let mut status = None;
        warden_testkit::wait_until(DEADLINE, "wardenctl elect to exit", || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            use std::io::Read;
            let _ = err.read_to_string(&mut stderr);
        }
        (status.is_some_and(|s| s.success()), stderr)
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `leader ID token=N`.
fn leader_line(line: &str) -> (String, u64) {
    let rest = line.strip_prefix("leader ").expect("a leader line");
    let (id, token) = rest.rsplit_once(" token=").expect("token=");
    (id.to_string(), token.parse().expect("numeric token"))
}

#[test]
fn sigterm_hands_leadership_to_the_next_candidate() {
    let server = WardenServer::start();
    let first = Candidate::start(&server.addr, "svc", "alpha");
    let (id, token1) = leader_line(&first.next_line());
    assert_eq!(id, "alpha");

    let second = Candidate::start(&server.addr, "svc", "beta");
    // beta queues behind alpha: wait until both candidates are there.
    warden_testkit::wait_until(DEADLINE, "two candidates", || {
        let out = wardenctl(&server.addr, &["ls", "/elections/svc"]);
        ok_stdout(&out).lines().count() == 2
    });
    assert!(second.lines.try_recv().is_err(), "two leaders at once");

    first.sigterm();
    let (ok, stderr) = first.wait();
    assert!(ok, "resigned and exited 0; stderr: {stderr}");

    let (id, token2) = leader_line(&second.next_line());
    assert_eq!(id, "beta");
    assert!(token2 > token1);
    second.sigterm();
    let (ok, stderr) = second.wait();
    assert!(ok, "stderr: {stderr}");
}

#[test]
fn losing_leadership_exits_non_zero_with_one_error_line() {
    let server = WardenServer::start();
    let leader = Candidate::start(&server.addr, "lose", "alpha");
    leader_line(&leader.next_line());
    let out = wardenctl(&server.addr, &["ls", "/elections/lose"]);
    let node = ok_stdout(&out).trim().to_string();
    let out = wardenctl(
        &server.addr,
        &["delete", &format!("/elections/lose/{node}")],
    );
    assert!(out.status.success(), "{out:?}");
    let (ok, stderr) = leader.wait();
    assert!(!ok, "lost leadership must exit non-zero");
    assert!(stderr.starts_with("error: NoNode: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
