//! A run's report files, rendered from its history and its checkers'
//! results: `timeline.html` (every operation as a box in its client's lane,
//! fault periods shaded, anomalies listed and outlined), `latency.svg` and
//! `throughput.svg`.
//!
//! Rendering is a pure function of its inputs: the same history and
//! results give the same bytes, so reports of a replayed history can be
//! diffed. Every string that came from the history or the results (values,
//! errors, messages, even `f`) is escaped before it reaches HTML or SVG.
//!
//! The plots are drawn with `plotters`' SVG backend and no font feature:
//! its naive font only estimates text extents and writes `<text>` elements
//! for the viewer to render, so nothing here needs fontconfig or freetype.

mod plots;
mod timeline;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::history::{fault_periods, pair, Event, FaultPeriod, Kind, Op, Process};

/// Writes `timeline.html`, `latency.svg` and `throughput.svg` into `dir`
/// (created if missing). `results` is the run's `results.json`: its
/// `valid` and `anomalies` (and `notes`, if any) are shown.
pub fn write_report(
    dir: &Path,
    title: &str,
    events: &[Event],
    results: &Value,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let run = Run::new(events);
    std::fs::write(dir.join("latency.svg"), plots::latency_svg(title, &run)?)?;
    std::fs::write(
        dir.join("throughput.svg"),
        plots::throughput_svg(title, &run)?,
    )?;
    std::fs::write(
        dir.join("timeline.html"),
        timeline::html(title, &run, results),
    )?;
    Ok(())
}

/// The history as all three files draw it.
struct Run {
    /// Client operations, in invocation order.
    ops: Vec<Op>,
    /// Nemesis operations, in invocation order.
    nemesis: Vec<Op>,
    faults: Vec<FaultPeriod>,
    /// Time of the last event (ns): where open operations and faults end.
    end_ns: u64,
    /// The client operations' functions, sorted.
    fs: Vec<String>,
}

impl Run {
    fn new(events: &[Event]) -> Run {
        let (nemesis, ops): (Vec<Op>, Vec<Op>) = pair(events)
            .into_iter()
            .partition(|op| op.invoke.process == Process::NEMESIS);
        let fs: BTreeSet<&str> = ops.iter().map(|op| op.invoke.f.as_str()).collect();
        Run {
            fs: fs.into_iter().map(str::to_string).collect(),
            faults: fault_periods(events),
            end_ns: events.iter().map(|e| e.time).max().unwrap_or(0),
            ops,
            nemesis,
        }
    }

    /// Position of `f` in `fs` (for its point shape).
    fn f_index(&self, f: &str) -> usize {
        self.fs.iter().position(|x| x == f).unwrap_or(0)
    }
}

/// How an operation ended, as the report colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    Fail,
    /// Completed `info`, or never completed.
    Info,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Fail, Outcome::Info];

    fn of(op: &Op) -> Outcome {
        match op.outcome() {
            Kind::Ok => Outcome::Ok,
            Kind::Fail => Outcome::Fail,
            Kind::Info | Kind::Invoke => Outcome::Info,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        }
    }
}

/// When `op` ends on the page: its completion (even `info`), or the end of
/// the history when it never completed.
fn end_of(op: &Op, end_ns: u64) -> u64 {
    op.complete
        .as_ref()
        .map(|c| c.time)
        .unwrap_or(end_ns)
        .max(op.invoke.time)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A number with at most three decimals and no trailing zeros.
fn num(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Escapes text for HTML or XML, in element content and quoted attributes.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push_str("&#10;"),
            // Other control characters are not allowed in XML 1.0.
            c if c.is_control() && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `s` cut to at most `chars_max` characters, an ellipsis marking the cut.
fn cap(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(chars_max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A value as compact JSON (a bare string without quotes), capped.
fn short(value: &Value, chars_max: usize) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => cap(s, chars_max),
        v => cap(&v.to_string(), chars_max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Builds a history with explicit times, one event at a time.
    struct Synth {
        events: Vec<Event>,
    }

    impl Synth {
        fn new() -> Synth {
            Synth { events: Vec::new() }
        }

        fn push(
            &mut self,
            process: Process,
            kind: Kind,
            f: &str,
            value: Value,
            time_ms: u64,
            error: Option<&str>,
        ) -> u64 {
            let index = self.events.len() as u64;
            let time = time_ms * 1_000_000;
            self.events.push(Event {
                index,
                process,
                kind,
                f: f.to_string(),
                value,
                time,
                mono_ns: 1_000_000_000 + time,
                wall_ns: 1_700_000_000_000_000_000 + time,
                error: error.map(str::to_string),
            });
            index
        }
    }

    /// Three clients doing reads, writes and a cas, a partition from 100 to
    /// 300 ms, an op whose value is a script tag, and an info op whose
    /// process moves on.
    fn synthetic() -> (Vec<Event>, u64) {
        use Kind::*;
        let mut h = Synth::new();
        let c = Process::Client;
        h.push(c(0), Invoke, "write", json!(1), 0, None);
        h.push(c(1), Invoke, "read", Value::Null, 5, None);
        h.push(c(0), Ok, "write", json!(1), 20, None);
        h.push(c(1), Ok, "read", json!(1), 30, None);
        h.push(
            Process::NEMESIS,
            Invoke,
            "partition",
            json!({"grudge": "halves"}),
            100,
            None,
        );
        h.push(
            Process::NEMESIS,
            Ok,
            "partition",
            json!({"grudge": {"1": [2, 3]}}),
            110,
            None,
        );
        let bad = h.push(c(2), Invoke, "cas", json!([1, 2]), 120, None);
        h.push(
            c(0),
            Invoke,
            "write",
            json!("<script>alert(1)</script>"),
            130,
            None,
        );
        h.push(
            c(2),
            Fail,
            "cas",
            json!([1, 2]),
            150,
            Some("BadVersion & co"),
        );
        h.push(
            c(0),
            Info,
            "write",
            Value::Null,
            250,
            Some("timed out <5s>"),
        );
        h.push(c(3), Invoke, "read", Value::Null, 260, None);
        h.push(Process::NEMESIS, Invoke, "heal", Value::Null, 300, None);
        h.push(Process::NEMESIS, Ok, "heal", Value::Null, 305, None);
        h.push(c(1), Invoke, "write", json!(2), 310, None);
        h.push(c(3), Ok, "read", json!(2), 330, None);
        // Client 1's write never completes.
        h.push(c(2), Invoke, "read", Value::Null, 400, None);
        h.push(c(2), Ok, "read", json!(1), 420, None);
        (h.events, bad)
    }

    fn results(bad: u64) -> Value {
        json!({
            "valid": false,
            "anomalies": [{
                "kind": "stale-read",
                "message": "read 1 after write 2 <completed>",
                "ops": [bad, 9999],
            }],
        })
    }

    #[test]
    fn renders_a_synthetic_history() {
        let (events, bad) = synthetic();
        let dir = tempfile::tempdir().unwrap();
        write_report(dir.path(), "register <n1>", &events, &results(bad)).unwrap();

        for plot in ["latency.svg", "throughput.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(plot)).unwrap();
            assert!(svg.starts_with("<svg"), "{plot}: {}", &svg[..40]);
            assert!(svg.trim_end().ends_with("</svg>"), "{plot}");
            let shade = format!(r#"opacity="0.18" fill="{}""#, plots::NEMESIS_FILL);
            assert!(
                svg.lines()
                    .any(|l| l.starts_with("<rect") && l.contains(&shade)),
                "{plot} shades the partition"
            );
            assert!(svg.contains("partition"), "{plot} labels the partition");
            assert!(
                svg.contains("register &lt;n1&gt;"),
                "{plot} escapes the title"
            );
            assert!(!svg.contains("<n1>"), "{plot}");
        }

        let html = std::fs::read_to_string(dir.path().join("timeline.html")).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        for f in ["write", "read", "cas", "partition", "heal"] {
            assert!(html.contains(f), "timeline shows {f}");
        }
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("BadVersion &amp; co"));
        assert!(html.contains("timed out &lt;5s&gt;"));
        assert!(html.contains("INVALID"));
        assert!(html.contains("stale-read"));
        assert!(html.contains("after write 2 &lt;completed&gt;"));
        // The anomaly links to its op, which is outlined; the unknown index
        // is listed without a link.
        assert!(html.contains(&format!(r##"href="#op-{bad}""##)));
        assert!(html.contains(&format!(r#"id="op-{bad}" class="o f a""#)));
        assert!(!html.contains(r##"href="#op-9999""##));
        assert!(html.contains("9999"));
        // No external resources other than the two plots beside it.
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(html.contains(r#"src="latency.svg""#));
    }

    #[test]
    fn renders_the_same_bytes_twice() {
        let (events, bad) = synthetic();
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        write_report(a.path(), "t", &events, &results(bad)).unwrap();
        write_report(b.path(), "t", &events, &results(bad)).unwrap();
        for file in ["timeline.html", "latency.svg", "throughput.svg"] {
            assert_eq!(
                std::fs::read(a.path().join(file)).unwrap(),
                std::fs::read(b.path().join(file)).unwrap(),
                "{file}"
            );
        }
    }

    #[test]
    fn renders_an_empty_history() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("not-yet");
        write_report(&sub, "empty", &[], &Value::Null).unwrap();
        for file in ["timeline.html", "latency.svg", "throughput.svg"] {
            let text = std::fs::read_to_string(sub.join(file)).unwrap();
            assert!(!text.is_empty(), "{file}");
        }
    }

    #[test]
    fn escapes_and_caps() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(escape("a\nb\u{1}"), "a&#10;b\u{fffd}");
        assert_eq!(cap("abcdef", 4), "abc…");
        assert_eq!(cap("abc", 4), "abc");
        assert_eq!(short(&json!({"k": "v"}), 40), r#"{"k":"v"}"#);
        assert_eq!(short(&json!("plain"), 40), "plain");
        assert_eq!(num(1.5), "1.5");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(0.0001), "0");
    }
}
