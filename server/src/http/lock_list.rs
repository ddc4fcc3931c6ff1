//! `GET /api/v1/locks`: every lock this server recognises in its tree
//! (the HTTP door's leases, the recipes' locks, ZooKeeper clients' locks:
//! `crate::lockstats`), its holder and its waiters, a page at a time in
//! path order.
//!
//! Linearizable by default: the handler first does a linearizable read on
//! the caller's gateway session (ReadIndex), so the listing, read from the
//! core's tree after it, reflects every write acknowledged before the
//! request. `consistency=local` skips that round and answers from what
//! this server has applied (possibly stale on a follower). The answer says
//! which it was, and the index it was read at.
//!
//! A lock is listed when the caller's digest identity (from its
//! Authorization header; none for an anonymous caller) may READ its
//! directory node; a holder's `client_id` is shown when it may READ the
//! holder's node.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use tokio::sync::oneshot;

use super::{ApiError, Http};
use crate::core::CoreMsg;
use crate::lockstats::{Kind, LockPage, LockQuery, PAGE_LIMIT_MAX};

/// Locks per page unless `limit` says otherwise.
const PAGE_LIMIT_DEFAULT: usize = 100;
/// Longest `after` accepted (a znode path).
const AFTER_LEN_MAX: usize = 4096;

pub(crate) async fn list(
    State(http): State<Arc<Http>>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    match answer(&http, query, &headers).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// The listing's parameters, checked.
struct Params {
    query: LockQuery,
    linearizable: bool,
}

fn params(raw: &HashMap<String, String>) -> Result<Params, ApiError> {
    let mut query = LockQuery {
        limit: PAGE_LIMIT_DEFAULT,
        ..Default::default()
    };
    let mut linearizable = true;
    for (key, value) in raw {
        match key.as_str() {
            "limit" => {
                query.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "limit must be an integer from 1 to {PAGE_LIMIT_MAX}, not {value:?}"
                        ))
                    })?;
            }
            "after" => {
                if !value.starts_with('/') || value.len() > AFTER_LEN_MAX {
                    return Err(bad(format!(
                        "after must be a lock's path (the previous page's next), at most \
                         {AFTER_LEN_MAX} bytes, not {value:?}"
                    )));
                }
                query.after = Some(value.clone());
            }
            "kind" => {
                query.kind = Some(Kind::from_label(value).ok_or_else(|| {
                    let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.label()).collect();
                    bad(format!(
                        "kind must be one of {}, not {value:?}",
                        kinds.join(", ")
                    ))
                })?);
            }
            "waiters" => {
                query.waiters = match value.as_str() {
                    "count" => false,
                    "list" => true,
                    _ => return Err(bad(format!("waiters must be count or list, not {value:?}"))),
                };
            }
            "consistency" => {
                linearizable = match value.as_str() {
                    "linearizable" => true,
                    "local" => false,
                    _ => {
                        return Err(bad(format!(
                            "consistency must be linearizable or local, not {value:?}"
                        )))
                    }
                };
            }
            other => {
                return Err(bad(format!(
                    "unknown parameter {other:?} (limit, after, kind, waiters, consistency)"
                )))
            }
        }
    }
    Ok(Params {
        query,
        linearizable,
    })
}

async fn answer(
    http: &Http,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let Query(raw) = query.map_err(|e| bad(format!("malformed query string: {e}")))?;
    let (page, linearizable) = page(http, &raw, headers).await?;
    let mut body = serde_json::to_value(&page)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    body["consistency"] = Value::from(if linearizable {
        "linearizable"
    } else {
        "local"
    });
    Ok(Json(body).into_response())
}

/// One page of the listing for the caller of `headers`, by the query's
/// parameters (`raw`), and whether it was read linearizably: the HTTP
/// door's and the gRPC door's (`crate::grpc`) listing.
pub(crate) async fn page(
    http: &Http,
    raw: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(LockPage, bool), ApiError> {
    let Params {
        mut query,
        linearizable,
    } = params(raw)?;
    let credentials = http.locks.credentials(headers)?;
    if let Some(c) = &credentials {
        query.ids = http
            .auth
            .authenticate("digest", c.as_bytes())
            .map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e))?;
    }
    if linearizable {
        // On the caller's own gateway session: every write acknowledged
        // before this request is applied here once it answers.
        let lock = http.locks.get(headers).await?;
        lock.client().exists_linearizable("/").await.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no leader confirmed the listing's read (no quorum?): {e}"),
            )
        })?;
    }
    let (tx, rx) = oneshot::channel();
    let unavailable = || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    http.core
        .send(CoreMsg::Locks { query, reply: tx })
        .await
        .map_err(|_| unavailable())?;
    let page = rx.await.map_err(|_| unavailable())?;
    Ok((page, linearizable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Params, String> {
        let raw = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        params(&raw).map_err(|e| e.message)
    }

    #[test]
    fn parameters_are_checked_and_named() {
        let p = parse(&[]).unwrap();
        assert_eq!(p.query.limit, PAGE_LIMIT_DEFAULT);
        assert!(p.linearizable && !p.query.waiters && p.query.after.is_none());
        let p = parse(&[
            ("limit", "5"),
            ("after", "/a"),
            ("kind", "kazoo"),
            ("waiters", "list"),
            ("consistency", "local"),
        ])
        .unwrap();
        assert_eq!(p.query.limit, 5);
        assert_eq!(p.query.after.as_deref(), Some("/a"));
        assert_eq!(p.query.kind, Some(Kind::Kazoo));
        assert!(p.query.waiters && !p.linearizable);
        for (pairs, named) in [
            (vec![("limit", "0")], "limit"),
            (vec![("limit", "1001")], "limit"),
            (vec![("limit", "x")], "limit"),
            (vec![("after", "a")], "after"),
            (vec![("kind", "rwlock")], "kind"),
            (vec![("waiters", "all")], "waiters"),
            (vec![("consistency", "strong")], "consistency"),
            (vec![("page", "2")], "page"),
        ] {
            let e = parse(&pairs).err().expect("refused");
            assert!(e.contains(named), "{e}");
        }
    }
}
