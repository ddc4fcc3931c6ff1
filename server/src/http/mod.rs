//! The HTTP door: the REST lock API (`/api/v1/locks/...`), `/health`,
//! `/status`, `/metrics`, backups (`/api/v1/snapshot`, [`snapshot`]), and ZooKeeper's AdminServer commands
//! (`/commands/...`, [`admin`]). The lock API answers in the fields of
//! both lock-service contracts it serves (see `contract.rs`).
//!
//! A thin adapter like the other doors. `/health` and `/status` ask the
//! core for its member view; the lock API is a *client* of this very
//! server (the `recipes` lease lock over a loopback connection), so it has
//! no lock semantics of its own: every rule lives in the recipe and the
//! pipeline behind it. This module must never touch the tree directly.

pub(crate) mod admin;
pub(crate) mod contract;
pub(crate) mod gateway;
mod health;
pub mod holder;
pub(crate) mod limited;
pub(crate) mod lock_list;
pub(crate) mod locks;
mod metrics;
mod process_metrics;
mod push;
mod snapshot;
pub(crate) mod tls;
pub(crate) mod watch;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::core::CoreMsg;

pub use locks::{GATEWAY_SESSIONS_MAX, TTL_MS_MAX, WAIT_TIMEOUT_MS_MAX};
pub use push::{PUSH_GRACE_MS_DEFAULT, PUSH_GRACE_MS_MAX};

/// Who HTTP lock callers are: bearer tokens standing for digest
/// identities, and the ACL of the nodes the lock API creates.
#[derive(Debug, Clone, Default)]
pub struct GatewayAuth {
    /// Token -> `user:password` (`--http-token`).
    pub tokens: Vec<(String, String)>,
    /// `--http-lock-acl`; empty: world:anyone.
    pub lock_acl: Vec<warden_protocol::pb::Acl>,
    /// `--super-digest` and `--auth-users`: whose passwords are checked,
    /// who the admin is, and whose credentials the gateway opens sessions
    /// for.
    pub auth: crate::auth::AuthConfig,
    /// `--4lw-whitelist`: the AdminServer commands open to anyone.
    pub four_letter_whitelist: crate::authority::Whitelist,
    /// `--min-lock-ttl-ms`.
    pub min_lock_ttl_ms: u64,
}

/// What every handler shares.
pub(crate) struct Http {
    core: mpsc::Sender<CoreMsg>,
    locks: gateway::Gateway,
    /// `--min-lock-ttl-ms`: the shortest lease TTL a request may ask for.
    pub(crate) ttl_ms_min: u64,
    metrics: metrics::Metrics,
    auth: crate::auth::AuthConfig,
    /// Who may take a backup or ask an AdminServer command.
    authority: crate::authority::Authority,
    /// Push waits and lock watches (`push.rs`, `watch.rs`, `ws.rs`).
    push: push::Waits,
    watch: watch::Hubs,
    /// The server's stop: ends the streams, which would hold up shutdown.
    stop: CancellationToken,
}

impl Http {
    /// Counts and times one request of `route` (the gRPC door's calls
    /// too, by their gRPC path).
    pub(crate) fn observe_request(&self, route: &str, code: u16, took: std::time::Duration) {
        self.metrics.observe_request(route, code, took);
    }

    /// Whether the caller at `from` with `headers`' credentials may do
    /// `action` ([`crate::authority`] decides): its credentials
    /// (`user:password`, `None` when anonymous) if so, else 401 (bad
    /// credentials, or none where the super user's are wanted) or 403.
    pub(crate) fn authorize(
        &self,
        action: crate::authority::Action,
        headers: &axum::http::HeaderMap,
        from: SocketAddr,
    ) -> Result<Option<String>, ApiError> {
        use axum::http::StatusCode;
        let credentials = self.locks.credentials(headers)?;
        let mut ids = crate::auth::connection_ids(from, None);
        if let Some(c) = &credentials {
            let given = self
                .auth
                .authenticate("digest", c.as_bytes())
                .map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e))?;
            ids.extend(given);
        }
        let caller = crate::authority::Caller {
            ids: &ids,
            addr: from.ip(),
        };
        match self
            .authority
            .check(action, crate::authority::Door::Http, &caller)
        {
            Ok(()) => Ok(credentials),
            Err(why) if why.wants_credentials() => {
                Err(ApiError::new(StatusCode::UNAUTHORIZED, why.to_string()))
            }
            Err(why) => Err(ApiError::new(StatusCode::FORBIDDEN, why.to_string())),
        }
    }
}

/// The address an HTTP or gRPC caller connects from (the TCP peer: a proxy
/// in front of the port is the caller as far as Warden can tell).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerAddr(pub(crate) SocketAddr);

impl<L>
    axum::extract::connect_info::Connected<
        axum::serve::IncomingStream<'_, limited::LimitedListener<L>>,
    > for CallerAddr
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, limited::LimitedListener<L>>) -> Self {
        CallerAddr(*stream.remote_addr())
    }
}

/// Largest HTTP request body.
pub const HTTP_BODY_BYTES_MAX: usize = 64 * 1024;

/// The lock API's state: the gateway, push waits, lock watches and
/// metrics, shared by the HTTP door and the gRPC door (`crate::grpc`).
/// `client` is this server's own native-protocol address, which the lock
/// gateway dials (with TLS when `tls` is on).
pub(crate) fn lock_api(
    core: mpsc::Sender<CoreMsg>,
    client: SocketAddr,
    stop: CancellationToken,
    op_metrics: &crate::opmetrics::OpMetrics,
    tls: Option<&crate::tls::Tls>,
    auth: GatewayAuth,
) -> Arc<Http> {
    let metrics = metrics::Metrics::new(op_metrics);
    let gateway = gateway::Gateway::new(
        client,
        tls.map(|t| t.gateway.clone()),
        (auth.tokens, auth.lock_acl, auth.auth.clone()),
        core.clone(),
        metrics.gateway_counters(),
    );
    Arc::new(Http {
        core,
        locks: gateway,
        ttl_ms_min: auth.min_lock_ttl_ms,
        metrics,
        authority: crate::authority::Authority::new(
            &auth.auth,
            auth.four_letter_whitelist,
            op_metrics,
        ),
        auth: auth.auth,
        push: push::Waits::default(),
        watch: watch::Hubs::default(),
        stop,
    })
}

/// Serves HTTP on `listener` until `stop` is cancelled, for the lock API
/// `state` (see [`lock_api`]). With `tls`, HTTPS only.
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<Http>,
    stop: CancellationToken,
    tls: Option<crate::tls::Tls>,
    limiter: crate::limits::Limiter,
) {
    let app = router(state).into_make_service_with_connect_info::<CallerAddr>();
    let stopped = stop.cancelled_owned();
    let served = match tls {
        None => {
            let listener = limited::LimitedListener::new(listener, limiter);
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
        }
        Some(tls) => {
            let listener = tls::TlsListener::new(listener, tls.clients);
            let listener = limited::LimitedListener::new(listener, limiter);
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
        }
    };
    if let Err(e) = served {
        warn!(error = %e, "the HTTP door stopped");
    }
}

fn router(state: Arc<Http>) -> Router {
    Router::new()
        .route("/health", get(health::health))
        .route("/status", get(health::status))
        .route("/metrics", get(metrics::metrics))
        .route("/commands", get(admin::list))
        .route("/commands/{name}", get(admin::command))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/snapshot", get(snapshot::snapshot))
        .route("/api/v1/locks", get(lock_list::list))
        .route("/api/v1/locks/acquire", post(locks::acquire_alt))
        .route("/api/v1/locks/renew", post(locks::renew_alt))
        .route("/api/v1/locks/release", post(locks::release_alt))
        .route("/api/v1/locks/{name}", get(locks::state))
        .route("/api/v1/locks/{name}/acquire", post(locks::acquire))
        .route("/api/v1/locks/{name}/renew", post(locks::renew))
        .route("/api/v1/locks/{name}/release", post(locks::release))
        .route(
            "/api/v1/locks/{name}/acquire/events",
            get(push::acquire_events),
        )
        .route("/api/v1/locks/{name}/watch", get(watch::watch_events))
        .route("/api/v1/locks/{name}/ws", get(ws::socket))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        // Lock API bodies are a few hundred bytes: a bigger one is refused
        // (413) before it is read whole.
        .layer(DefaultBodyLimit::max(HTTP_BODY_BYTES_MAX))
        .with_state(state)
}

/// Counts and times every request by route, and writes its source
/// address where the gateway's per-source bound reads it.
async fn observe(State(http): State<Arc<Http>>, mut req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<CallerAddr>>()
        .map(|c| c.0 .0);
    gateway::set_source(req.headers_mut(), peer);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let started = Instant::now();
    let response = next.run(req).await;
    http.metrics
        .observe_request(&route, response.status().as_u16(), started.elapsed());
    response
}

/// The OpenAPI document of the lock API, kept in the repo beside this file.
async fn openapi() -> impl IntoResponse {
    const DOC: &str = include_str!("openapi.json");
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        DOC,
    )
}

/// A refusal on its way to becoming a response (small, unlike
/// `Response`, so it travels cheaply through `Result`s).
pub(crate) struct ApiError {
    status: axum::http::StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: axum::http::StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn status(&self) -> axum::http::StatusCode {
        self.status
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.status, self.message)
    }
}

/// An error answer: a status and a JSON body `{"error": "..."}` (plus
/// whatever fields the caller adds).
pub(crate) fn error(status: axum::http::StatusCode, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": message.into() }))).into_response()
}
