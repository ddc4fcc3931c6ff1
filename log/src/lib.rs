//! Logging for Warden's binaries (`warden`, `wardenctl`, `warden-jepsen`),
//! set up one way everywhere:
//!
//! - `--log-level LEVEL` (`WARDEN_LOG_LEVEL`): the least severe level shown;
//!   each binary has its own default (the server `info`, `wardenctl` `off`
//!   so its stderr carries only its error line, the Jepsen harness `warn`).
//! - `--log-format text|json` (`WARDEN_LOG_FORMAT`): lines for people, or
//!   one JSON object per line (`timestamp`, `level`, `target`, `message` and
//!   the event's fields at the top level) for log shippers.
//! - `WARDEN_LOG`: per-target filters in tracing's env-filter syntax
//!   (`warden_server::core=debug,raft=info`), added to the above; a bare
//!   level in it (`debug`) stands in for `--log-level` when that is not
//!   given.
//!
//! Raft (`raft`) and the storage engine (`fjall`, `lsm_tree`) log at `warn`
//! unless `WARDEN_LOG` names them: their INFO lines are internal
//! bookkeeping (elections' vote counts, configuration dumps, compactions)
//! that the server already reports in its own words.
//!
//! Everything goes to stderr; stdout stays for a program's output.

use std::io::IsTerminal as _;

use clap::{Args, ValueEnum};
use tracing_subscriber::filter::{Directive, LevelFilter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// The version every binary reports: the crate version and the git
/// revision it was built from (`0.1.0 (git 1a2b3c4d5e6f)`), or `(revision
/// unknown)` when built outside a git checkout; see `build.rs`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("WARDEN_GIT_REV"), ")");

/// The git revision alone (`git 1a2b3c4d5e6f`, or `revision unknown`).
pub const REVISION: &str = env!("WARDEN_GIT_REV");

/// When this variable is set, a binary parses its command line and exits:
/// 0 if it parses, clap's error and 2 if not, running nothing. The docs
/// check (`ctl/tests/docs_commands.rs`) holds every documented command to
/// its binary's parser this way.
pub const PARSE_ONLY_ENV: &str = "WARDEN_PARSE_ONLY";

/// Whether [`PARSE_ONLY_ENV`] is set.
pub fn parse_only() -> bool {
    std::env::var_os(PARSE_ONLY_ENV).is_some()
}

/// The environment variable of per-target filters.
pub const FILTER_ENV: &str = "WARDEN_LOG";

/// Targets that log at `warn` at most unless [`FILTER_ENV`] names them.
pub const QUIET_TARGETS: &[&str] = &["raft", "fjall", "lsm_tree"];

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event, for people.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The least severe level logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Level {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl Level {
    fn filter(self) -> LevelFilter {
        match self {
            Level::Off => LevelFilter::OFF,
            Level::Error => LevelFilter::ERROR,
            Level::Warn => LevelFilter::WARN,
            Level::Info => LevelFilter::INFO,
            Level::Debug => LevelFilter::DEBUG,
            Level::Trace => LevelFilter::TRACE,
        }
    }
}

/// The logging flags every binary has (flatten them into its top-level
/// parser; they are global, so they may follow the subcommand).
#[derive(Debug, Clone, Default, Args)]
pub struct LogArgs {
    /// Least severe level logged [default: the binary's own]. Per-target
    /// filters go in WARDEN_LOG (env-filter syntax, e.g.
    /// `warden_server=debug,raft=info`); Raft and storage log at warn unless
    /// WARDEN_LOG names them.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "LEVEL",
        env = "WARDEN_LOG_LEVEL"
    )]
    pub log_level: Option<Level>,
    /// `text` for people, or `json`: one JSON object per line.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text,
        env = "WARDEN_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{FILTER_ENV}: {directive:?} is not a filter directive: {why}")]
    Directive { directive: String, why: String },
    #[error("{FILTER_ENV} is not valid unicode")]
    NotUnicode,
}

/// The filter for `args`, `default` (the binary's level) and the value of
/// [`FILTER_ENV`] if set.
pub fn filter(
    args: &LogArgs,
    default: Level,
    warden_log: Option<&str>,
) -> Result<EnvFilter, LogError> {
    let mut env_directives = Vec::new();
    let mut env_level = None;
    let mut named = Vec::new();
    for item in warden_log
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        // A bare level applies to every target: it is the overall level.
        if let Ok(level) = item.parse::<LevelFilter>() {
            env_level = Some(level);
            continue;
        }
        let directive: Directive = item.parse().map_err(|e| LogError::Directive {
            directive: item.to_string(),
            why: format!("{e}"),
        })?;
        named.extend(
            QUIET_TARGETS
                .iter()
                .filter(|t| item.starts_with(**t))
                .copied(),
        );
        env_directives.push(directive);
    }
    let level = match (args.log_level, env_level) {
        (Some(flag), _) => flag.filter(),
        (None, Some(env)) => env,
        (None, None) => default.filter(),
    };
    let mut filter = EnvFilter::default().add_directive(level.into());
    let quiet = level.min(LevelFilter::WARN);
    for target in QUIET_TARGETS.iter().filter(|t| !named.contains(t)) {
        let directive = format!("{target}={quiet}")
            .parse()
            .expect("a target and a level make a directive");
        filter = filter.add_directive(directive);
    }
    for directive in env_directives {
        filter = filter.add_directive(directive);
    }
    Ok(filter)
}

/// Installs the global subscriber: `args` over `default`, with
/// [`FILTER_ENV`]'s filters, writing to stderr.
pub fn init(args: &LogArgs, default: Level) -> Result<(), LogError> {
    let warden_log = match std::env::var(FILTER_ENV) {
        Ok(v) => Some(v),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => return Err(LogError::NotUnicode),
    };
    let filter = filter(args, default, warden_log.as_deref())?;
    let registry = tracing_subscriber::registry().with(filter);
    match args.log_format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level as L;
    use tracing_subscriber::layer::Context;
    use tracing_subscriber::Layer;

    /// Whether `filter` lets an event of `level` at `target` through, asked
    /// the way a subscriber asks it.
    fn enabled(filter: EnvFilter, target: &'static str, level: L) -> bool {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        struct Seen(Arc<AtomicBool>);
        impl<S: tracing::Subscriber> Layer<S> for Seen {
            fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let seen = Arc::new(AtomicBool::new(false));
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(Seen(seen.clone()));
        tracing::subscriber::with_default(subscriber, || match (target, level) {
            ("raft", L::INFO) => tracing::info!(target: "raft", "x"),
            ("raft", L::WARN) => tracing::warn!(target: "raft", "x"),
            ("raft", L::ERROR) => tracing::error!(target: "raft", "x"),
            ("warden_server", L::INFO) => tracing::info!(target: "warden_server", "x"),
            ("warden_server", L::DEBUG) => tracing::debug!(target: "warden_server", "x"),
            ("warden_server::core", L::DEBUG) => {
                tracing::debug!(target: "warden_server::core", "x")
            }
            other => panic!("no case for {other:?}"),
        });
        seen.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn args(level: Option<Level>) -> LogArgs {
        LogArgs {
            log_level: level,
            log_format: LogFormat::Text,
        }
    }

    #[test]
    fn raft_is_quiet_unless_named() {
        let f = || filter(&args(None), Level::Info, None).unwrap();
        assert!(enabled(f(), "warden_server", L::INFO));
        assert!(!enabled(f(), "warden_server", L::DEBUG));
        assert!(!enabled(f(), "raft", L::INFO));
        assert!(enabled(f(), "raft", L::WARN));
        // A debug level does not bring Raft's chatter back...
        let f = filter(&args(Some(Level::Debug)), Level::Info, None).unwrap();
        assert!(!enabled(f, "raft", L::INFO));
        // ...naming it does.
        let f = filter(&args(None), Level::Info, Some("raft=info")).unwrap();
        assert!(enabled(f, "raft", L::INFO));
        // A quieter level than warn quiets Raft too.
        let f = filter(&args(Some(Level::Error)), Level::Info, None).unwrap();
        assert!(!enabled(f, "raft", L::WARN));
        assert!(enabled(
            filter(&args(Some(Level::Error)), Level::Info, None).unwrap(),
            "raft",
            L::ERROR
        ));
    }

    #[test]
    fn the_flag_beats_a_bare_level_in_the_variable() {
        let f = || filter(&args(None), Level::Off, Some("debug")).unwrap();
        assert!(enabled(f(), "warden_server", L::DEBUG));
        let f = filter(&args(Some(Level::Info)), Level::Off, Some("debug")).unwrap();
        assert!(!enabled(f, "warden_server", L::DEBUG));
        // Per-target directives add to the flag's level.
        let f = || {
            filter(
                &args(Some(Level::Info)),
                Level::Off,
                Some("warden_server::core=debug"),
            )
            .unwrap()
        };
        assert!(enabled(f(), "warden_server::core", L::DEBUG));
        assert!(!enabled(f(), "warden_server", L::DEBUG));
        assert!(enabled(f(), "warden_server", L::INFO));
    }

    #[test]
    fn a_bad_directive_is_named() {
        let e = filter(&args(None), Level::Info, Some("info,raft=loud"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("WARDEN_LOG") && e.contains("raft=loud"), "{e}");
    }

    #[test]
    fn the_version_names_the_crate_version() {
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")), "{VERSION}");
        assert!(VERSION.contains("git ") || VERSION.contains("revision unknown"));
    }
}
