//! The store's HTTP API (axum). Every answer is JSON.
//!
//! - `PUT` or `POST /v1/keys/{key}`: write. Body `{"value": ANY JSON,
//!   "fencing_token": N, "client_id": "..."}` (`client_id` optional).
//! - `POST /write`: write, seed 003's shape: `{"clientID": "...",
//!   "fencingToken": {"key": "...", "value": N}, "data": "..."}`.
//! - `GET /v1/keys/{key}`: `{"key", "value", "fencing_token", "client_id"}`,
//!   404 if never written.
//! - `GET /health`: `{"status": "ok"}`.
//!
//! Both write routes take either shape ([`parse_write`]): `value` or
//! `data`, `fencing_token` or `fencingToken`, `client_id` or `clientID`;
//! the key from the path, `fencingToken.key` or `key`, which must agree
//! when more than one is given. A write answers 200 `{"success": true,
//! "key", "fencing_token"}`; a stale token 409 `{"success": false,
//! "error", "key", "fencing_token" (offered), "highest_fencing_token"}`;
//! bad input 400 `{"success": false, "error"}` naming what is wrong.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use crate::store::{check_key, Record, Store, StoreError};

/// Largest request body: a value plus a few fields.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

/// The routes, over `store`.
pub fn router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/health", get(health).fallback(method_not_allowed))
        .route("/write", post(write_seed).fallback(method_not_allowed))
        .route(
            "/v1/keys/{key}",
            get(read_key)
                .put(write_key)
                .post(write_key)
                .fallback(method_not_allowed),
        )
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(store)
}

/// A write, checked: what the store needs.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteRequest {
    pub key: String,
    pub value: Value,
    pub fencing_token: u64,
    pub client_id: Option<String>,
}

/// Parses a write body of either shape (see the module docs); `path_key`
/// is the key named by the URL, if any. The error names what is wrong.
pub fn parse_write(path_key: Option<&str>, body: &[u8]) -> Result<WriteRequest, String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?;
    let Value::Object(body) = body else {
        return Err(format!(
            "the body must be a JSON object, not {}",
            kind(&body)
        ));
    };
    let (token, token_key) = token(&body)?;
    let mut keys: Vec<(&str, String)> = Vec::new();
    if let Some(k) = path_key {
        keys.push(("the URL", k.to_string()));
    }
    if let Some(k) = token_key {
        keys.push(("fencingToken.key", k));
    }
    if let Some(k) = optional_str(&body, "key")? {
        keys.push(("key", k));
    }
    let Some((_, key)) = keys.first().cloned() else {
        return Err(
            "no key: name it in the URL (/v1/keys/KEY), in fencingToken.key or in \"key\"".into(),
        );
    };
    if let Some((from, other)) = keys.iter().find(|(_, k)| *k != key) {
        return Err(format!(
            "two different keys: {key:?} from {} and {other:?} from {from}",
            keys[0].0
        ));
    }
    check_key(&key).map_err(|e| e.to_string())?;
    let value = match (body.get("value"), body.get("data")) {
        (Some(_), Some(_)) => {
            return Err("both \"value\" and \"data\" given: give the value once".into())
        }
        (Some(v), None) | (None, Some(v)) => v.clone(),
        (None, None) => {
            return Err(
                "missing the value: give \"value\" (any JSON) or \"data\" (seed 003's name)".into(),
            )
        }
    };
    let client_id = match (
        optional_str(&body, "client_id")?,
        optional_str(&body, "clientID")?,
    ) {
        (Some(_), Some(_)) => {
            return Err("both \"client_id\" and \"clientID\" given: give it once".into())
        }
        (a, b) => a.or(b),
    };
    Ok(WriteRequest {
        key,
        value,
        fencing_token: token,
        client_id,
    })
}

/// The token, and the key `fencingToken` names if given that way.
fn token(body: &Map<String, Value>) -> Result<(u64, Option<String>), String> {
    match (body.get("fencing_token"), body.get("fencingToken")) {
        (Some(_), Some(_)) => {
            Err("both \"fencing_token\" and \"fencingToken\" given: give the token once".into())
        }
        (Some(t), None) => Ok((token_number("fencing_token", t)?, None)),
        (None, Some(Value::Object(t))) => {
            let value = t.get("value").ok_or(
                "fencingToken has no \"value\": seed 003's token is {\"key\": KEY, \"value\": N}",
            )?;
            let token = token_number("fencingToken.value", value)?;
            let key = match t.get("key") {
                None => None,
                Some(Value::String(k)) => Some(k.clone()),
                Some(other) => {
                    return Err(format!(
                        "fencingToken.key must be a string, not {}",
                        kind(other)
                    ))
                }
            };
            Ok((token, key))
        }
        (None, Some(other)) => Err(format!(
            "fencingToken must be an object {{\"key\": KEY, \"value\": N}}, not {}",
            kind(other)
        )),
        (None, None) => Err(
            "missing the fencing token: give \"fencing_token\": N (or seed 003's \"fencingToken\": {\"key\": KEY, \"value\": N})"
                .into(),
        ),
    }
}

fn token_number(name: &str, v: &Value) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{name} must be an integer from 0 to {}, not {v}", u64::MAX))
}

fn optional_str(body: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{name} must be a string, not {}", kind(other))),
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn write_seed(
    State(store): State<Arc<Store>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    write(store, None, body).await
}

async fn write_key(
    State(store): State<Arc<Store>>,
    key: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match key {
        Ok(Path(key)) => write(store, Some(key), body).await,
        Err(e) => bad_request(format!("bad key in the URL: {e}")),
    }
}

async fn write(
    store: Arc<Store>,
    key: Option<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(e) => return failure(e.status(), format!("the body could not be read: {e}")),
    };
    let req = match parse_write(key.as_deref(), &body) {
        Ok(req) => req,
        Err(why) => return bad_request(why),
    };
    let (key, token) = (req.key.clone(), req.fencing_token);
    let written = tokio::task::spawn_blocking(move || {
        store.write(&req.key, req.value, req.fencing_token, req.client_id)
    })
    .await
    .expect("the write task does not panic");
    match written {
        Ok(_) => {
            debug!(key, token, "write accepted");
            (
                StatusCode::OK,
                Json(json!({"success": true, "key": key, "fencing_token": token})),
            )
                .into_response()
        }
        Err(StoreError::Stale(stale)) => {
            info!(
                key,
                offered = stale.offered,
                highest = stale.highest,
                "stale write refused"
            );
            (
                StatusCode::CONFLICT,
                Json(json!({
                    "success": false,
                    "error": stale.to_string(),
                    "key": stale.key,
                    "fencing_token": stale.offered,
                    "highest_fencing_token": stale.highest,
                })),
            )
                .into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn read_key(
    State(store): State<Arc<Store>>,
    key: Result<Path<String>, PathRejection>,
) -> Response {
    let key = match key {
        Ok(Path(key)) => key,
        Err(e) => return bad_request(format!("bad key in the URL: {e}")),
    };
    let read = {
        let key = key.clone();
        tokio::task::spawn_blocking(move || store.read(&key))
            .await
            .expect("the read task does not panic")
    };
    match read {
        Ok(Some(Record {
            value,
            fencing_token,
            client_id,
        })) => Json(json!({
            "key": key,
            "value": value,
            "fencing_token": fencing_token,
            "client_id": client_id,
        }))
        .into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("key {key:?} was never written"), "key": key})),
        )
            .into_response(),
        Err(e) => store_error(e),
    }
}

async fn unknown_route(uri: Uri) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        format!(
            "no route {}: the routes are GET|PUT|POST /v1/keys/{{key}}, POST /write, GET /health",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let allowed = match uri.path() {
        "/health" => "GET",
        "/write" => "POST",
        _ => "GET, PUT or POST",
    };
    failure(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}: {allowed}", uri.path()),
    )
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::BadKey(_) => bad_request(e.to_string()),
        e => {
            warn!(error = %e, "storage failed");
            failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

fn bad_request(message: String) -> Response {
    failure(StatusCode::BAD_REQUEST, message)
}

fn failure(status: StatusCode, message: String) -> Response {
    (status, Json(json!({"success": false, "error": message}))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(key: Option<&str>, body: &str) -> Result<WriteRequest, String> {
        parse_write(key, body.as_bytes())
    }

    #[test]
    fn the_plain_shape() {
        let req = parse(Some("k"), r#"{"value": {"n": 1}, "fencing_token": 7}"#).unwrap();
        assert_eq!(
            req,
            WriteRequest {
                key: "k".into(),
                value: json!({"n": 1}),
                fencing_token: 7,
                client_id: None
            }
        );
    }

    #[test]
    fn seed_003s_shape() {
        let body =
            r#"{"clientID": "client1", "fencingToken": {"key": "l1", "value": 33}, "data": "hi"}"#;
        let req = parse(None, body).unwrap();
        assert_eq!(
            req,
            WriteRequest {
                key: "l1".into(),
                value: json!("hi"),
                fencing_token: 33,
                client_id: Some("client1".into())
            }
        );
        // The same body on the key's URL.
        assert_eq!(parse(Some("l1"), body).unwrap(), req);
    }

    #[test]
    fn bad_bodies_are_named() {
        let cases = [
            (Some("k"), "not json", "not valid JSON"),
            (Some("k"), "[1]", "must be a JSON object, not an array"),
            (Some("k"), r#"{"value": 1}"#, "missing the fencing token"),
            (
                Some("k"),
                r#"{"value": 1, "fencing_token": -1}"#,
                "fencing_token must be an integer",
            ),
            (
                Some("k"),
                r#"{"value": 1, "fencing_token": "7"}"#,
                "fencing_token must be an integer",
            ),
            (
                Some("k"),
                r#"{"value": 1, "fencing_token": 1.5}"#,
                "fencing_token must be an integer",
            ),
            (Some("k"), r#"{"fencing_token": 1}"#, "missing the value"),
            (
                Some("k"),
                r#"{"value": 1, "data": 2, "fencing_token": 1}"#,
                "both \"value\" and \"data\"",
            ),
            (None, r#"{"value": 1, "fencing_token": 1}"#, "no key"),
            (
                Some("a"),
                r#"{"data": 1, "fencingToken": {"key": "b", "value": 1}}"#,
                "two different keys: \"a\" from the URL and \"b\" from fencingToken.key",
            ),
            (
                None,
                r#"{"data": 1, "fencingToken": 5}"#,
                "fencingToken must be an object",
            ),
            (
                None,
                r#"{"data": 1, "fencingToken": {"key": "b"}}"#,
                "fencingToken has no \"value\"",
            ),
            (
                None,
                r#"{"data": 1, "fencingToken": {"key": "", "value": 1}}"#,
                "the key is empty",
            ),
            (
                Some("k"),
                r#"{"value": 1, "fencing_token": 1, "client_id": 5}"#,
                "client_id must be a string",
            ),
        ];
        for (key, body, expected) in cases {
            let e = parse(key, body).unwrap_err();
            assert!(
                e.contains(expected),
                "{body}: {e:?} does not say {expected:?}"
            );
        }
    }
}
