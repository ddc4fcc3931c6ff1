//! The member id a peer's certificate speaks for.
//!
//! With TLS, chaining to the cluster's CA is not enough to be a peer: a
//! client certificate from the same CA chains too. A node's certificate
//! names the one member id it speaks for, as a URI subject alternative
//! name `warden://node/<id>` (`warden certs --node n3` writes
//! `warden://node/3`; any CA can issue it, e.g. openssl's
//! `subjectAltName = URI:warden://node/3`). A peer link is bound to that
//! id at the handshake, in both directions: what the listener accepts
//! speaks for that member only, and what a node dials must be the member
//! it meant to reach.
//!
//! A URI, not the subject's CN: the CN is the x509 ACL identity clients
//! choose names for, and an operator's CA issues client certificates with
//! whatever CN is asked; a URI SAN in the `warden` scheme is asked for on
//! purpose only.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer as _, X509Certificate};

/// What a node certificate's URI SAN starts with; the member id follows.
pub const NODE_URI_PREFIX: &str = "warden://node/";

/// The URI SAN naming member `id`.
pub fn node_uri(id: u64) -> String {
    format!("{NODE_URI_PREFIX}{id}")
}

/// Why a certificate proves no member id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerIdError {
    #[error("the certificate does not parse")]
    Unparsable,
    #[error("the certificate names no member id (a URI SAN {NODE_URI_PREFIX}<id>): not a node's certificate")]
    None,
    #[error("the certificate names more than one member id ({0:?}): a node's certificate names its own only")]
    Several(Vec<String>),
    #[error("{0:?} is not a member id (expected {NODE_URI_PREFIX}<id>, <id> a number from 1)")]
    Malformed(String),
}

/// The member id the DER certificate `der` names: exactly one URI SAN
/// in the `warden://node/` form, its id a number from 1.
pub fn member_id_of(der: &[u8]) -> Result<u64, PeerIdError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|_| PeerIdError::Unparsable)?;
    let sans = match cert.subject_alternative_name() {
        Ok(Some(ext)) => ext.value.general_names.clone(),
        Ok(None) => Vec::new(),
        Err(_) => return Err(PeerIdError::Unparsable),
    };
    let named: Vec<&str> = sans
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) if has_node_prefix(uri) => Some(*uri),
            _ => None,
        })
        .collect();
    match named.as_slice() {
        [] => Err(PeerIdError::None),
        [uri] => parse_node_uri(uri),
        several => Err(PeerIdError::Several(
            several.iter().map(|s| s.to_string()).collect(),
        )),
    }
}

/// The scheme and host are case-insensitive in a URI.
fn has_node_prefix(uri: &str) -> bool {
    uri.len() >= NODE_URI_PREFIX.len()
        && uri.is_char_boundary(NODE_URI_PREFIX.len())
        && uri[..NODE_URI_PREFIX.len()].eq_ignore_ascii_case(NODE_URI_PREFIX)
}

fn parse_node_uri(uri: &str) -> Result<u64, PeerIdError> {
    let id = &uri[NODE_URI_PREFIX.len()..];
    match id.parse::<u64>() {
        // Digits only: `+3` and ` 3` parse elsewhere, not here.
        Ok(n) if n >= 1 && id.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(PeerIdError::Malformed(uri.to_string())),
    }
}

/// The id of the leaf certificate of a finished handshake's peer.
pub fn member_id_of_chain(
    chain: Option<&[rustls::pki_types::CertificateDer<'_>]>,
) -> Result<u64, PeerIdError> {
    match chain.and_then(|c| c.first()) {
        Some(leaf) => member_id_of(leaf),
        None => Err(PeerIdError::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair, SanType};

    fn cert_with(sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.subject_alt_names.extend(sans);
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn uri(s: &str) -> SanType {
        SanType::URI(s.try_into().unwrap())
    }

    #[test]
    fn one_node_uri_names_the_member() {
        assert_eq!(
            member_id_of(&cert_with(vec![uri("warden://node/3")])),
            Ok(3)
        );
        assert_eq!(
            member_id_of(&cert_with(vec![uri("WARDEN://Node/12")])),
            Ok(12)
        );
        // Other URIs (a SPIFFE id, say) are not ours and do not count.
        assert_eq!(
            member_id_of(&cert_with(vec![
                uri("spiffe://example.org/warden"),
                uri("warden://node/7"),
            ])),
            Ok(7)
        );
    }

    #[test]
    fn no_id_several_ids_or_a_bad_one_prove_nothing() {
        assert_eq!(member_id_of(&cert_with(vec![])), Err(PeerIdError::None));
        assert_eq!(
            member_id_of(&cert_with(vec![uri("https://node/1")])),
            Err(PeerIdError::None)
        );
        assert!(matches!(
            member_id_of(&cert_with(vec![
                uri("warden://node/1"),
                uri("warden://node/2")
            ])),
            Err(PeerIdError::Several(_))
        ));
        for bad in [
            "warden://node/0",
            "warden://node/",
            "warden://node/+3",
            "warden://node/3/x",
            "warden://node/99999999999999999999999",
        ] {
            assert!(
                matches!(
                    member_id_of(&cert_with(vec![uri(bad)])),
                    Err(PeerIdError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(member_id_of(b"junk"), Err(PeerIdError::Unparsable));
        assert_eq!(member_id_of_chain(None), Err(PeerIdError::None));
    }
}
