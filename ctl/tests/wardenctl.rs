//! `wardenctl` end to end: outputs, exit codes, the one-line error.
//!
//! Like `tests/client.rs`, each scenario runs against a real server
//! process of its own.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{ok_stdout, wardenctl};

/// Longest wait for a line from `wardenctl watch`.
const LINE_WAIT: Duration = Duration::from_secs(10);
/// Pause between changes while waiting for the watch to be set.
const CHANGE_INTERVAL: Duration = Duration::from_millis(100);

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod real {
            $(
                #[test]
                fn $name() {
                    let server = super::common::WardenServer::start();
                    super::$name(&server.addr);
                }
            )*
        }
    };
}

scenarios!(
    crud_commands,
    missing_node_is_one_line_on_stderr,
    version_conflict_exits_non_zero,
    json_output,
    tree_and_rmr,
    ephemeral_goes_when_wardenctl_exits,
    sequential_create_prints_the_name,
    watch_prints_events,
);

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// Asserts a failed run with exactly `line` (plus newline) on stderr.
fn assert_fails_with(out: &Output, line: &str) {
    assert!(!out.status.success(), "should fail: {out:?}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(out), format!("{line}\n"));
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
}

fn crud_commands(addr: &str) {
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["create", "/c", "hello"])),
        "/c\n"
    );
    assert_eq!(ok_stdout(&wardenctl(addr, &["get", "/c"])), "hello\n");
    assert_eq!(ok_stdout(&wardenctl(addr, &["set", "/c", "world"])), "");
    assert_eq!(ok_stdout(&wardenctl(addr, &["get", "/c"])), "world\n");
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["create", "/c/kid"])),
        "/c/kid\n"
    );
    assert_eq!(ok_stdout(&wardenctl(addr, &["ls", "/c"])), "kid\n");
    let stat = ok_stdout(&wardenctl(addr, &["stat", "/c"]));
    assert!(stat.contains("version = 1\n"), "{stat}");
    assert!(stat.contains("num_children = 1\n"), "{stat}");
    assert!(stat.contains("ephemeral_owner = 0x0\n"), "{stat}");
    let out = wardenctl(addr, &["delete", "/c"]);
    assert_fails_with(&out, "error: NotEmpty: /c");
    assert_eq!(ok_stdout(&wardenctl(addr, &["delete", "/c/kid"])), "");
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["delete", "--version", "1", "/c"])),
        ""
    );
    assert_fails_with(&wardenctl(addr, &["get", "/c"]), "error: NoNode: /c");
}

fn missing_node_is_one_line_on_stderr(addr: &str) {
    for args in [
        &["get", "/x"][..],
        &["set", "/x", "d"],
        &["delete", "/x"],
        &["ls", "/x"],
        &["stat", "/x"],
        &["tree", "/x"],
        &["rmr", "/x"],
    ] {
        assert_fails_with(&wardenctl(addr, args), "error: NoNode: /x");
    }
    assert_fails_with(&wardenctl(addr, &["get", "x"]), "error: InvalidPath: x");
    assert_fails_with(
        &wardenctl(addr, &["--json", "get", "/x"]),
        "error: NoNode: /x",
    );
}

fn version_conflict_exits_non_zero(addr: &str) {
    ok_stdout(&wardenctl(addr, &["create", "/v", "0"]));
    ok_stdout(&wardenctl(addr, &["set", "--version", "0", "/v", "1"]));
    assert_fails_with(
        &wardenctl(addr, &["set", "--version", "0", "/v", "2"]),
        "error: BadVersion: /v",
    );
    assert_fails_with(
        &wardenctl(addr, &["delete", "--version", "9", "/v"]),
        "error: BadVersion: /v",
    );
    assert_eq!(ok_stdout(&wardenctl(addr, &["get", "/v"])), "1\n");
}

fn json_line(stdout: &str) -> serde_json::Value {
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(stdout.trim_end()).expect("valid JSON")
}

fn json_output(addr: &str) {
    let created = json_line(&ok_stdout(&wardenctl(
        addr,
        &["--json", "create", "/j", "dat"],
    )));
    assert_eq!(created["path"], "/j");
    let czxid = created["stat"]["czxid"].as_u64().expect("czxid");

    let got = json_line(&ok_stdout(&wardenctl(addr, &["--json", "get", "/j"])));
    assert_eq!(got["path"], "/j");
    assert_eq!(got["data"], "dat");
    let stat = &got["stat"];
    for key in [
        "czxid",
        "mzxid",
        "pzxid",
        "ctime_ms",
        "mtime_ms",
        "version",
        "cversion",
        "aversion",
        "ephemeral_owner",
        "data_length",
        "num_children",
    ] {
        assert!(
            stat.get(key).is_some_and(|v| v.is_number()),
            "stat.{key} in {got}"
        );
    }
    assert_eq!(stat["czxid"].as_u64(), Some(czxid));
    assert_eq!(stat["data_length"], 3);
    // Key order is stable: path, data, stat.
    let raw = ok_stdout(&wardenctl(addr, &["--json", "get", "/j"]));
    assert!(
        raw.starts_with(r#"{"path":"/j","data":"dat","stat":{"czxid":"#),
        "{raw}"
    );

    let set = json_line(&ok_stdout(&wardenctl(addr, &["--json", "set", "/j", "x"])));
    assert_eq!(set["stat"]["version"], 1);
    let stat = json_line(&ok_stdout(&wardenctl(addr, &["--json", "stat", "/j"])));
    assert_eq!(stat["stat"]["version"], 1);
    let ls = json_line(&ok_stdout(&wardenctl(addr, &["--json", "ls", "/"])));
    assert!(
        ls["children"]
            .as_array()
            .expect("array")
            .contains(&"j".into()),
        "{ls}"
    );
    let deleted = json_line(&ok_stdout(&wardenctl(addr, &["--json", "delete", "/j"])));
    assert_eq!(deleted["deleted"], 1);
}

fn tree_and_rmr(addr: &str) {
    for node in ["/t", "/t/a", "/t/a/b", "/t/c"] {
        ok_stdout(&wardenctl(addr, &["create", node]));
    }
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["tree", "/t"])),
        "/t\n  a\n    b\n  c\n"
    );
    let lines = ok_stdout(&wardenctl(addr, &["--json", "tree", "/t"]));
    let paths: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("JSON")["path"]
                .as_str()
                .expect("path")
                .to_string()
        })
        .collect();
    assert_eq!(paths, ["/t", "/t/a", "/t/a/b", "/t/c"]);
    let root_tree = ok_stdout(&wardenctl(addr, &["tree"]));
    assert!(root_tree.starts_with("/\n"), "{root_tree}");
    assert!(root_tree.contains("\n  t\n"), "{root_tree}");

    let rmr = json_line(&ok_stdout(&wardenctl(addr, &["--json", "rmr", "/t"])));
    assert_eq!(rmr["deleted"], 4);
    assert_fails_with(&wardenctl(addr, &["get", "/t"]), "error: NoNode: /t");
}

fn ephemeral_goes_when_wardenctl_exits(addr: &str) {
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["create", "--ephemeral", "/e"])),
        "/e\n"
    );
    assert_fails_with(&wardenctl(addr, &["get", "/e"]), "error: NoNode: /e");
}

fn sequential_create_prints_the_name(addr: &str) {
    ok_stdout(&wardenctl(addr, &["create", "/s"]));
    let first = ok_stdout(&wardenctl(addr, &["create", "--sequential", "/s/n-"]));
    let second = ok_stdout(&wardenctl(addr, &["create", "--sequential", "/s/n-"]));
    for name in [&first, &second] {
        let suffix = name.trim_end().strip_prefix("/s/n-").expect("prefix kept");
        assert_eq!(suffix.len(), 10, "{name}");
    }
    assert!(first < second);
}

/// Kills the child on drop, so a failing test leaves no process behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn watch_prints_events(addr: &str) {
    ok_stdout(&wardenctl(addr, &["create", "/w"]));
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_wardenctl"))
            .args(["--servers", addr, "--json", "watch", "--recursive", "/w"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wardenctl watch"),
    );
    let stdout = child.0.stdout.take().expect("piped");
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    // The watch is set some time after the process starts; change the
    // subtree until it reports something.
    let deadline = Instant::now() + LINE_WAIT;
    let first = loop {
        ok_stdout(&wardenctl(addr, &["create", "--sequential", "/w/n-"]));
        match lines_rx.recv_timeout(CHANGE_INTERVAL) {
            Ok(line) => break line,
            Err(_) => assert!(Instant::now() < deadline, "wardenctl watch printed nothing"),
        }
    };
    let event: serde_json::Value = serde_json::from_str(&first).expect("JSON event");
    assert_eq!(event["type"], "NodeCreated");
    assert!(
        event["path"].as_str().expect("path").starts_with("/w/n-"),
        "{first}"
    );
    assert!(event["zxid"].as_u64().expect("zxid") > 0);
    assert!(
        first.starts_with(r#"{"type":"NodeCreated","path":"/w/n-"#),
        "{first}"
    );

    // Later changes keep coming, one line each.
    ok_stdout(&wardenctl(addr, &["set", "/w", "x"]));
    let deadline = Instant::now() + LINE_WAIT;
    loop {
        let line = lines_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("more events");
        let event: serde_json::Value = serde_json::from_str(&line).expect("JSON event");
        if event["type"] == "NodeDataChanged" {
            assert_eq!(event["path"], "/w");
            break;
        }
    }
    assert!(
        child.0.try_wait().expect("wait").is_none(),
        "still watching"
    );
}

#[test]
fn unreachable_server_is_one_line_on_stderr() {
    let out = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args([
            "--servers",
            "127.0.0.1:1",
            "--timeout-ms",
            "300",
            "get",
            "/x",
        ])
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .output()
        .expect("run wardenctl");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ConnectionLoss: could not connect: 127.0.0.1:1: "),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .arg("create")
        .output()
        .expect("run wardenctl");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_explains_ephemeral_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["create", "--help"])
        .output()
        .expect("run wardenctl");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("deleted when wardenctl exits"), "{help}");
}
