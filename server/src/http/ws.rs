//! The lock API's WebSocket: `GET /api/v1/locks/{name}/ws`, one lock per
//! socket, JSON text messages both ways.
//!
//! The client sends `{"op": ...}` messages:
//! - `acquire` (`client_id`, `ttl_ms`, optional `grace_ms`): a push wait
//!   (`push.rs`); the server answers `queued`, then `granted` (the
//!   acquire's answer, fencing token and all) or `error`;
//! - `cancel`: gives the wait up now (`cancelled`);
//! - `renew` (`fencing_token`, `ttl_ms`) and `release` (`fencing_token`),
//!   with the acquire's `client_id` unless they name one: `renewed` /
//!   `released`, the answers of the path form's POSTs;
//! - `watch` (optional `from_version`): the lock's holder events
//!   (`watch.rs`), `holder` messages.
//!
//! A message the server cannot act on gets an `error` message (`status`,
//! `error`) and the socket stays open. Closing the socket detaches its
//! wait (which then lives for its grace period) and its watch.

use std::sync::Arc;

use super::holder::HolderLock;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt as _, Stream, StreamExt as _};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::contract::{self, Contract};
use super::locks::{bad, check_client_id, check_name, check_ttl_ms, refusal};
use super::push::{error_message, field_u64, parse_ask, Attached, WaitKey};
use super::{ApiError, Http};

/// Messages queued for a slow client before the socket's readers wait.
const OUTGOING_MAX: usize = 64;

/// `GET /api/v1/locks/{name}/ws`: upgrades to the lock's WebSocket.
pub(crate) async fn socket(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = check_name(&name) {
        return e.into_response();
    }
    let upgrade = match upgrade {
        Ok(u) => u,
        Err(e) => {
            return ApiError::new(e.status(), format!("not a WebSocket upgrade: {e}"))
                .into_response()
        }
    };
    let (identity, lock) = match http.locks.session(&headers).await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    upgrade.on_upgrade(move |socket| serve(http, name, identity, lock, socket))
}

/// One socket: reads the client's messages, writes the answers and events
/// (from any task) in order.
async fn serve(
    http: Arc<Http>,
    name: String,
    identity: Option<String>,
    lock: HolderLock,
    socket: WebSocket,
) {
    let (mut sink, mut incoming) = socket.split();
    let (out, mut outgoing) = mpsc::channel::<Value>(OUTGOING_MAX);
    let stop = http.stop.clone();
    let mut conn = Conn {
        http,
        name,
        identity,
        lock,
        out,
        client_id: None,
        wait: None,
        watch: None,
    };
    let writer = async move {
        while let Some(message) = outgoing.recv().await {
            let text = Message::Text(message.to_string().into());
            if sink.send(text).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    };
    let reader = async move {
        while let Some(Ok(message)) = incoming.next().await {
            match message {
                Message::Text(text) => conn.handle(text.as_str()).await,
                Message::Binary(_) => {
                    conn.say(error_message(
                        400,
                        "binary messages are not understood: send JSON text",
                    ))
                    .await
                }
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => {}
            }
        }
        // `conn` drops here: its wait detaches, its watch ends.
    };
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
        _ = stop.cancelled() => {}
    }
}

/// A socket's state.
struct Conn {
    http: Arc<Http>,
    name: String,
    identity: Option<String>,
    lock: HolderLock,
    out: mpsc::Sender<Value>,
    /// The `client_id` of the socket's last acquire.
    client_id: Option<String>,
    /// The wait's key, the socket's attachment to it (dropped with the
    /// socket: the wait's grace starts then) and the task telling its
    /// messages.
    wait: Option<(WaitKey, Attached, JoinHandle<()>)>,
    watch: Option<JoinHandle<()>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The attachment drops with `self`: the wait's grace starts now.
        if let Some((_, _, task)) = &self.wait {
            task.abort();
        }
        if let Some(task) = &self.watch {
            task.abort();
        }
    }
}

impl Conn {
    async fn say(&self, message: Value) {
        let _ = self.out.send(message).await;
    }

    async fn handle(&mut self, text: &str) {
        let answer = match self.act(text).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return,
            Err(e) => error_message(e.status.as_u16(), &e.message),
        };
        self.say(answer).await;
    }

    /// Acts on one message; the direct answer, if any.
    async fn act(&mut self, text: &str) -> Result<Option<Value>, ApiError> {
        let body = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(bad("a message must be a JSON object")),
            Err(e) => return Err(bad(format!("malformed JSON: {e}"))),
        };
        let op = match body.get("op") {
            Some(Value::String(op)) => op.clone(),
            Some(_) => return Err(bad("op must be a string")),
            None => {
                return Err(bad(
                    "missing field op (acquire, cancel, renew, release, watch)",
                ))
            }
        };
        match op.as_str() {
            "acquire" => self.acquire(&body).map(|()| None),
            "cancel" => Ok(Some(self.cancel())),
            "renew" => self.renew(&body).await.map(Some),
            "release" => self.release(&body).await.map(Some),
            "watch" => self.watch(&body).map(|()| None),
            other => Err(bad(format!(
                "unknown op {other:?} (acquire, cancel, renew, release, watch)"
            ))),
        }
    }

    fn acquire(&mut self, body: &Map<String, Value>) -> Result<(), ApiError> {
        if self.wait.as_ref().is_some_and(|(_, _, t)| !t.is_finished()) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "an acquire is already waiting on this socket: cancel it first",
            ));
        }
        let client_id = match body.get("client_id") {
            None | Some(Value::String(_)) => body.get("client_id").and_then(Value::as_str),
            Some(_) => return Err(bad("client_id must be a string")),
        };
        let (client_id, ask) = parse_ask(
            client_id,
            field_u64(body, "ttl_ms")?,
            field_u64(body, "grace_ms")?,
            self.http.ttl_ms_min,
        )?;
        let key = WaitKey {
            identity: self.identity.clone(),
            name: self.name.clone(),
            client_id: client_id.clone(),
        };
        let attached = self
            .http
            .push
            .attach(&self.http, self.lock.clone(), key.clone(), ask)?;
        let task = forward(
            super::push::messages_of(key.clone(), &attached),
            self.out.clone(),
        );
        self.client_id = Some(client_id);
        self.wait = Some((key, attached, task));
        Ok(())
    }

    fn cancel(&mut self) -> Value {
        let had = match self.wait.take() {
            Some((key, attached, task)) => {
                task.abort();
                let had = self.http.push.cancel(&key);
                drop(attached);
                had
            }
            None => false,
        };
        json!({ "type": "cancelled", "lock_key": self.name, "had_wait": had })
    }

    /// The message's `client_id`, or the socket's acquire's.
    fn client_id(&self, body: &Map<String, Value>) -> Result<String, ApiError> {
        match body.get("client_id") {
            Some(Value::String(id)) => {
                check_client_id(id)?;
                Ok(id.clone())
            }
            Some(_) => Err(bad("client_id must be a string")),
            None => self
                .client_id
                .clone()
                .ok_or_else(|| bad("missing client_id (no acquire on this socket names one)")),
        }
    }

    async fn renew(&mut self, body: &Map<String, Value>) -> Result<Value, ApiError> {
        let client_id = self.client_id(body)?;
        let token =
            field_u64(body, "fencing_token")?.ok_or_else(|| bad("missing fencing_token"))?;
        let ttl_ms = field_u64(body, "ttl_ms")?.ok_or_else(|| bad("missing ttl_ms"))?;
        let ttl = check_ttl_ms("ttl_ms", ttl_ms, self.http.ttl_ms_min)?;
        match self.lock.renew(&self.name, &client_id, token, ttl).await {
            Ok(lease) => Ok(typed(
                "renewed",
                contract::renewed(Contract::Path, &self.name, &lease),
            )),
            Err(e) => {
                self.http.locks.after_error(&e).await;
                Err(refusal(&e, StatusCode::CONFLICT))
            }
        }
    }

    async fn release(&mut self, body: &Map<String, Value>) -> Result<Value, ApiError> {
        let client_id = self.client_id(body)?;
        let token =
            field_u64(body, "fencing_token")?.ok_or_else(|| bad("missing fencing_token"))?;
        match self.lock.release(&self.name, &client_id, token).await {
            Ok(()) => Ok(typed(
                "released",
                contract::released(&self.name, &client_id, token),
            )),
            Err(e) => {
                self.http.locks.after_error(&e).await;
                Err(refusal(&e, StatusCode::CONFLICT))
            }
        }
    }

    fn watch(&mut self, body: &Map<String, Value>) -> Result<(), ApiError> {
        if self.watch.as_ref().is_some_and(|t| !t.is_finished()) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "this socket already watches the lock",
            ));
        }
        let from_version = field_u64(body, "from_version")?;
        let events = self.http.watch.subscribe(
            &self.http,
            self.identity.clone(),
            self.lock.clone(),
            &self.name,
            from_version,
        )?;
        self.watch = Some(forward(events, self.out.clone()));
        Ok(())
    }
}

/// `answer` with `"type": kind` added.
fn typed(kind: &str, mut answer: Value) -> Value {
    if let Value::Object(m) = &mut answer {
        m.insert("type".into(), json!(kind));
    }
    answer
}

/// Sends `messages` to the socket from a task of their own.
fn forward(
    messages: impl Stream<Item = Value> + Send + 'static,
    out: mpsc::Sender<Value>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        futures::pin_mut!(messages);
        while let Some(message) = messages.next().await {
            if out.send(message).await.is_err() {
                break;
            }
        }
    })
}
