//! README.md's "A five-minute tour", run as written against a real server.
//!
//! The tour's shell block is taken from README.md as it is and run by
//! bash, one line at a time, with `wardenctl` the binary built with these
//! tests (the block's `alias` line is left out) pointed at a fresh server.
//! A line whose comment promises an error (`# error: ...`) must fail;
//! every other line must succeed; and the background watch must print the
//! change the tour says it prints. So a tour that stops working for a new
//! user fails here, not in their terminal.

use std::path::Path;
use std::process::Command;

use warden_testkit::Server;

/// The first `sh` block after the `## A five-minute tour` heading.
fn tour() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md");
    let section = text
        .split("\n## A five-minute tour")
        .nth(1)
        .expect("README.md has a five-minute tour");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the tour has a sh block");
    block.lines().map(str::to_string).collect()
}

/// Bash that runs each tour line and reports `FAIL line: why` for a line
/// that did not do what its comment says.
fn script(lines: &[String]) -> String {
    let mut s = String::from(
        "set -u\n\
         # Waits (up to 20 s) until the server counts a watch, as a user\n\
         # typing the next line would have.\n\
         until_watched() {\n\
           for _ in $(seq 1 200); do\n\
             exec 3<>\"/dev/tcp/$ZK_HOST/$ZK_PORT\" && printf wchs >&3 && out=$(cat <&3); exec 3<&-\n\
             case \"$out\" in *'Total watches:0'*|'') ;; *) return 0 ;; esac\n\
             sleep 0.1\n\
           done\n\
           echo 'FAIL watch: never registered'\n\
         }\n\
         # Waits (up to 20 s) until the background job printed $1.\n\
         until_printed() {\n\
           for _ in $(seq 1 200); do\n\
             grep -q \"$1\" \"$WATCH_OUT\" && return 0\n\
             sleep 0.1\n\
           done\n\
           echo \"FAIL watch: never printed $1\"\n\
         }\n",
    );
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("alias ") {
            continue;
        }
        let expect_error = line
            .split_once('#')
            .is_some_and(|(_, comment)| comment.trim_start().starts_with("error"));
        let quoted = line.replace('\'', "'\\''");
        if let Some(job) = trimmed
            .split('#')
            .next()
            .and_then(|c| c.trim().strip_suffix('&'))
        {
            // The background job's output goes to a file, so the script
            // can wait for what it prints before the line that stops it.
            s.push_str(&format!("{job} > \"$WATCH_OUT\" 2>&1 &\nuntil_watched\n"));
            continue;
        }
        if trimmed.starts_with("kill %") {
            s.push_str("until_printed NodeDataChanged\n");
        }
        s.push_str(line);
        s.push('\n');
        if expect_error {
            s.push_str(&format!(
                "[ $? -ne 0 ] || echo 'FAIL line {}: succeeded, the tour says it fails: {quoted}'\n",
                i + 1
            ));
        } else {
            s.push_str(&format!(
                "rc=$?; [ $rc -eq 0 ] || echo \"FAIL line {}: exit $rc: {quoted}\"\n",
                i + 1
            ));
        }
    }
    s.push_str("wait\ncat \"$WATCH_OUT\"\n");
    s
}

#[test]
fn the_readme_tour_runs_as_written() {
    let lines = tour();
    assert!(
        lines.iter().any(|l| l.contains("wardenctl watch")),
        "the tour lost its watch line; update this test"
    );
    let server = Server::start();
    // `wardenctl` on PATH, a program (not a shell function, whose
    // background job `kill %1` would stop without stopping wardenctl).
    let bin = tempfile::tempdir().expect("temp dir");
    let wrapper = bin.path().join("wardenctl");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\nexec \"$WARDENCTL\" --servers \"$SERVERS\" --timeout-ms 5000 \"$@\"\n",
    )
    .expect("write the wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod the wrapper");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (zk_host, zk_port) = server.zk_addr().rsplit_once(':').expect("host:port");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script(&lines))
        .env("PATH", path)
        .env("WATCH_OUT", bin.path().join("watch.out"))
        .env("WARDENCTL", env!("CARGO_BIN_EXE_wardenctl"))
        .env("SERVERS", server.addr())
        .env("ZK_HOST", zk_host)
        .env("ZK_PORT", zk_port)
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failures.is_empty(),
        "README tour:\n{}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        failures.join("\n")
    );
    // What the tour's comments say the commands print.
    for promised in [
        "threads=4",
        "/app/job-0000000001",
        "NodeDataChanged /app/config",
    ] {
        assert!(
            stdout.contains(promised),
            "the tour promises {promised:?}; stdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("BadVersion") && stderr.contains("NotEmpty"),
        "the tour's errors; stderr:\n{stderr}"
    );
}
