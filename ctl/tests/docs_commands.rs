//! Every documented command is one its binary accepts.
//!
//! README.md and docs/*.md show shell commands for `warden`, `wardenctl`,
//! `warden-jepsen` and `warden-fenced` (also as `./target/release/NAME` or
//! `cargo run --release --bin NAME --`). Each one found in a shell block is
//! run with `WARDEN_PARSE_ONLY=1`, under which the binary parses its
//! command line and exits without doing anything: an unknown flag or
//! subcommand, a missing argument or a value of the wrong kind fails this
//! test, naming the page and line. A `...` word stands for flags shown
//! elsewhere and is left out. What a command then does is the other tests'
//! business.

use std::path::{Path, PathBuf};
use std::process::Command;

const BINARIES: [&str; 4] = ["warden", "wardenctl", "warden-jepsen", "warden-fenced"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pages: README.md and every docs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Shell lines of `sh`/`bash`/`console` blocks: (line number, text), with
/// `\`-continued lines joined and a `$ ` prompt taken off.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // None: outside a block; Some(kind): in one (sh, console or other).
    let mut in_shell = None::<&str>;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_shell = match in_shell {
                None => Some(match info.trim() {
                    "sh" | "bash" | "shell" => "sh",
                    "console" => "console",
                    _ => "other",
                }),
                Some(_) => None,
            };
            continue;
        }
        // In a console block only `$ ` lines are commands (the rest is
        // their output), unless a command goes on from the line before.
        let line = match in_shell {
            Some("sh") => line.strip_prefix("$ ").unwrap_or(line),
            Some("console") => match (line.strip_prefix("$ "), &pending) {
                (Some(command), _) => command,
                (None, Some(_)) => line,
                (None, None) => continue,
            },
            _ => continue,
        };
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                out.push((start, joined));
            }
        }
    }
    out
}

/// Splits a shell line into commands (at unquoted `|`, `&`, `;`, `&&`,
/// `||`), each a list of words with quotes removed; stops at a comment.
/// `$VAR` and `${VAR}` become `1`; a command with `$(` or a backquote is
/// dropped (its words are not known until it runs).
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut unknowable = false;
    let mut chars = line.chars().peekable();
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                word.push(n);
                            }
                        }
                        '$' if chars.peek() == Some(&'(') => {
                            unknowable = true;
                            word.push(c);
                        }
                        '$' => {
                            variable(&mut chars);
                            word.push('1');
                        }
                        _ => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                unknowable = true;
                in_word = true;
                word.push(c);
            }
            '$' => {
                in_word = true;
                variable(&mut chars);
                word.push('1');
            }
            '`' => {
                unknowable = true;
                in_word = true;
            }
            '#' if !in_word => break,
            '|' | '&' | ';' => {
                end_word(&mut words, &mut word, &mut in_word);
                if !unknowable && !words.is_empty() {
                    cmds.push(std::mem::take(&mut words));
                }
                words.clear();
                unknowable = false;
            }
            '>' | '<' => {
                // A redirection: its target is not an argument, nor is a
                // file descriptor number just before it (`2>&1`).
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut words, &mut word, &mut in_word);
                while chars.peek().is_some_and(|c| *c == '>' || *c == '&') {
                    chars.next();
                }
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                while chars.peek().is_some_and(|c| !c.is_whitespace()) {
                    chars.next();
                }
            }
            c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    if !unknowable && !words.is_empty() {
        cmds.push(words);
    }
    cmds
}

/// Consumes a variable name after `$` (`NAME`, `{NAME}`, `1`, `@`).
fn variable(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    if chars.peek() == Some(&'{') {
        for c in chars.by_ref() {
            if c == '}' {
                break;
            }
        }
        return;
    }
    while chars
        .peek()
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '@')
    {
        chars.next();
    }
}

/// The Warden binary a command runs and its arguments, if it runs one.
fn warden_command(words: &[String]) -> Option<(&'static str, Vec<String>)> {
    let mut rest: Vec<String> = words
        .iter()
        .skip_while(|w| {
            // Environment assignments before the command, and `sudo`/`env`.
            (w.contains('=') && !w.starts_with('-')) || *w == "sudo" || *w == "env"
        })
        .cloned()
        .collect();
    if rest.is_empty() {
        return None;
    }
    if rest[0] == "cargo" && rest.get(1).map(String::as_str) == Some("run") {
        let bin_at = rest.iter().position(|w| w == "--bin")?;
        let name = rest.get(bin_at + 1)?.clone();
        let args_at = rest.iter().position(|w| w == "--")?;
        let args = rest.split_off(args_at + 1);
        let bin = BINARIES.into_iter().find(|b| *b == name)?;
        return Some((bin, args));
    }
    // `...` in a documented command stands for the flags shown elsewhere.
    rest.retain(|w| w != "...");
    if rest.is_empty() {
        return None;
    }
    let program = rest.remove(0);
    let name = program.rsplit('/').next().unwrap_or(&program);
    let bin = BINARIES.into_iter().find(|b| *b == name)?;
    Some((bin, rest))
}

fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

#[test]
fn shell_words_split_as_a_shell_would() {
    assert_eq!(
        commands(r#"wardenctl set /a 'x y' # comment"#),
        vec![vec!["wardenctl", "set", "/a", "x y"]]
    );
    assert_eq!(
        commands(r#"WARDEN_SERVERS=$S wardenctl ls / | head -3 && warden --version"#),
        vec![
            vec!["WARDEN_SERVERS=1", "wardenctl", "ls", "/"],
            vec!["head", "-3"],
            vec!["warden", "--version"]
        ]
    );
    assert_eq!(
        commands(r#"wardenctl get "$(cat f)"; wardenctl stat /a >out.txt 2>&1"#),
        vec![vec!["wardenctl", "stat", "/a"]]
    );
    let (bin, args) = warden_command(&[
        "cargo".into(),
        "run".into(),
        "--release".into(),
        "--bin".into(),
        "warden".into(),
        "--".into(),
        "serve".into(),
    ])
    .unwrap();
    assert_eq!((bin, args), ("warden", vec!["serve".to_string()]));
    assert!(warden_command(&["curl".into(), "-s".into()]).is_none());
}

#[test]
fn every_documented_command_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        for (line, shell) in shell_lines(&text) {
            for words in commands(&shell) {
                let Some((bin, args)) = warden_command(&words) else {
                    continue;
                };
                let out = Command::new(binary(bin))
                    .args(&args)
                    .env("WARDEN_PARSE_ONLY", "1")
                    .output()
                    .unwrap_or_else(|e| panic!("{bin}: {e} (built? cargo build --workspace)"));
                checked += 1;
                if !out.status.success() {
                    failures.push(format!(
                        "{name}:{line}: {bin} {}\n    {}",
                        args.join(" "),
                        String::from_utf8_lossy(&out.stderr)
                            .lines()
                            .take(3)
                            .collect::<Vec<_>>()
                            .join("\n    ")
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} commands found in the docs");
    assert!(
        failures.is_empty(),
        "{} of {checked} documented commands do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{checked} documented commands parse");
}
