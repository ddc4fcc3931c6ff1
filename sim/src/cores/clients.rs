//! Register clients on the native door, as a model: each opens a session
//! on one server (the real handshake, [`CoreMsg::Open`]), then reads and
//! writes a few registers (znodes `/r0`, `/r1`, ...), one operation at a
//! time: a linearizable read ([`pb::GetDataRequest`] with `linearizable`),
//! a write of a value no one wrote before ([`pb::SetDataRequest`]; a
//! [`pb::CreateRequest`] while the register is not known to exist).
//!
//! Now and then (until the run's calm end, `World::calm`) a client
//! instead creates a TTL node (`/ttl-c<client>-<n>`, a TTL of
//! [`TTL_MIN_MS`] to [`TTL_MAX_MS`]) that nobody writes again: it must be
//! gone by the end of the run (`World::check_ttl`).
//!
//! What each operation returned goes into a history the jepsen suite's
//! linearizability checker reads at the end of the run
//! ([`warden_jepsen::linearizable`]): a write answered OK took effect; a
//! write refused for a reason that proves it did nothing (no such node,
//! the node exists) is left out; any other end (an error, a timeout, a
//! lost connection) leaves its effect unknown. A client whose operation
//! is unanswered in time, or whose server went, opens a new session on
//! another server.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;
use warden_jepsen::linearizable::{Operation, RegOp};
use warden_protocol::pb::{self, ErrorCode};
use warden_server::core::{CoreMsg, Door, OUTBOUND_FRAMES_MAX};
use warden_server::outbound::{self, OutboundRx};
use warden_server::watch::ConnId;

use crate::time::SimTime;

/// Registers the clients share.
pub const KEYS: usize = 3;
/// The session timeout clients ask for.
pub const SESSION_TIMEOUT_MS: u32 = 4_000;
/// An operation (or a handshake) unanswered this long is given up.
pub const OP_TIMEOUT_MS: u64 = 3_000;

/// The TTL of the TTL nodes the clients create.
pub const TTL_MIN_MS: u64 = 100;
pub const TTL_MAX_MS: u64 = 800;
/// The name every such node starts with (under `/`).
pub const TTL_PREFIX: &str = "/ttl-";

/// A register's path.
pub fn key_path(key: usize) -> String {
    format!("/r{key}")
}

/// What a client has in flight.
#[derive(Debug, Clone)]
pub enum Op {
    Read {
        key: usize,
    },
    Write {
        key: usize,
        value: i64,
    },
    Create {
        key: usize,
        value: i64,
    },
    /// A TTL node, not a register.
    CreateTtl {
        n: u64,
        ttl_ms: u64,
    },
}

#[derive(Debug)]
pub struct Pending {
    pub xid: u64,
    pub op: Op,
    pub invoked: SimTime,
}

/// A connection to one server.
pub struct Conn {
    pub id: ConnId,
    pub host: u64,
    /// The host process it was opened with: a restarted one does not
    /// know it.
    pub incarnation: u64,
    pub rx: OutboundRx,
    pub closed: CancellationToken,
    /// The handshake was answered: the session's id.
    pub session: Option<u64>,
}

pub struct RegClient {
    pub id: u64,
    /// The server it opens its next session on.
    pub target: u64,
    pub conn: Option<Conn>,
    /// Connections opened so far (names the next).
    conns: u64,
    pub pending: Option<Pending>,
    /// Each send, timeout and loss starts a new attempt: a timeout meant
    /// for an older one is stale.
    pub attempt: u64,
    next_xid: u64,
    /// Values written so far (the next value's number).
    values: i64,
    /// TTL nodes created so far.
    ttl_nodes: u64,
    /// Registers this client saw exist (written or read).
    exists: [bool; KEYS],
    /// Every operation that may have taken effect, by register.
    pub history: BTreeMap<usize, Vec<Operation>>,
    pub acked: u64,
}

impl RegClient {
    pub fn new(id: u64, target: u64) -> Self {
        Self {
            id,
            target,
            conn: None,
            conns: 0,
            pending: None,
            attempt: 0,
            next_xid: 1,
            values: 0,
            ttl_nodes: 0,
            exists: [false; KEYS],
            history: BTreeMap::new(),
            acked: 0,
        }
    }

    /// The handshake opening a new session on `host` (process
    /// `incarnation`): the message for the core.
    pub fn open(&mut self, host: u64, incarnation: u64) -> CoreMsg {
        self.conns += 1;
        let (conn, msg) = open(self.id, self.conns, host, incarnation, Door::Native);
        self.conn = Some(conn);
        msg
    }

    /// A TTL node's create, as the request for the core.
    pub fn create_ttl(&mut self, ttl_ms: u64, now: SimTime) -> pb::Request {
        let xid = self.next_xid;
        self.next_xid += 1;
        self.ttl_nodes += 1;
        let n = self.ttl_nodes;
        self.pending = Some(Pending {
            xid,
            op: Op::CreateTtl { n, ttl_ms },
            invoked: now,
        });
        pb::Request {
            xid,
            op: Some(pb::request::Op::Create(pb::CreateRequest {
                path: format!("{TTL_PREFIX}c{}-{n}", self.id),
                acl: open_acl(),
                ttl_ms,
                ..Default::default()
            })),
        }
    }

    /// The next operation, drawn by the caller's `pick` (a register and a
    /// coin), as the request for the core.
    pub fn next_op(&mut self, key: usize, read: bool, now: SimTime) -> pb::Request {
        let xid = self.next_xid;
        self.next_xid += 1;
        let op = if read {
            Op::Read { key }
        } else {
            self.values += 1;
            let value = self.id as i64 * 1_000_000 + self.values;
            if self.exists[key] {
                Op::Write { key, value }
            } else {
                Op::Create { key, value }
            }
        };
        let path = key_path(key);
        let request = match &op {
            Op::Read { .. } => pb::request::Op::GetData(pb::GetDataRequest {
                path,
                watch: false,
                linearizable: true,
            }),
            Op::Write { value, .. } => pb::request::Op::SetData(pb::SetDataRequest {
                path,
                data: value.to_string().into_bytes(),
                version: None,
                ..Default::default()
            }),
            Op::Create { value, .. } => pb::request::Op::Create(pb::CreateRequest {
                path,
                data: value.to_string().into_bytes(),
                acl: open_acl(),
                ..Default::default()
            }),
            Op::CreateTtl { .. } => unreachable!("made by create_ttl"),
        };
        self.pending = Some(Pending {
            xid,
            op,
            invoked: now,
        });
        pb::Request {
            xid,
            op: Some(request),
        }
    }

    /// The pending operation's answer: what it did goes into the history.
    /// A text for the trace.
    pub fn answered(&mut self, response: &pb::Response, now: SimTime) -> Option<String> {
        let p = self.pending.take_if(|p| p.xid == response.xid)?;
        let code = ErrorCode::try_from(response.error).unwrap_or(ErrorCode::SystemError);
        let key = match &p.op {
            Op::Read { key } | Op::Write { key, .. } | Op::Create { key, .. } => *key,
            Op::CreateTtl { .. } => return Some(format!("{} {code:?}", describe(&p.op))),
        };
        let complete = Some(now.0);
        let recorded = match (&p.op, code) {
            (Op::Read { .. }, ErrorCode::Ok) => {
                let value = match &response.result {
                    Some(pb::response::Result::GetData(d)) => parse_value(&d.data),
                    _ => None,
                };
                self.exists[key] = true;
                Some((RegOp::Read(value), complete))
            }
            (Op::Read { .. }, ErrorCode::NoNode) => {
                self.exists[key] = false;
                Some((RegOp::Read(None), complete))
            }
            // A read that failed observed nothing.
            (Op::Read { .. }, _) => None,
            (Op::Write { value, .. } | Op::Create { value, .. }, ErrorCode::Ok) => {
                self.exists[key] = true;
                self.acked += 1;
                Some((RegOp::Write(*value), complete))
            }
            // Refusals that prove the write did nothing.
            (Op::Write { .. }, ErrorCode::NoNode) => {
                self.exists[key] = false;
                None
            }
            (Op::Create { .. }, ErrorCode::NodeExists) => {
                self.exists[key] = true;
                None
            }
            (Op::Write { value, .. } | Op::Create { value, .. }, _) => {
                Some((RegOp::Write(*value), None))
            }
            (Op::CreateTtl { .. }, _) => unreachable!("answered above"),
        };
        let text = format!(
            "{} {:?}: {:?}{}",
            describe(&p.op),
            code,
            recorded.as_ref().map(|(op, _)| op),
            if response.message.is_empty() {
                String::new()
            } else {
                format!(" ({})", response.message)
            }
        );
        if let Some((op, complete)) = recorded {
            self.record(key, p.invoked, complete, op);
        }
        Some(text)
    }

    /// The pending operation will never be answered (timed out, or its
    /// connection is gone): a write's effect is unknown, a read is
    /// dropped.
    pub fn given_up(&mut self) -> Option<String> {
        let p = self.pending.take()?;
        if let Op::Write { key, value } | Op::Create { key, value } = &p.op {
            let (key, value) = (*key, *value);
            self.record(key, p.invoked, None, RegOp::Write(value));
        }
        Some(format!("{} given up", describe(&p.op)))
    }

    fn record(&mut self, key: usize, invoked: SimTime, complete: Option<u64>, op: RegOp) {
        self.history.entry(key).or_default().push(Operation {
            process: self.id,
            invoke: invoked.0,
            complete,
            op,
        });
    }
}

/// Client `client`'s `seq`th connection, to `host` (process
/// `incarnation`), on `door`, and its handshake for the core (a new
/// session).
pub fn open(client: u64, seq: u64, host: u64, incarnation: u64, door: Door) -> (Conn, CoreMsg) {
    let id = client * 1_000_000 + seq;
    let (out, rx) = outbound::channel(OUTBOUND_FRAMES_MAX);
    let closed = CancellationToken::new();
    let conn = Conn {
        id,
        host,
        incarnation,
        rx,
        closed: closed.clone(),
        session: None,
    };
    let peer: SocketAddr = format!("10.1.0.{client}:{}", 40_000 + seq % 20_000)
        .parse()
        .expect("a literal address");
    let msg = CoreMsg::Open {
        conn: id,
        peer,
        door,
        out,
        closed,
        connect: pb::ConnectRequest {
            protocol_version: warden_protocol::PROTOCOL_VERSION,
            timeout_ms: SESSION_TIMEOUT_MS,
            ..Default::default()
        },
        tls_subject: None,
        can_be_read_only: false,
    };
    (conn, msg)
}

/// Full permissions for anyone: the clients' znodes.
pub fn open_acl() -> Vec<pb::Acl> {
    vec![pb::Acl {
        perms: 31,
        scheme: "world".into(),
        id: "anyone".into(),
    }]
}

fn parse_value(data: &[u8]) -> Option<i64> {
    std::str::from_utf8(data).ok()?.parse().ok()
}

fn describe(op: &Op) -> String {
    match op {
        Op::Read { key } => format!("read {}", key_path(*key)),
        Op::Write { key, value } => format!("write {} {value}", key_path(*key)),
        Op::Create { key, value } => format!("create {} {value}", key_path(*key)),
        Op::CreateTtl { n, ttl_ms } => format!("create TTL node #{n} ({ttl_ms} ms)"),
    }
}
