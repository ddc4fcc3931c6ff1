//! HTTPS for the HTTP door: an axum listener that runs each TLS handshake
//! in a task of its own, so a slow or silent client never holds up the
//! others, with at most [`HANDSHAKES_MAX`] in flight (beyond that new
//! connections wait in the backlog). Plain HTTP sent to the port gets a
//! 400 that says to use https.

use std::io;
use std::net::SocketAddr;

use crate::accept_errors::AcceptErrors;
use crate::tls::{Refused, Stream};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// TLS handshakes in progress at once on the HTTP port.
pub const HANDSHAKES_MAX: usize = 1024;

const PLAIN_HTTP_REFUSAL: &str = "HTTP/1.1 400 Bad Request\r\n\
    Content-Type: application/json\r\nConnection: close\r\nContent-Length: 61\r\n\r\n\
    {\"error\":\"this port speaks HTTPS only: use an https:// URL\"}\n";

pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(Stream, SocketAddr)>>,
    accept_errors: AcceptErrors,
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> Self {
        TlsListener {
            tcp,
            acceptor,
            handshakes: JoinSet::new(),
            accept_errors: AcceptErrors::new("https"),
        }
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Option<(Stream, SocketAddr)> {
    let _ = tcp.set_nodelay(true);
    match crate::tls::accept(&acceptor, tcp).await {
        Ok(a) => Some((a.stream, peer)),
        Err(refused) => {
            crate::tls::log_refused("http", peer, &refused);
            if let Refused::Plaintext(tcp) = refused {
                crate::tls::refuse_plaintext(tcp, PLAIN_HTTP_REFUSAL.as_bytes()).await;
            }
            None
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Stream, SocketAddr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept(), if self.handshakes.len() < HANDSHAKES_MAX => {
                    match accepted {
                        Ok((tcp, peer)) => {
                            self.accept_errors.accepted();
                            self.handshakes.spawn(handshake(self.acceptor.clone(), tcp, peer));
                        }
                        Err(e) => {
                            self.accept_errors.failed(&e).await;
                        }
                    }
                }
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(ready)) = done {
                        return ready;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plain_http_refusal_has_the_right_length() {
        let (head, body) = super::PLAIN_HTTP_REFUSAL.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
