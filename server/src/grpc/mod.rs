//! The gRPC door: the lock API as `warden.lock.v1.LockService`
//! (`protocol/proto/lock.proto`, served with tonic) on `--grpc-listen`,
//! plus server reflection so that `grpcurl` needs no `.proto`
//! (docs/grpc.md).
//!
//! A thin adapter over the HTTP door's lock API, not a second one: every
//! call runs the same functions as the HTTP handlers (`http::locks`'s
//! `acquire_lease`, `renew_lease`, `release_lease`, `lock_state`; the
//! watch hubs of `http::watch`; the listing of `http::lock_list`) on the
//! same state ([`crate::http::lock_api`]), so gRPC callers share the
//! gateway's sessions, bounds, identities and ACLs with HTTP callers.
//! What is gRPC's own is the messages, the status codes
//! ([`service::status`]) and the transport below: the HTTP door's
//! listeners (TLS with the same certificate, the per-IP connection count)
//! with ALPN `h2`, which gRPC clients over TLS ask for.

mod service;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;
use tracing::warn;
use warden_protocol::lock::lock_service_server::LockServiceServer;

use crate::http::limited::LimitedListener;
use crate::http::tls::TlsListener;
use crate::http::Http;

pub use service::code;

/// Serves gRPC on `listener` until `stop` is cancelled, for the lock API
/// `api`. With `tls`, TLS only (the server's certificate, ALPN `h2`).
pub(crate) async fn serve(
    listener: TcpListener,
    api: Arc<Http>,
    stop: CancellationToken,
    tls: Option<crate::tls::Tls>,
    limiter: crate::limits::Limiter,
) {
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(warden_protocol::lock::FILE_DESCRIPTOR_SET)
        .build_v1();
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(warden_protocol::lock::FILE_DESCRIPTOR_SET)
        .build_v1alpha();
    let (reflection, reflection_alpha) = match (reflection, reflection_alpha) {
        (Ok(r), Ok(a)) => (r, a),
        (Err(e), _) | (_, Err(e)) => {
            // The descriptors are compiled in: this is a build bug.
            warn!(error = %e, "the gRPC door cannot describe its service; it is off");
            return;
        }
    };
    let router = tonic::transport::Server::builder()
        .add_service(LockServiceServer::new(service::Locks::new(api)))
        .add_service(reflection)
        .add_service(reflection_alpha);
    let stopped = stop.cancelled_owned();
    let served = match tls {
        None => {
            let incoming = incoming(LimitedListener::new(listener, limiter));
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
        Some(tls) => {
            let listener = TlsListener::new(listener, h2_acceptor(&tls.clients));
            let incoming = incoming(LimitedListener::new(listener, limiter));
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
    };
    if let Err(e) = served {
        warn!(error = %e, "the gRPC door stopped");
    }
}

/// The client ports' TLS configuration, offering HTTP/2 by ALPN.
fn h2_acceptor(clients: &TlsAcceptor) -> TlsAcceptor {
    let mut config = clients.config().as_ref().clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// The connections an axum listener accepts, as tonic takes them.
fn incoming<L>(listener: L) -> impl futures::Stream<Item = io::Result<Conn<L::Io>>>
where
    L: axum::serve::Listener,
{
    futures::stream::unfold(listener, |mut listener| async move {
        let (io, _) = listener.accept().await;
        Some((Ok(Conn(io)), listener))
    })
}

/// One accepted connection (plain or TLS, holding its place in the per-IP
/// count until it ends).
struct Conn<Io>(Io);

impl<Io> Connected for Conn<Io> {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl<Io: AsyncRead + Unpin> AsyncRead for Conn<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Conn<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
