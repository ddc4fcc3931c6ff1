//! One ZooKeeper client connection: jute frames in, the same core requests
//! the native door makes, jute replies out.
//!
//! ZooKeeper replies do not say which request they answer beyond the xid,
//! and their layout depends on the opcode, so the connection remembers the
//! opcode of every request in flight (answers come back in request order).
//! Requests the door cannot express are answered here with ZooKeeper's
//! error (Unimplemented) in their turn, never forwarded.
//!
//! Limits as on the native door, in ZooKeeper's manner: a frame beyond
//! `--zk-max-packet-bytes` (ZooKeeper's jute.maxbuffer, 0xfffff) or
//! `--max-request-bytes`, whichever is smaller, closes the connection
//! before its body is read, as ZooKeeper does (its clients see
//! ConnectionLoss); with
//! `--max-outstanding-requests` unanswered the door stops reading.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use tokio::io::WriteHalf;
use tokio::sync::mpsc;
use tokio_util::codec::{Decoder, FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};
use warden_protocol::pb::{self, server_frame::Kind as Push, ErrorCode};
use warden_protocol::FRAME_BYTES_MAX;

use super::frames::BoundedFrames;
use super::jute::{Reader, Writer};
use super::proto::{self, opcode, Reply};
use super::sasl::{self, Sasl};
use crate::conn::FLUSH_TIMEOUT;
use crate::core::{CoreMsg, Door, OUTBOUND_FRAMES_MAX};
use crate::limits::{Limit, Limiter};
use crate::outbound;
use crate::sasl::SaslUsers;
use crate::tls::Stream;
use crate::watch::ConnId;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(FRAME_BYTES_MAX)
        .new_codec()
}

/// What a queued answer needs to be encoded.
enum Pending {
    /// Forwarded to the core: encode its response for this opcode.
    Core { xid: i32, reply: Reply },
    /// Answered by the door itself (unsupported, malformed, a SASL
    /// challenge): the error code, the reply's body, and whether the
    /// connection closes once it is sent.
    Local {
        xid: i32,
        err: i32,
        body: Option<BytesMut>,
        close: bool,
    },
    /// A SASL exchange the core is adding the identities of: once it
    /// confirms, the client gets `token` (or AuthFailed, and the
    /// connection closes).
    Sasl { xid: i32, token: Vec<u8> },
}

impl Pending {
    /// An error answered by the door itself.
    fn error(xid: i32, code: ErrorCode) -> Self {
        Pending::Local {
            xid,
            err: proto::zk_code(code),
            body: None,
            close: false,
        }
    }
}

/// Serves one ZooKeeper client on `stream` (TLS or not); `tls_subject` is
/// the subject of its verified certificate, if it presented one;
/// `sasl_users` the SASL users (`--zk-sasl-jaas`), if any.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    stream: Stream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    first4: [u8; 4],
    tls_subject: Option<String>,
    limiter: Limiter,
    sasl_users: Option<Arc<SaslUsers>>,
) {
    let span = tracing::debug_span!("zk_conn", conn, %peer);
    let sasl = Sasl::new(sasl_users);
    run(stream, peer, conn, core, first4, tls_subject, limiter, sasl)
        .instrument(span)
        .await
}

#[allow(clippy::too_many_arguments)]
async fn run(
    stream: Stream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    first4: [u8; 4],
    tls_subject: Option<String>,
    limiter: Limiter,
    mut sasl: Sasl,
) {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let limits = &limiter.limits;
    let mut frames = if limits.zk_packet_bytes <= limits.request_bytes {
        BoundedFrames::new(limits.zk_packet_bytes, Limit::ZkPacketBytes.flag())
    } else {
        BoundedFrames::new(limits.request_bytes, Limit::RequestBytes.flag())
    };
    // The announced length is known already: over the bound, close now
    // (ZooKeeper's answer to four bytes that are no word, too) rather
    // than wait for bytes that will not come.
    if let Err(e) = frames.decode(&mut BytesMut::from(&first4[..])) {
        frame_refused(&e, &limiter, peer);
        return;
    }
    let mut reader = FramedRead::new(rd, frames);
    // The listener already read the length of the first frame (to tell a
    // four-letter word from a handshake): put it back.
    reader.read_buffer_mut().extend_from_slice(&first4);
    let mut writer = FramedWrite::new(wr, codec());

    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await;
    let (connect, can_be_read_only) = match first {
        Ok(Some(Ok(body))) => match proto::decode_connect(&body) {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "bad ConnectRequest");
                return;
            }
        },
        Ok(Some(Err(e))) => {
            frame_refused(&e, &limiter, peer);
            return;
        }
        _ => return,
    };

    let (out_tx, mut out_rx) = outbound::channel(OUTBOUND_FRAMES_MAX);
    let closed = CancellationToken::new();
    if core
        .send(CoreMsg::Open {
            conn,
            peer,
            door: Door::ZooKeeper,
            out: out_tx,
            closed: closed.clone(),
            connect,
            tls_subject,
            can_be_read_only,
        })
        .await
        .is_err()
    {
        return;
    }

    let mut pending: VecDeque<Pending> = VecDeque::new();
    // Answers the door produced itself wait here for their turn.
    let mut connected = false;
    // Back-pressure: with this many requests unanswered, stop reading.
    let outstanding_max = limiter.limits.outstanding_requests;
    let mut paused = false;
    // Once the core lets go, a write has FLUSH_TIMEOUT left: a client that
    // does not read must not pin this task.
    let cut_off = async {
        closed.cancelled().await;
        tokio::time::sleep(FLUSH_TIMEOUT).await;
    };
    tokio::pin!(cut_off);
    loop {
        if pending.len() >= outstanding_max && !paused {
            limiter.record(
                Limit::OutstandingRequests,
                &format!("ZooKeeper connection {conn} from {peer} has {outstanding_max} requests unanswered; reading paused"),
            );
        }
        paused = pending.len() >= outstanding_max;
        tokio::select! {
            _ = &mut cut_off => {
                debug!("client does not read; connection cut off");
                break;
            }
            _ = closed.cancelled() => {
                // Drain what the core queued before it let go.
                let drain = async {
                    while let Some(frame) = out_rx.try_recv() {
                        if !write_frame(&mut writer, frame, &mut pending, &mut connected).await {
                            break;
                        }
                    }
                };
                if tokio::time::timeout(FLUSH_TIMEOUT, drain).await.is_err() {
                    debug!("client does not read; connection cut off");
                }
                break;
            }
            frame = out_rx.recv() => {
                let Some(frame) = frame else { break };
                let written = tokio::select! {
                    ok = write_frame(&mut writer, frame, &mut pending, &mut connected) => ok,
                    _ = &mut cut_off => false,
                };
                if !written {
                    break;
                }
                if !flush_local(&mut writer, &mut pending).await {
                    break;
                }
            }
            body = reader.next(), if !paused => {
                let body = match body {
                    Some(Ok(body)) => body,
                    Some(Err(e)) => {
                        frame_refused(&e, &limiter, peer);
                        break;
                    }
                    None => break,
                };
                match on_request(&body, conn, peer, &core, &mut pending, &mut sasl).await {
                    Ok(()) => {}
                    Err(()) => break,
                }
                // A local answer at the head of the queue can go now.
                if !flush_local(&mut writer, &mut pending).await {
                    break;
                }
            }
        }
    }
    let _ = core.send(CoreMsg::Closed { conn }).await;
    let _ = tokio::time::timeout(FLUSH_TIMEOUT, SinkExt::<bytes::Bytes>::close(&mut writer)).await;
}

/// A frame the decoder refused: oversized (ZooKeeper closes the connection
/// without an answer, and so do we; the log and the metric say why), or
/// a read error.
fn frame_refused(e: &std::io::Error, limiter: &Limiter, peer: SocketAddr) {
    if e.kind() == std::io::ErrorKind::InvalidData {
        let limit = Limit::named_in(&e.to_string()).unwrap_or(Limit::RequestBytes);
        limiter.record(
            limit,
            &format!("ZooKeeper client {peer}: {e}; connection closed"),
        );
    } else {
        debug!(error = %e, "read failed");
    }
}

/// Decodes one request frame and hands it to the core (or queues a local
/// answer). Err: the connection must close.
async fn on_request(
    body: &[u8],
    conn: ConnId,
    peer: SocketAddr,
    core: &mpsc::Sender<CoreMsg>,
    pending: &mut VecDeque<Pending>,
    sasl: &mut Sasl,
) -> Result<(), ()> {
    let mut r = Reader::new(body);
    let (Ok(xid), Ok(op)) = (r.int("xid"), r.int("type")) else {
        debug!("request header malformed; closing");
        return Err(());
    };
    let rest = &body[body.len() - r.remaining()..];
    if op == opcode::SASL {
        match sasl.on_request(rest, peer) {
            sasl::Outcome::Continue(token) => pending.push_back(Pending::Local {
                xid,
                err: 0,
                body: Some(sasl::response_body(Some(&token)).buf),
                close: false,
            }),
            sasl::Outcome::Authenticated { user, hash, token } => {
                pending.push_back(Pending::Sasl { xid, token });
                let msg = CoreMsg::SaslAuthenticated {
                    conn,
                    xid: xid as u32 as u64,
                    user,
                    hash,
                };
                return core.send(msg).await.map_err(|_| ());
            }
            // As ZooKeeper: AuthFailed, a null token, and the connection
            // closed.
            sasl::Outcome::Failed => pending.push_back(Pending::Local {
                xid,
                err: proto::zk_code(ErrorCode::AuthFailed),
                body: Some(sasl::response_body(None).buf),
                close: true,
            }),
        }
        return Ok(());
    }
    match proto::decode_request(op, rest) {
        Ok((request_op, reply)) => {
            pending.push_back(Pending::Core { xid, reply });
            let request = pb::Request {
                xid: xid as u32 as u64,
                op: Some(request_op),
            };
            core.send(CoreMsg::Request { conn, request })
                .await
                .map_err(|_| ())
        }
        Err(proto::DecodeError::Unsupported(op)) => {
            debug!(op, "unsupported opcode");
            pending.push_back(Pending::error(xid, ErrorCode::Unimplemented));
            Ok(())
        }
        Err(proto::DecodeError::Refused(code, why)) => {
            debug!(op, %why, "refused");
            pending.push_back(Pending::error(xid, code));
            Ok(())
        }
        Err(e) => {
            debug!(op, error = %e, "malformed request");
            pending.push_back(Pending::error(xid, ErrorCode::MarshallingError));
            Ok(())
        }
    }
}

/// Writes local answers that have reached the head of the queue. False:
/// the connection is to close (a write failed, or the answer said so).
async fn flush_local(
    writer: &mut FramedWrite<WriteHalf<Stream>, LengthDelimitedCodec>,
    pending: &mut VecDeque<Pending>,
) -> bool {
    while let Some(Pending::Local { .. }) = pending.front() {
        let Some(Pending::Local {
            xid,
            err,
            body,
            close,
        }) = pending.pop_front()
        else {
            unreachable!("front checked above");
        };
        let mut w = Writer::default();
        w.int(xid).long(0).int(err);
        if let Some(body) = body {
            w.buf.extend_from_slice(&body);
        }
        if writer.send(w.buf.freeze()).await.is_err() || close {
            return false;
        }
    }
    true
}

async fn write_frame(
    writer: &mut FramedWrite<WriteHalf<Stream>, LengthDelimitedCodec>,
    frame: pb::ServerFrame,
    pending: &mut VecDeque<Pending>,
    connected: &mut bool,
) -> bool {
    let body: BytesMut = match frame.kind {
        Some(Push::Connect(c)) => {
            *connected = c.error == ErrorCode::Ok as i32;
            proto::encode_connect(&c).buf
        }
        Some(Push::Response(resp)) => {
            let (xid, reply) = match pending.pop_front() {
                Some(Pending::Core { xid, reply }) => (xid, reply),
                Some(Pending::Sasl { xid, token }) => {
                    // SASL answers carry zxid 0, as ZooKeeper's do.
                    let ok = resp.error == ErrorCode::Ok as i32;
                    let mut w = Writer::default();
                    if ok {
                        w.int(xid).long(0).int(0);
                        w.buf
                            .extend_from_slice(&sasl::response_body(Some(&token)).buf);
                    } else {
                        debug!(message = %resp.message, "SASL identities refused; closing the connection");
                        w.int(xid)
                            .long(0)
                            .int(proto::zk_code(ErrorCode::AuthFailed));
                        w.buf.extend_from_slice(&sasl::response_body(None).buf);
                    }
                    return writer.send(w.buf.freeze()).await.is_ok() && ok;
                }
                // An answer to nothing we sent (a protocol error with xid 0).
                _ => return false,
            };
            let (err, body) = proto::encode_response(&reply, &resp);
            let mut w = Writer::default();
            w.int(xid).long(resp.zxid as i64).int(err);
            w.buf.extend_from_slice(&body.buf);
            if reply == Reply::Plain(opcode::AUTH) && err != 0 {
                // ZooKeeper answers a failed auth with AuthFailed and
                // closes the connection; its clients expect exactly that.
                debug!(message = %resp.message, "auth failed; closing the connection");
                let _ = writer.send(w.buf.freeze()).await;
                return false;
            }
            w.buf
        }
        Some(Push::WatchEvent(e)) => proto::encode_event(&e).buf,
        // ZooKeeper tells a client its session ended by closing the
        // connection; the client learns "expired" when it reconnects.
        Some(Push::SessionEvent(_)) | None => return true,
    };
    writer.send(body.freeze()).await.is_ok()
}
