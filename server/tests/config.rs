//! `warden serve --config FILE` and `warden config check FILE` as real
//! processes: a file's settings take effect; a flag beats the environment,
//! which beats the file; a bad key or value is refused, naming the key.

mod warden_process;

use std::path::Path;

use warden_process::{client_addr, field, one_session, run, Warden};

/// A config file for a single node on free loopback ports, data in
/// `dir/DATA`, plus `more` lines.
fn write_config(dir: &Path, data: &str, more: &str) -> String {
    let path = dir.join("warden.toml");
    let text = format!(
        "# a test node\n\
         data-dir = {:?}\n\
         listen = \"127.0.0.1:0\"\n\
         peer-listen = \"127.0.0.1:0\"\n\
         http-listen = \"127.0.0.1:0\"\n\
         {more}\n",
        dir.join(data).to_str().unwrap()
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// The `data_dir=` of the start-up line in a text log.
fn data_dir_logged(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.contains("warden starting"))
        .unwrap_or_else(|| panic!("no start-up line in:\n{stderr}"));
    field(line, "data_dir").unwrap_or_else(|| panic!("no data_dir in {line}"))
}

/// Starts a server, opens a session on it, stops it: (ready line, stderr).
fn serve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut warden = Warden::start(dir, &args, env);
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
fn a_config_files_settings_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "from-file",
        "tick-ms = 20\nzk-listen = \"off\"\nlog-format = \"json\"\nlog-level = \"debug\"\nid = 7\n\
         max-sessions = 5\nhttp-token = [\"t1=alice:pw\", \"t2=bob:pw\"]\njoin = false",
    );
    let (ready, stderr) = serve(dir.path(), &["serve", "--config", &config], &[]);
    // log-format: everything is JSON, the ready line too.
    let ready: serde_json::Value =
        serde_json::from_str(&ready).unwrap_or_else(|e| panic!("{ready:?}: {e}"));
    // zk-listen = "off": no ZooKeeper door.
    assert!(ready["zk"].is_null(), "{ready}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let starting = events
        .iter()
        .find(|e| e["message"] == "warden starting")
        .unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(starting["id"], 7, "{starting}");
    assert_eq!(starting["zk"], "off", "{starting}");
    let data = dir.path().join("from-file");
    assert_eq!(starting["data_dir"], data.to_str().unwrap(), "{starting}");
    assert!(data.join("raft").is_dir(), "data dir {}", data.display());
    // log-level = "debug": the per-session line is there.
    assert!(
        events
            .iter()
            .any(|e| e["level"] == "DEBUG" && e["message"] == "session created"),
        "{stderr}"
    );
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "file", "tick-ms = 20\nzk-listen = \"off\"");
    let env_dir = dir.path().join("env");
    let flag_dir = dir.path().join("flag");
    let env = [("WARDEN_DATA_DIR", env_dir.to_str().unwrap())];
    // File alone.
    let (_, stderr) = serve(dir.path(), &["serve", "--config", &config], &[]);
    assert_eq!(
        data_dir_logged(&stderr),
        dir.path().join("file").to_str().unwrap()
    );
    // The environment over the file.
    let (_, stderr) = serve(dir.path(), &["serve", "--config", &config], &env);
    assert_eq!(data_dir_logged(&stderr), env_dir.to_str().unwrap());
    // A flag over both; the config file itself may come from the
    // environment too.
    let (_, stderr) = serve(
        dir.path(),
        &["serve", "--data-dir", flag_dir.to_str().unwrap()],
        &[("WARDEN_CONFIG", config.as_str()), env[0]],
    );
    assert_eq!(data_dir_logged(&stderr), flag_dir.to_str().unwrap());
}

#[test]
fn a_bad_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "data", "tick-mss = 5");
    let ended = run(dir.path(), &["serve", "--config", &config], &[]);
    assert_eq!(ended.status.code(), Some(2), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("tick-mss") && ended.stderr.contains("unknown key"),
        "{}",
        ended.stderr
    );
    assert!(!dir.path().join("data").exists(), "it must not start");

    let ended = run(dir.path(), &["config", "check", &config], &[]);
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    assert!(ended.stderr.contains("tick-mss"), "{}", ended.stderr);
}

#[test]
fn config_check_names_bad_values_and_passes_good_files() {
    let dir = tempfile::tempdir().unwrap();
    let check = |more: &str| {
        let config = write_config(dir.path(), "data", more);
        run(dir.path(), &["config", "check", &config], &[])
    };
    let ok = check("max-sessions = 10\njoin = true");
    assert!(ok.status.success(), "{}", ok.stderr);
    assert!(
        ok.stdout.join("\n").contains("ok (6 settings)"),
        "{:?}",
        ok.stdout
    );

    // Every bad key is reported, each by name.
    let bad = check("max-sessions = \"many\"\njoin = \"yes\"\nhttp-token = \"a=b:c\"");
    assert_eq!(bad.status.code(), Some(1), "{}", bad.stderr);
    for key in [
        "max-sessions: invalid value 'many'",
        "join: expected true or false",
    ] {
        assert!(bad.stderr.contains(key), "{key} not in:\n{}", bad.stderr);
    }
    // A single value for a repeatable flag is fine; a list for a single
    // one is not.
    let bad = check("tick-ms = [1, 2]");
    assert!(
        bad.stderr.contains("tick-ms: takes one value"),
        "{}",
        bad.stderr
    );
    // Settings that do not go together name the flag.
    let bad = check("election-ticks = 3\nheartbeat-ticks = 3");
    assert_eq!(bad.status.code(), Some(1), "{}", bad.stderr);
    assert!(bad.stderr.contains("--heartbeat-ticks"), "{}", bad.stderr);
    // Not TOML at all.
    let bad = check("tick-ms = = 3");
    assert!(bad.stderr.contains("not valid TOML"), "{}", bad.stderr);
    // The environment does not hide a bad file.
    let config = write_config(dir.path(), "data", "tick-ms = 0");
    let bad = run(
        dir.path(),
        &["config", "check", &config],
        &[("WARDEN_TICK_MS", "50")],
    );
    assert!(bad.stderr.contains("--tick-ms"), "{}", bad.stderr);
}

#[test]
fn the_shipped_example_config_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/warden.toml");
    let ended = run(dir.path(), &["config", "check", example], &[]);
    assert!(ended.status.success(), "{}", ended.stderr);
    assert!(
        ended.stdout.join("\n").contains(": ok ("),
        "{:?}",
        ended.stdout
    );
}
