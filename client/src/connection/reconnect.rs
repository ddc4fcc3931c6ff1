//! Reconnecting: the next server, a jittered backoff, and resuming the
//! session there while calls fail fast.

use std::future::Future;
use std::time::Duration;

use futures::SinkExt;
use tokio::time::{timeout, Instant};
use tracing::{debug, info, warn};
use warden_protocol::{pb, ErrorCode, PROTOCOL_VERSION};

use super::dial::negotiated;
use super::requests::{Closing, Reply};
use super::{Command, Connection, End, Transport, RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN};
use crate::error::{Error, Result};

use super::dial::{handshake, AttemptError};

/// Doubling, jittered pauses between connection attempts.
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(super) fn new() -> Self {
        Self {
            next: RECONNECT_BACKOFF_MIN,
        }
    }

    pub(super) fn next(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(RECONNECT_BACKOFF_MAX);
        // Up to +50% so that clients cut off together do not return together.
        let jitter_ms = rand::random_range(0..=base.as_millis() as u64 / 2);
        base + Duration::from_millis(jitter_ms)
    }
}

impl Connection {
    fn next_addr(&mut self) -> String {
        let addr = self.servers[self.next_server % self.servers.len()].clone();
        self.next_server = (self.next_server + 1) % self.servers.len();
        addr
    }

    /// Tries the servers in turn until one resumes the session, or the
    /// session is over.
    pub(super) async fn reconnect(&mut self) -> Result<Transport, End> {
        let expires_at = self.last_heard + self.session.timeout;
        let mut backoff = Backoff::new();
        loop {
            let now = Instant::now();
            if now >= expires_at {
                warn!("no server resumed the session within its timeout");
                return Err(End::Expired);
            }
            let addr = self.next_addr();
            let request = pb::ConnectRequest {
                protocol_version: PROTOCOL_VERSION,
                session_id: self.session.id,
                password: self.session.password.clone(),
                timeout_ms: self.options.session_timeout_ms(),
                last_zxid_seen: self.last_zxid_seen,
            };
            let attempt_max = self.options.connect_timeout.min(expires_at - now);
            // A clone (an `Arc`): the attempt runs while `self` answers
            // commands.
            let tls = self.tls.clone();
            let attempt = timeout(attempt_max, handshake(&addr, tls.as_ref(), request));
            match self.while_offline(attempt).await? {
                Ok(Ok((transport, response))) => {
                    match self.resume(addr, transport, response).await {
                        Some(transport) => return Ok(transport),
                        None => continue,
                    }
                }
                Ok(Err(AttemptError::Refused {
                    code: ErrorCode::SessionExpired,
                    message,
                })) => {
                    warn!(%addr, %message, "the server says the session has expired");
                    return Err(End::Expired);
                }
                Ok(Err(e)) => debug!(%addr, error = %e, "reconnect attempt failed"),
                Err(_) => debug!(%addr, "reconnect attempt timed out"),
            }
            let pause = backoff
                .next()
                .min(expires_at.saturating_duration_since(Instant::now()));
            self.while_offline(tokio::time::sleep(pause)).await?;
        }
    }

    /// Takes up a resumed session on a new connection: re-registers the
    /// watches. `None` if the new connection broke at once.
    async fn resume(
        &mut self,
        addr: String,
        mut transport: Transport,
        response: pb::ConnectResponse,
    ) -> Option<Transport> {
        let now = Instant::now();
        self.peer = addr;
        self.session.timeout = negotiated(&self.options, response.timeout_ms);
        self.last_heard = now;
        self.last_sent = now;
        info!(peer = %self.peer, server_zxid = response.zxid, "session resumed");
        // Identities first: the server answers in order, so everything
        // after (watches, the caller's requests) runs as who we are.
        for auth in self.auths.clone() {
            let op = pb::request::Op::Auth(auth);
            if self
                .send(&mut transport, op, Reply::Internal("auth"), None)
                .await
                .is_err()
            {
                self.fail_pending(&Error::ConnectionLoss);
                return None;
            }
        }
        // Relative to what we saw *before* the break, not to the server's
        // zxid now: changes made while we were away must fire at once.
        for request in self.registry.set_watches(self.last_zxid_seen) {
            let op = pb::request::Op::SetWatches(request);
            if self
                .send(&mut transport, op, Reply::Internal("set_watches"), None)
                .await
                .is_err()
            {
                self.fail_pending(&Error::ConnectionLoss);
                return None;
            }
        }
        if transport.flush().await.is_err() {
            self.fail_pending(&Error::ConnectionLoss);
            return None;
        }
        Some(transport)
    }

    /// Runs `work` while answering commands as a disconnected client must:
    /// requests fail fast, removals are local, a close ends the session.
    async fn while_offline<F: Future>(&mut self, work: F) -> Result<F::Output, End> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Ok(out),
                command = self.commands.recv(), if self.commands_open => match command {
                    // Nobody is left to use the session, and there is no
                    // connection to close it over: it will expire.
                    None => {
                        self.commands_open = false;
                        return Err(End::Closed);
                    }
                    Some(Command::Request { reply, .. }) => {
                        let _ = reply.send(Err(Error::ConnectionLoss));
                    }
                    Some(Command::RemoveWatch { id, reply }) => {
                        // The server forgot it with the connection; not
                        // re-registering it is all the removal needed.
                        let _ = self.registry.remove_persistent(id);
                        if let Some(tx) = reply {
                            let _ = tx.send(Ok(()));
                        }
                    }
                    Some(Command::Close { reply }) => {
                        self.closing = Some(Closing {
                            deadline: Instant::now(),
                            replies: vec![reply],
                            unconfirmed: Some(Error::ConnectionLoss),
                        });
                        return Err(End::Closed);
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap() {
        let mut b = Backoff::new();
        let first = b.next();
        assert!(first >= RECONNECT_BACKOFF_MIN && first <= RECONNECT_BACKOFF_MIN * 3 / 2);
        let mut last = first;
        for _ in 0..20 {
            last = b.next();
        }
        assert!(last >= RECONNECT_BACKOFF_MAX && last <= RECONNECT_BACKOFF_MAX * 3 / 2);
    }
}
