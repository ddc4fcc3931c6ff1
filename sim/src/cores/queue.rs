//! A pipelined writer on the ZooKeeper door, as a model: it opens a
//! session with [`Door::ZooKeeper`] (the door whose clients restart their
//! xids on every connection, so the server numbers their writes itself,
//! `tree/writes.rs`), makes sure `/q` exists, then keeps a window of up
//! to [`WINDOW_MAX`] sequential creates of `/q/item-` in flight, each
//! holding a value no other create holds — more than the 64 answers a
//! session keeps, so a check that relied on them would miss a copy.
//!
//! Every value must end in the tree exactly once if it was acknowledged,
//! at most once if its fate is unknown (an unanswered create may or may
//! not have applied): `World::check_queue` reads the most advanced
//! replica's state at the end of the run.

use std::collections::BTreeMap;

use warden_protocol::pb::{self, ErrorCode};
use warden_server::core::{CoreMsg, Door};

use super::clients::{self, Conn};
use super::EXACTLY_ONCE;
use crate::time::SimTime;

/// The parent of the queue's items.
pub const QUEUE: &str = "/q";
/// The most creates in flight on one connection.
pub const WINDOW_MAX: usize = 160;
/// Creates one writer makes in a run (the tree, which every replica check
/// encodes, stays small).
pub const ITEMS_MAX: u64 = 1_500;
/// Between two bursts (a window sent, then every answer awaited).
pub const PAUSE_MIN_MS: u64 = 50;
pub const PAUSE_MAX_MS: u64 = 800;

pub struct QueueClient {
    /// Client ids are shared with the register clients: this one's is
    /// above theirs.
    pub id: u64,
    pub target: u64,
    pub conn: Option<Conn>,
    conns: u64,
    /// `/q` was created (or found) on this session.
    parent_ready: bool,
    next_xid: u64,
    values: u64,
    /// In flight: xid -> value (0: the parent's create).
    pub outstanding: BTreeMap<u64, u64>,
    /// Values acknowledged, with the zxid they were answered at.
    pub acked: BTreeMap<u64, u64>,
    /// Values whose create may or may not have applied.
    pub unknown: Vec<u64>,
    /// Bumped by every answer and every new connection: a timeout meant
    /// for an older state is stale.
    pub progress: u64,
    pub window: usize,
}

impl QueueClient {
    pub fn new(id: u64, target: u64, window: usize) -> Self {
        Self {
            id,
            target,
            conn: None,
            conns: 0,
            parent_ready: false,
            next_xid: 1,
            values: 0,
            outstanding: BTreeMap::new(),
            acked: BTreeMap::new(),
            unknown: Vec::new(),
            progress: 0,
            window,
        }
    }

    pub fn open(&mut self, host: u64, incarnation: u64) -> CoreMsg {
        self.conns += 1;
        self.parent_ready = false;
        // A ZooKeeper client's xids start again on every connection.
        self.next_xid = 1;
        self.progress += 1;
        let (conn, msg) = clients::open(self.id, self.conns, host, incarnation, Door::ZooKeeper);
        self.conn = Some(conn);
        msg
    }

    /// The requests to send now: the parent's create first (alone), then
    /// creates up to the window.
    pub fn fill(&mut self) -> Vec<pb::Request> {
        let Some(conn) = &self.conn else {
            return Vec::new();
        };
        if conn.session.is_none() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !self.parent_ready {
            if self.outstanding.is_empty() {
                out.push(self.create(QUEUE, 0, false));
            }
            return out;
        }
        // A burst: the whole window, then nothing until it is answered.
        if !self.outstanding.is_empty() {
            return out;
        }
        while self.outstanding.len() < self.window && self.values < ITEMS_MAX {
            self.values += 1;
            let value = self.id * 1_000_000 + self.values;
            out.push(self.create(&format!("{QUEUE}/item-"), value, true));
        }
        out
    }

    fn create(&mut self, path: &str, value: u64, sequential: bool) -> pb::Request {
        let xid = self.next_xid;
        self.next_xid += 1;
        self.outstanding.insert(xid, value);
        pb::Request {
            xid,
            op: Some(pb::request::Op::Create(pb::CreateRequest {
                path: path.into(),
                data: if value == 0 {
                    Vec::new()
                } else {
                    value.to_string().into_bytes()
                },
                acl: clients::open_acl(),
                sequential,
                ..Default::default()
            })),
        }
    }

    /// An answer; false if it ends the connection's usefulness (the
    /// parent could not be made).
    pub fn answered(&mut self, r: &pb::Response) -> bool {
        let Some(value) = self.outstanding.remove(&r.xid) else {
            return true;
        };
        self.progress += 1;
        let code = ErrorCode::try_from(r.error).unwrap_or(ErrorCode::SystemError);
        if value == 0 {
            self.parent_ready = matches!(code, ErrorCode::Ok | ErrorCode::NodeExists);
            return self.parent_ready;
        }
        match code {
            ErrorCode::Ok => {
                self.acked.insert(value, r.zxid);
            }
            // The parent exists and the name is the server's: any other
            // answer leaves the create's fate unknown.
            _ => self.unknown.push(value),
        }
        true
    }

    /// The connection is gone: what was in flight is unknown.
    pub fn lost(&mut self) -> usize {
        self.conn = None;
        self.progress += 1;
        let lost = self.outstanding.len();
        for (_, value) in std::mem::take(&mut self.outstanding) {
            if value != 0 {
                self.unknown.push(value);
            }
        }
        lost
    }

    /// When the last create was sent or answered, for the trace.
    pub fn describe(&self, now: SimTime) -> String {
        format!(
            "q{} at {}: {} in flight, {} acknowledged, {} unknown",
            self.id,
            now.ms(),
            self.outstanding.len(),
            self.acked.len(),
            self.unknown.len()
        )
    }
}

impl super::World {
    pub(super) fn queue_send(&mut self, q: usize) {
        let now = self.sched.now();
        if self.queues[q].conn.is_none() {
            let node = self.queues[q].target;
            let incarnation = self.hosts[(node - 1) as usize].incarnation;
            let msg = self.queues[q].open(node, incarnation);
            let conn = self.queues[q].conn.as_ref().map_or(0, |k| k.id);
            let id = self.queues[q].id;
            self.note(
                0,
                format!("q{id} opens a ZooKeeper-door session to n{node}"),
            );
            let at = self.link_at(conn, true);
            let msg = Box::new(msg);
            self.sched.at(
                at,
                super::Event::ToHost {
                    node,
                    incarnation,
                    msg,
                },
            );
        } else {
            let requests = self.queues[q].fill();
            if requests.is_empty() {
                return;
            }
            let (conn, node, incarnation) = {
                let k = self.queues[q].conn.as_ref().expect("checked");
                (k.id, k.host, k.incarnation)
            };
            let text = self.queues[q].describe(now);
            self.note(0, format!("{text}; sends {} to n{node}", requests.len()));
            for request in requests {
                let at = self.link_at(conn, true);
                let msg = Box::new(CoreMsg::Request { conn, request });
                self.sched.at(
                    at,
                    super::Event::ToHost {
                        node,
                        incarnation,
                        msg,
                    },
                );
            }
        }
        let progress = self.queues[q].progress;
        self.sched.after_us(
            clients::OP_TIMEOUT_MS * crate::time::US_PER_MS,
            super::Event::QueueTimeout { q, progress },
        );
    }

    pub(super) fn queue_frame(&mut self, q: usize, conn: u64, frame: pb::ServerFrame) {
        if self.queues[q].conn.as_ref().map(|k| k.id) != Some(conn) {
            return;
        }
        let id = self.queues[q].id;
        match frame.kind {
            Some(pb::server_frame::Kind::Connect(r)) => {
                let code = ErrorCode::try_from(r.error).unwrap_or(ErrorCode::SystemError);
                if code != ErrorCode::Ok {
                    self.queue_lost(q, &format!("handshake refused: {code:?} {}", r.message));
                    return;
                }
                let c = &mut self.queues[q];
                if let Some(k) = c.conn.as_mut() {
                    k.session = Some(r.session_id);
                }
                c.progress += 1;
                self.note(
                    0,
                    format!("q{id} session {:#x} on n{}", r.session_id, r.server_id),
                );
                self.sched.after_us(0, super::Event::QueueSend { q });
            }
            Some(pb::server_frame::Kind::Response(r)) => {
                if self.queues[q].answered(&r) {
                    if self.queues[q].outstanding.is_empty() {
                        let ms = self.rng.between(PAUSE_MIN_MS, PAUSE_MAX_MS);
                        self.sched
                            .after_us(ms * crate::time::US_PER_MS, super::Event::QueueSend { q });
                    }
                } else {
                    let code = ErrorCode::try_from(r.error).unwrap_or(ErrorCode::SystemError);
                    self.queue_close(q);
                    self.queue_lost(q, &format!("{QUEUE} not made: {code:?} {}", r.message));
                }
            }
            _ => {}
        }
    }

    /// The writer closes its connection (it gave up on it).
    pub(super) fn queue_close(&mut self, q: usize) {
        let Some((conn, node, incarnation)) = self.queues[q]
            .conn
            .as_ref()
            .map(|k| (k.id, k.host, k.incarnation))
        else {
            return;
        };
        let at = self.link_at(conn, true);
        let msg = Box::new(CoreMsg::Closed { conn });
        self.sched.at(
            at,
            super::Event::ToHost {
                node,
                incarnation,
                msg,
            },
        );
    }

    /// The writer's connection is gone: it opens a session elsewhere
    /// after a while.
    pub(super) fn queue_lost(&mut self, q: usize, why: &str) {
        let n = self.voters.len();
        let target = 1 + self.rng.below(n) as u64;
        let c = &mut self.queues[q];
        let lost = c.lost();
        c.target = target;
        let id = c.id;
        self.note(
            0,
            format!("q{id} lost its connection ({why}), {lost} creates in flight now unknown; next on n{target}"),
        );
        let wait = self.rng.between(
            super::registers::BACKOFF_MIN_MS,
            super::registers::BACKOFF_MAX_MS,
        );
        self.sched
            .after_us(wait * crate::time::US_PER_MS, super::Event::QueueSend { q });
    }

    /// At the end: the most advanced replica holds every acknowledged
    /// value once and no value twice.
    pub(super) fn check_queue(&mut self) -> Result<(), crate::invariants::Violation> {
        if self.queues.is_empty() {
            return Ok(());
        }
        let best = self
            .hosts
            .iter()
            .filter_map(|h| h.core.as_ref().map(|c| (c.applied_index(), h.id)))
            .max();
        let Some((applied, node)) = best else {
            self.note(0, "queue: no replica up at the end; not checked");
            return Ok(());
        };
        let state = self.host(node).core.as_ref().expect("up").encoded_state();
        let snapshot = <warden_server::proto::Snapshot as prost::Message>::decode(&state[..])
            .map_err(|e| crate::invariants::Violation {
                invariant: EXACTLY_ONCE_READ,
                detail: format!("n{node}'s state does not decode: {e}"),
            })?;
        let prefix = format!("{QUEUE}/");
        let mut copies: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for n in &snapshot.nodes {
            if let Some(name) = n.path.strip_prefix(&prefix) {
                let value = std::str::from_utf8(&n.data)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                copies.entry(value).or_default().push(name.to_string());
            }
        }
        if let Some((value, names)) = copies.iter().find(|(_, names)| names.len() > 1) {
            self.note(
                node,
                format!("queue: {value} applied {} times: {names:?}", names.len()),
            );
            return Err(crate::invariants::Violation {
                invariant: EXACTLY_ONCE,
                detail: format!(
                    "the create of {value} applied {} times ({names:?}) on n{node} at {applied}",
                    names.len()
                ),
            });
        }
        let acked_zxid = self
            .queues
            .iter()
            .flat_map(|q| q.acked.values().copied())
            .max()
            .unwrap_or(0);
        let acked: usize = self.queues.iter().map(|q| q.acked.len()).sum();
        if applied < acked_zxid {
            self.note(
                0,
                format!("queue: {} items on n{node}, no duplicate; n{node} applied {applied}, short of the last acknowledged {acked_zxid}: losses not checked", copies.len()),
            );
            return Ok(());
        }
        let missing = self
            .queues
            .iter()
            .flat_map(|q| q.acked.keys().copied())
            .find(|v| !copies.contains_key(v));
        if let Some(value) = missing {
            return Err(crate::invariants::Violation {
                invariant: EXACTLY_ONCE,
                detail: format!(
                    "the acknowledged create of {value} is not in n{node}'s tree at {applied}"
                ),
            });
        }
        self.note(
            0,
            format!(
                "queue: {} items on n{node} at {applied}, {acked} acknowledged, each once",
                copies.len()
            ),
        );
        Ok(())
    }
}

/// The final state could not be read.
const EXACTLY_ONCE_READ: &str = "the final state reads back";
