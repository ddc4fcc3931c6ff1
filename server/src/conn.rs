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
//!
//! Limits (see [`crate::limits`]) enforced here: a connection beyond
//! `--max-connections-per-ip` is refused at its handshake; a frame beyond
//! `--max-request-bytes` is refused before its body is read; and with
//! `--max-outstanding-requests` unanswered the task stops reading the
//! socket until answers go out (back-pressure: TCP then slows the client).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};
use warden_protocol::pb::{self, client_frame::Kind, ErrorCode};
use warden_protocol::{FrameCodec, FrameError};

use crate::core::{CoreMsg, Door, OUTBOUND_FRAMES_MAX};
use crate::limits::{Limit, Limiter};
use crate::outbound::{self, OutboundTx};
use crate::tls::Stream;
use crate::watch::ConnId;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// How long a new connection may take to send its ConnectRequest.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the writer may take to flush what is queued once the
/// connection is over; then it is cut off (a client that does not read
/// must not pin the task and its queue).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refused connection is read (and the bytes dropped) after
/// its refusal, so that closing does not reset it before it reads why.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

type ServerCodec = FrameCodec<pb::ClientFrame, pb::ServerFrame>;

/// Serves one client on `stream` (TLS or not); `tls_subject` is the
/// subject of the client's verified certificate, if it presented one.
pub async fn serve(
    stream: Stream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    tls_subject: Option<String>,
    limiter: Limiter,
) {
    let span = tracing::debug_span!("conn", conn, %peer);
    run(stream, peer, conn, core, tls_subject, limiter)
        .instrument(span)
        .await
}

async fn run(
    stream: Stream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    tls_subject: Option<String>,
    limiter: Limiter,
) {
    let _ = stream.set_nodelay(true);
    let admitted = limiter.admit(peer.ip());
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::new(rd, ServerCodec::with_limit(limiter.limits.request_bytes));
    let mut writer = FramedWrite::new(wr, ServerCodec::new());
    let (out_tx, mut out_rx) = outbound::channel(OUTBOUND_FRAMES_MAX);
    // One permit per request the client may have unanswered: taken before
    // a frame is read, given back when its answer is written.
    let outstanding = Arc::new(Semaphore::new(limiter.limits.outstanding_requests));
    let writer_done = CancellationToken::new();
    let mut writer_task = {
        let done = writer_done.clone();
        let outstanding = outstanding.clone();
        tokio::spawn(
            async move {
                while let Some(frame) = out_rx.recv().await {
                    let answer = matches!(frame.kind, Some(pb::server_frame::Kind::Response(_)));
                    let sent = writer.send(frame).await;
                    if answer {
                        outstanding.add_permits(1);
                    }
                    if let Err(e) = sent {
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

    let _permit = match admitted {
        Ok(permit) => permit,
        Err(message) => {
            // Answered before the client even asks: it reads the refusal
            // in place of its ConnectResponse.
            refuse(&out_tx, ErrorCode::LimitExceeded, message).await;
            drop(out_tx);
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, &mut writer_task).await;
            let _ = tokio::time::timeout(REFUSAL_LINGER, async {
                while let Some(Ok(_)) = reader.next().await {}
            })
            .await;
            writer_task.abort();
            return;
        }
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
                frame_error_code(&e, &limiter),
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
        finish_writer(writer_task).await;
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
            tls_subject,
            can_be_read_only: false,
        })
        .await
        .is_err()
    {
        return;
    }

    loop {
        // Back-pressure: no permit, no read.
        let permit = match outstanding.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                debug!(
                    max = limiter.limits.outstanding_requests,
                    "outstanding requests at the limit; reading paused"
                );
                limiter.record(
                    Limit::OutstandingRequests,
                    &format!(
                        "connection {conn} from {peer} has {} requests unanswered; reading paused",
                        limiter.limits.outstanding_requests
                    ),
                );
                tokio::select! {
                    _ = writer_done.cancelled() => break,
                    _ = closed_by_core.cancelled() => break,
                    p = outstanding.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                }
            }
        };
        tokio::select! {
            _ = writer_done.cancelled() => break,
            _ = closed_by_core.cancelled() => break,
            frame = reader.next() => match frame {
                None => break,
                Some(Ok(pb::ClientFrame { kind: Some(Kind::Request(request)) })) => {
                    // Given back by the writer with the answer.
                    permit.forget();
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
                    send_error(&out_tx, frame_error_code(&e, &limiter), frame_error_message(&e)).await;
                    break;
                }
            }
        }
    }
    let _ = core.send(CoreMsg::Closed { conn }).await;
    drop(out_tx);
    finish_writer(writer_task).await;
}

/// Lets the writer flush what is queued, for at most [`FLUSH_TIMEOUT`].
async fn finish_writer(mut writer_task: tokio::task::JoinHandle<()>) {
    if tokio::time::timeout(FLUSH_TIMEOUT, &mut writer_task)
        .await
        .is_err()
    {
        debug!("client does not read; writer cut off");
        writer_task.abort();
    }
}

/// An oversized frame is a limit (`--max-request-bytes`); anything else
/// that does not decode is malformed.
fn frame_error_code(e: &FrameError, limiter: &Limiter) -> ErrorCode {
    match e {
        FrameError::TooLarge { .. } => {
            limiter.record(Limit::RequestBytes, &e.to_string());
            ErrorCode::LimitExceeded
        }
        _ => ErrorCode::MarshallingError,
    }
}

/// Takes a new client connection: on a TLS port the handshake comes first
/// (a plaintext client is told why it is refused), then [`serve`].
pub async fn accept(
    tcp: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    core: mpsc::Sender<CoreMsg>,
    tls: Option<TlsAcceptor>,
    limiter: Limiter,
) {
    let Some(acceptor) = tls else {
        return serve(Stream::from(tcp), peer, conn, core, None, limiter).await;
    };
    match crate::tls::accept(&acceptor, tcp).await {
        Ok(a) => serve(a.stream, peer, conn, core, a.subject, limiter).await,
        Err(refused) => {
            crate::tls::log_refused("native", peer, &refused);
            if let crate::tls::Refused::Plaintext(tcp) = refused {
                let refusal = pb::ServerFrame {
                    kind: Some(pb::server_frame::Kind::Connect(pb::ConnectResponse {
                        error: ErrorCode::BadArguments as i32,
                        message: "this port speaks TLS only: connect with TLS \
                                  (wardenctl --tls-ca FILE, or Client::connect_tls)"
                            .into(),
                        ..Default::default()
                    })),
                };
                let mut reply = bytes::BytesMut::new();
                if tokio_util::codec::Encoder::encode(&mut ServerCodec::new(), refusal, &mut reply)
                    .is_ok()
                {
                    crate::tls::refuse_plaintext(tcp, &reply).await;
                }
            }
        }
    }
}

fn frame_error_message(e: &FrameError) -> String {
    match e {
        FrameError::TooLarge { .. } => format!(
            "{e} ({}); closing the connection",
            Limit::RequestBytes.flag()
        ),
        _ => format!("{e}; closing the connection"),
    }
}

async fn refuse(out: &OutboundTx, code: ErrorCode, message: String) {
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
async fn send_error(out: &OutboundTx, code: ErrorCode, message: String) {
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
