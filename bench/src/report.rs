//! What one run measured, and how it is printed: a markdown table row for
//! people, one JSON object per run for scripts (`--json`).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A closed-loop run (`set`, `get`, `create-delete`, `lock`, `handoff`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// What was measured (`--label`, e.g. `zookeeper` or `warden`).
    pub system: String,
    pub workload: String,
    pub clients: u32,
    /// Length of the measured window.
    pub seconds: f64,
    pub value_size: usize,
    /// Operations that succeeded in the window (a lock op is one
    /// acquire+release cycle; a handoff op is one hand-off).
    pub ops: u64,
    pub ops_per_sec: f64,
    /// Operations that failed (or timed out) in the window.
    pub errors: u64,
    /// The errors by kind (the client's error, or `timeout`).
    pub error_kinds: BTreeMap<String, u64>,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Report {
    /// The report of `latencies` (microseconds, successful ops only).
    pub fn new(
        head: (&str, &str, u32),
        seconds: f64,
        value_size: usize,
        latencies: &Histogram<u64>,
        error_kinds: BTreeMap<String, u64>,
    ) -> Report {
        let (system, workload, clients) = head;
        let ops = latencies.len();
        let q = |q: f64| {
            if ops == 0 {
                0
            } else {
                latencies.value_at_quantile(q)
            }
        };
        Report {
            system: system.to_string(),
            workload: workload.to_string(),
            clients,
            seconds,
            value_size,
            ops,
            ops_per_sec: if seconds > 0.0 {
                ops as f64 / seconds
            } else {
                0.0
            },
            errors: error_kinds.values().sum(),
            error_kinds,
            p50_us: q(0.50),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if ops == 0 { 0 } else { latencies.max() },
        }
    }
}

/// The header of [`table_row`]'s table.
pub const TABLE_HEADER: &str = "| system | workload | clients | ops/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---|";

/// One markdown table row.
pub fn table_row(r: &Report) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.system,
        r.workload,
        r.clients,
        thousands(r.ops_per_sec.round() as u64),
        ms(r.p50_us),
        ms(r.p99_us),
        ms(r.p999_us),
        ms(r.max_us),
        errors(r.errors, &r.error_kinds)
    )
}

/// `0` or `3 (ConnectionLoss 2, timeout 1)`.
pub fn errors(total: u64, kinds: &BTreeMap<String, u64>) -> String {
    if total == 0 {
        return "0".to_string();
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{total} ({})", kinds.join(", "))
}

/// Microseconds as milliseconds: two decimals below 10 ms, one below
/// 100 ms, none above.
pub fn ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    // A comma before each digit with a multiple of three digits after it.
    let first = digits.len() % 3;
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && i % 3 == first {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A failover run: writers in a loop while the leader is killed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailoverReport {
    pub system: String,
    pub workload: String,
    pub writers: u32,
    pub killed_pid: i32,
    /// Per writer: ms from the kill to the end of its first successful
    /// write sent after the kill (`null`: none succeeded before the end).
    pub resume_ms: Vec<Option<f64>>,
    /// Per writer: whether its connection was lost (it was on the killed
    /// server, or its server dropped it).
    pub disconnected: Vec<bool>,
    /// Per writer: the longest time between two successful writes around
    /// the kill, in ms.
    pub max_gap_ms: Vec<f64>,
    pub writes_before_kill: u64,
    pub writes_after_kill: u64,
    /// Errors from the kill to the end of the run, by kind.
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
}

/// `480 / 570* / 1330 ms` (`*`: that writer lost its connection).
pub fn resume_list(r: &FailoverReport) -> String {
    let parts: Vec<String> = r
        .resume_ms
        .iter()
        .zip(&r.disconnected)
        .map(|(ms, lost)| {
            let v = ms.map_or_else(|| "never".to_string(), |m| format!("{m:.0}"));
            if *lost {
                v + "*"
            } else {
                v
            }
        })
        .collect();
    format!("{} ms", parts.join(" / "))
}

/// One markdown row for a failover run.
pub fn failover_row(r: &FailoverReport) -> String {
    format!(
        "| {} | failover (leader kill -9) | {} | writes resume after {} | errors {} |",
        r.system,
        r.writers,
        resume_list(r),
        errors(r.errors, &r.error_kinds)
    )
}

/// `populate`: many znodes created, pipelined.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PopulateReport {
    pub system: String,
    pub workload: String,
    pub znodes: u64,
    pub created: u64,
    /// Already there (a rerun on the same data).
    pub existed: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub seconds: f64,
    pub creates_per_sec: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(ms(530), "0.53");
        assert_eq!(ms(12_340), "12.3");
        assert_eq!(ms(1_234_000), "1234");
    }

    #[test]
    fn table_row_of_a_run() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for us in 1..=1000u64 {
            h.record(us * 10).unwrap();
        }
        let mut kinds = BTreeMap::new();
        kinds.insert("timeout".to_string(), 1);
        kinds.insert("ConnectionLoss".to_string(), 2);
        let r = Report::new(("warden", "set", 16), 2.0, 64, &h, kinds);
        assert_eq!(r.ops, 1000);
        assert_eq!(r.errors, 3);
        assert_eq!(r.ops_per_sec, 500.0);
        assert_eq!(
            table_row(&r),
            "| warden | set | 16 | 500 | 5.00 | 9.90 | 9.99 | 10.0 | 3 (ConnectionLoss 2, timeout 1) |"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["ops"], 1000);
        assert_eq!(json["error_kinds"]["timeout"], 1);
    }

    #[test]
    fn empty_run_has_zero_latencies() {
        let h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let r = Report::new(("zookeeper", "get", 1), 1.0, 64, &h, BTreeMap::new());
        assert_eq!((r.ops, r.p50_us, r.max_us, r.errors), (0, 0, 0, 0));
        assert!(table_row(&r).ends_with("| 0 |"));
    }

    #[test]
    fn failover_list_marks_disconnected_writers() {
        let r = FailoverReport {
            system: "zookeeper".into(),
            workload: "failover".into(),
            writers: 3,
            killed_pid: 1,
            resume_ms: vec![Some(480.4), Some(1330.0), None],
            disconnected: vec![false, true, false],
            max_gap_ms: vec![0.0; 3],
            writes_before_kill: 1,
            writes_after_kill: 1,
            errors: 0,
            error_kinds: BTreeMap::new(),
        };
        assert_eq!(resume_list(&r), "480 / 1330* / never ms");
    }
}
