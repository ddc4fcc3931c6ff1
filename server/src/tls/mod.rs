//! TLS for every door and for the links between peers: rustls with the
//! ring provider, no OpenSSL.
//!
//! With `--tls-cert` and `--tls-key` the client port, the ZooKeeper port
//! (as ZooKeeper's secure client port: the same port, TLS only) and the
//! HTTP port speak TLS and nothing else. With `--tls-ca` as well:
//! - a client's certificate is verified against the CA when presented
//!   (`--tls-client-auth required` makes it mandatory), and its subject
//!   reaches the core with the connection (the x509 ACL scheme's identity);
//! - peer links are mutual TLS: both ends present a certificate that must
//!   chain to the CA (or to `--peer-tls-ca`, a CA for peers alone) and
//!   name the member id it speaks for ([`peer_id`]), so a process without
//!   one, a client's certificate included, can neither join nor inject
//!   raft messages. A cluster with TLS must have a CA ([`config`] refuses
//!   to start one without).
//!
//! This module owns the rustls configurations, built once at start-up from
//! the PEM files; a file that is missing or wrong is a start-up error
//! naming the flag and the file, never a failure at the first handshake.
//!
//! [`config`]: crate::config

mod accept;
pub mod certs;
pub mod peer_id;
mod pinned;
mod stream;
mod subject;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use accept::{accept, log_refused, refuse_plaintext, Accepted, Refused};
pub use stream::Stream;
pub use subject::subject_of;

/// How long a connection may take from its first byte to a finished
/// handshake (a client that opens a socket and says nothing is dropped).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether clients must present a certificate (`--tls-client-auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientAuth {
    /// Verified against `--tls-ca` when presented; clients without one are
    /// welcome (they authenticate otherwise, or not at all).
    #[default]
    Optional,
    /// Every client must present a certificate from `--tls-ca`.
    Required,
}

/// Where the PEM files are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
    /// The CA peers' certificates chain to (`--peer-tls-ca`), when not
    /// `ca`: then no certificate of the clients' CA can be a peer's.
    pub peer_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// The rustls configurations of a server, built once.
#[derive(Clone)]
pub struct Tls {
    /// The client, ZooKeeper and HTTP ports.
    pub clients: TlsAcceptor,
    /// Peer links; `None` without a CA, and then no peer is admitted.
    pub peers: Option<PeerTls>,
    /// The member id this server's own certificate names, if any (what
    /// its peers will hold it to).
    pub member_id: Result<u64, peer_id::PeerIdError>,
    /// The lock gateway's loopback client: trusts exactly this server's
    /// certificate and presents it as its own.
    pub gateway: Arc<ClientConfig>,
}

/// Mutual TLS between peers: both sides verify against the CA.
#[derive(Clone)]
pub struct PeerTls {
    pub acceptor: TlsAcceptor,
    pub connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("peers", &self.peers.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {detail}", path.display())]
    File {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("{flag} {}: no certificate in the file (expected PEM `BEGIN CERTIFICATE`)", path.display())]
    NoCertificate { flag: &'static str, path: PathBuf },
    #[error("--tls-cert {}: {detail}", path.display())]
    Certificate { path: PathBuf, detail: String },
    #[error("TLS set-up: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{flag}: {detail}")]
    Verifier { flag: &'static str, detail: String },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_err = |e: &dyn std::fmt::Display| TlsError::File {
        flag,
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(&e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        flag: "--tls-key",
        path: path.to_path_buf(),
        detail: format!("{e} (expected a PEM private key: PKCS#8, PKCS#1 or SEC1)"),
    })
}

/// Whether a certificate may authenticate a TLS client: no extended key
/// usage at all (any use), or one that lists clientAuth.
fn allows_client_auth(der: &[u8]) -> bool {
    use x509_parser::prelude::{FromDer as _, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return false;
    };
    match cert.extended_key_usage() {
        Ok(Some(eku)) => eku.value.client_auth || eku.value.any,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// The CA certificates in `path` (`flag` names it in errors).
fn read_roots(flag: &'static str, path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(flag, path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            flag,
            path: path.to_path_buf(),
            detail: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// Reads the files and builds every configuration.
pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
    let chain = read_certs("--tls-cert", &files.cert)?;
    let key = read_key(&files.key)?;
    let roots = match &files.ca {
        None => None,
        Some(ca) => Some(read_roots("--tls-ca", ca)?),
    };
    let peer_roots = match &files.peer_ca {
        Some(ca) => Some(("--peer-tls-ca", read_roots("--peer-tls-ca", ca)?)),
        None => roots.clone().map(|r| ("--tls-ca", r)),
    };
    if peer_roots.is_some() && !allows_client_auth(&chain[0]) {
        // Peers and the lock gateway present this certificate as clients.
        return Err(TlsError::Certificate {
            path: files.cert.clone(),
            detail: "its extended key usage lacks clientAuth, which peer links and the HTTP \
                     lock gateway need (they present the server's certificate as a client's)"
                .into(),
        });
    }
    let provider = provider();
    let server_builder = || {
        ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()
    };

    let clients = match &roots {
        None => server_builder()?.with_no_client_auth(),
        Some(roots) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
            let verifier = match files.client_auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                ClientAuth::Required => verifier,
            };
            let verifier = verifier.build().map_err(|e| TlsError::Verifier {
                flag: "--tls-ca",
                detail: e.to_string(),
            })?;
            server_builder()?.with_client_cert_verifier(verifier)
        }
    }
    .with_single_cert(chain.clone(), key.clone_key())?;

    let peers = match &peer_roots {
        None => None,
        Some((flag, roots)) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                    .build()
                    .map_err(|e| TlsError::Verifier {
                        flag,
                        detail: e.to_string(),
                    })?;
            let acceptor = server_builder()?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain.clone(), key.clone_key())?;
            let connector = ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(chain.clone(), key.clone_key())?;
            Some(PeerTls {
                acceptor: TlsAcceptor::from(Arc::new(acceptor)),
                connector: TlsConnector::from(Arc::new(connector)),
            })
        }
    };
    let member_id = peer_id::member_id_of(&chain[0]);

    let pinned = pinned::Pinned {
        cert: chain[0].clone(),
        algorithms: provider.signature_verification_algorithms,
    };
    let gateway = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned))
        .with_client_auth_cert(chain, key)?;

    Ok(Tls {
        clients: TlsAcceptor::from(Arc::new(clients)),
        peers,
        member_id,
        gateway: Arc::new(gateway),
    })
}
