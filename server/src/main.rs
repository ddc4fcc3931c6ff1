//! The `warden` binary.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use warden_server::config::ServeArgs;
use warden_server::local_cluster::{self, LocalClusterArgs};

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Warden: a coordination service (znodes, sessions, watches) replicated with Raft"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up: the size of the biggest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a server. With no flags: a single-node service on 127.0.0.1:7000,
    /// data in ./warden-data.
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,fjall=warn,lsm_tree=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
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
                    // Tests and scripts wait for this line, and read it field by
                    // field (`name=value`), so fields may be added.
                    let zk = bound.zk.map(|zk| format!(" zk={zk}")).unwrap_or_default();
                    println!(
                        "warden listening client={}{zk} http={}",
                        bound.client, bound.http
                    );
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
