//! Lock watches: a stream of a lock's holder changes (holder `client_id`,
//! fencing token, expiry), each with a version, resumable from a version
//! (`GET /api/v1/locks/{name}/watch` on Server-Sent Events, or a `watch`
//! message on the WebSocket of `ws.rs`).
//!
//! # Hubs
//!
//! The changes come from the recipe's [`LeaseWatch`] (a persistent
//! recursive watch on the lock's queue, each change read back; versions
//! are zxids, see `LeaseView`). One watch per (caller identity, lock)
//! serves every stream of that lock on this server: a *hub*, which keeps
//! the last [`WATCH_HISTORY_MAX`] changes it saw. A hub starts with its
//! first stream and lingers [`WATCH_LINGER`] after its last, so that a
//! client that reconnects soon resumes from the history.
//!
//! # Resuming
//!
//! Every event carries `version`, and on SSE the event id is that version
//! (an `EventSource` sends it back as `Last-Event-ID` when it reconnects,
//! which counts as `from_version`). A stream opened with
//! `from_version=N`:
//! - gets every change after N, `kind: "replayed"`, when the hub's history
//!   reaches back to N (its oldest entry is at or before N);
//! - otherwise gets the current state, `kind: "reset"`: changes between N
//!   and it may be missing (the hub is younger than N's change, or N fell
//!   out of the history; or N is newer than anything this server has
//!   seen);
//!
//! and then live changes (`kind: "change"`). Without `from_version` the
//! first event is the current state, `kind: "current"`. Versions rise
//! strictly along a stream.
//!
//! Watch events are hints (the seed this serves says as much): a holder
//! acts on its fencing token, and a strong read of the holder is
//! `GET /api/v1/locks/{name}` (linearizable).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use warden_recipes::{LeaseView, LeaseWatch};

use super::holder::HolderLock;

use super::locks::{bad, check_name, refusal};
use super::push::{query_u64, KEEP_ALIVE};
use super::{contract, ApiError, Http};

pub use crate::limits::{WATCH_HISTORY_MAX, WATCH_HUBS_MAX};
/// How long a hub outlives its last stream.
pub const WATCH_LINGER: Duration = Duration::from_secs(60);
/// Live changes a slow stream may fall behind before it is ended (it
/// resumes from its last version).
const WATCH_BACKLOG_MAX: usize = 1024;

/// What a hub tells its streams.
#[derive(Debug, Clone)]
enum Said {
    Change(LeaseView),
    /// The hub's watch ended: (status, message).
    Ended(u16, String),
}

/// (identity, lock name).
type HubKey = (Option<String>, String);

struct Hub {
    id: u64,
    history: VecDeque<LeaseView>,
    tx: broadcast::Sender<Said>,
    streams: usize,
    generation: u64,
    task: AbortHandle,
}

#[derive(Default)]
struct Registry {
    hubs: HashMap<HubKey, Hub>,
    next_id: u64,
}

/// This server's lock watches.
#[derive(Clone, Default)]
pub(crate) struct Hubs {
    registry: Arc<Mutex<Registry>>,
}

impl Hubs {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A stream of lock `name`'s holder events from `from_version` (see
    /// the module docs), for the caller whose session is `lock`.
    pub(crate) fn subscribe(
        &self,
        http: &Arc<Http>,
        identity: Option<String>,
        lock: HolderLock,
        name: &str,
        from_version: Option<u64>,
    ) -> Result<impl Stream<Item = Value>, ApiError> {
        let key: HubKey = (identity, name.to_string());
        let mut registry = self.lock();
        let fresh = !registry.hubs.contains_key(&key);
        if fresh && registry.hubs.len() >= WATCH_HUBS_MAX {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this server already watches {WATCH_HUBS_MAX} locks"),
            ));
        }
        if fresh {
            registry.next_id += 1;
            let id = registry.next_id;
            let (tx, _) = broadcast::channel(WATCH_BACKLOG_MAX);
            let task =
                tokio::spawn(run(http.clone(), self.clone(), key.clone(), id, lock)).abort_handle();
            registry.hubs.insert(
                key.clone(),
                Hub {
                    id,
                    history: VecDeque::new(),
                    tx,
                    streams: 0,
                    generation: 0,
                    task,
                },
            );
        }
        let hub = registry.hubs.get_mut(&key).expect("just made");
        hub.streams += 1;
        hub.generation += 1;
        let watching = Watching {
            rx: hub.tx.subscribe(),
            history: hub.history.clone(),
            from_version,
            last_version: None,
            started: false,
            finished: false,
            name: name.to_string(),
            pending: VecDeque::new(),
            _stream: StreamGuard {
                hubs: self.clone(),
                key,
                id: hub.id,
            },
        };
        Ok(futures::stream::unfold(watching, |mut w| async move {
            let next = w.next().await?;
            Some((next, w))
        }))
    }

    /// Records a hub's change and tells its streams, under the registry
    /// lock (so a stream subscribing sees it in the history or live, never
    /// both, never neither).
    fn said(&self, key: &HubKey, id: u64, said: Said) {
        let mut registry = self.lock();
        let Some(hub) = registry.hubs.get_mut(key).filter(|h| h.id == id) else {
            return;
        };
        if let Said::Change(view) = &said {
            if hub.history.len() == WATCH_HISTORY_MAX {
                hub.history.pop_front();
            }
            hub.history.push_back(view.clone());
        }
        let _ = hub.tx.send(said.clone());
        if matches!(said, Said::Ended(..)) {
            // The next stream starts a new watch.
            registry.hubs.remove(key);
        }
    }

    fn unsubscribe(&self, key: &HubKey, id: u64) {
        let mut registry = self.lock();
        let Some(hub) = registry.hubs.get_mut(key).filter(|h| h.id == id) else {
            return;
        };
        hub.streams = hub.streams.saturating_sub(1);
        hub.generation += 1;
        if hub.streams > 0 {
            return;
        }
        let generation = hub.generation;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let hubs = self.clone();
        let key = key.clone();
        runtime.spawn(async move {
            tokio::time::sleep(WATCH_LINGER).await;
            let mut registry = hubs.lock();
            let idle = registry
                .hubs
                .get(&key)
                .is_some_and(|h| h.id == id && h.streams == 0 && h.generation == generation);
            if idle {
                if let Some(hub) = registry.hubs.remove(&key) {
                    hub.task.abort();
                }
            }
        });
    }
}

/// A hub's watch: the recipe's [`LeaseWatch`], each change told.
async fn run(http: Arc<Http>, hubs: Hubs, key: HubKey, id: u64, lock: HolderLock) {
    let ended = match lock.watch(&key.1).await {
        Ok(watch) => follow(&hubs, &key, id, watch).await,
        Err(e) => e,
    };
    http.locks.after_error(&ended).await;
    let refused = refusal(&ended, StatusCode::SERVICE_UNAVAILABLE);
    hubs.said(
        &key,
        id,
        Said::Ended(
            refused.status.as_u16(),
            format!("the watch ended: {}", refused.message),
        ),
    );
}

async fn follow(
    hubs: &Hubs,
    key: &HubKey,
    id: u64,
    mut watch: LeaseWatch,
) -> warden_recipes::Error {
    loop {
        match watch.next().await {
            Ok(view) => hubs.said(key, id, Said::Change(view)),
            Err(e) => return e,
        }
    }
}

struct StreamGuard {
    hubs: Hubs,
    key: HubKey,
    id: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.hubs.unsubscribe(&self.key, self.id);
    }
}

/// One stream of a hub.
struct Watching {
    rx: broadcast::Receiver<Said>,
    /// The hub's history when the stream subscribed.
    history: VecDeque<LeaseView>,
    from_version: Option<u64>,
    last_version: Option<u64>,
    started: bool,
    finished: bool,
    name: String,
    pending: VecDeque<Value>,
    _stream: StreamGuard,
}

impl Watching {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Some(next);
            }
            if self.finished {
                return None;
            }
            if !self.started && !self.history.is_empty() {
                self.started = true;
                let history = std::mem::take(&mut self.history);
                self.start(history.into());
                continue;
            }
            match self.rx.recv().await {
                Ok(Said::Change(view)) if !self.started => {
                    // A new hub's first read.
                    self.started = true;
                    self.start(vec![view]);
                }
                Ok(Said::Change(view)) => {
                    if self.last_version.is_none_or(|v| view.version > v) {
                        self.push(&view, "change");
                    }
                }
                Ok(Said::Ended(status, message)) => self.finish(status, &message),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let resume = self.last_version.unwrap_or(0);
                    self.finish(
                        503,
                        &format!("this stream fell behind; resume with from_version={resume}"),
                    );
                }
                Err(broadcast::error::RecvError::Closed) => self.finish(503, "the watch ended"),
            }
        }
    }

    /// Ends the stream with an `error` event.
    fn finish(&mut self, status: u16, message: &str) {
        self.started = true;
        self.finished = true;
        self.pending
            .push_back(super::push::error_message(status, message));
    }

    /// The first events, from the hub's history (oldest first, the last
    /// being the current state).
    fn start(&mut self, history: Vec<LeaseView>) {
        let Some(current) = history.last().cloned() else {
            return;
        };
        match self.from_version {
            None => self.push(&current, "current"),
            // Covered: the history reaches back to `from`, and `from` is
            // no newer than what this server has seen (a version from the
            // future would silence the stream: it gets a reset instead).
            Some(from) if history[0].version <= from && from <= current.version => {
                for view in history.iter().filter(|v| v.version > from) {
                    self.push(view, "replayed");
                }
                // Nothing newer: the client is up to date; later events
                // must still be newer than what it has.
                self.last_version = Some(self.last_version.unwrap_or(from).max(from));
            }
            Some(_) => self.push(&current, "reset"),
        }
    }

    fn push(&mut self, view: &LeaseView, kind: &str) {
        self.last_version = Some(view.version);
        self.pending.push_back(holder_event(&self.name, view, kind));
    }
}

/// A holder event (the JSON of an SSE `holder` event's data and of a
/// WebSocket `holder` message).
pub(crate) fn holder_event(name: &str, view: &LeaseView, kind: &str) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("type".into(), json!("holder"));
    m.insert("kind".into(), json!(kind));
    m.insert("lock_key".into(), json!(name));
    m.insert("version".into(), json!(view.version));
    m.insert("held".into(), json!(view.holder.is_some()));
    match &view.holder {
        Some(lease) => {
            if let Value::Object(h) = contract::holder(lease) {
                m.extend(h);
            }
        }
        None => {
            for field in [
                "label",
                "fencing_token",
                "expires_at_ms",
                "expires_at_epoch_ms",
                "expires_at",
            ] {
                m.insert(field.into(), Value::Null);
            }
        }
    }
    m.insert("waiters".into(), json!(view.waiters));
    Value::Object(m)
}

/// The caller's stream of lock `name`'s holder events from
/// `from_version` (see the module docs), ending when the server stops:
/// `holder` messages ([`holder_event`]), and an `error` message that ends
/// it. `name` must have been checked. The SSE door's and the gRPC door's
/// (`crate::grpc`) watch.
pub(crate) async fn holder_events(
    http: &Arc<Http>,
    headers: &HeaderMap,
    name: &str,
    from_version: Option<u64>,
) -> Result<impl Stream<Item = Value> + Send + 'static, ApiError> {
    let (identity, lock) = http.locks.session(headers).await?;
    let events = http
        .watch
        .subscribe(http, identity, lock, name, from_version)?;
    Ok(futures::StreamExt::take_until(
        events,
        http.stop.clone().cancelled_owned(),
    ))
}

/// `GET /api/v1/locks/{name}/watch[?from_version=N]`: the lock's holder
/// changes on Server-Sent Events (`holder` events, id = version).
pub(crate) async fn watch_events(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let started = async {
        check_name(&name)?;
        let mut from_version = query_u64(&query, "from_version")?;
        if from_version.is_none() {
            if let Some(last) = headers.get("last-event-id") {
                let last = last.to_str().unwrap_or_default();
                from_version = Some(last.trim().parse().map_err(|_| {
                    bad(format!(
                        "Last-Event-ID must be a version (a non-negative integer), not {last:?}"
                    ))
                })?);
            }
        }
        holder_events(&http, &headers, &name, from_version).await
    };
    let events = match started.await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let events = futures::StreamExt::map(events, |m| {
        let kind = m["type"].as_str().unwrap_or("message").to_string();
        let mut event = Event::default().event(kind);
        if let Some(version) = m["version"].as_u64() {
            event = event.id(version.to_string());
        }
        Ok::<_, Infallible>(event.data(m.to_string()))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

#[cfg(test)]
mod tests {
    use warden_recipes::Lease;

    use super::*;

    fn view(version: u64, token: Option<u64>) -> LeaseView {
        LeaseView {
            holder: token.map(|t| Lease {
                name: "jobs".into(),
                client_id: format!("c{t}"),
                fencing_token: t,
                expires_at_ms: 1_000,
            }),
            waiters: 0,
            version,
        }
    }

    #[test]
    fn free_and_held_events_have_the_same_fields() {
        let held = holder_event("jobs", &view(7, Some(5)), "change");
        let free = holder_event("jobs", &view(9, None), "change");
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&held), keys(&free));
        assert_eq!(held["fencing_token"], 5);
        assert_eq!(held["held"], true);
        assert_eq!(free["held"], false);
        assert_eq!(free["label"], Value::Null);
    }
}
