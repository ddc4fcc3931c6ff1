//! `warden serve --config FILE`: a TOML file of settings whose keys are the
//! long flags of `warden serve` without `--` (and the global `log-level`
//! and `log-format`):
//!
//! ```toml
//! id = 2
//! data-dir = "/var/lib/warden"
//! peers = "1=10.0.0.1:7100,2=10.0.0.2:7100,3=10.0.0.3:7100"
//! join = false
//! http-token-file = "/etc/warden/tokens"
//! log-format = "json"
//! ```
//!
//! The file is not a second parser of the flags: each key is looked up
//! among the command's own arguments, and its value is turned into the
//! argument(s) it stands for (`tick-ms = 50` is `--tick-ms 50`, `join =
//! true` is `--join`, a list repeats the flag) and checked by that
//! argument's own value parser, so a flag and its key always accept the
//! same values. The arguments of the keys that no flag or environment
//! variable already set are then added to the command line, which clap
//! parses again: flag > environment > file > default.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// One thing wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// The key at fault; `None` for the file as a whole.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every problem of a file, one a line.
#[derive(Debug)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
                write!(f, "error: ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// The file's settings as command-line arguments, each key checked.
/// `serve` is the `warden serve` command as built by a parse (so it holds
/// the global flags too).
fn settings(path: &Path, serve: &Command) -> Result<Vec<(String, Vec<OsString>)>, Problems> {
    let whole = |message: String| {
        Problems(vec![Problem {
            file: path.to_path_buf(),
            key: None,
            message,
        }])
    };
    let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| whole(format!("not valid TOML: {}", e.message())))?;
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (key, value) in &table {
        match setting(serve, key, value) {
            Ok(args) => out.push((key.clone(), args)),
            Err(message) => problems.push(Problem {
                file: path.to_path_buf(),
                key: Some(key.clone()),
                message,
            }),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(Problems(problems))
    }
}

/// The arguments `key = value` stands for, checked by the flag's parser.
fn setting(serve: &Command, key: &str, value: &toml::Value) -> Result<Vec<OsString>, String> {
    if key == "config" {
        return Err("a config file cannot name another one".into());
    }
    let arg = serve
        .get_arguments()
        .find(|a| {
            a.get_long() == Some(key)
                && !matches!(a.get_action(), ArgAction::Help | ArgAction::Version)
        })
        .ok_or_else(|| {
            "unknown key (keys are `warden serve`'s long flags without --)".to_string()
        })?;
    let flag = format!("--{key}");
    let scalar = |v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(x) => Ok(x.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!(
                "expected a string, number or boolean, got a {}",
                other.type_str()
            )),
        }
    };
    let args: Vec<OsString> = match (arg.get_action(), value) {
        (ArgAction::SetTrue, toml::Value::Boolean(true)) => vec![flag.clone().into()],
        (ArgAction::SetTrue, toml::Value::Boolean(false)) => Vec::new(),
        (ArgAction::SetTrue, other) => {
            return Err(format!(
                "expected true or false, got a {}",
                other.type_str()
            ))
        }
        (ArgAction::Append, toml::Value::Array(items)) => {
            let mut args = Vec::new();
            for item in items {
                args.push(flag.clone().into());
                args.push(scalar(item)?.into());
            }
            args
        }
        (_, toml::Value::Array(_)) => return Err("takes one value, not a list".into()),
        (_, v) => vec![flag.clone().into(), scalar(v)?.into()],
    };
    // The flag's own parser judges the value: a command of that one
    // argument, fed the value (so no environment variable is read).
    let alone = Command::new("warden serve")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(arg.clone().global(false));
    if let Err(e) = alone.try_get_matches_from(&args) {
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or("invalid value");
        return Err(first.trim_start_matches("error: ").to_string());
    }
    Ok(args)
}

/// For `warden serve --config FILE`: the arguments to add to the command
/// line, those of every key whose flag was given neither on the command
/// line nor by its environment variable (`matches`, the parse without the
/// file; `None` takes every key).
pub fn args_for(
    path: &Path,
    serve: &Command,
    matches: Option<&ArgMatches>,
) -> Result<Vec<OsString>, Problems> {
    let mut out = Vec::new();
    for (key, args) in settings(path, serve)? {
        let id = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()))
            .map(|a| a.get_id().as_str().to_string())
            .expect("settings() found the key's argument");
        let given = matches
            .and_then(|m| m.value_source(&id))
            .is_some_and(|s| matches!(s, ValueSource::CommandLine | ValueSource::EnvVariable));
        if !given {
            out.extend(args);
        }
    }
    Ok(out)
}

/// `warden config check FILE`: the number of settings in the file, or
/// every problem with it. `cli` is the whole `warden` command; the file is
/// read as `warden serve --config FILE` would read it with no flags and an
/// empty environment, and the result validated like a start's flags
/// (files it names, such as certificates, must exist).
pub fn check(path: &Path, cli: &Command) -> Result<usize, Problems> {
    // The environment must not stand in for, or hide, what the file says.
    let no_env = |a: clap::Arg| a.env(None::<&'static str>);
    let mut cli = cli
        .clone()
        .mut_args(no_env)
        .mut_subcommand("serve", |s| s.mut_args(no_env));
    cli.build();
    let serve = cli
        .find_subcommand("serve")
        .expect("warden has a serve subcommand")
        .clone();
    let settings = settings(path, &serve)?;
    let mut argv: Vec<OsString> = vec!["warden".into(), "serve".into()];
    for (_, args) in &settings {
        argv.extend(args.iter().cloned());
    }
    let whole = |message: String| {
        Problems(vec![Problem {
            file: path.to_path_buf(),
            key: None,
            message,
        }])
    };
    let matches = cli.try_get_matches_from(&argv).map_err(|e| {
        let rendered = e.render().to_string();
        whole(
            rendered
                .lines()
                .next()
                .unwrap_or("invalid")
                .trim_start_matches("error: ")
                .to_string(),
        )
    })?;
    let serve_matches = matches
        .subcommand_matches("serve")
        .expect("argv names serve");
    let args = <super::ServeArgs as clap::FromArgMatches>::from_arg_matches(serve_matches)
        .map_err(|e| whole(e.to_string()))?;
    args.validate().map_err(|e| whole(e.to_string()))?;
    Ok(settings.len())
}
