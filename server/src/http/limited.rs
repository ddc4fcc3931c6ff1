//! Connections per client IP on the HTTP door (`--max-connections-per-ip`,
//! counted apart from the client doors: the lock gateway's own sessions
//! are native connections from this host and must not crowd out HTTP
//! callers, nor the other way round).
//!
//! An axum listener around the door's own (plain or TLS): a connection
//! over the limit is answered 429 with a JSON error naming the limit and
//! closed; an admitted one holds its place until the connection ends.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use crate::limits::{IpPermit, Limiter};

/// How long a refused client gets to take its 429.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

pub(crate) struct LimitedListener<L> {
    inner: L,
    limiter: Limiter,
}

impl<L> LimitedListener<L> {
    pub(crate) fn new(inner: L, limiter: Limiter) -> Self {
        LimitedListener { inner, limiter }
    }
}

/// An admitted connection: the stream and its place in the per-IP count.
pub(crate) struct Admitted<Io> {
    io: Io,
    _permit: IpPermit,
}

/// The 429 a refused connection gets, with `message` as its JSON error.
fn refusal(message: &str) -> String {
    let body = serde_json::json!({ "error": format!("LimitExceeded: {message}") }).to_string();
    format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl<L> Listener for LimitedListener<L>
where
    L: Listener<Addr = SocketAddr>,
{
    type Io = Admitted<L::Io>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            let (mut io, peer) = self.inner.accept().await;
            match self.limiter.admit(peer.ip()) {
                Ok(permit) => {
                    return (
                        Admitted {
                            io,
                            _permit: permit,
                        },
                        peer,
                    )
                }
                Err(message) => {
                    let answer = refusal(&message);
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
                            io.write_all(answer.as_bytes()).await?;
                            io.shutdown().await
                        })
                        .await;
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Admitted<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Admitted<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_refusal_has_the_right_length() {
        let r = super::refusal("127.0.0.1 already has 3 connections open");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(body.contains("LimitExceeded"));
    }
}
