//! The requests in flight: who waits for each answer ([`Pending`]), how
//! commands become requests and answers reach their callers, and a clean
//! close.

use futures::SinkExt;
use prost::Message;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use warden_protocol::{pb, ErrorCode, FRAME_BYTES_MAX};

use super::{Command, Connection, End, Exit, Transport, AUTHS_MAX};
use crate::error::{decode_code, Error, Result};
use crate::types::WatchEvent;
use crate::watch::{
    oneshot_kind_after, OneshotKind, Registration, ServerRemoval, WatchId, WATCHES_MAX,
};

/// Who is waiting for a request's answer.
pub(super) enum Reply {
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
pub(super) enum PendingWatch {
    Oneshot {
        kind: OneshotKind,
        path: String,
        tx: oneshot::Sender<Result<WatchEvent>>,
    },
    /// Already in the registry; forgotten if the AddWatch fails.
    Persistent(WatchId),
}

pub(super) struct Pending {
    reply: Reply,
    watch: Option<PendingWatch>,
    /// An auth request: remembered once the server accepts it.
    auth: Option<pb::AuthRequest>,
}

/// A close in progress: who waits for it, and how long we wait for the
/// server's answer.
pub(super) struct Closing {
    pub(super) deadline: Instant,
    pub(super) replies: Vec<oneshot::Sender<Result<()>>>,
    /// Why the server's confirmation never came (the session then lives on
    /// at the server until it times out); `None` while waiting or once
    /// confirmed.
    pub(super) unconfirmed: Option<Error>,
}

impl Connection {
    pub(super) fn on_response(&mut self, response: pb::Response) -> Result<(), Exit> {
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

    pub(super) async fn on_command(
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

    pub(super) async fn remove_on_server(
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

    pub(super) async fn begin_close(
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
    pub(super) async fn send(
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
    pub(super) fn fail_pending(&mut self, err: &Error) {
        for (_, pending) in std::mem::take(&mut self.pending) {
            if let Some(PendingWatch::Persistent(id)) = pending.watch {
                let _ = self.registry.remove_persistent(id);
            }
            pending.reply.fail(err.clone());
        }
    }
}
