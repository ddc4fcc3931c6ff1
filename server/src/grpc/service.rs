//! `LockService`: each call checks its fields with the HTTP door's checks,
//! runs the HTTP door's lock operation on the caller's gateway session
//! (the caller's `authorization` metadata is its Authorization header:
//! `Bearer TOKEN` or `Basic base64(user:password)`), and answers in
//! `lock.proto`'s messages; a refusal becomes a status by [`status`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderMap;
use futures::{Stream, StreamExt as _};
use serde_json::Value;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status};
use warden_protocol::lock as pb;
use warden_recipes::Lease;

use crate::http::contract::rfc3339;
use crate::http::locks::{
    acquire_lease, check_client_id, check_name, check_ttl_ms, check_wait_ms, lock_state,
    release_lease, renew_lease, Acquired,
};
use crate::http::{lock_list, watch, ApiError, Http};
use crate::lockstats::{Contender, LockInfo};

/// The gRPC status of an HTTP status, the one table both doors' errors
/// go through (docs/grpc.md lists it).
pub fn code(http_status: u16) -> Code {
    match http_status {
        400 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        // A token that does not hold the lock: the caller's state is not
        // what the call needs.
        409 => Code::FailedPrecondition,
        413 | 429 => Code::ResourceExhausted,
        503 => Code::Unavailable,
        500 => Code::Internal,
        _ => Code::Unknown,
    }
}

/// The HTTP status a gRPC status stands for (the inverse of [`code`];
/// not granted, `ABORTED`, is the acquire's 409).
fn http_status(code: Code) -> u16 {
    match code {
        Code::InvalidArgument => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::FailedPrecondition | Code::Aborted => 409,
        Code::ResourceExhausted => 429,
        Code::Unavailable => 503,
        _ => 500,
    }
}

/// A refusal of the lock API as a gRPC status, same message.
pub(crate) fn status(e: ApiError) -> Status {
    Status::new(code(e.status().as_u16()), e.message())
}

/// The checked lock name; a bad one is INVALID_ARGUMENT naming the field.
fn lock_key(name: &str) -> Result<&str, Status> {
    check_name(name)
        .map(|()| name)
        .map_err(|e| Status::invalid_argument(format!("lock_key: {}", e.message())))
}

fn client_id(id: &str) -> Result<&str, Status> {
    check_client_id(id).map(|()| id).map_err(status)
}

/// The caller's credentials travel as the `authorization` metadata,
/// which is the HTTP/2 header the gateway reads.
fn headers<T>(request: &Request<T>) -> HeaderMap {
    let mut headers = request.metadata().clone().into_headers();
    crate::http::gateway::set_source(&mut headers, request.remote_addr());
    headers
}

/// The caller's own lease: with the `client_id` it sent.
fn lease(name: &str, lease: &Lease) -> pb::Lease {
    pb::Lease {
        lock_key: name.to_string(),
        client_id: lease.client_id.clone(),
        fencing_token: lease.fencing_token,
        expires_at_ms: lease.expires_at_ms,
        expires_at: rfc3339(lease.expires_at_ms),
        label: String::new(),
    }
}

/// A lease as others see it (Get): its label, never its client id.
fn held(name: &str, lease: &Lease) -> pb::Lease {
    pb::Lease {
        lock_key: name.to_string(),
        client_id: String::new(),
        fencing_token: lease.fencing_token,
        expires_at_ms: lease.expires_at_ms,
        expires_at: rfc3339(lease.expires_at_ms),
        label: crate::http::holder::label(&lease.client_id),
    }
}

/// The service, on the lock API's state.
pub(crate) struct Locks {
    api: Arc<Http>,
}

impl Locks {
    pub(crate) fn new(api: Arc<Http>) -> Self {
        Locks { api }
    }

    /// Runs a call, counting and timing it as the HTTP door counts its
    /// requests (`warden_http_requests_total`,
    /// `warden_http_request_duration_seconds`): the route is the call's
    /// gRPC path, the code the HTTP status its answer stands for. A call
    /// dropped midway (its client hung up or its deadline passed) is not
    /// counted.
    async fn observed<T>(
        &self,
        method: &str,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let started = Instant::now();
        let answer = call.await;
        let code = match &answer {
            Ok(_) => 200,
            Err(s) => http_status(s.code()),
        };
        let route = format!("/warden.lock.v1.LockService/{method}");
        self.api.observe_request(&route, code, started.elapsed());
        answer
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<pb::HolderEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::lock_service_server::LockService for Locks {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        self.observed("Acquire", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            let name = lock_key(&r.lock_key)?;
            let client_id = client_id(&r.client_id)?;
            let ttl = check_ttl_ms("ttl_ms", r.ttl_ms, self.api.ttl_ms_min).map_err(status)?;
            let wait = check_wait_ms(r.wait_timeout_ms).map_err(status)?;
            match acquire_lease(&self.api, &headers, name, client_id, ttl, wait)
                .await
                .map_err(status)?
            {
                Acquired::Granted(l) => Ok(Response::new(pb::AcquireResponse {
                    acquired: true,
                    lease: Some(lease(name, &l)),
                })),
                Acquired::NotGranted(holder) => {
                    let mut refused = Status::aborted(format!(
                        "{name} is held; not granted within {} ms",
                        wait.as_millis()
                    ));
                    if let Some(h) = holder {
                        let m = refused.metadata_mut();
                        let label = crate::http::holder::label(&h.client_id);
                        if let Ok(v) = MetadataValue::try_from(label.as_str()) {
                            m.insert("warden-holder-label", v);
                        }
                        m.insert("warden-holder-fencing-token", h.fencing_token.into());
                        m.insert("warden-holder-expires-at-ms", h.expires_at_ms.into());
                    }
                    Err(refused)
                }
            }
        })
        .await
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.observed("Renew", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            let name = lock_key(&r.lock_key)?;
            let client_id = client_id(&r.client_id)?;
            let ttl = check_ttl_ms("ttl_ms", r.ttl_ms, self.api.ttl_ms_min).map_err(status)?;
            let stale = axum::http::StatusCode::CONFLICT;
            let l = renew_lease(
                &self.api,
                &headers,
                (name, client_id, r.fencing_token),
                ttl,
                stale,
            )
            .await
            .map_err(status)?;
            Ok(Response::new(pb::RenewResponse {
                renewed: true,
                lease: Some(lease(name, &l)),
            }))
        })
        .await
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.observed("Release", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            let name = lock_key(&r.lock_key)?;
            let client_id = client_id(&r.client_id)?;
            release_lease(&self.api, &headers, name, client_id, r.fencing_token)
                .await
                .map_err(status)?;
            Ok(Response::new(pb::ReleaseResponse {
                released: true,
                lock_key: name.to_string(),
                client_id: client_id.to_string(),
                fencing_token: r.fencing_token,
            }))
        })
        .await
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        self.observed("Get", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            let name = lock_key(&r.lock_key)?;
            match lock_state(&self.api, &headers, name)
                .await
                .map_err(status)?
            {
                Some((holder, waiters)) => Ok(Response::new(pb::GetResponse {
                    holder: Some(held(name, &holder)),
                    waiters: waiters as u64,
                })),
                None => Err(Status::not_found(format!("{name} is free"))),
            }
        })
        .await
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        self.observed("List", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            // The HTTP listing's query parameters, checked by it.
            let mut query = HashMap::new();
            if r.limit != 0 {
                query.insert("limit".to_string(), r.limit.to_string());
            }
            if !r.after.is_empty() {
                query.insert("after".to_string(), r.after);
            }
            if !r.kind.is_empty() {
                query.insert("kind".to_string(), r.kind);
            }
            if r.list_waiters {
                query.insert("waiters".to_string(), "list".to_string());
            }
            if r.local {
                query.insert("consistency".to_string(), "local".to_string());
            }
            let (page, linearizable) = lock_list::page(&self.api, &query, &headers)
                .await
                .map_err(status)?;
            Ok(Response::new(pb::ListResponse {
                locks: page.locks.iter().map(listed).collect(),
                next: page.next.unwrap_or_default(),
                applied_index: page.applied_index,
                consistency: if linearizable {
                    "linearizable"
                } else {
                    "local"
                }
                .to_string(),
            }))
        })
        .await
    }

    type WatchStream = Events;

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Events>, Status> {
        self.observed("Watch", async move {
            let headers = headers(&request);
            let r = request.into_inner();
            let name = lock_key(&r.lock_key)?;
            let events = watch::holder_events(&self.api, &headers, name, r.from_version)
                .await
                .map_err(status)?;
            let events: Events = Box::pin(events.map(|m| holder_event(&m)));
            Ok(Response::new(events))
        })
        .await
    }
}

fn contender(c: &Contender) -> pb::Contender {
    pb::Contender {
        node: c.node.clone(),
        sequence: c.sequence,
        fencing_token: c.fencing_token,
        session_id: c.session_id.clone().unwrap_or_default(),
        client_id: c.client_id.clone().unwrap_or_default(),
        label: c.label.clone().unwrap_or_default(),
        created_at_ms: c.created_at_ms,
        granted_at_ms: c.granted_at_ms.unwrap_or_default(),
        expires_at_ms: c.expires_at_ms.unwrap_or_default(),
    }
}

fn listed(l: &LockInfo) -> pb::ListedLock {
    pb::ListedLock {
        path: l.path.clone(),
        name: l.name.clone(),
        kind: l.kind.to_string(),
        holder: Some(contender(&l.holder)),
        waiters: l.waiters as u64,
        waiting: l.waiting.iter().flatten().map(contender).collect(),
    }
}

/// A message of the watch stream (`http::watch::holder_event`, or an
/// `error` message, which ends the stream with its status).
fn holder_event(m: &Value) -> Result<pb::HolderEvent, Status> {
    if m["type"] == "error" {
        let http_status = m["status"].as_u64().unwrap_or(500) as u16;
        let message = m["error"].as_str().unwrap_or("the watch ended");
        return Err(Status::new(code(http_status), message));
    }
    let text = |field: &str| m[field].as_str().unwrap_or_default().to_string();
    let held = m["held"].as_bool().unwrap_or(false);
    Ok(pb::HolderEvent {
        kind: text("kind"),
        lock_key: text("lock_key"),
        version: m["version"].as_u64().unwrap_or_default(),
        held,
        holder: held.then(|| pb::Lease {
            lock_key: text("lock_key"),
            client_id: String::new(),
            label: text("label"),
            fencing_token: m["fencing_token"].as_u64().unwrap_or_default(),
            expires_at_ms: m["expires_at_ms"].as_i64().unwrap_or_default(),
            expires_at: text("expires_at"),
        }),
        waiters: m["waiters"].as_u64().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use warden_recipes::LeaseView;

    use super::*;

    #[test]
    fn holder_events_carry_every_field() {
        let view = LeaseView {
            holder: Some(Lease {
                name: "jobs".into(),
                client_id: "w1".into(),
                fencing_token: 7,
                expires_at_ms: 1_774_834_810_234,
            }),
            waiters: 2,
            version: 99,
        };
        let e = holder_event(&watch::holder_event("jobs", &view, "change")).unwrap();
        assert_eq!((e.kind.as_str(), e.lock_key.as_str()), ("change", "jobs"));
        assert_eq!((e.version, e.held, e.waiters), (99, true, 2));
        let h = e.holder.unwrap();
        // Another's lease: its label, never its client id.
        assert_eq!(h.client_id, "");
        assert_eq!(h.label, crate::http::holder::label("w1"));
        assert_eq!(h.fencing_token, 7);
        assert_eq!(h.expires_at_ms, 1_774_834_810_234);
        assert_eq!(h.expires_at, "2026-03-30T01:40:10.234Z");
        let free = LeaseView {
            holder: None,
            waiters: 0,
            version: 100,
        };
        let e = holder_event(&watch::holder_event("jobs", &free, "change")).unwrap();
        assert!(!e.held && e.holder.is_none());
        let ended =
            serde_json::json!({"type": "error", "status": 503, "error": "the watch ended: gone"});
        let s = holder_event(&ended).unwrap_err();
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.message(), "the watch ended: gone");
    }

    #[test]
    fn statuses() {
        for (http, grpc) in [
            (400, Code::InvalidArgument),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::NotFound),
            (409, Code::FailedPrecondition),
            (429, Code::ResourceExhausted),
            (503, Code::Unavailable),
            (500, Code::Internal),
        ] {
            assert_eq!(code(http), grpc, "{http}");
            assert_eq!(http_status(grpc), http, "{grpc:?}");
        }
    }
}
