//! What a real `warden serve` logs: JSON lines only with `--log-format
//! json`; a plain start without Raft's INFO chatter or per-session lines;
//! one start-up line naming the version, id, every address, the data dir
//! and the peers; `WARDEN_LOG` brings a quiet target back.

mod warden_process;

use warden_process::{client_addr, field, one_session, serve_args, Warden};

/// Starts a server with `extra` arguments and `env`, opens a session, and
/// stops it: (ready line, stderr).
fn start_session_stop(extra: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(dir.path());
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut warden = Warden::start(dir.path(), &args, env);
    let ready = warden.ready_line();
    one_session(&client_addr(&ready));
    let ended = warden.stop();
    assert!(
        ended.status.success(),
        "{:?}\n{}",
        ended.status,
        ended.stderr
    );
    (ready, ended.stderr)
}

#[test]
fn json_format_prints_only_json_lines() {
    let (ready, stderr) =
        start_session_stop(&["--log-format", "json", "--log-level", "debug"], &[]);
    let ready: serde_json::Value =
        serde_json::from_str(&ready).unwrap_or_else(|e| panic!("ready line {ready:?}: {e}"));
    assert_eq!(ready["message"], "warden listening");
    let client = ready["client"].as_str().unwrap();
    let mut events = Vec::new();
    for line in stderr.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\nstderr:\n{stderr}"));
        assert!(event.is_object(), "{line}");
        assert!(
            event["level"].is_string() && event["target"].is_string(),
            "{line}"
        );
        events.push(event);
    }
    let starting: Vec<_> = events
        .iter()
        .filter(|e| e["message"] == "warden starting")
        .collect();
    assert_eq!(starting.len(), 1, "{stderr}");
    assert_eq!(starting[0]["client"], client, "{stderr}");
    // Debug asked for: the per-session line is there, as JSON too.
    assert!(
        events
            .iter()
            .any(|e| e["message"] == "session created" && e["level"] == "DEBUG"),
        "{stderr}"
    );
}

#[test]
fn a_plain_start_is_quiet_and_names_its_addresses() {
    let (ready, stderr) = start_session_stop(&[], &[]);
    assert!(ready.starts_with("warden listening client="), "{ready}");
    let raft_info: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(" raft:"))
        .collect();
    assert!(raft_info.is_empty(), "Raft INFO lines:\n{stderr}");
    assert!(!stderr.contains("session created"), "{stderr}");
    let starting: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("warden starting"))
        .collect();
    assert_eq!(starting.len(), 1, "{stderr}");
    let line = starting[0];
    for name in ["client", "zk", "http", "peer"] {
        let addr = field(&ready, name).unwrap_or_else(|| panic!("no {name} in {ready}"));
        assert!(
            line.contains(&format!("{name}={addr}")),
            "{name}={addr} missing from {line}"
        );
    }
    assert!(line.contains(warden_log::VERSION), "{line}");
    for name in ["id=1", "data_dir=", "peers=1=127.0.0.1:"] {
        assert!(line.contains(name), "{name} missing from {line}");
    }
}

#[test]
fn warden_log_brings_a_quiet_target_back() {
    // What the quiet start above leaves out is there when asked for, so
    // that test's absence check looks where the lines would be.
    let (_, stderr) = start_session_stop(
        &[],
        &[("WARDEN_LOG", "raft=info,warden_server::core=debug")],
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(" INFO ") && l.contains(" raft:")),
        "{stderr}"
    );
    assert!(stderr.contains("session created"), "{stderr}");
}

#[test]
fn a_bad_filter_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let args = serve_args(dir.path());
    let ended = Warden::start(dir.path(), &args, &[("WARDEN_LOG", "info,raft=loud")]).wait();
    assert_eq!(ended.status.code(), Some(2), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("WARDEN_LOG") && ended.stderr.contains("raft=loud"),
        "{}",
        ended.stderr
    );
}
