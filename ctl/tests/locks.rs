//! `wardenctl locks` against a real server: locks held by `wardenctl lock`
//! processes (the recipes' Mutex) listed as a table and as JSON lines,
//! every page read, a bad kind refused with the server's message.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use warden_testkit::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(30);

/// `wardenctl [--json] locks --http HTTP ARGS`.
fn locks(server: &Server, json: bool, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
    if json {
        cmd.arg("--json");
    }
    cmd.args([
        "--timeout-ms",
        "5000",
        "locks",
        "--http",
        server.http_addr(),
    ])
    .args(args)
    .env_remove("WARDEN_LOG")
    .env_remove("WARDEN_HTTP")
    .stdin(Stdio::null())
    .output()
    .expect("run wardenctl")
}

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `wardenctl lock PATH -- sleep 600`: holds (or waits for) the lock
/// until killed.
struct Holding(Child);

impl Holding {
    fn start(server: &Server, path: &str) -> Holding {
        let child = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
            .args([
                "--servers",
                server.addr(),
                "lock",
                path,
                "--",
                "sleep",
                "600",
            ])
            .env_remove("WARDEN_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run wardenctl lock");
        Holding(child)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn locks_lists_every_lock_as_a_table_and_as_json() {
    let server = Server::start();
    let _holder = Holding::start(&server, "/locks/backup");
    wait_until(WAIT, "the first lock held", || {
        json_lines(&locks(&server, true, &[])).len() == 1
    });
    let _waiter = Holding::start(&server, "/locks/backup");
    let _other = Holding::start(&server, "/locks/report");
    wait_until(WAIT, "a waiter and a second lock", || {
        let listed = json_lines(&locks(&server, true, &["--page", "1"]));
        listed.len() == 2 && listed[0]["waiters"] == 1
    });

    let listed = json_lines(&locks(&server, true, &["--page", "1", "--waiters"]));
    let paths: Vec<&str> = listed.iter().map(|l| l["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/locks/backup", "/locks/report"]);
    let backup = &listed[0];
    assert_eq!(backup["kind"], "mutex");
    assert!(backup["holder"]["session_id"].is_string(), "{backup}");
    assert_eq!(backup["waiting"].as_array().unwrap().len(), 1, "{backup}");

    let out = locks(&server, false, &["--waiters"]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["KIND", "LOCK", "HOLDER", "TOKEN", "WAITERS", "WAITING"],
        "{table}"
    );
    assert_eq!(rows.len(), 3, "{table}");
    let token = backup["holder"]["fencing_token"].to_string();
    assert_eq!(
        (rows[1][0], rows[1][1], rows[1][2], rows[1][4], rows[1][5]),
        ("mutex", "/locks/backup", "session", token.as_str(), "1"),
        "{table}"
    );

    assert!(json_lines(&locks(&server, true, &["--kind", "kazoo", "--local"])).is_empty());
    let out = locks(&server, false, &["--kind", "rwlock"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HTTP 400") && err.contains("kind must be one of"),
        "{err}"
    );
}
