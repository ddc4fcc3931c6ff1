//! The connection task: the one owner of a client's mutable state.
//!
//! A [`Client`](crate::Client) is only a handle. Everything that changes —
//! the TCP connection (a tokio-util `Framed` with the protocol's frame
//! codec), the map of requests in flight (xid → who is waiting), the watch
//! registry, the heartbeat timer, the session's id, password and last zxid
//! seen — lives in one task, [`Connection::run`]. API calls reach it as
//! [`Command`]s over a bounded channel, each with a `oneshot` for its
//! answer, so no lock is ever shared and none is held across an `.await`.
//!
//! The task's life:
//!
//! 1. **Connected**: it writes requests as commands arrive (many in flight:
//!    the server answers in order, tagged by xid), reads responses and
//!    pushes, and sends a ping whenever it has written nothing for a third
//!    of the session timeout, so the server keeps the session alive. If
//!    the server goes silent for two thirds of the timeout the connection
//!    is deemed dead.
//! 2. **Disconnected**: every request in flight fails with
//!    `ConnectionLoss` (it may or may not have been applied; only the caller
//!    can decide whether to retry), the state becomes `Disconnected`, and the
//!    task tries the next server in the list, with a short jittered backoff,
//!    resuming the session (id, password, last zxid seen, so no server
//!    older than what we have read can take us). On success it re-sends the
//!    watches with `SetWatches` and the state becomes `Connected`. Calls
//!    made meanwhile fail fast with `ConnectionLoss` rather than queueing
//!    behind a reconnect of unknown length.
//! 3. **Over**: the session expires (the server says so, or no server took
//!    us back within the session timeout since we last heard from one) or
//!    is closed. The state becomes `Expired` or `Closed` *before* anything
//!    is failed, so a caller that finds the task gone can tell which; every
//!    watch ends with that error; the task exits. A client whose handles are
//!    all dropped closes its session cleanly, as if `close` were called.
//!
//! Every queue is bounded: the command channel ([`COMMANDS_MAX`]), requests
//! in flight ([`IN_FLIGHT_MAX`]: beyond it the task stops taking commands,
//! so callers wait on the channel), watch queues (see `watch.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};
use tokio_util::codec::Framed;
use tracing::{debug, info, info_span, warn, Instrument};
use warden_protocol::{pb, FrameCodec};

use crate::error::{Error, Result};
use crate::tls::{Stream, TlsOptions};
use crate::types::{ConnectOptions, EventType, SessionState, WatchEvent};
use crate::watch::{Registration, WatchId, WatchRegistry};

mod dial;
mod reconnect;
mod requests;

pub(crate) use dial::connect;
use dial::negotiated;
use requests::{Closing, Pending, Reply};

/// Commands queued between the API handles and the task.
pub(crate) const COMMANDS_MAX: usize = 1024;
/// Requests written but not yet answered, per connection.
pub(crate) const IN_FLIGHT_MAX: usize = 4096;
/// Commands written before one flush, so a burst costs one syscall.
const FLUSH_BATCH_MAX: usize = 128;
/// Servers a client may be given.
const SERVERS_MAX: usize = 64;
/// First wait after a failed connection attempt; doubles per failure.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between connection attempts.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A floor on the heartbeat period, whatever timeout was negotiated.
const PING_INTERVAL_MIN: Duration = Duration::from_millis(10);
/// Most distinct auths a client remembers (and replays on reconnect); the
/// server bounds a connection's identities likewise.
pub(crate) const AUTHS_MAX: usize = 16;

type Transport = Framed<Stream, FrameCodec<pb::ServerFrame, pb::ClientFrame>>;

/// What API handles ask of the task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Send `op`; answer with the raw response (the caller interprets its
    /// error code, since only it knows the path and the op's meaning).
    Request {
        op: pb::request::Op,
        registration: Option<Registration>,
        reply: oneshot::Sender<Result<pb::Response>>,
    },
    /// A persistent-watch handle was removed or dropped.
    RemoveWatch {
        id: WatchId,
        reply: Option<oneshot::Sender<Result<()>>>,
    },
    /// Close the session cleanly.
    Close { reply: oneshot::Sender<Result<()>> },
}

/// The ends of a running connection task that a `Client` keeps.
pub(crate) struct Handles {
    pub commands: mpsc::Sender<Command>,
    pub state: watch::Receiver<SessionState>,
    pub session_id: u64,
}
/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Expired,
    Closed,
}

/// Why the connected loop returned.
enum Exit {
    /// The connection broke; the session may live on.
    Lost(String),
    End(End),
}
/// The session as the task knows it.
struct Session {
    id: u64,
    password: Vec<u8>,
    /// Negotiated with the server.
    timeout: Duration,
}

/// The task's state. See the module docs.
pub(crate) struct Connection {
    servers: Vec<String>,
    next_server: usize,
    /// The server we are (or were last) connected to, for logs.
    peer: String,
    options: ConnectOptions,
    tls: Option<TlsOptions>,
    session: Session,
    last_zxid_seen: u64,
    last_heard: Instant,
    last_sent: Instant,
    next_xid: u64,
    /// Keyed by xid; xids only grow, so the first entry is the oldest.
    pending: BTreeMap<u64, Pending>,
    registry: WatchRegistry,
    commands: mpsc::Receiver<Command>,
    /// False once every `Client` handle is gone.
    commands_open: bool,
    state: watch::Sender<SessionState>,
    closing: Option<Closing>,
    /// Auths the server accepted, in order: identities belong to a
    /// connection, so each new connection gets them again, first.
    auths: Vec<pb::AuthRequest>,
}

impl Connection {
    /// Builds the task around a freshly opened session and spawns it.
    fn start(
        servers: Vec<String>,
        next_server: usize,
        peer: String,
        options: ConnectOptions,
        tls: Option<TlsOptions>,
        transport: Transport,
        response: pb::ConnectResponse,
    ) -> Handles {
        let (commands_tx, commands_rx) = mpsc::channel(COMMANDS_MAX);
        let (state_tx, state_rx) = watch::channel(SessionState::Connected);
        let now = Instant::now();
        let session = Session {
            id: response.session_id,
            password: response.password,
            timeout: negotiated(&options, response.timeout_ms),
        };
        let session_id = session.id;
        info!(
            session_id = format_args!("{session_id:#x}"),
            %peer,
            timeout_ms = session.timeout.as_millis() as u64,
            "session opened"
        );
        let conn = Connection {
            servers,
            next_server,
            peer,
            options,
            tls,
            session,
            // Only what a response or event showed us counts as seen; a
            // fresh session has seen nothing yet.
            last_zxid_seen: 0,
            last_heard: now,
            last_sent: now,
            next_xid: 1,
            pending: BTreeMap::new(),
            registry: WatchRegistry::default(),
            commands: commands_rx,
            commands_open: true,
            state: state_tx,
            closing: None,
            auths: Vec::new(),
        };
        let span = info_span!(
            "warden_client",
            session_id = format_args!("{session_id:#x}")
        );
        tokio::spawn(conn.run(transport).instrument(span));
        Handles {
            commands: commands_tx,
            state: state_rx,
            session_id,
        }
    }

    /// The task's body: serve, reconnect, ..., until the session ends.
    async fn run(mut self, mut transport: Transport) {
        let end = loop {
            let span = info_span!("conn", peer = %self.peer);
            match self.serve(&mut transport).instrument(span).await {
                Exit::End(end) => break end,
                Exit::Lost(reason) => {
                    info!(peer = %self.peer, %reason, "connection lost");
                    self.fail_pending(&Error::ConnectionLoss);
                    self.state.send_replace(SessionState::Disconnected);
                    match self.reconnect().await {
                        Ok(next) => {
                            transport = next;
                            self.state.send_replace(SessionState::Connected);
                        }
                        Err(end) => break end,
                    }
                }
            }
        };
        self.finish(end);
    }

    /// The connected loop.
    async fn serve(&mut self, transport: &mut Transport) -> Exit {
        loop {
            if let Err(exit) = self.step(transport).await {
                return exit;
            }
            if let Err(e) = transport.flush().await {
                return self.lost(format!("write failed: {e}"));
            }
        }
    }

    /// Waits for the next thing to do and does it (writes are flushed by
    /// the caller).
    async fn step(&mut self, transport: &mut Transport) -> Result<(), Exit> {
        let ping_interval = (self.session.timeout / 3).max(PING_INTERVAL_MIN);
        // Two missed pings at the least, however short the timeout.
        let silence_max = (self.session.timeout * 2 / 3).max(ping_interval * 2);
        let ping_at = self.last_sent + ping_interval;
        let dead_at = self.last_heard + silence_max;
        let close_at = self.closing.as_ref().map(|c| c.deadline);
        let can_take = self.commands_open && self.pending.len() < IN_FLIGHT_MAX;
        tokio::select! {
            frame = transport.next() => match frame {
                Some(Ok(frame)) => {
                    self.last_heard = Instant::now();
                    self.on_frame(frame, transport).await
                }
                Some(Err(e)) => Err(self.lost(format!("read failed: {e}"))),
                None => Err(self.lost("the server closed the connection".into())),
            },
            command = self.commands.recv(), if can_take => match command {
                Some(command) => {
                    self.on_command(command, transport).await?;
                    // Take what else is queued, up to a batch, before the
                    // caller flushes once.
                    for _ in 1..FLUSH_BATCH_MAX {
                        if self.pending.len() >= IN_FLIGHT_MAX {
                            break;
                        }
                        match self.commands.try_recv() {
                            Ok(command) => self.on_command(command, transport).await?,
                            Err(_) => break,
                        }
                    }
                    Ok(())
                }
                None => {
                    // Every Client handle is gone: nobody can use the
                    // session any more, so end it now rather than let its
                    // ephemerals linger until it expires.
                    debug!("all client handles dropped; closing the session");
                    self.commands_open = false;
                    self.begin_close(None, transport).await
                }
            },
            _ = sleep_until(ping_at) => {
                let ping = pb::request::Op::Ping(pb::PingRequest {});
                self.send(transport, ping, Reply::Internal("ping"), None).await
            }
            _ = sleep_until(dead_at) => Err(self.lost(format!(
                "no word from the server for {} ms",
                silence_max.as_millis()
            ))),
            _ = sleep_until(close_at.unwrap_or(dead_at)), if close_at.is_some() => {
                warn!("the server did not answer the close in time");
                if let Some(c) = &mut self.closing {
                    c.unconfirmed = Some(Error::Timeout);
                }
                Err(Exit::End(End::Closed))
            }
        }
    }

    /// A broken connection: lost, unless we were closing anyway.
    fn lost(&mut self, reason: String) -> Exit {
        if let Some(c) = &mut self.closing {
            c.unconfirmed = Some(Error::ConnectionLoss);
            Exit::End(End::Closed)
        } else {
            Exit::Lost(reason)
        }
    }

    fn see_zxid(&mut self, zxid: u64) {
        self.last_zxid_seen = self.last_zxid_seen.max(zxid);
    }

    async fn on_frame(
        &mut self,
        frame: pb::ServerFrame,
        transport: &mut Transport,
    ) -> Result<(), Exit> {
        match frame.kind {
            Some(pb::server_frame::Kind::Response(response)) => self.on_response(response),
            Some(pb::server_frame::Kind::WatchEvent(event)) => {
                self.on_watch_event(event, transport).await
            }
            Some(pb::server_frame::Kind::SessionEvent(event)) => {
                match pb::SessionState::try_from(event.state) {
                    Ok(pb::SessionState::Expired) => {
                        warn!(message = %event.message, "the server expired the session");
                        Err(Exit::End(End::Expired))
                    }
                    Ok(pb::SessionState::Closed) => {
                        info!(message = %event.message, "the server closed the session");
                        Err(Exit::End(End::Closed))
                    }
                    other => {
                        debug!(state = ?other, "ignoring session event");
                        Ok(())
                    }
                }
            }
            Some(pb::server_frame::Kind::Connect(_)) | None => {
                Err(self.lost("protocol error: unexpected frame from the server".into()))
            }
        }
    }
    async fn on_watch_event(
        &mut self,
        event: pb::WatchEvent,
        transport: &mut Transport,
    ) -> Result<(), Exit> {
        self.see_zxid(event.zxid);
        let Some(event_type) = EventType::from_wire(event.r#type) else {
            warn!(raw_type = event.r#type, path = %event.path, "watch event of unknown type; ignored");
            return Ok(());
        };
        let event = WatchEvent {
            event_type,
            path: event.path,
            zxid: event.zxid,
        };
        debug!(?event, "watch event");
        for removal in self.registry.route(&event) {
            self.remove_on_server(removal, None, transport).await?;
        }
        Ok(())
    }
    /// Publishes the end, then fails everything still waiting.
    fn finish(mut self, end: End) {
        let (state, err) = match end {
            End::Expired => (SessionState::Expired, Error::SessionExpired),
            End::Closed => (SessionState::Closed, Error::Closed),
        };
        // First the state, so a caller that sees its answer channel drop
        // can read why.
        self.state.send_replace(state);
        self.fail_pending(&err);
        self.registry.fail_all(&err);
        if let Some(closing) = self.closing.take() {
            // An expired session is as over as a closed one.
            let answer = match (end, closing.unconfirmed) {
                (End::Closed, Some(e)) => Err(e),
                _ => Ok(()),
            };
            for tx in closing.replies {
                let _ = tx.send(answer.clone());
            }
        }
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Request { reply, .. } => {
                    let _ = reply.send(Err(err.clone()));
                }
                Command::RemoveWatch { reply, .. } => {
                    if let Some(tx) = reply {
                        let _ = tx.send(Ok(()));
                    }
                }
                Command::Close { reply } => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
        info!(?state, "session over");
    }
}
