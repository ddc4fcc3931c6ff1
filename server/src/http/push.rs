//! Push waits: a caller waits for its grant on a stream (Server-Sent
//! Events at `GET /api/v1/locks/{name}/acquire/events`, or the WebSocket
//! of `ws.rs`) instead of long-polling, and keeps its FIFO place across a
//! reconnect.
//!
//! # A wait is the recipe's acquire, kept by client id
//!
//! A wait is one `LeaseLock::acquire` of the recipe, run in a task of its
//! own (not in the request), with no wait timeout but a year: its node in
//! the lease's queue is the caller's place, and the recipe keeps it alive
//! (it touches the node every third of the TTL while it waits, and
//! deletes it when the acquire is dropped). The gateway adds no lock rule:
//! it only decides how long an acquire outlives the stream that asked
//! for it.
//!
//! Waits are kept by (caller identity, lock, `client_id`). A stream that
//! asks for a wait that is already there attaches to it (`resumed: true`)
//! rather than acquiring again; when the last stream of a wait goes (the
//! client hung up, the connection broke), the wait lives on for its
//! *grace period* (`grace_ms`, default [`PUSH_GRACE_MS_DEFAULT`], at most
//! [`PUSH_GRACE_MS_MAX`]). A reconnect within it finds the wait, and so
//! its place, as it was; past it the acquire is dropped: the recipe
//! deletes the node and the place is given up.
//!
//! A grant ends the wait: it leaves the registry and its streams get
//! `granted`. A grant that came while nobody was attached is not lost: a
//! reconnect with the same `client_id` acquires again, and the recipe's
//! acquire is idempotent per client id (it answers the grant the client
//! id holds, same fencing token). Unclaimed, the lease lapses by its TTL
//! like any lease whose holder went away.
//!
//! Waits live in this server's memory. A reconnect through another server
//! acquires there; the recipe finds the client id's node and takes up its
//! place (shared with the first server's wait until that one's grace
//! ends, when the first server deletes the node and the recipe queues the
//! second wait again, at the back). Reconnect to the same server to keep
//! the place for sure.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use warden_recipes::Lease;

use super::holder::HolderLock;

use super::locks::{bad, check_client_id, check_name, check_ttl_ms, refusal};
use super::{contract, ApiError, Http};

/// How long a wait outlives its last stream unless `grace_ms` says.
pub const PUSH_GRACE_MS_DEFAULT: u64 = 15_000;
pub use crate::limits::{PUSH_GRACE_MS_MAX, PUSH_WAITS_MAX};
/// A push wait's timeout: in effect none (the caller ends a wait by
/// hanging up, or with `cancel` on a WebSocket).
const PUSH_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);
/// SSE keep-alive comments, so idle proxies and clients keep the stream.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Where a wait is.
#[derive(Debug, Clone)]
pub(crate) enum WaitState {
    /// The acquire is on its way into the queue.
    Starting,
    /// In the queue: later acquires of other client ids queue behind.
    Queued,
    Granted(Lease),
    /// The wait ended without a grant: (status, message).
    Failed(u16, String),
}

/// Who waits: waits are kept by this.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct WaitKey {
    /// The caller's identity (`None`: anonymous); see `Gateway::session`.
    pub identity: Option<String>,
    pub name: String,
    pub client_id: String,
}

/// What a caller asks a wait for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitAsk {
    pub ttl: Duration,
    pub grace: Duration,
}

struct Slot {
    /// Tells this wait from a later one of the same key.
    id: u64,
    ttl: Duration,
    grace: Duration,
    attached: usize,
    /// Bumped at every attach and detach: a grace timer acts only if
    /// nothing happened since it was set.
    generation: u64,
    states: watch::Receiver<WaitState>,
    task: AbortHandle,
}

#[derive(Default)]
struct Registry {
    slots: HashMap<WaitKey, Slot>,
    next_id: u64,
}

/// This server's push waits.
#[derive(Clone, Default)]
pub(crate) struct Waits {
    registry: Arc<Mutex<Registry>>,
}

/// A stream attached to a wait; detaches when dropped (starting the
/// wait's grace period if it was the last).
pub(crate) struct Attached {
    pub states: watch::Receiver<WaitState>,
    /// The wait was there already (a reconnect).
    pub resumed: bool,
    pub ask: WaitAsk,
    waits: Waits,
    key: WaitKey,
    id: u64,
}

impl Waits {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Attaches to `key`'s wait, starting it (an acquire on `lock`) if
    /// there is none.
    pub(crate) fn attach(
        &self,
        http: &Arc<Http>,
        lock: HolderLock,
        key: WaitKey,
        ask: WaitAsk,
    ) -> Result<Attached, ApiError> {
        let mut registry = self.lock();
        if let Some(slot) = registry.slots.get_mut(&key) {
            if slot.ttl != ask.ttl {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "client_id {:?} already waits for {} with ttl_ms {}: reconnect with that ttl_ms, or cancel that wait first",
                        key.client_id,
                        key.name,
                        slot.ttl.as_millis()
                    ),
                ));
            }
            slot.attached += 1;
            slot.grace = ask.grace;
            slot.generation += 1;
            return Ok(Attached {
                states: slot.states.clone(),
                resumed: true,
                ask,
                waits: self.clone(),
                key,
                id: slot.id,
            });
        }
        if registry.slots.len() >= PUSH_WAITS_MAX {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this server already keeps {PUSH_WAITS_MAX} push waits"),
            ));
        }
        registry.next_id += 1;
        let id = registry.next_id;
        let (tx, states) = watch::channel(WaitState::Starting);
        let task = tokio::spawn(run(
            http.clone(),
            self.clone(),
            lock,
            key.clone(),
            id,
            ask.ttl,
            tx,
        ))
        .abort_handle();
        registry.slots.insert(
            key.clone(),
            Slot {
                id,
                ttl: ask.ttl,
                grace: ask.grace,
                attached: 1,
                generation: 0,
                states: states.clone(),
                task,
            },
        );
        Ok(Attached {
            states,
            resumed: false,
            ask,
            waits: self.clone(),
            key,
            id,
        })
    }

    /// Ends `key`'s wait now (a WebSocket's `cancel`): the acquire is
    /// dropped, and the recipe deletes the node it made. True if there was
    /// one.
    pub(crate) fn cancel(&self, key: &WaitKey) -> bool {
        let removed = self.lock().slots.remove(key);
        match removed {
            Some(slot) => {
                slot.task.abort();
                true
            }
            None => false,
        }
    }

    /// Removes wait `id` of `key` if it is still there; its task.
    fn remove(&self, key: &WaitKey, id: u64) -> Option<AbortHandle> {
        let mut registry = self.lock();
        if registry.slots.get(key).is_some_and(|s| s.id == id) {
            registry.slots.remove(key).map(|s| s.task)
        } else {
            None
        }
    }

    fn detach(&self, key: &WaitKey, id: u64) {
        let mut registry = self.lock();
        let Some(slot) = registry.slots.get_mut(key).filter(|s| s.id == id) else {
            return;
        };
        slot.attached = slot.attached.saturating_sub(1);
        slot.generation += 1;
        if slot.attached > 0 {
            return;
        }
        let (generation, grace) = (slot.generation, slot.grace);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let waits = self.clone();
        let key = key.clone();
        runtime.spawn(async move {
            tokio::time::sleep(grace).await;
            let mut registry = waits.lock();
            let expired = registry
                .slots
                .get(&key)
                .is_some_and(|s| s.id == id && s.attached == 0 && s.generation == generation);
            if expired {
                if let Some(slot) = registry.slots.remove(&key) {
                    tracing::debug!(lock = %key.name, client_id = %key.client_id, "push wait's grace period over; giving up its place");
                    slot.task.abort();
                }
            }
        });
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.waits.detach(&self.key, self.id);
    }
}

/// One wait: the recipe's acquire, its states told to the streams.
async fn run(
    http: Arc<Http>,
    waits: Waits,
    lock: HolderLock,
    key: WaitKey,
    id: u64,
    ttl: Duration,
    tx: watch::Sender<WaitState>,
) {
    let queued = tx.clone();
    let acquired = lock
        .acquire_notified(&key.name, &key.client_id, ttl, PUSH_WAIT, move || {
            queued.send_replace(WaitState::Queued);
        })
        .await;
    let state = match acquired {
        Ok(Some(lease)) => WaitState::Granted(lease),
        Ok(None) => WaitState::Failed(408, format!("{} not granted within a year", key.name)),
        Err(e) => {
            http.locks.after_error(&e).await;
            let refused = refusal(&e, StatusCode::CONFLICT);
            WaitState::Failed(refused.status.as_u16(), refused.message)
        }
    };
    // Out of the registry before telling anyone: a stream that comes after
    // this acquires anew (and the recipe answers it this same grant).
    waits.remove(&key, id);
    tx.send_replace(state);
}

/// The JSON of a `queued` message.
pub(crate) fn queued_message(key: &WaitKey, attached: &Attached) -> Value {
    json!({
        "type": "queued",
        "lock_key": key.name,
        "client_id": key.client_id,
        "ttl_ms": attached.ask.ttl.as_millis() as u64,
        "grace_ms": attached.ask.grace.as_millis() as u64,
        "resumed": attached.resumed,
    })
}

/// The JSON of a `granted` message: the acquire's answer, typed.
pub(crate) fn granted_message(name: &str, lease: &Lease) -> Value {
    let mut m = contract::granted(name, lease);
    if let Value::Object(m) = &mut m {
        m.insert("type".into(), json!("granted"));
    }
    m
}

/// The JSON of an `error` message.
pub(crate) fn error_message(status: u16, message: &str) -> Value {
    json!({ "type": "error", "status": status, "error": message })
}

/// The messages a stream attached to a wait sends: `queued` once, then
/// `granted` or `error`, which end it. `queued` always comes first, even
/// when the grant follows too fast for the stream to see it queued. The
/// stream owns the attachment: dropping it detaches.
pub(crate) fn messages(key: WaitKey, attached: Attached) -> impl Stream<Item = Value> {
    let telling = Telling {
        queued: queued_message(&key, &attached),
        states: attached.states.clone(),
        _attached: Some(attached),
        key,
        pending: VecDeque::new(),
        said_queued: false,
        done: false,
    };
    futures::stream::unfold(telling, |mut t| async move {
        let next = t.next().await?;
        Some((next, t))
    })
}

/// [`messages`], the attachment staying with the caller (a WebSocket's
/// state, so that closing the socket detaches at once, not whenever the
/// task running this stream is dropped).
pub(crate) fn messages_of(key: WaitKey, attached: &Attached) -> impl Stream<Item = Value> {
    let telling = Telling {
        queued: queued_message(&key, attached),
        states: attached.states.clone(),
        _attached: None,
        key,
        pending: VecDeque::new(),
        said_queued: false,
        done: false,
    };
    futures::stream::unfold(telling, |mut t| async move {
        let next = t.next().await?;
        Some((next, t))
    })
}

struct Telling {
    _attached: Option<Attached>,
    states: watch::Receiver<WaitState>,
    key: WaitKey,
    queued: Value,
    pending: VecDeque<Value>,
    said_queued: bool,
    done: bool,
}

impl Telling {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Some(next);
            }
            if self.done {
                return None;
            }
            let state = self.states.borrow_and_update().clone();
            match state {
                WaitState::Starting => {}
                WaitState::Queued if self.said_queued => {}
                WaitState::Queued => {
                    self.said_queued = true;
                    self.pending.push_back(self.queued.clone());
                    continue;
                }
                WaitState::Granted(lease) => {
                    if !self.said_queued {
                        self.said_queued = true;
                        self.pending.push_back(self.queued.clone());
                    }
                    self.pending
                        .push_back(granted_message(&self.key.name, &lease));
                    self.done = true;
                    continue;
                }
                WaitState::Failed(status, message) => {
                    self.pending.push_back(error_message(status, &message));
                    self.done = true;
                    continue;
                }
            }
            if self.states.changed().await.is_err() {
                // The wait's task is gone without a last word (cancelled,
                // or its grace ran out).
                self.pending
                    .push_back(error_message(410, "the wait was given up"));
                self.done = true;
            }
        }
    }
}

/// A wait's parameters, checked: `client_id`, `ttl_ms`, `grace_ms`.
pub(crate) fn parse_ask(
    client_id: Option<&str>,
    ttl_ms: Option<u64>,
    grace_ms: Option<u64>,
    ttl_ms_min: u64,
) -> Result<(String, WaitAsk), ApiError> {
    let client_id = client_id.ok_or_else(|| bad("missing client_id"))?;
    check_client_id(client_id)?;
    let ttl_ms = ttl_ms.ok_or_else(|| bad("missing ttl_ms"))?;
    let ttl = check_ttl_ms("ttl_ms", ttl_ms, ttl_ms_min)?;
    let grace_ms = grace_ms.unwrap_or(PUSH_GRACE_MS_DEFAULT);
    if grace_ms > PUSH_GRACE_MS_MAX {
        return Err(bad(format!(
            "grace_ms must be at most {PUSH_GRACE_MS_MAX} ms, not {grace_ms}"
        )));
    }
    let grace = Duration::from_millis(grace_ms);
    Ok((client_id.to_string(), WaitAsk { ttl, grace }))
}

/// A query parameter that must be a non-negative integer.
pub(crate) fn query_u64(
    query: &HashMap<String, String>,
    name: &str,
) -> Result<Option<u64>, ApiError> {
    match query.get(name) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(format!("{name} must be a non-negative integer, not {v:?}"))),
    }
}

/// A JSON field that must be a non-negative integer.
pub(crate) fn field_u64(body: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad(format!("{name} must be a non-negative integer, not {v}"))),
    }
}

/// `GET /api/v1/locks/{name}/acquire/events?client_id=&ttl_ms=[&grace_ms=]`:
/// waits for the grant on Server-Sent Events (`queued`, then `granted`
/// or `error`; the stream ends after either).
pub(crate) async fn acquire_events(
    State(http): State<Arc<Http>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let started = async {
        check_name(&name)?;
        let (client_id, ask) = parse_ask(
            query.get("client_id").map(String::as_str),
            query_u64(&query, "ttl_ms")?,
            query_u64(&query, "grace_ms")?,
            http.ttl_ms_min,
        )?;
        let (identity, lock) = http.locks.session(&headers).await?;
        let key = WaitKey {
            identity,
            name: name.clone(),
            client_id,
        };
        let attached = http.push.attach(&http, lock, key.clone(), ask)?;
        Ok::<_, ApiError>((key, attached))
    };
    let (key, attached) = match started.await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let stop = http.stop.clone();
    let events = futures::StreamExt::map(messages(key, attached), |m| {
        let kind = m["type"].as_str().unwrap_or("message").to_string();
        Ok::<_, Infallible>(Event::default().event(kind).data(m.to_string()))
    });
    let events = futures::StreamExt::take_until(events, stop.cancelled_owned());
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_are_checked() {
        assert!(parse_ask(None, Some(1000), None, 1).is_err());
        assert!(parse_ask(Some("b"), None, None, 1).is_err());
        assert!(parse_ask(Some("b"), Some(0), None, 1).is_err());
        assert!(parse_ask(Some(""), Some(1000), None, 1).is_err());
        assert!(parse_ask(Some("b"), Some(1000), Some(PUSH_GRACE_MS_MAX + 1), 1).is_err());
        // Below the server's --min-lock-ttl-ms.
        assert!(parse_ask(Some("b"), Some(999), None, 1000).is_err());
        let (id, ask) = parse_ask(Some("b"), Some(1000), None, 1000).ok().unwrap();
        assert_eq!(id, "b");
        assert_eq!(ask.ttl, Duration::from_secs(1));
        assert_eq!(ask.grace, Duration::from_millis(PUSH_GRACE_MS_DEFAULT));
    }
}
