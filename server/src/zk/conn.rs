//! One ZooKeeper client connection: jute frames in, the same core requests
//! the native door makes, jute replies out.
//!
//! ZooKeeper replies do not say which request they answer beyond the xid,
//! and their layout depends on the opcode, so the connection remembers the
//! opcode of every request in flight (answers come back in request order).
//! Requests the door cannot express are answered here with ZooKeeper's
//! error (Unimplemented) in their turn, never forwarded.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};
use warden_protocol::pb::{self, server_frame::Kind as Push, ErrorCode};
use warden_protocol::FRAME_BYTES_MAX;

use super::jute::{Reader, Writer};
use super::proto::{self, opcode, Reply};
use crate::core::{CoreMsg, Door, OUTBOUND_FRAMES_MAX};
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
    /// Answered by the door itself (auth, unsupported): the error code.
    Local { xid: i32, err: i32 },
}

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    first4: [u8; 4],
) {
    let span = tracing::debug_span!("zk_conn", conn, %peer);
    run(stream, peer, conn, core, first4).instrument(span).await
}

async fn run(
    stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    first4: [u8; 4],
) {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::new(rd, codec());
    // The listener already read the length of the first frame (to tell a
    // four-letter word from a handshake): put it back.
    reader.read_buffer_mut().extend_from_slice(&first4);
    let mut writer = FramedWrite::new(wr, codec());

    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await;
    let connect = match first {
        Ok(Some(Ok(body))) => match proto::decode_connect(&body) {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "bad ConnectRequest");
                return;
            }
        },
        _ => return,
    };

    let (out_tx, mut out_rx) = mpsc::channel::<pb::ServerFrame>(OUTBOUND_FRAMES_MAX);
    let closed = CancellationToken::new();
    if core
        .send(CoreMsg::Open {
            conn,
            peer,
            door: Door::ZooKeeper,
            out: out_tx,
            closed: closed.clone(),
            connect,
        })
        .await
        .is_err()
    {
        return;
    }

    let mut pending: VecDeque<Pending> = VecDeque::new();
    // Answers the door produced itself wait here for their turn.
    let mut connected = false;
    loop {
        tokio::select! {
            _ = closed.cancelled() => {
                // Drain what the core queued before it let go.
                while let Ok(frame) = out_rx.try_recv() {
                    if !write_frame(&mut writer, frame, &mut pending, &mut connected).await {
                        break;
                    }
                }
                break;
            }
            frame = out_rx.recv() => {
                let Some(frame) = frame else { break };
                if !write_frame(&mut writer, frame, &mut pending, &mut connected).await {
                    break;
                }
                if !flush_local(&mut writer, &mut pending).await {
                    break;
                }
            }
            body = reader.next() => {
                let Some(Ok(body)) = body else { break };
                match on_request(&body, conn, &core, &mut pending).await {
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
    let _ = SinkExt::<bytes::Bytes>::close(&mut writer).await;
}

/// Decodes one request frame and hands it to the core (or queues a local
/// answer). Err: the connection must close.
async fn on_request(
    body: &[u8],
    conn: ConnId,
    core: &mpsc::Sender<CoreMsg>,
    pending: &mut VecDeque<Pending>,
) -> Result<(), ()> {
    let mut r = Reader::new(body);
    let (Ok(xid), Ok(op)) = (r.int("xid"), r.int("type")) else {
        debug!("request header malformed; closing");
        return Err(());
    };
    let rest = &body[body.len() - r.remaining()..];
    if op == opcode::AUTH {
        // ACLs are stored but not enforced yet: every identity is accepted.
        pending.push_back(Pending::Local { xid, err: 0 });
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
            pending.push_back(Pending::Local {
                xid,
                err: proto::zk_code(ErrorCode::Unimplemented),
            });
            Ok(())
        }
        Err(e) => {
            debug!(op, error = %e, "malformed request");
            pending.push_back(Pending::Local {
                xid,
                err: proto::zk_code(ErrorCode::MarshallingError),
            });
            Ok(())
        }
    }
}

/// Writes local answers that have reached the head of the queue.
async fn flush_local(
    writer: &mut FramedWrite<tokio::net::tcp::OwnedWriteHalf, LengthDelimitedCodec>,
    pending: &mut VecDeque<Pending>,
) -> bool {
    while let Some(Pending::Local { xid, err }) = pending.front() {
        let mut w = Writer::default();
        w.int(*xid).long(0).int(*err);
        pending.pop_front();
        if writer.send(w.buf.freeze()).await.is_err() {
            return false;
        }
    }
    true
}

async fn write_frame(
    writer: &mut FramedWrite<tokio::net::tcp::OwnedWriteHalf, LengthDelimitedCodec>,
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
            let Some(Pending::Core { xid, reply }) = pending.pop_front() else {
                // An answer to nothing we sent (a protocol error with xid 0).
                return false;
            };
            let (err, body) = proto::encode_response(&reply, &resp);
            let mut w = Writer::default();
            w.int(xid).long(resp.zxid as i64).int(err);
            w.buf.extend_from_slice(&body.buf);
            w.buf
        }
        Some(Push::WatchEvent(e)) => proto::encode_event(&e).buf,
        // ZooKeeper tells a client its session ended by closing the
        // connection; the client learns "expired" when it reconnects.
        Some(Push::SessionEvent(_)) | None => return true,
    };
    writer.send(body.freeze()).await.is_ok()
}
