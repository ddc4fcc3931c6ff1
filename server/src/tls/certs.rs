//! Throwaway certificates for trying TLS: a CA, one certificate per node,
//! client certificates (rcgen). `warden certs` and `warden local-cluster
//! --tls` make them; tests use them too.
//!
//! A node's certificate names the member id it speaks for on peer links
//! (see [`super::peer_id`]): the number its name ends with, so `n3` and
//! `node-3` speak for member 3. A client's certificate names none, so it
//! can never be a peer.
//!
//! Not for production: the CA's private key sits beside its certificate.
//! A directory that already holds a CA keeps it, so certificates issued
//! later (a node added to the cluster, another client) chain to the same CA.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use super::peer_id::node_uri;

/// The CA's certificate in the directory (what `--tls-ca` takes).
pub const CA_FILE: &str = "ca.pem";
/// The CA's private key, kept to issue more certificates later.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// Names a node certificate is valid for when none are given: what a
/// cluster on one machine dials.
pub const LOCAL_SANS: [&str; 2] = ["localhost", "127.0.0.1"];

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Rcgen { what: String, source: rcgen::Error },
    #[error("{0:?} is not a usable certificate name (letters, digits, `.`, `_`, `-`)")]
    Name(String),
    #[error(
        "{0:?} ends in 0: a node's name ends with its member id (n1, node-2), and ids start at 1"
    )]
    MemberIdZero(String),
}

/// The member id a node certificate named `name` speaks for: the number
/// its name ends with (`n3`, `node-3`, `db-east-3`: 3); `None` if it ends
/// with no digit (then the certificate serves clients but is no peer's).
pub fn member_id_of_name(name: &str) -> Option<u64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().ok()
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A server: serverAuth for its ports, clientAuth for its peer links
    /// and its lock gateway.
    Node,
    /// A client: clientAuth only.
    Client,
}

/// A certificate and its key on disk.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The member id a node's certificate speaks for on peer links.
    pub member_id: Option<u64>,
}

/// A CA that can issue certificates.
pub struct Ca {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

fn rcgen_err(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> CertError {
    let what = what.into();
    move |source| CertError::Rcgen { what, source }
}

fn write(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    let err = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, contents).map_err(err)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = private;
    Ok(())
}

fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::Read {
        path: path.to_path_buf(),
        source,
    })
}

impl Ca {
    /// The CA in `dir` (`ca.pem`, `ca-key.pem`), made if absent.
    pub fn open_or_create(dir: &Path) -> Result<Ca, CertError> {
        std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let cert_path = dir.join(CA_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            let key = KeyPair::from_pem(&read(&key_path)?)
                .map_err(rcgen_err(key_path.display().to_string()))?;
            let issuer = Issuer::from_ca_cert_pem(&read(&cert_path)?, key)
                .map_err(rcgen_err(cert_path.display().to_string()))?;
            return Ok(Ca {
                dir: dir.to_path_buf(),
                issuer,
            });
        }
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "warden");
        // Unique, so that a certificate from another throwaway CA is
        // refused as "unknown issuer", not matched by name.
        dn.push(
            DnType::CommonName,
            format!("Warden throwaway CA {:08x}", rand::random::<u32>()),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(rcgen_err("generating the CA key"))?;
        let cert = params
            .self_signed(&key)
            .map_err(rcgen_err("signing the CA certificate"))?;
        write(&key_path, &key.serialize_pem(), true)?;
        write(&cert_path, &cert.pem(), false)?;
        Ok(Ca {
            dir: dir.to_path_buf(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate's path.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    /// Issues `name.pem` and `name-key.pem` in the CA's directory, with
    /// subject `CN=name` and, for a node, `sans` as its names and the URI
    /// `warden://node/<id>` if `name` ends with a member id.
    pub fn issue(&self, name: &str, role: Role, sans: &[String]) -> Result<Issued, CertError> {
        if name.is_empty()
            || name == "ca"
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(CertError::Name(name.to_string()));
        }
        let sans = match role {
            Role::Node => sans.to_vec(),
            Role::Client => Vec::new(),
        };
        let member_id = match role {
            Role::Node => member_id_of_name(name),
            Role::Client => None,
        };
        if member_id == Some(0) {
            return Err(CertError::MemberIdZero(name.to_string()));
        }
        let mut params =
            CertificateParams::new(sans).map_err(rcgen_err(format!("{name}'s names")))?;
        if let Some(id) = member_id {
            let uri = node_uri(id)
                .try_into()
                .map_err(rcgen_err(format!("{name}'s member id")))?;
            params.subject_alt_names.push(SanType::URI(uri));
        }
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match role {
            Role::Node => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(rcgen_err(format!("{name}'s key")))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_err(format!("signing {name}'s certificate")))?;
        let issued = Issued {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}-key.pem")),
            member_id,
        };
        write(&issued.key, &key.serialize_pem(), true)?;
        write(&issued.cert, &cert.pem(), false)?;
        Ok(issued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject as _;

    #[test]
    fn a_directory_keeps_its_ca_and_certificates_chain_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::open_or_create(dir.path()).unwrap();
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        let node = ca.issue("node-1", Role::Node, &sans).unwrap();
        let ca_pem = std::fs::read(ca.cert_path()).unwrap();
        drop(ca);
        // Reopened: the same CA, not a new one.
        let again = Ca::open_or_create(dir.path()).unwrap();
        assert_eq!(std::fs::read(again.cert_path()).unwrap(), ca_pem);
        let client = again.issue("alice", Role::Client, &[]).unwrap();
        // Both load as a server's TLS set-up with that CA (which checks the
        // key matches the certificate and the clientAuth usage).
        for issued in [&node, &client] {
            let files = crate::tls::TlsFiles {
                cert: issued.cert.clone(),
                key: issued.key.clone(),
                ca: Some(again.cert_path()),
                peer_ca: None,
                client_auth: crate::tls::ClientAuth::Required,
            };
            crate::tls::load(&files).unwrap();
        }
        let der = rustls::pki_types::CertificateDer::from_pem_file(&client.cert).unwrap();
        assert_eq!(crate::tls::subject_of(&der).unwrap(), "CN=alice");
        assert!(again.issue("../x", Role::Client, &[]).is_err());
        // A node speaks for the member its name ends with; a client (even
        // one named like a node) and a node named without a number for none.
        use crate::tls::peer_id::{member_id_of, PeerIdError};
        let der_of = |i: &Issued| {
            rustls::pki_types::CertificateDer::from_pem_file(&i.cert)
                .unwrap()
                .to_vec()
        };
        assert_eq!(node.member_id, Some(1));
        assert_eq!(member_id_of(&der_of(&node)), Ok(1));
        let n12 = again.issue("n12", Role::Node, &sans).unwrap();
        assert_eq!(member_id_of(&der_of(&n12)), Ok(12));
        let fake = again.issue("n2", Role::Client, &[]).unwrap();
        assert_eq!(member_id_of(&der_of(&fake)), Err(PeerIdError::None));
        let plain = again.issue("node", Role::Node, &sans).unwrap();
        assert_eq!(plain.member_id, None);
        assert_eq!(member_id_of(&der_of(&plain)), Err(PeerIdError::None));
        assert!(matches!(
            again.issue("n0", Role::Node, &sans),
            Err(CertError::MemberIdZero(_))
        ));
    }
}

/// Flags of `warden certs`.
#[derive(Debug, Clone, clap::Args)]
pub struct CertsArgs {
    /// Where the CA and the certificates go (a CA already there is reused).
    #[arg(long, value_name = "DIR", default_value = "warden-certs")]
    pub dir: PathBuf,
    /// A server certificate NAME.pem (serverAuth and clientAuth, subject
    /// CN=NAME, valid for every --san); repeat for each node. NAME ends
    /// with the node's member id (n1, node-2): the certificate names it
    /// (URI SAN warden://node/ID), and peers accept it for that member only.
    #[arg(long = "node", value_name = "NAME")]
    pub nodes: Vec<String>,
    /// A client certificate NAME.pem (clientAuth, subject CN=NAME).
    #[arg(long = "client", value_name = "NAME")]
    pub clients: Vec<String>,
    /// Host names and IP addresses the node certificates are valid for:
    /// those that --peers and clients dial. Default: localhost, 127.0.0.1.
    #[arg(long = "san", value_name = "HOST")]
    pub sans: Vec<String>,
}

/// `warden certs`: makes what was asked, and says where it is.
pub fn run(args: &CertsArgs) -> Result<(), CertError> {
    let ca = Ca::open_or_create(&args.dir)?;
    println!("CA: {}", ca.cert_path().display());
    let sans: Vec<String> = if args.sans.is_empty() {
        LOCAL_SANS.iter().map(|s| s.to_string()).collect()
    } else {
        args.sans.clone()
    };
    for (names, role) in [(&args.nodes, Role::Node), (&args.clients, Role::Client)] {
        for name in names {
            let issued = ca.issue(name, role, &sans)?;
            let speaks_for = match (role, issued.member_id) {
                (Role::Client, _) => String::new(),
                (Role::Node, Some(id)) => format!(" (member {id}: {})", node_uri(id)),
                (Role::Node, None) => {
                    " (names no member id, so no peer accepts it: end NAME with the node's --id for a cluster)"
                        .to_string()
                }
            };
            println!(
                "{} {name}: --tls-cert {} --tls-key {}{speaks_for}",
                if role == Role::Node { "node" } else { "client" },
                issued.cert.display(),
                issued.key.display()
            );
        }
    }
    Ok(())
}
