//! The register clients as the world runs them: when each sends its next
//! operation (or opens a session), what it does with an answer, and how
//! it gives up a session that went quiet or closed (the model itself,
//! its history and its requests: `clients.rs`).

use warden_protocol::pb;
use warden_server::core::CoreMsg;
use warden_server::watch::ConnId;

use super::clients::{self, RegClient};
use super::{Event, World};
use crate::time::US_PER_MS;

/// Between an answer and the next operation.
const THINK_MAX_MS: u64 = 30;
/// One client operation in this many creates a TTL node (before the calm).
const TTL_ONE_IN: usize = 8;
/// After a lost session, before the next.
pub(super) const BACKOFF_MIN_MS: u64 = 20;
pub(super) const BACKOFF_MAX_MS: u64 = 200;

impl World {
    pub(super) fn client(&mut self, id: u64) -> &mut RegClient {
        &mut self.clients[(id - 1) as usize]
    }

    pub(super) fn client_send(&mut self, client: u64) {
        let now = self.sched.now();
        let c = self.client(client);
        if c.pending.is_some() || c.conn.as_ref().is_some_and(|k| k.session.is_none()) {
            return;
        }
        c.attempt += 1;
        let attempt = c.attempt;
        let (node, msg, text) = match &c.conn {
            None => {
                let node = c.target;
                let incarnation = self.hosts[(node - 1) as usize].incarnation;
                let c = self.client(client);
                let msg = c.open(node, incarnation);
                (node, msg, "opens a session".to_string())
            }
            Some(conn) => {
                let (node, id) = (conn.host, conn.id);
                let ttl = !self.calm && self.rng.below(TTL_ONE_IN) == 0;
                let key = self.rng.below(clients::KEYS);
                let read = self.rng.coin();
                let ttl_ms = self.rng.between(clients::TTL_MIN_MS, clients::TTL_MAX_MS);
                let c = self.client(client);
                let request = if ttl {
                    c.create_ttl(ttl_ms, now)
                } else {
                    c.next_op(key, read, now)
                };
                let text = format!("sends {:?}", c.pending.as_ref().map(|p| &p.op));
                (node, CoreMsg::Request { conn: id, request }, text)
            }
        };
        let (conn, incarnation) = self
            .client(client)
            .conn
            .as_ref()
            .map_or((0, 0), |k| (k.id, k.incarnation));
        self.note(0, format!("c{client} {text} to n{node}"));
        let at = self.link_at(conn, true);
        self.sched.at(
            at,
            Event::ToHost {
                node,
                incarnation,
                msg: Box::new(msg),
            },
        );
        self.sched.after_us(
            clients::OP_TIMEOUT_MS * US_PER_MS,
            Event::ClientTimeout { client, attempt },
        );
    }

    pub(super) fn client_frame(&mut self, client: u64, conn: ConnId, frame: pb::ServerFrame) {
        let now = self.sched.now();
        if self.client(client).conn.as_ref().map(|k| k.id) != Some(conn) {
            return;
        }
        match frame.kind {
            Some(pb::server_frame::Kind::Connect(r)) => {
                let code = pb::ErrorCode::try_from(r.error).unwrap_or(pb::ErrorCode::SystemError);
                if code != pb::ErrorCode::Ok {
                    self.conn_lost(
                        client,
                        conn,
                        &format!("handshake refused: {code:?} {}", r.message),
                    );
                    return;
                }
                let c = self.client(client);
                if let Some(k) = c.conn.as_mut() {
                    k.session = Some(r.session_id);
                }
                c.attempt += 1;
                self.note(
                    0,
                    format!("c{client} session {:#x} on n{}", r.session_id, r.server_id),
                );
                self.think(client);
            }
            Some(pb::server_frame::Kind::Response(r)) => {
                let c = self.client(client);
                if let Some(text) = c.answered(&r, now) {
                    c.attempt += 1;
                    self.note(0, format!("c{client} {text}"));
                    self.think(client);
                }
            }
            Some(pb::server_frame::Kind::SessionEvent(e)) => {
                self.note(0, format!("c{client} session event {e:?}"));
            }
            Some(pb::server_frame::Kind::WatchEvent(_)) | None => {}
        }
    }

    pub(super) fn think(&mut self, client: u64) {
        let wait = self.rng.between(0, THINK_MAX_MS * US_PER_MS);
        self.sched.after_us(wait, Event::ClientSend { client });
    }

    pub(super) fn conn_lost_after_timeout(&mut self, client: u64) {
        let Some(conn) = self.client(client).conn.as_ref().map(|k| k.id) else {
            // Timed out before a connection was made: try again.
            self.think(client);
            return;
        };
        // The client closes the connection it gave up on.
        let (node, incarnation) = {
            let k = self.client(client).conn.as_ref().expect("checked");
            (k.host, k.incarnation)
        };
        let at = self.link_at(conn, true);
        self.sched.at(
            at,
            Event::ToHost {
                node,
                incarnation,
                msg: Box::new(CoreMsg::Closed { conn }),
            },
        );
        self.conn_lost(client, conn, "timed out");
    }

    /// The client's connection is gone: what it waited for is given up,
    /// and it opens a session on another server after a while.
    pub(super) fn conn_lost(&mut self, client: u64, conn: ConnId, why: &str) {
        if self.client(client).conn.as_ref().map(|k| k.id) != Some(conn) {
            return;
        }
        let n = self.voters.len() as u64;
        let target = 1 + self.rng.below(n as usize) as u64;
        let c = self.client(client);
        c.conn = None;
        c.attempt += 1;
        c.target = target;
        let given_up = c.given_up();
        self.note(
            0,
            format!("c{client} lost its connection ({why}); next on n{target}"),
        );
        if let Some(text) = given_up {
            self.note(0, format!("c{client} {text}"));
        }
        let wait = self.rng.between(BACKOFF_MIN_MS, BACKOFF_MAX_MS) * US_PER_MS;
        self.sched.after_us(wait, Event::ClientSend { client });
    }
}
