//! `warden serve`: start the core on its own thread, wait until it is ready
//! (a leader is known and the log is replayed), then accept clients until
//! shutdown.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info};

use crate::config::Config;
use crate::conn;
use crate::core::{Core, CoreMsg, CoreState, CORE_QUEUE_MAX, PEER_INBOX_MAX};
use crate::raft::transport;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot start: {0}")]
    Core(#[from] crate::core::CoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the core stopped before it was ready; see the log above")]
    CoreStopped,
    #[error("data dir: {0}")]
    DataDir(String),
    #[error("cannot start the core's runtime: {0}")]
    Runtime(std::io::Error),
}

/// Addresses actually bound (a port of 0 in the config is resolved here).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub client: SocketAddr,
    /// The ZooKeeper door's address, if it is on.
    pub zk: Option<SocketAddr>,
    /// The HTTP door's address (lock API, `/metrics`, `/health`).
    pub http: SocketAddr,
    /// The gRPC lock API's address, if it is on.
    pub grpc: Option<SocketAddr>,
    /// Where peers' Raft traffic comes in.
    pub peer: SocketAddr,
}

/// Runs a server until `shutdown` completes. `on_ready` is called once with
/// the bound addresses when clients can connect.
pub async fn serve(
    cfg: Config,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(Bound),
) -> Result<(), ServeError> {
    // Bind both ports first: peers must reach us for an election to happen,
    // and clients queue in the backlog until we are ready to accept them.
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: cfg.listen,
            source,
        })?;
    let client = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: cfg.listen,
        source,
    })?;
    let peer_listener =
        TcpListener::bind(cfg.peer_listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: cfg.peer_listen,
                source,
            })?;
    let zk_listener = match cfg.zk_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen { addr, source })?,
        ),
        None => None,
    };
    let zk_addr = zk_listener.as_ref().and_then(|l| l.local_addr().ok());
    let http_listener =
        TcpListener::bind(cfg.http_listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: cfg.http_listen,
                source,
            })?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|source| ServeError::Listen {
            addr: cfg.http_listen,
            source,
        })?;
    let grpc_listener = match cfg.grpc_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen { addr, source })?,
        ),
        None => None,
    };
    let grpc_addr = grpc_listener.as_ref().and_then(|l| l.local_addr().ok());
    let peer_addr = peer_listener
        .local_addr()
        .map_err(|source| ServeError::Listen {
            addr: cfg.peer_listen,
            source,
        })?;
    // The one start-up line: what runs, and where, before waiting for a
    // quorum (which may take long); the core logs `ready` when it serves.
    let peers = cfg
        .peers
        .iter()
        .map(|p| format!("{}={}", p.id, p.addr))
        .collect::<Vec<_>>()
        .join(",");
    info!(
        version = warden_log::VERSION,
        id = cfg.id,
        %client,
        peer = %peer_addr,
        zk = %zk_addr.map_or_else(|| "off".to_string(), |a| a.to_string()),
        http = %http_addr,
        grpc = %grpc_addr.map_or_else(|| "off".to_string(), |a| a.to_string()),
        data_dir = %cfg.data_dir.display(),
        %peers,
        join = cfg.join,
        tls = cfg.tls.is_some(),
        "warden starting"
    );
    // One server per data dir, of a format this build reads.
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| ServeError::DataDir(format!("creating {}: {e}", cfg.data_dir.display())))?;
    let _dir_lock = crate::backup::lock(&cfg.data_dir).map_err(ServeError::DataDir)?;
    crate::backup::check_format(&cfg.data_dir).map_err(ServeError::DataDir)?;
    let stop_peers = CancellationToken::new();
    // However `serve` ends (an error included), the peer port's loop on
    // this runtime ends with it.
    let _stop_peers_on_return = stop_peers.clone().drop_guard();
    let (peer_tx, peer_rx) = mpsc::channel::<transport::PeerEvent>(PEER_INBOX_MAX);
    // The core's own runtime: it also runs the peer links, so a frame from
    // a peer reaches the core, and one to a peer leaves it, without waking
    // another thread.
    let core_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let op_metrics = crate::opmetrics::OpMetrics::new();
    // The peer port's accept loop and handshakes run here, off the core's
    // thread; the links' frames are read on the core's runtime.
    tokio::spawn(transport::listen(
        peer_listener,
        peer_tx,
        stop_peers.clone(),
        transport::PeerLinks::of(cfg.tls.as_ref()),
        op_metrics.clone(),
        core_rt.handle().clone(),
    ));

    // Opened here, on the server's runtime: the links' TLS handshakes run
    // on it, off the core's thread.
    let net = transport::Transport::for_server(&cfg, core_rt.handle().clone(), op_metrics.clone());
    let core = match Core::open(
        cfg.clone(),
        client,
        Box::new(net),
        op_metrics.clone(),
        crate::core::CoreInputs::os(&cfg),
    ) {
        Ok(core) => core,
        Err(e) => {
            // Dropped here, inside the server's runtime, it would block.
            core_rt.shutdown_background();
            return Err(e.into());
        }
    };
    let (core_tx, core_rx) = mpsc::channel::<CoreMsg>(CORE_QUEUE_MAX);
    let (state_tx, mut state_rx) = watch::channel(CoreState::Starting);
    let (stop_tx, stop_rx) = oneshot::channel();
    let core_thread = std::thread::Builder::new()
        .name("warden-core".into())
        .spawn(move || {
            core_rt.block_on(crate::core::driver::run(
                core, core_rx, peer_rx, state_tx, stop_rx,
            ))
        })
        .expect("spawning the core thread");

    // Wait for the core to be ready before taking clients (a shutdown
    // signal meanwhile is honoured: a node of a group without a quorum may
    // wait a long time).
    tokio::pin!(shutdown);
    let mut stopping = false;
    loop {
        match *state_rx.borrow_and_update() {
            CoreState::Ready => break,
            CoreState::Stopped => return Err(ServeError::CoreStopped),
            CoreState::Starting => {}
        }
        tokio::select! {
            _ = &mut shutdown => {
                info!("shutting down before ready");
                stopping = true;
                break;
            }
            changed = state_rx.changed() => {
                if changed.is_err() {
                    return Err(ServeError::CoreStopped);
                }
            }
        }
    }

    if !stopping {
        on_ready(Bound {
            client,
            zk: zk_addr,
            http: http_addr,
            grpc: grpc_addr,
            peer: peer_addr,
        });
    }

    // Connection ids, shared by both doors so they never collide.
    let next_conn = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    // Connections per client IP are counted across both doors.
    let limiter = crate::limits::Limiter::new(cfg.limits, op_metrics.clone());
    if let (false, Some(l)) = (stopping, zk_listener) {
        tokio::spawn(crate::zk::listen(
            l,
            core_tx.clone(),
            stop_peers.clone(),
            next_conn.clone(),
            cfg.tls.as_ref().map(|t| t.clients.clone()),
            limiter.clone(),
            crate::zk::Access {
                sasl_users: cfg.zk_sasl.clone(),
                authority: crate::authority::Authority::new(
                    &cfg.auth,
                    cfg.four_letter_whitelist.clone(),
                    &op_metrics,
                ),
            },
        ));
    }
    if !stopping {
        // The lock API's state, shared by the HTTP and gRPC doors.
        let lock_api = crate::http::lock_api(
            core_tx.clone(),
            client,
            stop_peers.clone(),
            &op_metrics,
            cfg.tls.as_ref(),
            crate::http::GatewayAuth {
                tokens: cfg.http_tokens.clone(),
                lock_acl: cfg.http_lock_acl.clone(),
                auth: cfg.auth.clone(),
                four_letter_whitelist: cfg.four_letter_whitelist.clone(),
                min_lock_ttl_ms: cfg.min_lock_ttl_ms,
            },
        );
        // Counted apart from the client doors (see http/limited.rs); the
        // HTTP and gRPC doors count together.
        let api_limiter = crate::limits::Limiter::new(cfg.limits, op_metrics.clone());
        if let Some(l) = grpc_listener {
            tokio::spawn(crate::grpc::serve(
                l,
                lock_api.clone(),
                stop_peers.clone(),
                cfg.tls.clone(),
                api_limiter.clone(),
            ));
        }
        tokio::spawn(crate::http::serve(
            http_listener,
            lock_api,
            stop_peers.clone(),
            cfg.tls.clone(),
            api_limiter,
        ));
        let mut accept_errors = crate::accept_errors::AcceptErrors::new("native");
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    info!("shutting down");
                    break;
                }
                changed = state_rx.changed() => {
                    if changed.is_err() || *state_rx.borrow() == CoreState::Stopped {
                        error!("core stopped; shutting down");
                        break;
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        accept_errors.accepted();
                        let conn = next_conn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let tls = cfg.tls.as_ref().map(|t| t.clients.clone());
                        tokio::spawn(conn::accept(stream, peer, conn, core_tx.clone(), tls, limiter.clone()));
                    }
                    Err(e) => {
                        // Paused before the next try, out of the select:
                        // a shutdown waits at most the pause.
                        accept_errors.failed(&e).await;
                    }
                }
            }
        }
    }
    let _ = stop_tx.send(());
    stop_peers.cancel();
    drop(core_tx);
    let joined = tokio::task::spawn_blocking(move || core_thread.join()).await;
    match joined {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(ServeError::Core(e)),
        _ => Err(ServeError::CoreStopped),
    }
}
