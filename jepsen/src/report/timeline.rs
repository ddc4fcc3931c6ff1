//! `timeline.html`: one page, no external resources but the two plots
//! beside it. Time flows down; each lane is a client process (or a few, one
//! after another), each operation a box from its invocation to its
//! completion.
//!
//! The page has to stay usable with ~50k operations, so an operation is one
//! absolutely positioned `<div>` whose only geometry is two CSS variables,
//! its start and duration in ms (`--t`, `--d`); a stylesheet rule turns
//! them into pixels with the zoom (`--z`, px per ms) set once on the
//! container. Zooming is then one style change, and the markup per
//! operation is a class, two numbers, a capped label and a capped tooltip.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::{cap, end_of, escape, ms, num, short, Outcome, Run};
use crate::history::{Kind, Op};

/// Characters of a box's label (`f` and value).
const LABEL_CHARS_MAX: usize = 28;
/// Characters of each value in a tooltip.
const TOOLTIP_VALUE_CHARS_MAX: usize = 300;
/// Characters of a fault period's label.
const FAULT_LABEL_CHARS_MAX: usize = 40;
/// Operations linked from one anomaly; the rest are counted.
const ANOMALY_LINKS_MAX: usize = 50;
/// Anomalies (and notes) listed in the header; the rest are counted.
const ANOMALIES_LISTED_MAX: usize = 500;
/// Characters of the raw results shown at the bottom of the header.
const RESULTS_CHARS_MAX: usize = 200_000;
/// Processes named in a lane's heading.
const LANE_PROCESSES_NAMED_MAX: usize = 3;

const GUTTER_PX: u32 = 70;
const NEMESIS_LANE_PX: u32 = 220;
const LANE_PX: u32 = 110;
/// Default zoom: the median operation about this tall...
const MEDIAN_OP_PX: f64 = 16.0;
/// ...unless that makes the page taller than this.
const DEFAULT_HEIGHT_MAX_PX: f64 = 1_000_000.0;
/// Tick marks at least this far apart.
const TICK_GAP_PX: f64 = 120.0;

pub(super) fn html(title: &str, run: &Run, results: &Value) -> String {
    let end_ms = ms(run.end_ns).max(0.001);
    let zoom = default_zoom(run, end_ms);
    let lanes = assign_lanes(run);
    let lane_count = lanes.iter().map(|&l| l + 1).max().unwrap_or(0);
    let width_px = GUTTER_PX + NEMESIS_LANE_PX + lane_count as u32 * LANE_PX;

    let anomalies = listed(results, "anomalies");
    let notes = listed(results, "notes");
    // Invocation index → the anomalies it is part of (numbered from 1).
    let mut flagged: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (n, a) in anomalies.iter().enumerate() {
        for &i in &a.ops {
            flagged.entry(i).or_default().push(n + 1);
        }
    }
    let noted: BTreeSet<u64> = notes.iter().flat_map(|a| a.ops.clone()).collect();
    let drawn: BTreeSet<u64> = run
        .ops
        .iter()
        .chain(&run.nemesis)
        .map(|op| op.invoke.index)
        .collect();

    let mut out = String::with_capacity(4096 + run.ops.len() * 220);
    let t = escape(title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <title>{t}: timeline</title>\n<style>{STYLE}</style></head>\n<body>\n<h1>{t}</h1>\n"
    );

    header(&mut out, run, results, &anomalies, &notes, &drawn);

    let _ = write!(
        out,
        "<div id=\"zoom\">zoom <button onclick=\"zoom(0.5)\">&minus;</button>\
         <button onclick=\"zoom(2)\">+</button></div>\n\
         <div id=\"tl\" style=\"--z:{z};--end:{end};width:{width_px}px\">\n<div id=\"heads\">\
         <span style=\"left:{GUTTER_PX}px;width:{NEMESIS_LANE_PX}px\">nemesis</span>",
        z = num_precise(zoom),
        end = num(end_ms),
    );
    let mut lane_processes: Vec<Vec<u64>> = vec![Vec::new(); lane_count];
    for (op, &lane) in run.ops.iter().zip(&lanes) {
        let p = op.invoke.process.client().unwrap_or(0);
        if lane_processes[lane].last() != Some(&p) {
            lane_processes[lane].push(p);
        }
    }
    for (lane, ps) in lane_processes.iter().enumerate() {
        let named: Vec<String> = ps
            .iter()
            .take(LANE_PROCESSES_NAMED_MAX)
            .map(|p| format!("p{p}"))
            .collect();
        let more = ps.len().saturating_sub(LANE_PROCESSES_NAMED_MAX);
        let all: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
        let _ = write!(
            out,
            "<span style=\"left:{left}px;width:{LANE_PX}px\" title=\"processes {all}\">{named}{more}</span>",
            left = lane_left(lane),
            all = all.join(", "),
            named = named.join(" "),
            more = if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            },
        );
    }
    out.push_str("</div>\n<div id=\"lanes\">\n");

    // Time ticks (the script redraws them on zoom).
    let step_ms = tick_step_ms(zoom);
    let mut i = 0u32;
    while f64::from(i) * step_ms <= end_ms {
        let tick = f64::from(i) * step_ms;
        let _ = writeln!(
            out,
            "<div class=\"tick\" style=\"--t:{}\">{}</div>",
            num(tick),
            tick_label(tick, step_ms)
        );
        i += 1;
    }

    // Fault periods across every lane, labelled in the nemesis lane.
    for (i, p) in run.faults.iter().enumerate() {
        let start = ms(p.start);
        let end = p.end.map(ms).unwrap_or(end_ms);
        let stack = run.faults[..i]
            .iter()
            .filter(|q| q.end.is_none_or(|e| e > p.start))
            .count();
        let label = format!("{} {}", p.kind, short(&p.detail, FAULT_LABEL_CHARS_MAX));
        let label = label.trim_end();
        let tip = format!(
            "{} from {} ms to {}\n{}",
            p.kind,
            num(start),
            match p.end {
                Some(_) => format!("{} ms", num(end)),
                None => "the end (never healed)".to_string(),
            },
            cap(&p.detail.to_string(), TOOLTIP_VALUE_CHARS_MAX)
        );
        let _ = writeln!(
            out,
            "<div class=\"fault\" style=\"--t:{};--d:{}\"></div>\
             <div class=\"fl\" style=\"--t:{};left:{}px\" title=\"{}\">{}</div>",
            num(start),
            num(end - start),
            num(start),
            GUTTER_PX + NEMESIS_LANE_PX - 106 + 12 * (stack as u32 % 4),
            escape(&tip),
            escape(&cap(label, FAULT_LABEL_CHARS_MAX)),
        );
    }

    // Nemesis actions: a box in the nemesis lane and a line across.
    let _ = writeln!(
        out,
        "<div class=\"lane\" style=\"left:{GUTTER_PX}px;width:{NEMESIS_LANE_PX}px\">"
    );
    for op in &run.nemesis {
        op_div(&mut out, op, "n", run.end_ns, &flagged, &noted);
    }
    out.push_str("</div>\n");
    for op in &run.nemesis {
        let _ = writeln!(
            out,
            "<div class=\"mark\" style=\"--t:{}\"></div>",
            num(ms(op.invoke.time))
        );
    }

    // Client lanes.
    let mut by_lane: Vec<Vec<&Op>> = vec![Vec::new(); lane_count];
    for (op, &lane) in run.ops.iter().zip(&lanes) {
        by_lane[lane].push(op);
    }
    for (lane, ops) in by_lane.iter().enumerate() {
        let _ = writeln!(
            out,
            "<div class=\"lane\" style=\"left:{}px;width:{LANE_PX}px\">",
            lane_left(lane)
        );
        for op in ops {
            let class = match (Outcome::of(op), &op.complete) {
                (Outcome::Ok, _) => "k",
                (Outcome::Fail, _) => "f",
                (Outcome::Info, Some(_)) => "i",
                (Outcome::Info, None) => "u",
            };
            op_div(&mut out, op, class, run.end_ns, &flagged, &noted);
        }
        out.push_str("</div>\n");
    }

    let _ = write!(
        out,
        "</div></div>\n<script>\n{SCRIPT}\ninit({tick_gap});\n</script>\n</body></html>\n",
        tick_gap = num(TICK_GAP_PX),
    );
    out
}

/// One operation's box.
fn op_div(
    out: &mut String,
    op: &Op,
    class: &str,
    end_ns: u64,
    flagged: &BTreeMap<u64, Vec<usize>>,
    noted: &BTreeSet<u64>,
) {
    let index = op.invoke.index;
    let start = ms(op.invoke.time);
    let duration = ms(end_of(op, end_ns)) - start;
    let anomalies = flagged.get(&index);

    let who = match op.invoke.process.client() {
        Some(p) => format!("process {p}"),
        None => "nemesis".to_string(),
    };
    let mut tip = format!(
        "{} by {who}, #{index}\ninvoke at {} ms: {}",
        op.invoke.f,
        num(start),
        cap(&op.invoke.value.to_string(), TOOLTIP_VALUE_CHARS_MAX),
    );
    match &op.complete {
        Some(c) => {
            let kind = match c.kind {
                Kind::Ok => "ok",
                Kind::Fail => "fail",
                Kind::Info | Kind::Invoke => "info",
            };
            let _ = write!(
                tip,
                "\n{kind} at {} ms, +{} ms: {}",
                num(ms(c.time)),
                num(duration),
                cap(&c.value.to_string(), TOOLTIP_VALUE_CHARS_MAX),
            );
            if let Some(e) = &c.error {
                let _ = write!(tip, "\nerror: {}", cap(e, TOOLTIP_VALUE_CHARS_MAX));
            }
        }
        None => tip.push_str("\nnever completed"),
    }
    if let Some(ns) = anomalies {
        let list: Vec<String> = ns.iter().map(|n| format!("#{n}")).collect();
        let _ = write!(tip, "\nin anomaly {}", list.join(", "));
    }

    out.push_str("<div ");
    if anomalies.is_some() || noted.contains(&index) {
        let _ = write!(out, "id=\"op-{index}\" ");
    }
    let _ = writeln!(
        out,
        "class=\"o {class}{}\" style=\"--t:{};--d:{}\" title=\"{}\">{}</div>",
        if anomalies.is_some() { " a" } else { "" },
        num(start),
        num(duration),
        escape(&tip),
        escape(&cap(
            format!("{} {}", op.invoke.f, short(op.value(), LABEL_CHARS_MAX)).trim_end(),
            LABEL_CHARS_MAX
        )),
    );
}

/// The title block: verdict, counts, faults, anomalies, plots.
fn header(
    out: &mut String,
    run: &Run,
    results: &Value,
    anomalies: &[Listed],
    notes: &[Listed],
    drawn: &BTreeSet<u64>,
) {
    let (verdict, class) = match results.get("valid") {
        Some(Value::Bool(true)) => ("valid".to_string(), "valid"),
        Some(Value::Bool(false)) => ("INVALID".to_string(), "invalid"),
        Some(Value::String(s)) if s == "unknown" => ("unknown".to_string(), "unknown"),
        Some(v) => (v.to_string(), "unknown"),
        None => ("not checked".to_string(), "unknown"),
    };
    let _ = writeln!(
        out,
        "<p class=\"verdict {class}\">{}</p>\n<p>{} client operations, {} nemesis operations, \
         {} s. Colours: <span class=\"key k\">ok</span> <span class=\"key f\">fail</span> \
         <span class=\"key i\">info</span> <span class=\"key u\">never completed</span> \
         <span class=\"key n\">nemesis</span> <span class=\"key a\">in an anomaly</span>.</p>",
        escape(&verdict),
        run.ops.len(),
        run.nemesis.len(),
        num(ms(run.end_ns) / 1000.0),
    );

    // Counts per f.
    let mut counts: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    for op in &run.ops {
        let c = counts.entry(op.invoke.f.as_str()).or_default();
        c[Outcome::of(op) as usize] += 1;
        if op.complete.is_none() {
            c[3] += 1;
        }
    }
    out.push_str(
        "<table><tr><th>f</th><th>ok</th><th>fail</th><th>info</th>\
         <th>of which never completed</th></tr>\n",
    );
    for (f, c) in &counts {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(f),
            c[0],
            c[1],
            c[2],
            c[3]
        );
    }
    out.push_str("</table>\n");

    if !run.faults.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>{} fault periods</summary><ul>",
            run.faults.len()
        );
        for p in &run.faults {
            let _ = writeln!(
                out,
                "<li>{} from {} s to {}: {}</li>",
                escape(&p.kind),
                num(ms(p.start) / 1000.0),
                p.end
                    .map(|e| format!("{} s", num(ms(e) / 1000.0)))
                    .unwrap_or_else(|| "the end".to_string()),
                escape(&cap(&p.detail.to_string(), TOOLTIP_VALUE_CHARS_MAX)),
            );
        }
        out.push_str("</ul></details>\n");
    }

    for (heading, list, id) in [
        ("Anomalies", anomalies, "anomaly"),
        ("Notes", notes, "note"),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "<h2>{heading} ({})</h2>\n<ol>", list.len());
        for (n, a) in list.iter().take(ANOMALIES_LISTED_MAX).enumerate() {
            let _ = write!(
                out,
                "<li id=\"{id}-{}\"><b>{}</b>: {}",
                n + 1,
                escape(&a.kind),
                escape(&a.message)
            );
            if !a.ops.is_empty() {
                out.push_str(" &mdash; ops");
                for i in a.ops.iter().take(ANOMALY_LINKS_MAX) {
                    if drawn.contains(i) {
                        let _ = write!(out, " <a href=\"#op-{i}\">{i}</a>");
                    } else {
                        let _ = write!(out, " {i}");
                    }
                }
                let more = a.ops.len().saturating_sub(ANOMALY_LINKS_MAX);
                if more > 0 {
                    let _ = write!(out, " and {more} more");
                }
            }
            out.push_str("</li>\n");
        }
        out.push_str("</ol>\n");
        let more = list.len().saturating_sub(ANOMALIES_LISTED_MAX);
        if more > 0 {
            let _ = writeln!(out, "<p>and {more} more (see results.json)</p>");
        }
    }

    if !results.is_null() {
        let text = serde_json::to_string_pretty(results).unwrap_or_default();
        let _ = writeln!(
            out,
            "<details><summary>results</summary><pre>{}</pre></details>",
            escape(&cap(&text, RESULTS_CHARS_MAX))
        );
    }
    out.push_str(
        "<div class=\"plots\"><img src=\"latency.svg\" alt=\"latency\">\
         <img src=\"throughput.svg\" alt=\"throughput\"></div>\n",
    );
}

/// An anomaly or note as the page lists it.
struct Listed {
    kind: String,
    message: String,
    ops: Vec<u64>,
}

/// `results[key]` as a list, tolerating missing or odd fields.
fn listed(results: &Value, key: &str) -> Vec<Listed> {
    let Some(items) = results.get(key).and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|a| Listed {
            kind: a
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            message: match a.get("message") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
            ops: a
                .get("ops")
                .and_then(Value::as_array)
                .map(|ops| ops.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default(),
        })
        .collect()
}

/// Lane of each client operation (parallel to `run.ops`).
///
/// After an `info` a worker carries on under a new process number, so one
/// lane per process would leave a lane per timeout. Instead a process takes
/// the lowest lane whose previous process had finished (its last operation
/// completed) before this one's first invocation; a process whose last
/// operation never completed keeps its lane to the end.
fn assign_lanes(run: &Run) -> Vec<usize> {
    // Process → (first invocation, end of its last operation).
    let mut span: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for op in &run.ops {
        let p = op.invoke.process.client().unwrap_or(0);
        let end = if op.complete.is_some() {
            end_of(op, run.end_ns)
        } else {
            u64::MAX
        };
        let s = span.entry(p).or_insert((op.invoke.time, end));
        s.0 = s.0.min(op.invoke.time);
        s.1 = s.1.max(end);
    }
    let mut order: Vec<(u64, u64)> = span.iter().map(|(&p, &(first, _))| (first, p)).collect();
    order.sort_unstable();
    let mut busy_until: Vec<u64> = Vec::new();
    let mut lane_of: BTreeMap<u64, usize> = BTreeMap::new();
    for (first, p) in order {
        let lane = match busy_until.iter().position(|&b| b < first) {
            Some(l) => l,
            None => {
                busy_until.push(0);
                busy_until.len() - 1
            }
        };
        busy_until[lane] = span[&p].1;
        lane_of.insert(p, lane);
    }
    run.ops
        .iter()
        .map(|op| lane_of[&op.invoke.process.client().unwrap_or(0)])
        .collect()
}

fn lane_left(lane: usize) -> u32 {
    GUTTER_PX + NEMESIS_LANE_PX + lane as u32 * LANE_PX
}

/// Pixels per ms: the median completed operation [`MEDIAN_OP_PX`] tall,
/// unless the page would be taller than [`DEFAULT_HEIGHT_MAX_PX`].
fn default_zoom(run: &Run, end_ms: f64) -> f64 {
    let mut latencies: Vec<u64> = run
        .ops
        .iter()
        .filter_map(|op| op.completed_at().map(|c| c - op.invoke.time.min(c)))
        .collect();
    latencies.sort_unstable();
    let median_ms = latencies
        .get(latencies.len() / 2)
        .map(|&ns| ms(ns))
        .unwrap_or(end_ms / 20.0)
        .max(0.001);
    (MEDIAN_OP_PX / median_ms).min(DEFAULT_HEIGHT_MAX_PX / end_ms)
}

/// `num` keeps three decimals; a zoom can be much smaller than 0.001.
fn num_precise(x: f64) -> String {
    let s = format!("{x:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A tick step of 1, 2 or 5 × 10^k ms at least [`TICK_GAP_PX`] apart.
/// The script computes the same.
fn tick_step_ms(zoom: f64) -> f64 {
    let want = TICK_GAP_PX / zoom;
    let mut step = 10f64.powf(want.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if step * m >= want {
            step *= m;
            break;
        }
    }
    step
}

/// A tick's label in seconds, with as many decimals as the step needs.
fn tick_label(t_ms: f64, step_ms: f64) -> String {
    let decimals = (-(step_ms / 1000.0).log10().floor()).max(0.0) as usize;
    format!("{:.*} s", decimals, t_ms / 1000.0)
}

const STYLE: &str = "\
body{font:13px sans-serif;margin:0 1em}\
h1{font-size:20px}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
td:first-child{text-align:left}\
.verdict{font-size:18px;font-weight:bold}.valid{color:#1a7f1a}.invalid{color:#c00}.unknown{color:#b36b00}\
.plots img{max-width:100%;display:block;margin:8px 0}\
.key{padding:0 6px;border-radius:2px}\
#zoom{position:fixed;top:6px;right:10px;z-index:20;background:#fff;border:1px solid #ccc;padding:3px 6px}\
#tl{position:relative;margin-top:10px}\
#heads{position:sticky;top:0;height:20px;background:#fff;z-index:10;border-bottom:1px solid #ccc}\
#heads span{position:absolute;top:2px;overflow:hidden;white-space:nowrap;font-weight:bold}\
#lanes{position:relative;height:calc(var(--end)*var(--z)*1px + 30px)}\
.lane{position:absolute;top:0;bottom:0;border-left:1px solid #e4e4e4}\
.o{position:absolute;left:2px;right:2px;z-index:2;\
top:calc(var(--t)*var(--z)*1px);height:max(2px,calc(var(--d)*var(--z)*1px));\
overflow:hidden;white-space:nowrap;font-size:10px;line-height:12px;padding:0 2px;\
box-sizing:border-box;border-radius:2px;scroll-margin-top:40vh}\
.o:hover{outline:1px solid #000;z-index:6}\
.k{background:#a6dba0}.f{background:#f4a5b5}.i{background:#ffd37a}\
.u{background:#ffe9b5;border-bottom:2px dashed #c80}\
.n{background:#b9c6e6;right:112px}\
.a{outline:2px solid #e00;z-index:5}\
.o:target{outline:3px solid #06f;z-index:7}\
.fault{position:absolute;left:0;right:0;z-index:1;pointer-events:none;\
top:calc(var(--t)*var(--z)*1px);height:calc(var(--d)*var(--z)*1px);\
background:rgba(128,128,128,.18);border-top:1px solid #888}\
.fl{position:absolute;z-index:3;top:calc(var(--t)*var(--z)*1px);font-size:11px;max-width:104px;\
overflow:hidden;text-overflow:ellipsis;white-space:nowrap;background:rgba(255,255,255,.8)}\
.mark{position:absolute;left:0;right:0;z-index:1;pointer-events:none;\
top:calc(var(--t)*var(--z)*1px);border-top:1px dashed #446}\
.tick{position:absolute;left:0;right:0;z-index:0;top:calc(var(--t)*var(--z)*1px);\
border-top:1px solid #f0f0f0;font-size:10px;color:#666}\
";

/// Zoom keeps the middle of the window on the same moment and redraws the
/// ticks; everything else follows `--z`.
const SCRIPT: &str = "\
var tl=document.getElementById('tl'),lanes=document.getElementById('lanes');\
var z=parseFloat(tl.style.getPropertyValue('--z')),end=parseFloat(tl.style.getPropertyValue('--end'));\
var gap=120;\
function init(g){gap=g;}\
function step(){var w=gap/z,s=Math.pow(10,Math.floor(Math.log10(w)));\
for(var m of [1,2,5,10]){if(s*m>=w){return s*m;}}return s*10;}\
function ticks(){lanes.querySelectorAll('.tick').forEach(function(e){e.remove();});\
var s=step(),d=Math.max(0,-Math.floor(Math.log10(s/1000))),f=document.createDocumentFragment();\
for(var i=0,t=0;t<=end;t=++i*s){var e=document.createElement('div');e.className='tick';\
e.style.setProperty('--t',t);e.textContent=(t/1000).toFixed(d)+' s';f.appendChild(e);}\
lanes.insertBefore(f,lanes.firstChild);}\
function zoom(k){var top=lanes.getBoundingClientRect().top+window.scrollY;\
var mid=(window.scrollY+window.innerHeight/2-top)/z;\
var nz=Math.min(Math.max(z*k,300/end),8e6/end);if(nz===z){return;}z=nz;\
tl.style.setProperty('--z',z);ticks();\
window.scrollTo(window.scrollX,top+mid*z-window.innerHeight/2);}\
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Event, Process};
    use serde_json::Value;

    fn ev(index: u64, p: u64, kind: Kind, time_ms: u64) -> Event {
        Event {
            index,
            process: Process::Client(p),
            kind,
            f: "read".to_string(),
            value: Value::Null,
            time: time_ms * 1_000_000,
            mono_ns: 0,
            wall_ns: 0,
            error: None,
        }
    }

    #[test]
    fn a_process_after_an_info_reuses_a_free_lane() {
        use Kind::*;
        let events = vec![
            ev(0, 0, Invoke, 0),
            ev(1, 1, Invoke, 1),
            ev(2, 0, Info, 10),
            // Process 2 carries on for 0; process 1 never completes.
            ev(3, 2, Invoke, 11),
            ev(4, 2, Ok, 12),
            ev(5, 3, Invoke, 13),
            ev(6, 3, Ok, 14),
            ev(7, 2, Invoke, 20),
            ev(8, 2, Ok, 21),
            // Processes 2 and 3 are done by now: the lowest lane wins.
            ev(9, 4, Invoke, 22),
        ];
        let run = Run::new(&events);
        // Ops in invocation order: p0, p1, p2, p3, p2, p4.
        assert_eq!(assign_lanes(&run), vec![0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn tick_steps_are_round_and_far_enough_apart() {
        assert_eq!(tick_step_ms(1.0), 200.0);
        assert_eq!(tick_step_ms(2.4), 50.0);
        assert_eq!(tick_step_ms(0.12), 1000.0);
        assert_eq!(tick_label(1500.0, 500.0), "1.5 s");
        assert_eq!(tick_label(4000.0, 2000.0), "4 s");
    }
}
