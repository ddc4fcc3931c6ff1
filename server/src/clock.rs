//! The core's clock: the one place its decisions read time from.
//!
//! The core decides by time (session and TTL deadlines, proposal
//! timeouts, ReadIndex asks, who was heard from lately) and stamps wall
//! time on what it proposes (a node's ctime and mtime, and so a lease's
//! `expires_at_ms`). It reads both from the [`Clock`] it was handed
//! ([`crate::core::CoreInputs`]), never from the OS, so that a simulator
//! can run several cores in one process on a time of its own, each with
//! its own drift and jumps, and the same seed gives the same history.
//!
//! [`OsClock`] is the real server's: the OS monotonic clock, and the OS
//! wall clock moved by the test-only offset (`--clock-offset-ms`, and
//! `--clock-offset-file`, read again when the core asks, see
//! [`Clock::refresh`]). [`ManualClock`] is moved only by its owner (tests,
//! the simulator).
//!
//! Time that only measures (a log line's `took_ms`, a latency histogram,
//! an fsync's duration, an operator's figure) decides nothing and may read
//! the OS clock; each such site says so with an `os-clock:` comment, and a
//! test (`the_core_reads_no_os_clock_unmarked`) reads the core's
//! sources and fails on any other, and on any draw of OS randomness but
//! the real server's seed (`os-rng:`, [`crate::core::CoreInputs`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the core reads time.
///
/// `Send`: the real server opens the core on one thread and runs it on
/// another.
pub trait Clock: Send + std::fmt::Debug {
    /// Monotonic time, for every deadline the core keeps. Only
    /// differences between two readings mean anything.
    fn now(&self) -> Instant;

    /// Wall time in milliseconds since the Unix epoch: what a proposal is
    /// stamped with (what users see as ctime and mtime). It decides no
    /// deadline (see [`crate::ttl`]).
    fn wall_ms(&self) -> i64;

    /// The core's periodic chance for the clock to look at the world
    /// again (the leader's removal check, every few ticks); the OS clock
    /// re-reads its offset file there. Nothing by default.
    fn refresh(&mut self) {}
}

/// The real server's clock: the OS clocks, the wall clock moved by a
/// test-only offset.
#[derive(Debug)]
pub struct OsClock {
    /// Added to the OS wall clock: a test-only knob (`--clock-offset-ms`)
    /// that makes one server's clock wrong on purpose.
    offset_ms: i64,
    /// Tests of clock jumps (`--clock-offset-file`): the offset is read
    /// from this file at every [`Clock::refresh`].
    offset_file: Option<PathBuf>,
}

impl OsClock {
    /// The OS clock, its wall time moved by `offset_ms`, and by what
    /// `offset_file` says once the core refreshes the clock.
    pub fn new(offset_ms: i64, offset_file: Option<PathBuf>) -> Self {
        Self {
            offset_ms,
            offset_file,
        }
    }

    /// The offset `file` holds (milliseconds; a missing or empty file is
    /// 0); None: unreadable, keep the one in force.
    fn read_offset(file: &std::path::Path) -> Option<i64> {
        match std::fs::read_to_string(file) {
            Ok(text) if text.trim().is_empty() => Some(0),
            Ok(text) => match text.trim().parse::<i64>() {
                Ok(ms) => Some(ms),
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "clock offset file unreadable; offset kept");
                    None
                }
            },
            Err(_) => Some(0),
        }
    }
}

impl Clock for OsClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_ms(&self) -> i64 {
        os_wall_ms() + self.offset_ms
    }

    fn refresh(&mut self) {
        let Some(file) = &self.offset_file else {
            return;
        };
        let Some(offset) = Self::read_offset(file) else {
            return;
        };
        if std::mem::replace(&mut self.offset_ms, offset) != offset {
            tracing::warn!(
                offset_ms = offset,
                "this server's wall clock jumped (test clock offset)"
            );
        }
    }
}

/// The OS wall clock, milliseconds since the Unix epoch (0 before it).
fn os_wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A clock that moves only when its owner moves it. Clones share one
/// time: the owner keeps a clone and hands another to the core.
///
/// Its monotonic readings are a base taken once at creation plus the time
/// advanced since; only differences between readings reach anything the
/// core decides or sends, so two runs advanced alike behave alike.
#[derive(Debug, Clone)]
pub struct ManualClock {
    base: Instant,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Advanced since `base`, in nanoseconds.
    elapsed_ns: AtomicU64,
    wall_ms: AtomicI64,
}

impl ManualClock {
    /// A clock at wall time `wall_ms` (ms since the Unix epoch).
    pub fn new(wall_ms: i64) -> Self {
        Self {
            // os-clock: an anchor only; every reading is this plus the
            // time advanced, and nothing compares it with another clock.
            base: Instant::now(),
            shared: Arc::new(Shared {
                elapsed_ns: AtomicU64::new(0),
                wall_ms: AtomicI64::new(wall_ms),
            }),
        }
    }

    /// Time passes: both clocks move on by `by`.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.shared.elapsed_ns.fetch_add(ns, Ordering::Relaxed);
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.shared.wall_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// The wall clock jumps to `wall_ms` (an NTP step, `date -s`); the
    /// monotonic clock does not move.
    pub fn set_wall_ms(&self, wall_ms: i64) {
        self.shared.wall_ms.store(wall_ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.shared.elapsed_ns.load(Ordering::Relaxed))
    }

    fn wall_ms(&self) -> i64 {
        self.shared.wall_ms.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_moved() {
        let clock = ManualClock::new(1_000);
        let held = clock.clone();
        let t0 = held.now();
        assert_eq!(held.now(), t0);
        assert_eq!(held.wall_ms(), 1_000);
        clock.advance(Duration::from_millis(250));
        assert_eq!(held.now() - t0, Duration::from_millis(250));
        assert_eq!(held.wall_ms(), 1_250);
        // A wall-clock jump leaves the monotonic clock alone.
        clock.set_wall_ms(-5);
        assert_eq!(held.wall_ms(), -5);
        assert_eq!(held.now() - t0, Duration::from_millis(250));
    }

    #[test]
    fn the_os_clock_takes_its_offset_and_rereads_its_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("offset");
        let mut clock = OsClock::new(3_600_000, Some(file.clone()));
        let before = os_wall_ms();
        let stamped = clock.wall_ms();
        assert!(
            stamped >= before + 3_600_000,
            "{stamped} is not an hour ahead of {before}"
        );
        std::fs::write(&file, "-7200000\n").expect("write");
        clock.refresh();
        assert_eq!(clock.offset_ms, -7_200_000);
        // Unreadable: the offset in force is kept.
        std::fs::write(&file, "soon").expect("write");
        clock.refresh();
        assert_eq!(clock.offset_ms, -7_200_000);
        // Empty or missing: no offset.
        std::fs::write(&file, "").expect("write");
        clock.refresh();
        assert_eq!(clock.offset_ms, 0);
        std::fs::write(&file, "5").expect("write");
        clock.refresh();
        std::fs::remove_file(&file).expect("remove");
        clock.refresh();
        assert_eq!(clock.offset_ms, 0);
        // Without a file, refreshing changes nothing.
        let mut fixed = OsClock::new(42, None);
        fixed.refresh();
        assert_eq!(fixed.offset_ms, 42);
    }

    /// The files whose decisions must read time from the [`Clock`] they
    /// are handed: the core, sessions, watches, the tree and TTLs.
    fn decision_sources() -> Vec<std::path::PathBuf> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![
            src.join("session.rs"),
            src.join("watch.rs"),
            src.join("ttl.rs"),
        ];
        for dir in ["core", "tree"] {
            for entry in std::fs::read_dir(src.join(dir)).expect("source dir") {
                let path = entry.expect("entry").path();
                if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        files.sort();
        files
    }

    /// Every read of the OS clock or of OS randomness in the core's
    /// sources outside their unit tests, unless an `os-clock:` (or
    /// `os-rng:`) comment on the line or the line above says why the core
    /// may: a measurement that decides nothing, or the real server's
    /// seed.
    fn unmarked_os_reads(text: &str) -> Vec<(usize, String)> {
        const READS: [&str; 7] = [
            "Instant::now",
            "SystemTime::now",
            ".elapsed()",
            "rand::random",
            "rand::rng(",
            "thread_rng",
            "OsRng",
        ];
        let lines: Vec<&str> = text.lines().collect();
        let mut found = Vec::new();
        for (n, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            // A test module ends what the server runs.
            if code.starts_with("#[cfg(test)]")
                && lines
                    .get(n + 1)
                    .is_some_and(|next| next.trim_start().starts_with("mod "))
            {
                break;
            }
            if code.starts_with("//") || !READS.iter().any(|r| code.contains(r)) {
                continue;
            }
            let marked = |l: &str| l.contains("// os-clock:") || l.contains("// os-rng:");
            let above = n.checked_sub(1).map(|p| lines[p]);
            if !marked(line) && !above.is_some_and(marked) {
                found.push((n + 1, line.to_string()));
            }
        }
        found
    }

    #[test]
    fn the_scan_finds_unmarked_reads_and_passes_marked_ones() {
        let text = "fn a() {\n    let t = Instant::now();\n    // os-clock: a log line's took_ms\n    let s = Instant::now();\n    let r = rand::random::<u64>();\n    let w = SystemTime::now(); // os-clock: a figure\n    let u = 1;\n    let e = s.elapsed();\n}\n#[cfg(test)]\nmod tests {\n    fn t() { Instant::now(); }\n}\n";
        let found: Vec<usize> = unmarked_os_reads(text)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(found, vec![2, 5, 8]);
    }

    /// The core decides by the clock and the rng it is handed: a read of
    /// the OS clock or OS randomness in its sources is either marked as
    /// measurement only, or a decision the simulator could not replay.
    #[test]
    fn the_core_reads_no_os_clock_unmarked() {
        let files = decision_sources();
        assert!(files.len() > 30, "only {} files read", files.len());
        let mut unmarked = Vec::new();
        for path in &files {
            let text = std::fs::read_to_string(path).expect("readable");
            for (n, line) in unmarked_os_reads(&text) {
                unmarked.push(format!("{}:{n}: {}", path.display(), line.trim()));
            }
        }
        assert!(
            unmarked.is_empty(),
            "OS clock or randomness read where the core decides (take it from the core's Clock or rng, or mark a measurement with `// os-clock: why`):\n{}",
            unmarked.join("\n")
        );
    }
}
