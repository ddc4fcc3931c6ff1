//! `wardenctl bench` end to end against a real server: every workload runs
//! briefly and reports a well-formed result. No timing is asserted: the
//! figures depend on the machine; only their shape and consistency are
//! checked.

mod common;

use common::{ok_stdout, wardenctl, WardenServer};
use serde_json::Value;

/// Runs one short bench and checks its one JSON object.
fn bench(addr: &str, workload: &str) {
    let out = wardenctl(
        addr,
        &[
            "--json",
            "bench",
            "--workload",
            workload,
            "--clients",
            "2",
            "--seconds",
            "1",
            "--warmup-seconds",
            "0",
        ],
    );
    let stdout = ok_stdout(&out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one JSON object: {stdout}");
    let report: Value = serde_json::from_str(lines[0]).expect("valid JSON");
    let u = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} missing or not a count: {report}"))
    };
    assert_eq!(report["workload"], workload);
    assert_eq!(u("clients"), 2);
    assert_eq!(u("seconds"), 1);
    assert_eq!(u("value_size"), 64);
    assert!(u("ops") > 0, "{report}");
    assert_eq!(u("errors"), 0, "{report}");
    assert!(report["ops_per_sec"].as_f64().expect("ops_per_sec") > 0.0);
    let (p50, p99, p999, max) = (u("p50_us"), u("p99_us"), u("p999_us"), u("max_us"));
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{report}");
}

#[test]
fn workloads_report_and_clean_up() {
    let server = WardenServer::start();
    for workload in ["write", "read", "create-delete", "lock", "lock-contended"] {
        bench(&server.addr, workload);
    }
    // Every bench deleted its root.
    let left = ok_stdout(&wardenctl(&server.addr, &["ls", "/"]));
    assert!(!left.contains("bench-"), "bench nodes left behind: {left}");
}

#[test]
fn bad_arguments_exit_2() {
    // Rejected by clap before any connection is attempted.
    let nowhere = "127.0.0.1:1";
    for args in [
        &[
            "bench",
            "--workload",
            "write",
            "--clients",
            "0",
            "--seconds",
            "1",
        ][..],
        &[
            "bench",
            "--workload",
            "write",
            "--clients",
            "1",
            "--seconds",
            "0",
        ],
        &[
            "bench",
            "--workload",
            "write",
            "--clients",
            "1",
            "--seconds",
            "1",
            "--value-size",
            "1048577",
        ],
        &[
            "bench",
            "--workload",
            "juggle",
            "--clients",
            "1",
            "--seconds",
            "1",
        ],
    ] {
        let out = wardenctl(nowhere, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
