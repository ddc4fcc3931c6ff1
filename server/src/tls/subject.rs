//! A certificate's subject as an RFC 4514 string (`CN=alice,O=acme`): the
//! identity the x509 ACL scheme matches, spelled as ZooKeeper's x509
//! provider spells it (Java's `X500Principal.getName()`, RFC 2253, which
//! RFC 4514 updates): the RDNs last to first, joined by `,` without spaces,
//! the usual short names, every other attribute as its dotted OID with the
//! value in `#`-hex DER.

use x509_parser::der_parser::asn1_rs::ToDer as _;
use x509_parser::prelude::{FromDer as _, X509Certificate, X509Name};

/// The subject of the DER certificate `der`; `None` if it does not parse
/// (a certificate rustls verified always does).
pub fn subject_of(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(rfc4514(cert.subject()))
}

/// RFC 4514 string of a distinguished name.
pub fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    match (short_name(&oid), atv.as_str()) {
                        (Some(short), Ok(value)) => format!("{short}={}", escape(value)),
                        _ => {
                            let der = atv.attr_value().to_der_vec().unwrap_or_default();
                            format!("{oid}=#{}", hex(&der))
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// The attribute names RFC 4514 (section 3) knows; others go by OID.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// RFC 4514 section 2.4: `"+,;<>\` always, `#` and space at the start,
/// space at the end, NUL as `\00`.
fn escape(value: &str) -> String {
    let last = value.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert_with(dn: DistinguishedName) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subject_reads_last_rdn_first_without_spaces() {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "NL");
        dn.push(DnType::OrganizationName, "acme");
        dn.push(DnType::CommonName, "alice");
        assert_eq!(subject_of(&cert_with(dn)).unwrap(), "CN=alice,O=acme,C=NL");
    }

    #[test]
    fn special_characters_are_escaped() {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Acme, Inc.");
        dn.push(DnType::CommonName, "#bob+1 ");
        assert_eq!(
            subject_of(&cert_with(dn)).unwrap(),
            r"CN=\#bob\+1\ ,O=Acme\, Inc."
        );
    }

    #[test]
    fn unknown_attributes_go_by_oid_and_hex() {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "carol");
        // emailAddress is not an RFC 4514 name: Java prints it by OID too.
        dn.push(
            DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
            rcgen::DnValue::Ia5String("c@x.org".try_into().unwrap()),
        );
        assert_eq!(
            subject_of(&cert_with(dn)).unwrap(),
            "1.2.840.113549.1.9.1=#1607634078 2e6f7267,CN=carol".replace(' ', "")
        );
    }

    #[test]
    fn garbage_is_no_subject() {
        assert_eq!(subject_of(b"not a certificate"), None);
    }
}
