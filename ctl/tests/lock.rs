//! `wardenctl lock` and `wardenctl lock-holder` end to end, against a real
//! server: the command runs with its fencing token and its exit code comes
//! back; two lockers never overlap; `--wait` gives up without running the
//! command.

mod common;

use std::process::{Command, Stdio};

use common::{ok_stdout, wardenctl, WardenServer};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn runs_the_command_with_its_token_and_passes_the_exit_code() {
    let server = WardenServer::start();
    let out = wardenctl(
        &server.addr,
        &[
            "lock",
            "/locks/a",
            "--",
            "sh",
            "-c",
            "echo token=$WARDEN_FENCING_TOKEN",
        ],
    );
    let stdout = ok_stdout(&out);
    let token: u64 = stdout
        .trim()
        .strip_prefix("token=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a numeric token: {stdout:?}"));
    assert!(token > 0);

    let out = wardenctl(
        &server.addr,
        &["lock", "/locks/a", "--", "sh", "-c", "exit 7"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));

    // Released on exit: free again, and lock-holder says so.
    let out = wardenctl(&server.addr, &["lock-holder", "/locks/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

#[test]
fn lock_holder_prints_the_holder() {
    let server = WardenServer::start();
    // The command itself asks who holds the lock: that is its own wardenctl.
    let script = format!(
        "{} --servers {} --json lock-holder /locks/h",
        env!("CARGO_BIN_EXE_wardenctl"),
        server.addr
    );
    let out = wardenctl(
        &server.addr,
        &["lock", "/locks/h", "--", "sh", "-c", &script],
    );
    let line = ok_stdout(&out);
    let json: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON object");
    assert!(json["node"]
        .as_str()
        .is_some_and(|n| n.starts_with("/locks/h/")));
    assert!(json["session_id"]
        .as_str()
        .is_some_and(|s| s.starts_with("0x")));
    assert!(json["fencing_token"].as_u64().is_some_and(|t| t > 0));
    assert!(json["since_ms"].as_i64().is_some_and(|t| t > 0));
}

#[test]
fn two_lockers_never_overlap() {
    const ROUNDS: usize = 5;
    let server = WardenServer::start();
    let dir = std::env::temp_dir().join(format!("wardenctl-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let _ = std::fs::remove_file(&log);
    // Each critical section: start line, a pause to invite overlap, end line.
    let script = "echo \"start $WARDEN_FENCING_TOKEN\" >> \"$0\"; sleep 0.05; \
                  echo \"end $WARDEN_FENCING_TOKEN\" >> \"$0\"";
    let lockers: Vec<_> = (0..2)
        .map(|_| {
            let servers = server.addr.clone();
            let script = script.to_string();
            let log = log.clone();
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let status = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
                        .args(["--servers", &servers, "lock", "/locks/pair", "--"])
                        .args(["sh", "-c", &script])
                        .arg(&log)
                        .stdin(Stdio::null())
                        .status()
                        .expect("run wardenctl");
                    assert!(status.success(), "{status:?}");
                }
            })
        })
        .collect();
    for l in lockers {
        l.join().expect("locker thread");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * 2 * ROUNDS, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect("a start line");
        let end = pair[1].strip_prefix("end ").expect("its end line next");
        assert_eq!(start, end, "interleaved sections:\n{text}");
        let token: u64 = start.parse().unwrap();
        assert!(token > last, "tokens must increase:\n{text}");
        last = token;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wait_timeout_exits_3_without_running_the_command() {
    let server = WardenServer::start();
    let dir = std::env::temp_dir().join(format!("wardenctl-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ran = dir.join("ran");
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ran);
    let _ = std::fs::remove_file(&ready);
    // Holds the lock until we remove `ready`... simplest: until killed.
    let mut holder = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--servers", &server.addr, "lock", "/locks/w", "--"])
        .args(["sh", "-c", "touch \"$0\"; exec sleep 60"])
        .arg(&ready)
        .stdin(Stdio::null())
        .spawn()
        .expect("run the holder");
    warden_testkit::wait_until(
        std::time::Duration::from_secs(20),
        "the holder runs",
        || ready.exists(),
    );

    let touch = format!("touch {}", ran.display());
    let out = wardenctl(
        &server.addr,
        &[
            "lock", "/locks/w", "--wait", "200", "--", "sh", "-c", &touch,
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        stderr(&out),
        "error: Timeout: lock /locks/w not acquired within 200 ms\n"
    );
    assert!(!ran.exists(), "the command must not run");

    // SIGTERM to wardenctl is passed on to the command; then it releases.
    warden_testkit::sigterm(holder.id());
    let status = holder.wait().expect("reap the holder");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    let out = wardenctl(&server.addr, &["lock-holder", "/locks/w"]);
    assert_eq!(out.status.code(), Some(1), "released: {out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn losing_the_lock_stops_the_command_and_exits_4() {
    let server = WardenServer::start();
    let locker = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--servers", &server.addr, "lock", "/locks/lost", "--"])
        .args(["sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the locker");
    let mut node = String::new();
    warden_testkit::wait_until(
        std::time::Duration::from_secs(20),
        "the locker holds the lock",
        || {
            let out = wardenctl(&server.addr, &["--json", "lock-holder", "/locks/lost"]);
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                return false;
            };
            node = json["node"].as_str().unwrap_or_default().to_string();
            out.status.success()
        },
    );
    // Someone else deletes the holder's node: the lock is gone.
    ok_stdout(&wardenctl(&server.addr, &["delete", &node]));
    let out = locker.wait_with_output().expect("the locker exits");
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(
        stderr(&out),
        "error: LockLost: /locks/lost: the lock node was deleted; the command was stopped\n"
    );
}
