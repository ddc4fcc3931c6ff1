//! TLS for the client: which servers to trust, and the certificate the
//! client presents to servers that ask for one (rustls, ring provider; no
//! OpenSSL).
//!
//! A server is verified as a browser verifies one: its certificate must
//! chain to the given CA and name the host of the address dialled
//! (`127.0.0.1` in `127.0.0.1:7000` must be among its IP SANs).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};

/// How a client speaks TLS: see [`Client::connect_tls`](crate::Client::connect_tls).
#[derive(Clone)]
pub struct TlsOptions {
    connector: TlsConnector,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions").finish_non_exhaustive()
    }
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::BadArguments(format!("TLS: {what}: {e}"))
}

impl TlsOptions {
    /// Trusts the CA certificate(s) in `ca_pem`; with `identity` (a PEM
    /// certificate chain and its PEM private key), presents that
    /// certificate to servers that ask for one.
    pub fn from_pem(ca_pem: &[u8], identity: Option<(&[u8], &[u8])>) -> Result<TlsOptions> {
        Self::build(ca_pem, "the CA", identity, ("the certificate", "the key"))
    }

    /// Like [`from_pem`](Self::from_pem), from files (what `wardenctl
    /// --tls-ca --tls-cert --tls-key` name). A certificate needs its key.
    pub fn from_files(ca: &Path, cert: Option<&Path>, key: Option<&Path>) -> Result<TlsOptions> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path).map_err(|e| bad(&format!("{what} {}", path.display()), e))
        };
        let ca_pem = read("CA file", ca)?;
        let name = |what: &str, p: Option<&Path>| {
            p.map(|p| format!("{what} {}", p.display()))
                .unwrap_or_default()
        };
        let (cert_name, key_name) = (name("certificate file", cert), name("key file", key));
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                Some((read("certificate file", cert)?, read("key file", key)?))
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad("a client certificate", "needs its private key too"))
            }
            (None, Some(_)) => return Err(bad("a private key", "needs its certificate too")),
        };
        Self::build(
            &ca_pem,
            &format!("CA file {}", ca.display()),
            identity.as_ref().map(|(c, k)| (&c[..], &k[..])),
            (&cert_name, &key_name),
        )
    }

    /// A rustls configuration of the caller's own (its own trust rules).
    pub fn from_rustls(config: Arc<ClientConfig>) -> TlsOptions {
        TlsOptions {
            connector: TlsConnector::from(config),
        }
    }

    fn build(
        ca_pem: &[u8],
        ca_name: &str,
        identity: Option<(&[u8], &[u8])>,
        (cert_name, key_name): (&str, &str),
    ) -> Result<TlsOptions> {
        let mut roots = RootCertStore::empty();
        let mut any = false;
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| bad(ca_name, e))?;
            roots.add(cert).map_err(|e| bad(ca_name, e))?;
            any = true;
        }
        if !any {
            return Err(bad(ca_name, "no PEM certificate in it"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("set-up", e))?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let chain = CertificateDer::pem_slice_iter(cert_pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| bad(cert_name, e))?;
                if chain.is_empty() {
                    return Err(bad(cert_name, "no PEM certificate in it"));
                }
                let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad(key_name, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad(&format!("{cert_name} and {key_name}"), e))?
            }
        };
        Ok(Self::from_rustls(Arc::new(config)))
    }

    /// Runs the client side of the handshake with `addr` (`host:port`)
    /// over `tcp` (also what `wardenctl snapshot save` speaks HTTPS over).
    pub async fn connect(&self, addr: &str, tcp: TcpStream) -> std::result::Result<Stream, String> {
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("TLS: {host:?} is not a usable server name: {e}"))?;
        self.connector
            .connect(name, tcp)
            .await
            .map(|s| Stream::Tls(Box::new(s.into())))
            .map_err(|e| format!("TLS handshake with {addr} failed: {}", cause(&e)))
    }
}

/// What went wrong in TLS terms, if `e` is a TLS error (rustls reports
/// through `io::Error`), with a hint where the fix is on our side.
pub(crate) fn tls_error(e: &io::Error) -> Option<String> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let hint = match tls {
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            " (the server requires a client certificate: give one, e.g. wardenctl --tls-cert --tls-key)"
        }
        rustls::Error::AlertReceived(
            rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::DecryptError,
        ) => " (the server does not accept this client's certificate: is it from the server's CA?)",
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            " (the server's certificate is not from the CA given)"
        }
        _ => "",
    };
    Some(format!("{tls}{hint}"))
}

fn cause(e: &io::Error) -> String {
    tls_error(e).unwrap_or_else(|| e.to_string())
}

/// A TCP connection, plain or inside TLS (either side of the handshake):
/// what the client, and every door and peer link of the server, read and
/// write, so their code is the same either way.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.tcp().set_nodelay(nodelay)
    }

    /// Reader and writer halves that can live in different tasks.
    pub fn into_split(self) -> (ReadHalf<Stream>, WriteHalf<Stream>) {
        tokio::io::split(self)
    }
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Self {
        Stream::Plain(s)
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
