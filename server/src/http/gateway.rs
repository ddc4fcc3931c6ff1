//! The lock API's gateway: the loopback sessions its callers' requests
//! run on, one per caller identity.
//!
//! The gateway is a client of its own server: a caller presenting
//! `Authorization: Basic` user:password (or a `Bearer` token standing for
//! one) gets a session authenticated as that digest identity, so the
//! ACLs treat an HTTP caller exactly as that identity; callers without
//! credentials share an anonymous one.
//!
//! A session costs the cluster: two Raft writes (its open, and its close
//! when it is let go) and a place in every replica's session table. So,
//! against a flood of made-up credentials:
//!
//! - **a credential never seen costs nothing until it is shown valid**:
//!   a token of `--http-token`, a password the operator's `--auth-users`
//!   (or `--super-digest`) checks, or, with no user list, a digest
//!   identity some ACL in the tree already names. Anything else is a 401
//!   before any session is opened (`warden_gateway_credentials_refused_total`
//!   counts them, `warden_gateway_sessions_opened_total` the sessions);
//! - **no lock every call waits on**: the table of sessions is behind a
//!   plain mutex held for a lookup, never across a connect or an
//!   authentication; each identity's session has a lock of its own, so a
//!   connect (or a slow one) holds up only callers of that identity, and a
//!   holder renewing on its session never waits behind someone's connect;
//! - **a per-source bound**: past [`GATEWAY_SESSIONS_PER_SOURCE_MAX`]
//!   sessions opened for one source address, a new identity from that
//!   source lets go of that source's least recently used session rather
//!   than another source's. The table holds at most
//!   [`GATEWAY_SESSIONS_MAX`].
//!
//! What the gateway hands a caller is a [`HolderLock`]: the lease lock
//! seen through the caller's proof of holding (see `holder.rs`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use base64::Engine as _;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};
use warden_client::{Acl, Client, ConnectOptions, ErrorCode, SessionState};
use warden_protocol::auth::{digest_id, split_credentials};
use warden_recipes::{Error as RecipeError, LeaseLock};

use super::holder::HolderLock;
use super::locks::{api_message, LOCK_ROOT};
use super::ApiError;
use crate::auth::AuthConfig;
use crate::core::CoreMsg;
use crate::limits::{GATEWAY_SESSIONS_MAX, GATEWAY_SESSIONS_PER_SOURCE_MAX};

/// The request header the doors write the caller's source address into
/// (replacing whatever a caller sent under that name): how the per-source
/// bound learns who is asking without every door passing it along.
const SOURCE_HEADER: &str = "x-warden-source";

/// Writes `peer`'s address as the request's source (see
/// [`SOURCE_HEADER`]); a value the caller sent is dropped either way.
pub(crate) fn set_source(headers: &mut HeaderMap, peer: Option<SocketAddr>) {
    headers.remove(SOURCE_HEADER);
    let value = peer.and_then(|p| HeaderValue::from_str(&p.ip().to_canonical().to_string()).ok());
    if let Some(v) = value {
        headers.insert(SOURCE_HEADER, v);
    }
}

fn source(headers: &HeaderMap) -> Option<IpAddr> {
    headers.get(SOURCE_HEADER)?.to_str().ok()?.parse().ok()
}

/// What the gateway counts for `/metrics`.
#[derive(Clone, Debug, Default)]
pub(crate) struct GatewayCounters {
    /// Loopback sessions opened (each a Raft write, and one more when it
    /// is let go).
    pub(crate) sessions_opened: Counter,
    /// Credentials refused before any session was opened for them.
    pub(crate) credentials_refused: Counter,
}

/// A session's key: the digest id (`user:hash`, never a bare user name: a
/// wrong password must not find the session of the right one); `None`
/// for anonymous callers.
type Key = Option<String>;

/// One loopback session and the lease lock over it.
struct Session {
    client: Client,
    lock: LeaseLock,
}

/// An identity's place in the table: its session (`None` until connected,
/// or after it was lost), behind a lock of its own.
struct Slot {
    session: Arc<tokio::sync::Mutex<Option<Session>>>,
    last_used: Instant,
    source: Option<IpAddr>,
}

pub(crate) struct Gateway {
    addr: SocketAddr,
    /// With TLS on: trusts exactly this server's certificate and presents
    /// it as the client's (see `tls/pinned.rs`).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Bearer token -> `user:password` (`--http-token`).
    tokens: Vec<(String, String)>,
    /// The ACL of the nodes the lock API creates (`--http-lock-acl`).
    acl: Vec<Acl>,
    /// `--super-digest` and `--auth-users`.
    auth: AuthConfig,
    /// Asked whether the tree knows a digest identity.
    core: mpsc::Sender<CoreMsg>,
    counters: GatewayCounters,
    /// Held for lookups and insertions only, never across an `.await`.
    slots: Mutex<HashMap<Key, Slot>>,
}

impl Gateway {
    pub(crate) fn new(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ClientConfig>>,
        (tokens, acl, auth): (Vec<(String, String)>, Vec<Acl>, AuthConfig),
        core: mpsc::Sender<CoreMsg>,
        counters: GatewayCounters,
    ) -> Self {
        Gateway {
            addr,
            tls,
            tokens,
            acl,
            auth,
            core,
            counters,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The caller's credentials (`user:password`), from its Authorization
    /// header; `None` for an anonymous caller.
    pub(crate) fn credentials(&self, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
        Ok(self.presented(headers)?.map(|(c, _)| c))
    }

    /// [`credentials`](Self::credentials), and whether the operator
    /// configured them (a bearer token of `--http-token`).
    fn presented(&self, headers: &HeaderMap) -> Result<Option<(String, bool)>, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(None);
        };
        let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m);
        let value = value
            .to_str()
            .map_err(|_| unauthorized("the Authorization header is not ASCII"))?;
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| unauthorized("Basic credentials are not base64 of user:password"))?;
            split_credentials(&decoded).map_err(|e| unauthorized(&e.0))?;
            Ok(Some((decoded, false)))
        } else if scheme.eq_ignore_ascii_case("bearer") {
            self.tokens
                .iter()
                .find(|(t, _)| crate::auth::same_secret(t.as_bytes(), rest.as_bytes()))
                .map(|(_, c)| Some((c.clone(), true)))
                .ok_or_else(|| unauthorized("unknown bearer token"))
        } else {
            Err(unauthorized(
                "unsupported Authorization scheme (Basic or Bearer)",
            ))
        }
    }

    /// The lease lock of the caller's session, connecting (and
    /// authenticating) it on first use.
    pub(crate) async fn get(&self, headers: &HeaderMap) -> Result<HolderLock, ApiError> {
        Ok(self.session(headers).await?.1)
    }

    /// [`get`](Self::get), with the caller's identity: the session's key
    /// (`None` for anonymous callers), which push waits and watches are
    /// kept by.
    pub(crate) async fn session(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Option<String>, HolderLock), ApiError> {
        let presented = self.presented(headers)?;
        // The stored form of the password: a session per user *and*
        // password, without keeping passwords as keys.
        let key = match &presented {
            Some((c, _)) => {
                Some(digest_id(c).map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.0))?)
            }
            None => None,
        };
        let slot = match self.known(&key) {
            Some(slot) => slot,
            None => {
                if let Some((c, configured)) = &presented {
                    self.check_unseen(c, *configured, key.as_deref()).await?;
                }
                self.admit(&key, source(headers))
            }
        };
        let mut session = slot.lock().await;
        if let Some(s) = session.as_ref() {
            let state = *s.client.session_events().borrow();
            if !matches!(state, SessionState::Expired | SessionState::Closed) {
                return Ok((key.clone(), HolderLock::new(s.lock.clone(), key)));
            }
            debug!(?state, "lock gateway session lost; connecting anew");
            *session = None;
        }
        let credentials = presented.as_ref().map(|(c, _)| c.as_str());
        match self.connect(credentials).await {
            Ok(client) => {
                self.counters.sessions_opened.inc();
                debug!(session = client.session_id(), "lock gateway connected");
                let lock = LeaseLock::new(client.clone(), LOCK_ROOT).with_acl(self.acl.clone());
                *session = Some(Session {
                    client,
                    lock: lock.clone(),
                });
                Ok((key.clone(), HolderLock::new(lock, key)))
            }
            Err(e) => {
                drop(session);
                self.forget(&key, &slot);
                Err(e)
            }
        }
    }

    fn table(&self) -> MutexGuard<'_, HashMap<Key, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot of an identity seen before (its credential was checked
    /// then), marked used.
    fn known(&self, key: &Key) -> Option<Arc<tokio::sync::Mutex<Option<Session>>>> {
        let mut slots = self.table();
        let slot = slots.get_mut(key)?;
        slot.last_used = Instant::now();
        Some(slot.session.clone())
    }

    /// Whether an unseen credential may have a session: refused (401,
    /// counted) unless the operator vouches for it or the tree knows its
    /// digest identity. Costs no Raft proposal either way.
    async fn check_unseen(
        &self,
        credentials: &str,
        configured: bool,
        digest: Option<&str>,
    ) -> Result<(), ApiError> {
        let refused = |message: String| {
            self.counters.credentials_refused.inc();
            ApiError::new(StatusCode::UNAUTHORIZED, message)
        };
        let (user, _) = split_credentials(credentials).map_err(|e| refused(e.0))?;
        if let Err(why) = self.auth.authenticate("digest", credentials.as_bytes()) {
            return Err(refused(format!("AuthFailed: {why}")));
        }
        if configured || self.auth.vouches_for(user) {
            return Ok(());
        }
        let Some(id) = digest else {
            return Ok(());
        };
        let (tx, rx) = oneshot::channel();
        let unavailable =
            || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
        self.core
            .send(CoreMsg::DigestKnown {
                id: id.to_string(),
                reply: tx,
            })
            .await
            .map_err(|_| unavailable())?;
        if rx.await.map_err(|_| unavailable())? {
            return Ok(());
        }
        debug!(user, "lock gateway: credentials nobody vouches for");
        Err(refused(format!(
            "AuthFailed: unknown credentials for user {user:?}: with no --auth-users file, the \
             lock API accepts Basic credentials only for a digest identity an ACL already names \
             (or a --http-token); ask the operator for a user or a token"
        )))
    }

    /// A slot for `key`, whose credential was just shown valid: made
    /// room for, per source and in all.
    fn admit(&self, key: &Key, source: Option<IpAddr>) -> Arc<tokio::sync::Mutex<Option<Session>>> {
        let mut slots = self.table();
        if let Some(slot) = slots.get_mut(key) {
            // Admitted by a request that raced this one.
            slot.last_used = Instant::now();
            return slot.session.clone();
        }
        let from_source = slots.values().filter(|s| s.source == source).count();
        let victim = if from_source >= GATEWAY_SESSIONS_PER_SOURCE_MAX {
            lru(&slots, |s| s.source == source)
        } else if slots.len() >= GATEWAY_SESSIONS_MAX {
            lru(&slots, |_| true)
        } else {
            None
        };
        if let Some(k) = victim {
            // Dropping the handle closes the session once requests still
            // running on it are done.
            debug!(
                ?source,
                "lock gateway lets its least recently used session go"
            );
            slots.remove(&k);
        }
        let session = Arc::new(tokio::sync::Mutex::new(None));
        slots.insert(
            key.clone(),
            Slot {
                session: session.clone(),
                last_used: Instant::now(),
                source,
            },
        );
        session
    }

    /// Drops `key`'s slot if it is still `slot` (a connect failed: a
    /// credential that did not connect holds no place).
    fn forget(&self, key: &Key, slot: &Arc<tokio::sync::Mutex<Option<Session>>>) {
        let mut slots = self.table();
        if slots
            .get(key)
            .is_some_and(|s| Arc::ptr_eq(&s.session, slot))
        {
            slots.remove(key);
        }
    }

    /// A new session on this very server (over TLS when it serves TLS),
    /// authenticated with `credentials` (`user:password`) if given.
    pub(crate) async fn connect(&self, credentials: Option<&str>) -> Result<Client, ApiError> {
        let addr = self.addr.to_string();
        let connected = match &self.tls {
            None => Client::connect(&addr, ConnectOptions::default()).await,
            Some(tls) => {
                let tls = warden_client::TlsOptions::from_rustls(tls.clone());
                Client::connect_tls(&addr, ConnectOptions::default(), tls).await
            }
        };
        let client = connected.map_err(|e| {
            warn!(error = %e, "the HTTP door cannot reach its own server");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot reach the service: {e}"),
            )
        })?;
        if let Some(c) = credentials {
            if let Err(e) = client.add_auth("digest", c.as_bytes()).await {
                let _ = client.close().await;
                return Err(match e.code() {
                    ErrorCode::AuthFailed => ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        format!("AuthFailed: {}", api_message(&e)),
                    ),
                    _ => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                });
            }
        }
        Ok(client)
    }

    /// Drops the sessions that are over, so the next request connects anew.
    pub(crate) async fn after_error(&self, e: &RecipeError) {
        if let RecipeError::Client(c) = e {
            if c.code() == ErrorCode::SessionExpired {
                self.table().retain(|_, slot| {
                    // A slot in use is looked at by its next request.
                    let Ok(session) = slot.session.try_lock() else {
                        return true;
                    };
                    session.as_ref().is_none_or(|s| {
                        !matches!(
                            *s.client.session_events().borrow(),
                            SessionState::Expired | SessionState::Closed
                        )
                    })
                });
            }
        }
    }
}

/// The least recently used of the slots `which` picks.
fn lru(slots: &HashMap<Key, Slot>, which: impl Fn(&Slot) -> bool) -> Option<Key> {
    slots
        .iter()
        .filter(|(_, s)| which(s))
        .min_by_key(|(_, s)| s.last_used)
        .map(|(k, _)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_header_is_the_doors_not_the_callers() {
        let mut headers = HeaderMap::new();
        headers.insert(SOURCE_HEADER, HeaderValue::from_static("10.9.9.9"));
        set_source(&mut headers, Some("127.0.0.1:5000".parse().unwrap()));
        assert_eq!(source(&headers), Some("127.0.0.1".parse().unwrap()));
        set_source(&mut headers, None);
        assert_eq!(source(&headers), None);
        // An IPv4 caller on a dual-stack socket counts as its IPv4 address.
        set_source(&mut headers, Some("[::ffff:10.0.0.1]:1".parse().unwrap()));
        assert_eq!(source(&headers), Some("10.0.0.1".parse().unwrap()));
    }
}
