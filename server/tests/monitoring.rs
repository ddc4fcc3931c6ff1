//! Monitoring as shipped: `/metrics` has the figures operators need
//! (leadership, follower lag, peer round trips, session expiries, snapshot
//! installs, the process, the build), and every metric the alert rules
//! (`packaging/prometheus/warden-rules.yml`) and the Grafana dashboard
//! (`packaging/grafana/warden-dashboard.json`) name is one a running
//! cluster exports. With `promtool` (Debian's `prometheus`, fetched by
//! testkit) the rules are also loaded, unit-tested against their
//! `warden-rules.test.yml`, and the scraped text linted.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::http::request;
use warden_protocol::pb;
use warden_testkit::raw::RawConn;
use warden_testkit::{wait_until, Cluster};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn scrape(http: &str) -> String {
    let (status, body) = request(http, "GET", "/metrics", None);
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample `name{labels}` (labels as printed, or "" for
/// none), if the scrape has it.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let key = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Every name a scrape declares or has samples of: each `# TYPE` family
/// with the sample names its type gives (`_total` of a counter; `_bucket`,
/// `_sum`, `_count` of a histogram), so a family nothing was recorded in
/// yet (no label set seen) still counts as exported.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix("# TYPE ") {
            let mut parts = decl.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            names.insert(line.split(['{', ' ']).next().unwrap().to_string());
        }
    }
    names
}

/// Every metric name an expression text refers to.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = text[i..].starts_with("warden_") || text[i..].starts_with("process_");
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts && boundary {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(text.len(), |n| i + n);
            names.insert(text[i..end].to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_scrape_rules_and_dashboard_agree_on_a_running_cluster() {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();

    // Exactly one leader, seen by every member; lag and reachability of
    // every member; the build and the process.
    wait_until(Duration::from_secs(30), "one leader in /metrics", || {
        ids.iter()
            .map(|&i| sample(&scrape(cluster.http_addr(i)), "warden_is_leader", ""))
            .map(|v| v.unwrap_or(0.0))
            .sum::<f64>()
            == 1.0
    });
    let leader = *ids
        .iter()
        .find(|&&i| sample(&scrape(cluster.http_addr(i)), "warden_is_leader", "") == Some(1.0))
        .unwrap();
    for &i in &ids {
        let text = scrape(cluster.http_addr(i));
        assert_eq!(
            sample(&text, "warden_has_leader", ""),
            Some(1.0),
            "node {i}"
        );
        assert!(
            text.contains("warden_build_info{version=\"")
                && text.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
            "node {i}: no build info"
        );
        assert!(sample(&text, "process_resident_memory_bytes", "").unwrap() > 1e6);
        assert!(sample(&text, "process_open_fds", "").unwrap() > 3.0);
        assert!(sample(&text, "process_cpu_seconds_total", "").unwrap() > 0.0);
        assert!(sample(&text, "process_start_time_seconds", "").unwrap() > 1e9);
    }
    let leader_http = cluster.http_addr(leader).to_string();
    wait_until(
        Duration::from_secs(30),
        "the leader's view of every member",
        || {
            let text = scrape(&leader_http);
            ids.iter().all(|&i| {
                sample(&text, "warden_member_reachable", &format!("member=\"{i}\"")) == Some(1.0)
                    && sample(
                        &text,
                        "warden_member_lag_entries",
                        &format!("member=\"{i}\""),
                    )
                    .is_some()
            })
        },
    );
    // Heartbeat round trips to both followers.
    wait_until(
        Duration::from_secs(30),
        "peer round trips on the leader",
        || {
            let text = scrape(&leader_http);
            ids.iter().filter(|&&i| i != leader).all(|&i| {
                sample(
                    &text,
                    "warden_peer_rtt_seconds_count",
                    &format!("peer=\"{i}\""),
                )
                .is_some_and(|n| n > 0.0)
            })
        },
    );

    // A session whose client goes quiet is expired by the leader, and
    // counted there.
    let expired_before =
        sample(&scrape(&leader_http), "warden_session_expiries_total", "").unwrap();
    let mut raw = RawConn::connect(cluster.addr(leader));
    let session = raw.connect_request(pb::ConnectRequest {
        protocol_version: warden_protocol::PROTOCOL_VERSION,
        timeout_ms: 1_000,
        ..Default::default()
    });
    assert_ne!(session.session_id, 0);
    drop(raw);
    wait_until(
        Duration::from_secs(30),
        "the quiet session to expire",
        || {
            sample(&scrape(&leader_http), "warden_session_expiries_total", "").unwrap()
                > expired_before
        },
    );

    // Requests through the native door, so their families have samples.
    let mut raw = RawConn::connect(cluster.addr(leader));
    raw.handshake(0, Vec::new());
    raw.request(
        1,
        pb::request::Op::Exists(pb::ExistsRequest {
            path: "/".into(),
            ..Default::default()
        }),
    );
    drop(raw);

    // Every metric the rules and the dashboard use is exported.
    let mut exported = BTreeSet::new();
    for &i in &ids {
        exported.extend(exported_names(&scrape(cluster.http_addr(i))));
    }
    let rules_path = repo().join("packaging/prometheus/warden-rules.yml");
    let rules = std::fs::read_to_string(&rules_path).unwrap();
    let dashboard_path = repo().join("packaging/grafana/warden-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dashboard_path).unwrap())
            .expect("the dashboard is JSON");
    let mut exprs = String::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push_str(target["expr"].as_str().expect("a target's expr"));
            exprs.push('\n');
        }
    }
    let used: BTreeSet<String> = names_in(&rules)
        .into_iter()
        .chain(names_in(&exprs))
        .collect();
    assert!(used.len() > 15, "too few names found: {used:?}");
    let missing: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the rules or dashboard name metrics /metrics does not export: {missing:?}"
    );

    // promtool: the rules load, their unit tests pass, the scrape lints.
    match warden_testkit::debian::tool("prometheus", "promtool") {
        Err(why) => println!("promtool checks skipped: {why}"),
        Ok(promtool) => {
            let run = |args: &[&str], dir: &Path, stdin: Option<&str>| {
                let mut cmd = Command::new(&promtool);
                cmd.args(args).current_dir(dir);
                let out = if let Some(input) = stdin {
                    use std::io::Write as _;
                    let mut child = cmd
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .unwrap();
                    child
                        .stdin
                        .take()
                        .unwrap()
                        .write_all(input.as_bytes())
                        .unwrap();
                    child.wait_with_output().unwrap()
                } else {
                    cmd.output().unwrap()
                };
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                (out.status.success(), said)
            };
            let dir = rules_path.parent().unwrap();
            let (ok, said) = run(&["check", "rules", "warden-rules.yml"], dir, None);
            assert!(ok, "promtool check rules: {said}");
            let (ok, said) = run(&["test", "rules", "warden-rules.test.yml"], dir, None);
            assert!(ok, "promtool test rules: {said}");
            // Lint problems are printed, not failed on: some are naming
            // advice (a gauge's unit) rather than errors.
            let (_, said) = run(&["check", "metrics"], dir, Some(&scrape(&leader_http)));
            assert!(
                !said.contains("error while linting"),
                "promtool check metrics cannot parse /metrics: {said}"
            );
            println!("promtool check metrics: {said}");
        }
    }
}
