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
use std::future::Future;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use prost::Message;
use rand::seq::SliceRandom;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, timeout, Instant};
use tokio_util::codec::Framed;
use tracing::{debug, info, info_span, warn, Instrument};
use warden_protocol::{pb, ErrorCode, FrameCodec, FRAME_BYTES_MAX, PROTOCOL_VERSION};

use crate::error::{decode_code, Error, Result};
use crate::tls::{tls_error, Stream, TlsOptions};
use crate::types::{ConnectOptions, EventType, SessionState, WatchEvent};
use crate::watch::{
    oneshot_kind_after, OneshotKind, Registration, ServerRemoval, WatchId, WatchRegistry,
    WATCHES_MAX,
};

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

/// Parses `"host:port,host:port"`.
pub(crate) fn parse_servers(servers: &str) -> Result<Vec<String>> {
    let list: Vec<String> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if list.is_empty() {
        return Err(Error::BadArguments(
            "no servers given (expected host:port,host:port)".into(),
        ));
    }
    if list.len() > SERVERS_MAX {
        return Err(Error::BadArguments(format!(
            "{} servers given, at most {SERVERS_MAX} allowed",
            list.len()
        )));
    }
    for server in &list {
        match server.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(Error::BadArguments(format!("{server}: expected host:port"))),
        }
    }
    Ok(list)
}

/// Opens a new session on one of `servers` and starts the task that owns
/// it. Gives up after `options.connect_timeout`.
pub(crate) async fn connect(
    servers: &str,
    options: ConnectOptions,
    tls: Option<TlsOptions>,
) -> Result<Handles> {
    options.validate()?;
    let mut servers = parse_servers(servers)?;
    // Spread clients over the ensemble, as ZooKeeper does.
    servers.shuffle(&mut rand::rng());
    let deadline = Instant::now() + options.connect_timeout;
    let mut backoff = Backoff::new();
    let mut last_error = String::from("no server answered");
    for attempt in 0.. {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let addr = servers[attempt % servers.len()].clone();
        let request = pb::ConnectRequest {
            protocol_version: PROTOCOL_VERSION,
            session_id: 0,
            password: Vec::new(),
            timeout_ms: options.session_timeout_ms(),
            last_zxid_seen: 0,
        };
        match timeout(deadline - now, handshake(&addr, tls.as_ref(), request)).await {
            Ok(Ok((transport, response))) => {
                let next_server = (attempt + 1) % servers.len();
                return Ok(Connection::start(
                    servers,
                    next_server,
                    addr,
                    options,
                    tls,
                    transport,
                    response,
                ));
            }
            // Not a passing trouble: the same TLS set-up fails the same way
            // every time, and a server that found the request itself bad
            // (a plaintext client on a TLS port, say) will again.
            Ok(Err(AttemptError::Tls(e))) => return Err(Error::Connect(e)),
            Ok(Err(
                e @ AttemptError::Refused {
                    code: ErrorCode::BadArguments,
                    ..
                },
            )) => return Err(Error::Connect(format!("{addr}: {e}"))),
            Ok(Err(e)) => last_error = format!("{addr}: {e}"),
            Err(_) => last_error = format!("{addr}: no answer within the connect timeout"),
        }
        debug!(error = %last_error, "connection attempt failed");
        let pause = backoff
            .next()
            .min(deadline.saturating_duration_since(Instant::now()));
        tokio::time::sleep(pause).await;
    }
    Err(Error::Connect(last_error))
}

/// Why one connection attempt failed.
#[derive(Debug)]
enum AttemptError {
    Io(String),
    /// TLS failed: the handshake, or the server's verdict on our
    /// certificate right after it.
    Tls(String),
    Refused {
        code: ErrorCode,
        message: String,
    },
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::Io(e) | AttemptError::Tls(e) => f.write_str(e),
            AttemptError::Refused { code, message } if message.is_empty() => {
                write!(f, "refused: {code}")
            }
            AttemptError::Refused { code, message } => write!(f, "refused: {code}: {message}"),
        }
    }
}

/// Connects to `addr` and runs the Connect handshake.
async fn handshake(
    addr: &str,
    tls: Option<&TlsOptions>,
    request: pb::ConnectRequest,
) -> Result<(Transport, pb::ConnectResponse), AttemptError> {
    let io = |e: &dyn std::fmt::Display| AttemptError::Io(e.to_string());
    let tcp = TcpStream::connect(addr).await.map_err(|e| io(&e))?;
    // Requests are small and latency-bound; do not let Nagle hold them.
    tcp.set_nodelay(true).map_err(|e| io(&e))?;
    let stream = match tls {
        None => Stream::Plain(tcp),
        Some(tls) => tls.connect(addr, tcp).await.map_err(AttemptError::Tls)?,
    };
    // With TLS 1.3 the server judges our certificate after the handshake
    // is done on our side: its refusal arrives as the first read's error.
    let frame_err = |e: warden_protocol::FrameError| match &e {
        warden_protocol::FrameError::Io(io_err) => match tls_error(io_err) {
            Some(cause) => AttemptError::Tls(format!("TLS with {addr} failed: {cause}")),
            None => AttemptError::Io(e.to_string()),
        },
        _ => AttemptError::Io(e.to_string()),
    };
    let mut transport = Framed::new(stream, FrameCodec::new());
    let resuming = request.session_id;
    transport
        .send(pb::ClientFrame {
            kind: Some(pb::client_frame::Kind::Connect(request)),
        })
        .await
        .map_err(frame_err)?;
    let response = match transport.next().await {
        Some(Ok(pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Connect(response)),
        })) => response,
        Some(Ok(_)) => return Err(io(&"the server answered the handshake with another frame")),
        Some(Err(e)) => return Err(frame_err(e)),
        None => return Err(io(&"the server closed the connection during the handshake")),
    };
    let code = decode_code(response.error);
    if code != ErrorCode::Ok {
        return Err(AttemptError::Refused {
            code,
            message: response.message,
        });
    }
    if response.session_id == 0 || (resuming != 0 && response.session_id != resuming) {
        // A server that hands us another session than the one we asked to
        // resume has lost ours: from our side, that is expiry.
        return Err(AttemptError::Refused {
            code: ErrorCode::SessionExpired,
            message: format!(
                "asked for session {resuming:#x}, got {:#x}",
                response.session_id
            ),
        });
    }
    Ok((transport, response))
}

/// Doubling, jittered pauses between connection attempts.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Self {
        Self {
            next: RECONNECT_BACKOFF_MIN,
        }
    }

    fn next(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(RECONNECT_BACKOFF_MAX);
        // Up to +50% so that clients cut off together do not return together.
        let jitter_ms = rand::random_range(0..=base.as_millis() as u64 / 2);
        base + Duration::from_millis(jitter_ms)
    }
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

/// Who is waiting for a request's answer.
enum Reply {
    Caller(oneshot::Sender<Result<pb::Response>>),
    RemoveWatch {
        path: String,
        reply: Option<oneshot::Sender<Result<()>>>,
    },
    /// The task's own requests (pings, SetWatches, removals of dropped
    /// watches): only logged if they fail.
    Internal(&'static str),
    Close,
}

impl Reply {
    fn fail(self, err: Error) {
        match self {
            Reply::Caller(tx) => {
                let _ = tx.send(Err(err));
            }
            Reply::RemoveWatch { reply, .. } => {
                if let Some(tx) = reply {
                    let _ = tx.send(Err(err));
                }
            }
            Reply::Internal(what) => debug!(what, error = %err, "internal request failed"),
            Reply::Close => {}
        }
    }
}

/// A watch that waits on its request's answer.
enum PendingWatch {
    Oneshot {
        kind: OneshotKind,
        path: String,
        tx: oneshot::Sender<Result<WatchEvent>>,
    },
    /// Already in the registry; forgotten if the AddWatch fails.
    Persistent(WatchId),
}

struct Pending {
    reply: Reply,
    watch: Option<PendingWatch>,
    /// An auth request: remembered once the server accepts it.
    auth: Option<pb::AuthRequest>,
}

/// A close in progress: who waits for it, and how long we wait for the
/// server's answer.
struct Closing {
    deadline: Instant,
    replies: Vec<oneshot::Sender<Result<()>>>,
    /// Why the server's confirmation never came (the session then lives on
    /// at the server until it times out); `None` while waiting or once
    /// confirmed.
    unconfirmed: Option<Error>,
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

    fn on_response(&mut self, response: pb::Response) -> Result<(), Exit> {
        self.see_zxid(response.zxid);
        let Some(pending) = self.pending.remove(&response.xid) else {
            warn!(
                xid = response.xid,
                "response to no request in flight; ignored"
            );
            return Ok(());
        };
        let code = decode_code(response.error);
        if let (Some(auth), ErrorCode::Ok) = (pending.auth, code) {
            if !self.auths.contains(&auth) {
                self.auths.push(auth);
            }
        }
        match pending.watch {
            Some(PendingWatch::Oneshot { kind, path, tx }) => {
                let node_exists = matches!(
                    response.result,
                    Some(pb::response::Result::Stat(pb::StatResponse {
                        stat: Some(_)
                    })) | Some(pb::response::Result::GetData(_))
                        | Some(pb::response::Result::GetChildren(_))
                );
                if let Some(kind) = oneshot_kind_after(kind, code, node_exists) {
                    self.registry.add_oneshot(kind, path, tx);
                }
            }
            Some(PendingWatch::Persistent(id)) if code != ErrorCode::Ok => {
                // The server set nothing, so there is nothing to remove there.
                let _ = self.registry.remove_persistent(id);
            }
            Some(PendingWatch::Persistent(_)) | None => {}
        }
        match pending.reply {
            Reply::Caller(tx) => {
                let _ = tx.send(Ok(response));
            }
            Reply::RemoveWatch { path, reply } => {
                let result = match code {
                    ErrorCode::Ok | ErrorCode::NoWatcher => Ok(()),
                    code => Err(Error::api(code, path, response.message)),
                };
                if let Some(tx) = reply {
                    let _ = tx.send(result);
                }
            }
            Reply::Internal(what) => {
                if code != ErrorCode::Ok {
                    warn!(what, %code, message = %response.message, "internal request refused");
                }
            }
            Reply::Close => {
                match code {
                    // Closed, or over already: either way the session is gone.
                    ErrorCode::Ok | ErrorCode::SessionExpired => info!("session closed"),
                    // Refused (no leader, ...): closed here only; the server
                    // keeps the session until it times out.
                    code => {
                        warn!(%code, message = %response.message, "the server refused to close the session");
                        if let Some(c) = &mut self.closing {
                            c.unconfirmed = Some(Error::api(code, "", response.message));
                        }
                    }
                }
                return Err(Exit::End(End::Closed));
            }
        }
        Ok(())
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

    async fn on_command(
        &mut self,
        command: Command,
        transport: &mut Transport,
    ) -> Result<(), Exit> {
        match command {
            Command::Request {
                op,
                registration,
                reply,
            } => {
                if self.closing.is_some() {
                    let _ = reply.send(Err(Error::Closed));
                    return Ok(());
                }
                if let pb::request::Op::Auth(a) = &op {
                    if !self.auths.contains(a) && self.auths.len() >= AUTHS_MAX {
                        let _ = reply.send(Err(Error::api(
                            ErrorCode::AuthFailed,
                            "",
                            format!("this client already holds {AUTHS_MAX} auths"),
                        )));
                        return Ok(());
                    }
                }
                let watch = match registration {
                    None => None,
                    Some(registration) if self.registry.len() >= WATCHES_MAX => {
                        let _ = reply.send(Err(Error::api(
                            ErrorCode::Throttled,
                            registration.path(),
                            format!("this client already holds {WATCHES_MAX} watches"),
                        )));
                        return Ok(());
                    }
                    Some(Registration::Oneshot { kind, path, tx }) => {
                        Some(PendingWatch::Oneshot { kind, path, tx })
                    }
                    Some(Registration::Persistent {
                        id,
                        path,
                        mode,
                        sink,
                    }) => {
                        self.registry.add_persistent(id, path, mode, sink);
                        Some(PendingWatch::Persistent(id))
                    }
                };
                self.send(transport, op, Reply::Caller(reply), watch).await
            }
            Command::RemoveWatch { id, reply } => match self.registry.remove_persistent(id) {
                Some(removal) => self.remove_on_server(removal, reply, transport).await,
                None => {
                    if let Some(tx) = reply {
                        let _ = tx.send(Ok(()));
                    }
                    Ok(())
                }
            },
            Command::Close { reply } => self.begin_close(Some(reply), transport).await,
        }
    }

    async fn remove_on_server(
        &mut self,
        removal: ServerRemoval,
        reply: Option<oneshot::Sender<Result<()>>>,
        transport: &mut Transport,
    ) -> Result<(), Exit> {
        let op = pb::request::Op::RemoveWatches(pb::RemoveWatchesRequest {
            path: removal.path.clone(),
            watcher_type: removal.mode.watcher_type() as i32,
        });
        let reply = Reply::RemoveWatch {
            path: removal.path,
            reply,
        };
        self.send(transport, op, reply, None).await
    }

    async fn begin_close(
        &mut self,
        reply: Option<oneshot::Sender<Result<()>>>,
        transport: &mut Transport,
    ) -> Result<(), Exit> {
        if let Some(closing) = &mut self.closing {
            closing.replies.extend(reply);
            return Ok(());
        }
        self.closing = Some(Closing {
            deadline: Instant::now() + self.options.request_timeout,
            replies: reply.into_iter().collect(),
            unconfirmed: None,
        });
        let op = pb::request::Op::Close(pb::CloseRequest {});
        self.send(transport, op, Reply::Close, None).await
    }

    /// Writes one request (unflushed) and records who waits for it.
    async fn send(
        &mut self,
        transport: &mut Transport,
        op: pb::request::Op,
        reply: Reply,
        watch: Option<PendingWatch>,
    ) -> Result<(), Exit> {
        let xid = self.next_xid;
        self.next_xid += 1;
        let frame = pb::ClientFrame {
            kind: Some(pb::client_frame::Kind::Request(pb::Request {
                xid,
                op: Some(op),
            })),
        };
        let len = frame.encoded_len();
        if len > FRAME_BYTES_MAX {
            // Refuse it here: the server would drop the whole connection.
            if let Some(PendingWatch::Persistent(id)) = watch {
                let _ = self.registry.remove_persistent(id);
            }
            reply.fail(Error::api(
                ErrorCode::DataTooLarge,
                "",
                format!(
                    "a request of {len} bytes exceeds the frame limit of {FRAME_BYTES_MAX} bytes"
                ),
            ));
            return Ok(());
        }
        let auth = match frame.kind {
            Some(pb::client_frame::Kind::Request(pb::Request {
                op: Some(pb::request::Op::Auth(ref a)),
                ..
            })) => Some(a.clone()),
            _ => None,
        };
        self.pending.insert(xid, Pending { reply, watch, auth });
        self.last_sent = Instant::now();
        match transport.feed(frame).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(format!("write failed: {e}"))),
        }
    }

    /// Fails every request in flight; AddWatches among them are forgotten
    /// (their callers got the error and hold no handle).
    fn fail_pending(&mut self, err: &Error) {
        for (_, pending) in std::mem::take(&mut self.pending) {
            if let Some(PendingWatch::Persistent(id)) = pending.watch {
                let _ = self.registry.remove_persistent(id);
            }
            pending.reply.fail(err.clone());
        }
    }

    fn next_addr(&mut self) -> String {
        let addr = self.servers[self.next_server % self.servers.len()].clone();
        self.next_server = (self.next_server + 1) % self.servers.len();
        addr
    }

    /// Tries the servers in turn until one resumes the session, or the
    /// session is over.
    async fn reconnect(&mut self) -> Result<Transport, End> {
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

/// The session timeout the server granted (what we asked, if it says 0).
fn negotiated(options: &ConnectOptions, timeout_ms: u32) -> Duration {
    if timeout_ms == 0 {
        options.session_timeout
    } else {
        Duration::from_millis(u64::from(timeout_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse() {
        assert_eq!(
            parse_servers("a:1, b:2 ,,[::1]:3").unwrap(),
            vec!["a:1", "b:2", "[::1]:3"]
        );
        for bad in ["", " , ", "a", "a:", ":1", "a:70000", "a:x"] {
            let err = parse_servers(bad).unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadArguments, "{bad:?}");
        }
        let many = vec!["h:1"; SERVERS_MAX + 1].join(",");
        assert!(parse_servers(&many).is_err());
    }

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

    #[test]
    fn negotiated_timeout_falls_back_to_requested() {
        let o = ConnectOptions::default();
        assert_eq!(negotiated(&o, 0), o.session_timeout);
        assert_eq!(negotiated(&o, 4000), Duration::from_secs(4));
    }
}
