//! One client connection: decode frames, hand them to the core, write back
//! what the core queues for us, in order.
//!
//! The reader half runs in this task; a writer task drains the outbound
//! queue. When the core is done with the connection (session closed or
//! expired, connect refused, slow client) it cancels the connection's token:
//! we stop reading, and the writer flushes what is queued and closes the
//! socket.
//!
//! Bad input never reaches the core: a frame that is oversized or does not
//! decode gets one error answer naming the problem, then the connection is
//! closed (after such a frame the byte stream cannot be trusted). Other
//! clients are unaffected.

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};
use warden_protocol::pb::{self, client_frame::Kind, ErrorCode};
use warden_protocol::{FrameCodec, FrameError};

use crate::core::{CoreMsg, Door, OUTBOUND_FRAMES_MAX};
use crate::watch::ConnId;

/// How long a new connection may take to send its ConnectRequest.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

type ServerCodec = FrameCodec<pb::ClientFrame, pb::ServerFrame>;

pub async fn serve(stream: TcpStream, peer: SocketAddr, conn: ConnId, core: mpsc::Sender<CoreMsg>) {
    let span = tracing::debug_span!("conn", conn, %peer);
    run(stream, peer, conn, core).instrument(span).await
}

async fn run(stream: TcpStream, peer: SocketAddr, conn: ConnId, core: mpsc::Sender<CoreMsg>) {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::new(rd, ServerCodec::new());
    let mut writer = FramedWrite::new(wr, ServerCodec::new());
    let (out_tx, mut out_rx) = mpsc::channel::<pb::ServerFrame>(OUTBOUND_FRAMES_MAX);
    let writer_done = CancellationToken::new();
    let writer_task = {
        let done = writer_done.clone();
        tokio::spawn(
            async move {
                while let Some(frame) = out_rx.recv().await {
                    if let Err(e) = writer.send(frame).await {
                        debug!(error = %e, "write failed");
                        break;
                    }
                }
                let _ = writer.close().await;
                done.cancel();
            }
            .in_current_span(),
        )
    };

    // Handshake.
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await;
    let connect = match first {
        Ok(Some(Ok(pb::ClientFrame {
            kind: Some(Kind::Connect(c)),
        }))) => Some(c),
        Ok(Some(Ok(_))) => {
            refuse(
                &out_tx,
                ErrorCode::MarshallingError,
                "the first frame must be a ConnectRequest".into(),
            )
            .await;
            None
        }
        Ok(Some(Err(e))) => {
            refuse(
                &out_tx,
                ErrorCode::MarshallingError,
                frame_error_message(&e),
            )
            .await;
            None
        }
        Ok(None) => None,
        Err(_) => {
            refuse(
                &out_tx,
                ErrorCode::OperationTimeout,
                "no ConnectRequest within 10 s".into(),
            )
            .await;
            None
        }
    };
    let Some(connect) = connect else {
        drop(out_tx);
        let _ = writer_task.await;
        return;
    };
    let closed_by_core = CancellationToken::new();
    if core
        .send(CoreMsg::Open {
            conn,
            peer,
            door: Door::Native,
            out: out_tx.clone(),
            closed: closed_by_core.clone(),
            connect,
            tls_subject: None,
        })
        .await
        .is_err()
    {
        return;
    }

    loop {
        tokio::select! {
            _ = writer_done.cancelled() => break,
            _ = closed_by_core.cancelled() => break,
            frame = reader.next() => match frame {
                None => break,
                Some(Ok(pb::ClientFrame { kind: Some(Kind::Request(request)) })) => {
                    if core.send(CoreMsg::Request { conn, request }).await.is_err() {
                        break;
                    }
                }
                Some(Ok(_)) => {
                    send_error(&out_tx, ErrorCode::MarshallingError, "expected a Request frame after the handshake".into()).await;
                    break;
                }
                Some(Err(FrameError::Io(e))) => {
                    debug!(error = %e, "read failed");
                    break;
                }
                Some(Err(e)) => {
                    send_error(&out_tx, ErrorCode::MarshallingError, frame_error_message(&e)).await;
                    break;
                }
            }
        }
    }
    let _ = core.send(CoreMsg::Closed { conn }).await;
    drop(out_tx);
    let _ = writer_task.await;
}

fn frame_error_message(e: &FrameError) -> String {
    format!("{e}; closing the connection")
}

async fn refuse(out: &mpsc::Sender<pb::ServerFrame>, code: ErrorCode, message: String) {
    debug!(code = code.name(), %message, "handshake refused");
    let _ = out
        .send(pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Connect(pb::ConnectResponse {
                error: code as i32,
                message,
                ..Default::default()
            })),
        })
        .await;
}

/// An error that belongs to no request (the xid could not be read): xid 0.
async fn send_error(out: &mpsc::Sender<pb::ServerFrame>, code: ErrorCode, message: String) {
    debug!(code = code.name(), %message, "protocol error");
    let _ = out
        .send(pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Response(pb::Response {
                xid: 0,
                zxid: 0,
                error: code as i32,
                message,
                result: None,
            })),
        })
        .await;
}
