//! The REST lock API: the recipes' lease lock behind JSON.
//!
//! Two body contracts reach the same three operations:
//! - `/api/v1/locks/{name}/acquire|renew|release` with `ttl_ms`,
//!   `wait_timeout_ms`; a stale token answers 409;
//! - `/api/v1/locks/acquire|renew|release` with the name in the body as
//!   `lock_key` and `lease_time_ms`, `block_time_ms`, `extend_time_ms`
//!   accepted for `ttl_ms`, `wait_timeout_ms` and the renewal's `ttl_ms`;
//!   a stale renew answers 403 (the lease lapsed, or another client took
//!   it).
//!
//! A renewal's TTL (`ttl_ms` / `extend_time_ms`) is the lease's TTL from
//! then on, whatever the acquire asked for. The answers, with the fields
//! of both contracts, are shaped in `contract.rs`.
//!
//! The calls run on the caller's gateway session (`gateway.rs`: one
//! loopback session per caller identity, so ACLs apply to HTTP callers as
//! to any client: a refusal is 403 naming the node, bad credentials 401),
//! through the caller's proof of holding (`holder.rs`: what proves a
//! holder, what others are shown of it). This module checks the JSON and
//! the bounds (`crate::limits`, and `--min-lock-ttl-ms`) and nothing else:
//! the lock's rules are the recipe's. In particular an acquire is
//! idempotent per `client_id` (and identity): one that already holds the
//! lock gets that grant back (200, the same fencing token, renewed with
//! the acquire's TTL), one that already waits takes up its place. So a
//! caller whose acquire timed out, lost its connection or got a 503
//! retries it with the same `client_id`, through any server, and never
//! ends up queued behind its own lease.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};
use warden_client::ErrorCode;
use warden_recipes::{Error as RecipeError, Lease};

use super::contract;
pub(crate) use super::contract::Contract;
use super::{error, ApiError, Http};

/// Where the HTTP door keeps its locks.
pub const LOCK_ROOT: &str = "/warden/http-locks";
pub use crate::limits::{
    GATEWAY_SESSIONS_MAX, LOCK_CLIENT_ID_LEN_MAX as CLIENT_ID_LEN_MAX,
    LOCK_NAME_LEN_MAX as NAME_LEN_MAX, LOCK_TTL_MS_MAX as TTL_MS_MAX,
    LOCK_WAIT_MS_MAX as WAIT_TIMEOUT_MS_MAX,
};

/// The server's detail of a client error, or its one-line form.
pub(crate) fn api_message(e: &warden_client::Error) -> String {
    match e {
        warden_client::Error::Api { message, .. } | warden_client::Error::Multi { message, .. }
            if !message.is_empty() =>
        {
            message.clone()
        }
        other => other.to_string(),
    }
}

/// A 400 answer naming the problem.
pub(crate) fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(e) => Err(bad(format!("malformed JSON: {e}"))),
    }
}

/// The first of `names` present in `body`.
fn find<'a>(body: &'a Map<String, Value>, names: &[&str]) -> Option<(&'a Value, String)> {
    names
        .iter()
        .find_map(|n| body.get(*n).map(|v| (v, n.to_string())))
}

fn required_u64(body: &Map<String, Value>, names: &[&str]) -> Result<u64, ApiError> {
    match find(body, names) {
        None => Err(bad(format!("missing field {}", names.join(" or ")))),
        Some((v, name)) => v
            .as_u64()
            .ok_or_else(|| bad(format!("{name} must be a non-negative integer"))),
    }
}

fn optional_u64(body: &Map<String, Value>, names: &[&str]) -> Result<Option<u64>, ApiError> {
    match find(body, names) {
        None | Some((Value::Null, _)) => Ok(None),
        Some(_) => required_u64(body, names).map(Some),
    }
}

fn required_str<'a>(body: &'a Map<String, Value>, name: &str) -> Result<&'a str, ApiError> {
    match body.get(name) {
        None => Err(bad(format!("missing field {name}"))),
        Some(v) => v
            .as_str()
            .ok_or_else(|| bad(format!("{name} must be a string"))),
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), ApiError> {
    let legal = !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal {
        Ok(())
    } else {
        Err(bad(format!(
            "illegal lock name {name:?}: 1 to {NAME_LEN_MAX} characters of [A-Za-z0-9._-], not \".\" or \"..\""
        )))
    }
}

fn client_id(body: &Map<String, Value>) -> Result<String, ApiError> {
    let id = required_str(body, "client_id")?;
    check_client_id(id)?;
    Ok(id.to_string())
}

pub(crate) fn check_client_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > CLIENT_ID_LEN_MAX || id.chars().any(char::is_control) {
        return Err(bad(format!(
            "client_id must be 1 to {CLIENT_ID_LEN_MAX} bytes without control characters"
        )));
    }
    Ok(())
}

fn ttl(body: &Map<String, Value>, names: &[&str], min_ms: u64) -> Result<Duration, ApiError> {
    let ms = required_u64(body, names)?;
    let name = find(body, names).map(|(_, n)| n).unwrap_or_default();
    check_ttl_ms(&name, ms, min_ms)
}

/// A TTL in bounds, `name` being the field it came in: at least `min_ms`
/// (`--min-lock-ttl-ms`), at most [`TTL_MS_MAX`].
pub(crate) fn check_ttl_ms(name: &str, ms: u64, min_ms: u64) -> Result<Duration, ApiError> {
    if ms < min_ms.max(1) || ms > TTL_MS_MAX {
        return Err(bad(format!(
            "{name} must be between {} and {TTL_MS_MAX} ms (the server's --min-lock-ttl-ms is \
             {min_ms}), not {ms}",
            min_ms.max(1)
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// The lock name: from the path, or from `lock_key` in the body.
fn lock_name(
    contract: Contract,
    path: Option<String>,
    body: &Map<String, Value>,
) -> Result<String, ApiError> {
    let name = match (contract, path) {
        (Contract::Path, Some(name)) => name,
        _ => required_str(body, "lock_key")?.to_string(),
    };
    check_name(&name)?;
    Ok(name)
}

/// An acquire's body, checked: (name, client id, ttl, wait). Pure, so the
/// fuzzer reaches it without a server (`crate::fuzzing`).
pub(crate) fn parse_acquire(
    contract: Contract,
    path: Option<String>,
    body: &[u8],
    ttl_ms_min: u64,
) -> Result<(String, String, Duration, Duration), ApiError> {
    let body = parse_body(body)?;
    let name = lock_name(contract, path, &body)?;
    let client_id = client_id(&body)?;
    let ttl = ttl(&body, &["ttl_ms", "lease_time_ms"], ttl_ms_min)?;
    let wait_ms = optional_u64(&body, &["wait_timeout_ms", "block_time_ms"])?.unwrap_or(0);
    Ok((name, client_id, ttl, check_wait_ms(wait_ms)?))
}

/// An acquire's wait in bounds.
pub(crate) fn check_wait_ms(ms: u64) -> Result<Duration, ApiError> {
    if ms > WAIT_TIMEOUT_MS_MAX {
        return Err(bad(format!(
            "wait_timeout_ms must be at most {WAIT_TIMEOUT_MS_MAX} ms, not {ms}"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// A renew's body, checked: (name, client id, fencing token, ttl).
pub(crate) fn parse_renew(
    contract: Contract,
    path: Option<String>,
    body: &[u8],
    ttl_ms_min: u64,
) -> Result<(String, String, u64, Duration), ApiError> {
    let body = parse_body(body)?;
    let name = lock_name(contract, path, &body)?;
    let client_id = client_id(&body)?;
    let token = required_u64(&body, &["fencing_token"])?;
    let ttl = ttl(
        &body,
        &["ttl_ms", "extend_time_ms", "lease_time_ms"],
        ttl_ms_min,
    )?;
    Ok((name, client_id, token, ttl))
}

/// A release's body, checked: (name, client id, fencing token).
pub(crate) fn parse_release(
    contract: Contract,
    path: Option<String>,
    body: &[u8],
) -> Result<(String, String, u64), ApiError> {
    let body = parse_body(body)?;
    let name = lock_name(contract, path, &body)?;
    let client_id = client_id(&body)?;
    let token = required_u64(&body, &["fencing_token"])?;
    Ok((name, client_id, token))
}

/// Maps a recipe failure to a refusal, dropping a lost session; `stale`
/// is the status for a token that does not hold the lock.
async fn recipe_error(http: &Http, e: RecipeError, stale: StatusCode) -> ApiError {
    http.locks.after_error(&e).await;
    refusal(&e, stale)
}

/// A recipe failure as a refusal (`recipe_error` without the session
/// clean-up); also the push doors' `error` events.
pub(crate) fn refusal(e: &RecipeError, stale: StatusCode) -> ApiError {
    match e {
        RecipeError::NotHolder(m) => ApiError::new(stale, m.clone()),
        RecipeError::BadArguments(m) => bad(m.clone()),
        RecipeError::Client(c) if c.is_retryable() || c.code() == ErrorCode::SessionExpired => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, c.to_string())
        }
        // The server's message, not just the code and path.
        RecipeError::Client(c) if c.code() == ErrorCode::BadArguments => {
            bad(format!("BadArguments: {}", api_message(c)))
        }
        // The message names the node and the permission refused.
        RecipeError::Client(c) if c.code() == ErrorCode::NoAuth => {
            ApiError::new(StatusCode::FORBIDDEN, format!("NoAuth: {}", api_message(c)))
        }
        RecipeError::Client(c) if c.code() == ErrorCode::AuthFailed => ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("AuthFailed: {}", api_message(c)),
        ),
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// What an acquire came to.
pub(crate) enum Acquired {
    Granted(Lease),
    /// Not granted within the wait; the holder as read after it, if the
    /// lock was still held.
    NotGranted(Option<Lease>),
}

// The lock operations, on the caller's gateway session, with checked
// arguments: what both doors run (the HTTP handlers below, and the gRPC
// door in `crate::grpc`), so neither has lock rules of its own.

/// Acquires `name` for `client_id` (see the module docs).
pub(crate) async fn acquire_lease(
    http: &Http,
    headers: &HeaderMap,
    name: &str,
    client_id: &str,
    ttl: Duration,
    wait: Duration,
) -> Result<Acquired, ApiError> {
    let lock = http.locks.get(headers).await?;
    let started = std::time::Instant::now();
    // An acquire that does not wait runs to its end even if the caller
    // goes away (its connection closed): dropped midway, the recipe deletes
    // its queue node, whose grant may already be committed, and a retry
    // after the lost answer (same client_id) would find no grant to take
    // up. A wait the caller gives up on (hangs up, a gRPC deadline) ends
    // with it, giving its place in line up.
    let task = {
        let (lock, name, client_id) = (lock.clone(), name.to_string(), client_id.to_string());
        tokio::spawn(async move { lock.acquire(&name, &client_id, ttl, wait).await })
    };
    let outcome = if wait.is_zero() {
        task.await
    } else {
        tokio_util::task::AbortOnDropHandle::new(task).await
    }
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    match outcome {
        Ok(Some(lease)) => {
            http.metrics
                .lock_granted(!wait.is_zero(), started.elapsed());
            Ok(Acquired::Granted(lease))
        }
        Ok(None) => {
            http.metrics.lock_refused();
            let holder = match lock.state(name).await {
                Ok(Some(s)) => Some(s.holder),
                _ => None,
            };
            Ok(Acquired::NotGranted(holder))
        }
        Err(e) => Err(recipe_error(http, e, StatusCode::CONFLICT).await),
    }
}

/// Renews `client_id`'s lease `token` on `name` with `ttl`; `stale` is the
/// status of a token that does not hold the lock.
pub(crate) async fn renew_lease(
    http: &Http,
    headers: &HeaderMap,
    (name, client_id, token): (&str, &str, u64),
    ttl: Duration,
    stale: StatusCode,
) -> Result<Lease, ApiError> {
    let lock = http.locks.get(headers).await?;
    match lock.renew(name, client_id, token, ttl).await {
        Ok(lease) => Ok(lease),
        Err(e) => Err(recipe_error(http, e, stale).await),
    }
}

/// Releases `client_id`'s lease `token` on `name`.
pub(crate) async fn release_lease(
    http: &Http,
    headers: &HeaderMap,
    name: &str,
    client_id: &str,
    token: u64,
) -> Result<(), ApiError> {
    let lock = http.locks.get(headers).await?;
    match lock.release(name, client_id, token).await {
        Ok(()) => Ok(()),
        Err(e) => Err(recipe_error(http, e, StatusCode::CONFLICT).await),
    }
}

/// `name`'s holder and waiter count, linearizable (`None`: free).
pub(crate) async fn lock_state(
    http: &Http,
    headers: &HeaderMap,
    name: &str,
) -> Result<Option<(Lease, usize)>, ApiError> {
    let lock = http.locks.get(headers).await?;
    match lock.state_synced(name).await {
        Ok(s) => Ok(s.map(|s| (s.holder, s.waiters))),
        Err(e) => Err(recipe_error(http, e, StatusCode::CONFLICT).await),
    }
}

async fn do_acquire(
    http: &Http,
    headers: &HeaderMap,
    contract: Contract,
    path: Option<String>,
    body: Bytes,
) -> Response {
    let (name, client_id, ttl, wait) = match parse_acquire(contract, path, &body, http.ttl_ms_min) {
        Ok(a) => a,
        Err(r) => return r.into_response(),
    };
    match acquire_lease(http, headers, &name, &client_id, ttl, wait).await {
        Ok(Acquired::Granted(lease)) => Json(contract::granted(&name, &lease)).into_response(),
        Ok(Acquired::NotGranted(holder)) => {
            let answer = contract::not_granted(&name, &client_id, holder.as_ref(), wait);
            (StatusCode::CONFLICT, Json(answer)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn do_renew(
    http: &Http,
    headers: &HeaderMap,
    contract: Contract,
    path: Option<String>,
    body: Bytes,
) -> Response {
    let (name, client_id, token, ttl) = match parse_renew(contract, path, &body, http.ttl_ms_min) {
        Ok(a) => a,
        Err(r) => return r.into_response(),
    };
    let stale = match contract {
        Contract::Path => StatusCode::CONFLICT,
        Contract::Body => StatusCode::FORBIDDEN,
    };
    match renew_lease(http, headers, (&name, &client_id, token), ttl, stale).await {
        Ok(lease) => Json(contract::renewed(contract, &name, &lease)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn do_release(
    http: &Http,
    headers: &HeaderMap,
    contract: Contract,
    path: Option<String>,
    body: Bytes,
) -> Response {
    let (name, client_id, token) = match parse_release(contract, path, &body) {
        Ok(a) => a,
        Err(r) => return r.into_response(),
    };
    match release_lease(http, headers, &name, &client_id, token).await {
        Ok(()) => Json(contract::released(&name, &client_id, token)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn acquire(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_acquire(&http, &headers, Contract::Path, Some(name), body).await
}

pub(crate) async fn renew(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_renew(&http, &headers, Contract::Path, Some(name), body).await
}

pub(crate) async fn release(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_release(&http, &headers, Contract::Path, Some(name), body).await
}

pub(crate) async fn acquire_alt(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_acquire(&http, &headers, Contract::Body, None, body).await
}

pub(crate) async fn renew_alt(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_renew(&http, &headers, Contract::Body, None, body).await
}

pub(crate) async fn release_alt(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    do_release(&http, &headers, Contract::Body, None, body).await
}

/// `GET /api/v1/locks/{name}`: the holder and the number of waiters, or
/// 404 when the lock is free. Linearizable: a `sync` before the read
/// (`LeaseLock::state_synced`), so the answer reflects every acquire,
/// renewal and release answered before the request, through any server.
pub(crate) async fn state(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = check_name(&name) {
        return r.into_response();
    }
    match lock_state(&http, &headers, &name).await {
        Ok(Some((holder, waiters))) => {
            Json(contract::state(&name, &holder, waiters)).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, format!("{name} is free")),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names() {
        for ok in ["a", "jobs.nightly", "A-Z_0-9", &"n".repeat(NAME_LEN_MAX)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "é",
            "a$",
            &"n".repeat(NAME_LEN_MAX + 1),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn alternative_field_names() {
        let body: Map<String, Value> = serde_json::from_str(
            r#"{"client_id": "c", "lease_time_ms": 1000, "block_time_ms": 5}"#,
        )
        .unwrap();
        assert_eq!(
            ttl(&body, &["ttl_ms", "lease_time_ms"], 1).ok(),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            optional_u64(&body, &["wait_timeout_ms", "block_time_ms"]).ok(),
            Some(Some(5))
        );
        assert!(ttl(&body, &["extend_time_ms"], 1).is_err());
        // Below the server's minimum: refused, naming the field and it.
        let e = ttl(&body, &["ttl_ms", "lease_time_ms"], 2000)
            .err()
            .unwrap();
        assert!(
            e.message().contains("lease_time_ms") && e.message().contains("2000"),
            "{}",
            e.message()
        );
    }
}
