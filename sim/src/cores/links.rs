//! The links between clients and servers: not faulted, in order per
//! connection, each message delayed a little; and the answers a server's
//! core queued for its clients, carried to them after each of its turns.

use warden_protocol::pb;
use warden_server::watch::ConnId;

use super::clients::Conn;
use super::{Event, World};
use crate::time::SimTime;

/// Client links are not faulted: a message or answer takes this long.
const CLIENT_DELAY_MIN_US: u64 = 100;
const CLIENT_DELAY_MAX_US: u64 = 1_000;

impl World {
    fn client_delay(&mut self) -> u64 {
        self.rng.between(CLIENT_DELAY_MIN_US, CLIENT_DELAY_MAX_US)
    }

    /// When a message on `conn` (toward the server if `to_server`) sent
    /// now arrives: after a drawn delay, and never before the one sent
    /// before it on the same connection.
    pub(super) fn link_at(&mut self, conn: ConnId, to_server: bool) -> SimTime {
        let delay = self.client_delay();
        let at = self.sched.now().plus_us(delay);
        let last = self.links.entry((conn, to_server)).or_default();
        let at = at.max(*last);
        *last = at;
        at
    }

    /// Answers and closings a host's core queued for its clients travel to
    /// them.
    pub(super) fn answer_clients(&mut self, node: u64) {
        for c in 0..self.clients.len() {
            let client = self.clients[c].id;
            let Some((conn, frames, closed)) = drain(self.clients[c].conn.as_mut(), node) else {
                continue;
            };
            for frame in frames {
                let at = self.link_at(conn, false);
                let frame = Box::new(frame);
                self.sched.at(
                    at,
                    Event::ToClient {
                        client,
                        conn,
                        frame,
                    },
                );
            }
            if closed {
                let at = self.link_at(conn, false);
                self.sched.at(at, Event::ConnLost { client, conn });
            }
        }
        for q in 0..self.queues.len() {
            let Some((conn, frames, closed)) = drain(self.queues[q].conn.as_mut(), node) else {
                continue;
            };
            for frame in frames {
                let at = self.link_at(conn, false);
                let frame = Box::new(frame);
                self.sched.at(at, Event::QueueFrame { q, conn, frame });
            }
            if closed {
                let at = self.link_at(conn, false);
                self.sched.at(at, Event::QueueLost { q, conn });
            }
        }
    }
}

/// What a client's connection to `node` has received (its id, the frames,
/// whether the server closed it); `None` if it is not on `node`.
fn drain(conn: Option<&mut Conn>, node: u64) -> Option<(ConnId, Vec<pb::ServerFrame>, bool)> {
    let conn = conn.filter(|c| c.host == node)?;
    let mut frames = Vec::new();
    while let Some(frame) = conn.rx.try_recv() {
        frames.push(frame);
    }
    Some((conn.id, frames, conn.closed.is_cancelled()))
}
