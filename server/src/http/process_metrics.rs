//! The process's own figures for `/metrics`, under the names every
//! Prometheus client library uses (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), so stock dashboards and alerts
//! work; and `warden_build_info` with the version and git revision.
//!
//! Read from `/proc/self` at each scrape (Linux); on a system without
//! `/proc` the process figures are simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self` says of this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
    pub open_fds: i64,
    pub max_fds: i64,
    pub start_time_seconds: f64,
    pub threads: i64,
}

impl ProcessStats {
    /// `None` where `/proc` is missing or unreadable.
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
        // SAFETY: sysconf has no preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        parse(&stat, &boot, &limits, open_fds, ticks as f64, page)
    }
}

/// Parses `/proc/self/stat` (fields after the command name, which may hold
/// spaces and parentheses, so the split is at its last `)`), the boot time
/// from `/proc/stat` and the open-files limit from `/proc/self/limits`.
fn parse(
    stat: &str,
    proc_stat: &str,
    limits: &str,
    open_fds: i64,
    ticks_per_second: f64,
    page_bytes: i64,
) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field N is at index N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let utime = field(14)?;
    let stime = field(15)?;
    let threads = field(20)?;
    let start_ticks = field(22)?;
    let vsize = field(23)?;
    let rss_pages = field(24)?;
    let boot_time: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|soft| soft.parse::<i64>().ok())
        .unwrap_or(-1);
    Some(ProcessStats {
        cpu_seconds: (utime + stime) / ticks_per_second,
        resident_bytes: rss_pages as i64 * page_bytes,
        virtual_bytes: vsize as i64,
        open_fds,
        max_fds,
        start_time_seconds: boot_time + start_ticks / ticks_per_second,
        threads: threads as i64,
    })
}

/// Encodes [`ProcessStats`] at each scrape; registered on the root
/// registry (no `warden_` prefix).
#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, ConstGauge<f64>); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                ConstGauge::new(s.resident_bytes as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                ConstGauge::new(s.virtual_bytes as f64),
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                ConstGauge::new(s.open_fds as f64),
            ),
            (
                "process_max_fds",
                "The limit on open file descriptors (-1: unlimited or unknown)",
                ConstGauge::new(s.max_fds as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                ConstGauge::new(s.start_time_seconds),
            ),
            (
                "process_threads",
                "Threads of the process",
                ConstGauge::new(s.threads as f64),
            ),
        ];
        for (name, help, gauge) in gauges {
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (warden (a) b) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 150 0 0 20 0 17 0 123400 1234567168 5000 18446744073709551615 1 1 0 0 0 0 0 4096 17003 0 0 0 17 1 0 0 0 0 0";
    const PROC_STAT: &str = "cpu  1 2 3\nbtime 1790000000\nprocesses 77\n";
    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";

    #[test]
    fn parses_proc_files_with_spaces_and_parentheses_in_the_name() {
        let s = parse(STAT, PROC_STAT, LIMITS, 12, 100.0, 4096).unwrap();
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.threads, 17);
        assert_eq!(s.virtual_bytes, 1_234_567_168);
        assert_eq!(s.resident_bytes, 5000 * 4096);
        assert_eq!(s.open_fds, 12);
        assert_eq!(s.max_fds, 1024);
        assert_eq!(s.start_time_seconds, 1_790_000_000.0 + 1234.0);
    }

    #[test]
    fn missing_fields_give_none() {
        assert_eq!(
            parse("1 (x) S 1 2", PROC_STAT, LIMITS, 1, 100.0, 4096),
            None
        );
        assert_eq!(parse(STAT, "cpu 1\n", LIMITS, 1, 100.0, 4096), None);
    }

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read().expect("/proc is there on Linux");
        assert!(s.resident_bytes > 0 && s.open_fds > 0 && s.threads >= 1);
        assert!(s.start_time_seconds > 1.0e9);
    }
}
