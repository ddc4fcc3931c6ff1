//! The `warden-fenced` binary: the fenced key-value store service (see the
//! library's docs and `docs/fencing.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tokio::net::TcpListener;
use tracing::{error, info};
use warden_fenced::{api, Store};
use warden_log::{Level, LogArgs};

/// The line printed on stdout once the store takes requests (tests and
/// scripts wait for it).
const READY_PREFIX: &str = "warden-fenced listening";

#[derive(Parser)]
#[command(
    name = "warden-fenced",
    version = warden_log::VERSION,
    about = "A fenced key-value store: refuses writes whose fencing token is below the highest seen for the key"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    /// Address of the HTTP API. Port 0 picks one (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7500", env = "WARDEN_FENCED_LISTEN")]
    listen: SocketAddr,
    /// Where the store keeps its data (created if absent). One store
    /// process per directory.
    #[arg(
        long,
        default_value = "warden-fenced-data",
        env = "WARDEN_FENCED_DATA_DIR"
    )]
    data_dir: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if warden_log::parse_only() {
        return ExitCode::SUCCESS;
    }
    if let Err(e) = warden_log::init(&cli.log, Level::Info) {
        eprintln!("warden-fenced: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("warden-fenced: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            eprintln!("warden-fenced: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let dir = cli.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&dir))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("data dir {}: {e}", cli.data_dir.display()))?;
    let listener = TcpListener::bind(cli.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", cli.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    info!(%addr, data_dir = %cli.data_dir.display(), "fenced store open");
    println!("{READY_PREFIX} http={addr}");
    axum::serve(listener, api::router(Arc::new(store)))
        .with_graceful_shutdown(stop_signal())
        .await
        .map_err(|e| format!("serving: {e}"))?;
    info!("stopped");
    Ok(())
}

/// SIGTERM or SIGINT (Ctrl-C).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    info!("stop signal: finishing the requests in hand");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    /// Every flag has an environment variable (`WARDEN_FENCED_` and the
    /// flag's name; the logging flags share the other binaries' `WARDEN_`).
    #[test]
    fn every_flag_has_an_environment_variable() {
        let cli = Cli::command();
        for arg in cli.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let env = arg
                .get_env()
                .unwrap_or_else(|| panic!("--{id} has no environment variable"));
            let long = arg.get_long().expect("a long flag");
            let expected = long.to_uppercase().replace('-', "_");
            let env = env.to_string_lossy();
            assert!(
                env == format!("WARDEN_FENCED_{expected}") || env == format!("WARDEN_{expected}"),
                "--{long}: {env}"
            );
        }
    }
}
