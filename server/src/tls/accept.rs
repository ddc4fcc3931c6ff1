//! The server side of a TLS handshake on a client port, bounded in time,
//! with a plaintext client told apart from a failed handshake so that each
//! door can refuse it in words its client understands.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::{subject_of, Stream, HANDSHAKE_TIMEOUT};

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Why a connection did not become TLS.
#[derive(Debug)]
pub enum Refused {
    /// The client's first byte is not a TLS record: it speaks plaintext.
    /// The socket is handed back, unread, for the door's refusal.
    Plaintext(TcpStream),
    /// Closed, or silent, before the handshake finished.
    Timeout,
    Closed,
    /// The handshake failed (untrusted or missing client certificate, no
    /// common protocol version, garbage...).
    Handshake(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Plaintext(_) => f.write_str("plaintext connection on a TLS-only port"),
            Refused::Timeout => write!(f, "no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
            Refused::Closed => f.write_str("closed before the TLS handshake"),
            Refused::Handshake(e) => write!(f, "TLS handshake failed: {e}"),
        }
    }
}

/// A finished handshake: the stream, and the subject of the client's
/// certificate if it presented one (rustls has verified it against the CA
/// by then; an unverifiable one fails the handshake).
pub struct Accepted {
    pub stream: Stream,
    pub subject: Option<String>,
    /// The client's certificate itself (the peer port reads the member id
    /// it names).
    pub leaf: Option<rustls::pki_types::CertificateDer<'static>>,
}

/// Runs the server side of the handshake on `tcp`.
pub async fn accept(acceptor: &TlsAcceptor, tcp: TcpStream) -> Result<Accepted, Refused> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
        Err(_) => return Err(Refused::Timeout),
        Ok(Err(_)) | Ok(Ok(0)) => return Err(Refused::Closed),
        Ok(Ok(_)) if first[0] != TLS_HANDSHAKE_RECORD => return Err(Refused::Plaintext(tcp)),
        Ok(Ok(_)) => {}
    }
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Err(_) => return Err(Refused::Timeout),
        Ok(Err(e)) => return Err(Refused::Handshake(e)),
        Ok(Ok(tls)) => tls,
    };
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.clone().into_owned());
    let subject = leaf.as_ref().and_then(|leaf| subject_of(leaf));
    Ok(Accepted {
        stream: Stream::Tls(Box::new(tls.into())),
        subject,
        leaf,
    })
}

/// The one line a refused connection leaves in the log.
pub fn log_refused(door: &'static str, peer: std::net::SocketAddr, refused: &Refused) {
    match refused {
        // Port scanners and health checks that only open a socket.
        Refused::Closed => tracing::debug!(door, %peer, "connection refused: {refused}"),
        _ => tracing::info!(door, %peer, "connection refused: {refused}"),
    }
}

/// How long a refused plaintext client gets to read our refusal.
const PLAINTEXT_LINGER: Duration = Duration::from_secs(1);
/// What we read of a refused plaintext client's bytes, at most.
const PLAINTEXT_DRAIN_BYTES_MAX: usize = 64 * 1024;

/// Tells a plaintext client, in its own protocol, that the port speaks
/// TLS only: reads what it sent (so closing does not reset the connection
/// before it can read the answer), writes `reply`, and closes. Bounded in
/// time and bytes.
pub async fn refuse_plaintext(mut tcp: TcpStream, reply: &[u8]) {
    let work = async {
        let mut buf = [0u8; 4096];
        let mut drained = 0;
        // What the client sent first is already here (we peeked it).
        if let Ok(n) = tcp.try_read(&mut buf) {
            drained += n;
        }
        tcp.write_all(reply).await?;
        tcp.shutdown().await?;
        // Wait for the client to close after reading the answer.
        while drained < PLAINTEXT_DRAIN_BYTES_MAX {
            match tcp.read(&mut buf).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout(PLAINTEXT_LINGER, work).await;
}
