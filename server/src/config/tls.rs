//! The TLS flags of `warden serve`, checked for consistency, and the rule
//! that a node's certificate speaks for its own member id.

use std::path::PathBuf;

use clap::Args;

use super::ConfigError;

/// The TLS flags (flattened into [`ServeArgs`](super::ServeArgs)).
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// This server's certificate chain (PEM). With --tls-key, the client,
    /// ZooKeeper and HTTP ports speak TLS only.
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA certificate(s) (PEM) that client and peer certificates must chain
    /// to. Required for a cluster with TLS (or --peer-tls-ca): peer links
    /// are then mutual TLS, each peer's certificate naming its member id.
    #[arg(long, value_name = "FILE", env = "WARDEN_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// CA certificate(s) (PEM) for peer links alone, in place of --tls-ca
    /// there: no certificate of the clients' CA can then be a peer's.
    #[arg(long, value_name = "FILE", env = "WARDEN_PEER_TLS_CA")]
    pub peer_tls_ca: Option<PathBuf>,
    /// Whether clients must present a certificate from --tls-ca.
    #[arg(long, value_enum, default_value_t = crate::tls::ClientAuth::Optional, env = "WARDEN_TLS_CLIENT_AUTH")]
    pub tls_client_auth: crate::tls::ClientAuth,
}

/// The TLS flags, checked for consistency; `None`: TLS is off.
pub(super) fn tls_files(args: &TlsArgs) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            if args.tls_client_auth == crate::tls::ClientAuth::Required && args.tls_ca.is_none() {
                return Err(ConfigError::TlsFlags(
                    "--tls-client-auth required needs --tls-ca (the CA client certificates must chain to)",
                ));
            }
            Ok(Some(crate::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: args.tls_ca.clone(),
                peer_ca: args.peer_tls_ca.clone(),
                client_auth: args.tls_client_auth,
            }))
        }
        (Some(_), None) => Err(ConfigError::TlsFlags("--tls-cert needs --tls-key")),
        (None, Some(_)) => Err(ConfigError::TlsFlags("--tls-key needs --tls-cert")),
        (None, None) if args.tls_ca.is_some() => Err(ConfigError::TlsFlags(
            "--tls-ca needs --tls-cert and --tls-key (this server's own certificate)",
        )),
        (None, None) if args.peer_tls_ca.is_some() => Err(ConfigError::TlsFlags(
            "--peer-tls-ca needs --tls-cert and --tls-key (this server's own certificate)",
        )),
        (None, None) if args.tls_client_auth == crate::tls::ClientAuth::Required => {
            Err(ConfigError::TlsFlags(
                "--tls-client-auth required needs --tls-cert, --tls-key and --tls-ca",
            ))
        }
        (None, None) => Ok(None),
    }
}

/// This server's certificate must speak for its own `--id` on peer links
/// (its peers hold it to the id it names): one naming another member is
/// refused at start; one naming none is refused for a cluster with peer
/// TLS (a single server's peer port admits nobody anyway).
pub(super) fn own_member_id(
    tls: &crate::tls::Tls,
    id: u64,
    cluster: bool,
) -> Result<(), ConfigError> {
    match &tls.member_id {
        Ok(named) if *named == id => Ok(()),
        Ok(named) => Err(ConfigError::MemberId(format!(
            "the certificate speaks for member {named} ({}), but this server is --id {id}; \
             each node needs a certificate naming its own id",
            crate::tls::peer_id::node_uri(*named)
        ))),
        Err(e) if cluster && tls.peers.is_some() => Err(ConfigError::MemberId(format!(
            "{e}; peers accept a node's certificate only for the member it names, so this \
             one needs the URI SAN {} (`warden certs --node n{id}` makes one)",
            crate::tls::peer_id::node_uri(id)
        ))),
        Err(_) => Ok(()),
    }
}
