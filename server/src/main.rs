//! The `warden` binary.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use warden_log::{Level, LogArgs, LogFormat};
use warden_server::config::{self, ServeArgs};
use warden_server::local_cluster::{self, LocalClusterArgs};

#[derive(Parser)]
#[command(
    name = "warden",
    version = warden_log::VERSION,
    about = "Warden: a coordination service (znodes, sessions, watches) replicated with Raft"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up: the size of the biggest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a server. With no flags: a single-node service on 127.0.0.1:7000,
    /// data in ./warden-data. Every flag has an environment variable
    /// (WARDEN_ and the flag's name) and a key in --config's file.
    Serve(ServeArgs),
    /// Run a 3- or 5-node cluster on this machine (one `warden serve` child
    /// per node), print its connect string as `WARDEN_SERVERS=...`, and
    /// stop every node on Ctrl-C.
    LocalCluster(LocalClusterArgs),
    /// Make a throwaway CA and certificates for trying TLS (not for
    /// production: the CA's key sits in the directory): `warden certs
    /// --node n1 --node n2 --node n3 --client alice`.
    Certs(warden_server::tls::certs::CertsArgs),
    /// Print the digest of USER:PASSWORD as `USER:BASE64HASH`, the form
    /// --super-digest, --auth-users files and digest ACLs take.
    Digest {
        /// USER:PASSWORD (the password may contain colons).
        credentials: String,
    },
    /// Configuration files of `warden serve --config`.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Make a new data dir from a backup (`wardenctl snapshot save`): the
    /// data dir of server ID alone, a group of one that other servers then
    /// join. Refuses a damaged file and a DIR that is not empty.
    Restore {
        /// The snapshot file `wardenctl snapshot save` wrote.
        #[arg(long, value_name = "FILE")]
        snapshot: PathBuf,
        /// The new data dir (absent or empty).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The id the restored server will run with (`warden serve --id`).
        #[arg(long, value_name = "N", default_value_t = 1)]
        id: u64,
    },
    /// Print the tree of a stopped server's data dir as JSON lines (one
    /// znode per line, in path order): its newest snapshot with the
    /// committed log applied. Refuses a dir a running server holds.
    Inspect {
        /// The data dir.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check FILE as `warden serve --config FILE` would read it, without
    /// the environment: unknown keys, bad values and flags that do not go
    /// together are reported, naming the key. Exits 1 if any.
    Check {
        /// A TOML file of `key = value` lines, keys named like the flags.
        file: PathBuf,
    },
}

/// Parses the command line; for `serve --config FILE`, again with the
/// file's settings added where neither a flag nor an environment variable
/// gave one (flag > environment > file > default). Exits on a usage error.
fn parse() -> Result<Cli, String> {
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    let mut cmd = Cli::command();
    let matches = cmd
        .try_get_matches_from_mut(&argv)
        .unwrap_or_else(|e| e.exit());
    if warden_log::parse_only() {
        std::process::exit(0);
    }
    let extra = match matches.subcommand() {
        Some(("serve", serve)) => match serve.get_one::<PathBuf>("config") {
            Some(file) => {
                let serve_cmd = cmd.find_subcommand("serve").expect("serve is a subcommand");
                config::file::args_for(file, serve_cmd, Some(serve)).map_err(|e| e.to_string())?
            }
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    let matches = if extra.is_empty() {
        matches
    } else {
        argv.extend(extra);
        cmd.try_get_matches_from_mut(&argv)
            .unwrap_or_else(|e| e.exit())
    };
    Ok(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = warden_log::init(&cli.log, Level::Info) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let format = cli.log.log_format;
    match cli.command {
        Command::Config(ConfigCommand::Check { file }) => {
            match config::file::check(&file, &Cli::command()) {
                Ok(keys) => {
                    println!("{}: ok ({keys} settings)", file.display());
                    ExitCode::SUCCESS
                }
                Err(problems) => {
                    for problem in problems.0 {
                        eprintln!("error: {problem}");
                    }
                    ExitCode::FAILURE
                }
            }
        }
        Command::Restore {
            snapshot,
            data_dir,
            id,
        } => match warden_server::backup::restore(&snapshot, &data_dir, id) {
            Ok(r) => {
                println!(
                    "restored {} (index {}, term {}, {} znodes) into {} as server {id}; start it \
                     with `warden serve --id {id} --data-dir {}`",
                    snapshot.display(),
                    r.index,
                    r.term,
                    r.nodes,
                    data_dir.display(),
                    data_dir.display()
                );
                if !r.left_behind.is_empty() {
                    let old: Vec<String> = r
                        .left_behind
                        .iter()
                        .map(|(id, addr)| format!("{id}={addr}"))
                        .collect();
                    println!(
                        "the backup's member addresses ({}) are not kept: server {id} takes its \
                         peers from --peers (or the config file's peers), and the others join \
                         it with `wardenctl cluster add`",
                        old.join(",")
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Inspect { data_dir } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match warden_server::backup::inspect(&data_dir, &mut out) {
                Ok(i) => {
                    let from = match &i.snapshot {
                        Some(f) => format!("snapshot {} (index {})", f.display(), i.snapshot_index),
                        None => "no snapshot".to_string(),
                    };
                    eprintln!(
                        "{} znodes at index {}: {from} and the committed log after it",
                        i.nodes, i.applied
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    drop(out);
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Digest { credentials } => match warden_protocol::auth::digest_id(&credentials) {
            Ok(id) => {
                println!("{id}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Serve(args) => {
            let cfg = match args.validate() {
                Ok(cfg) => cfg,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("the tokio runtime builds");
            let result = rt.block_on(async {
                let shutdown = shutdown_signal();
                warden_server::serve::serve(cfg, shutdown, |bound| {
                    println!("{}", ready_line(&bound, format));
                    let _ = std::io::stdout().flush();
                })
                .await
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Certs(args) => match warden_server::tls::certs::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::LocalCluster(args) => {
            let plan = match args.validate() {
                Ok(plan) => plan,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            // The nodes inherit the environment: they log as the
            // supervisor was asked to (set before any thread starts).
            use clap::ValueEnum as _;
            if let Some(v) = cli.log.log_level.and_then(|l| l.to_possible_value()) {
                std::env::set_var("WARDEN_LOG_LEVEL", v.get_name());
            }
            if let Some(v) = format.to_possible_value() {
                std::env::set_var("WARDEN_LOG_FORMAT", v.get_name());
            }
            // A supervisor of a few child processes: one thread is plenty.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the tokio runtime builds");
            match rt.block_on(local_cluster::run(plan)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The line printed on stdout when clients can connect. Tests and scripts
/// wait for it: as text (`warden listening client=ADDR zk=ADDR http=ADDR
/// [grpc=ADDR] peer=ADDR`, read field by field, so fields may be added) or, with
/// `--log-format json`, as a JSON object with the same fields, so that
/// everything the process prints is JSON.
fn ready_line(bound: &warden_server::serve::Bound, format: LogFormat) -> String {
    match format {
        LogFormat::Text => {
            let zk = bound.zk.map(|zk| format!(" zk={zk}")).unwrap_or_default();
            let grpc = bound
                .grpc
                .map(|grpc| format!(" grpc={grpc}"))
                .unwrap_or_default();
            format!(
                "{}{}{zk} http={}{grpc} peer={}",
                local_cluster::READY_LINE_PREFIX,
                bound.client,
                bound.http,
                bound.peer
            )
        }
        LogFormat::Json => serde_json::json!({
            "message": "warden listening",
            "client": bound.client.to_string(),
            "zk": bound.zk.map(|zk| zk.to_string()),
            "http": bound.http.to_string(),
            "grpc": bound.grpc.map(|grpc| grpc.to_string()),
            "peer": bound.peer.to_string(),
        })
        .to_string(),
    }
}

/// Ctrl-C or SIGTERM: both shut down cleanly. The handlers are installed
/// here, before the server reports ready, so a signal sent right after the
/// ready line is never lost to the default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let ctrl_c = tokio::signal::ctrl_c();
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = ctrl_c.await;
    }
}
