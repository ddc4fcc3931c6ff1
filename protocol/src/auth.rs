//! ZooKeeper's ACL vocabulary, shared by the server, the client and the
//! tools: digest identities, permission letters and names, and the ACL text
//! format of zkCli (`scheme:id:perms[,scheme:id:perms...]`).
//!
//! A digest identity is stored exactly as ZooKeeper stores it:
//! `user:base64(sha1("user:password"))`, so ACLs and `--super-digest`
//! values carry over between the two.

use base64::Engine as _;

use crate::pb::Acl;
use crate::perms;

/// The ACL schemes a node's ACL may name.
pub const SCHEMES: [&str; 5] = ["world", "auth", "digest", "ip", "x509"];

/// Longest credential (`user:password`) an auth request may carry, in bytes.
pub const CREDENTIALS_BYTES_MAX: usize = 1024;

/// Why credentials or an ACL text were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// The stored form of a password: `base64(sha1("user:password"))`.
pub fn digest_hash(user: &str, password: &str) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(user.as_bytes());
    h.update(b":");
    h.update(password.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.digest().bytes())
}

/// Splits `user:password` at the first colon (a password may contain
/// colons, a user name may not); the user must not be empty.
pub fn split_credentials(credentials: &str) -> Result<(&str, &str), AuthError> {
    if credentials.len() > CREDENTIALS_BYTES_MAX {
        return Err(AuthError(format!(
            "credentials of {} bytes exceed the limit of {CREDENTIALS_BYTES_MAX}",
            credentials.len()
        )));
    }
    match credentials.split_once(':') {
        Some((user, password)) if !user.is_empty() => Ok((user, password)),
        Some(_) => Err(AuthError(
            "credentials name no user (expected user:password)".into(),
        )),
        None => Err(AuthError(
            "credentials have no colon (expected user:password)".into(),
        )),
    }
}

/// `user:password` -> the digest identity's id, `user:BASE64HASH` (what
/// `warden digest` and `wardenctl digest` print).
pub fn digest_id(credentials: &str) -> Result<String, AuthError> {
    let (user, password) = split_credentials(credentials)?;
    Ok(format!("{user}:{}", digest_hash(user, password)))
}

/// Checks a digest ACL id or `--super-digest` value: `user:hash`, both
/// non-empty, exactly one colon (base64 has none).
pub fn check_digest_id(id: &str) -> Result<(&str, &str), AuthError> {
    match id.split_once(':') {
        Some((user, hash)) if !user.is_empty() && !hash.is_empty() && !hash.contains(':') => {
            Ok((user, hash))
        }
        _ => Err(AuthError(format!(
            "{id:?} is not a digest id (expected user:BASE64HASH)"
        ))),
    }
}

/// Permission letters, in zkCli's order: `cdrwa`.
const LETTERS: [(char, u32); 5] = [
    ('c', perms::CREATE),
    ('d', perms::DELETE),
    ('r', perms::READ),
    ('w', perms::WRITE),
    ('a', perms::ADMIN),
];

/// Names, for error messages.
const NAMES: [(&str, u32); 5] = [
    ("READ", perms::READ),
    ("WRITE", perms::WRITE),
    ("CREATE", perms::CREATE),
    ("DELETE", perms::DELETE),
    ("ADMIN", perms::ADMIN),
];

/// `perms` as zkCli letters, e.g. `cdrwa`, `r`.
pub fn perms_letters(bits: u32) -> String {
    LETTERS
        .iter()
        .filter(|(_, b)| bits & b != 0)
        .map(|(c, _)| *c)
        .collect()
}

/// `perms` as names joined by `|`, e.g. `READ|ADMIN`.
pub fn perms_names(bits: u32) -> String {
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(_, b)| bits & b != 0)
        .map(|(n, _)| *n)
        .collect();
    if names.is_empty() {
        "no permission".to_string()
    } else {
        names.join("|")
    }
}

/// Parses permission letters (`cdrwa`, any order, at least one).
pub fn parse_perms(text: &str) -> Result<u32, AuthError> {
    if text.is_empty() {
        return Err(AuthError(
            "no permissions given (letters from cdrwa)".into(),
        ));
    }
    let mut bits = 0;
    for ch in text.chars() {
        match LETTERS.iter().find(|(c, _)| *c == ch) {
            Some((_, b)) => bits |= b,
            None => {
                return Err(AuthError(format!(
                    "unknown permission {ch:?} in {text:?} (letters from cdrwa)"
                )))
            }
        }
    }
    Ok(bits)
}

/// One ACL entry as text: `scheme:id:perms`.
pub fn format_acl_entry(acl: &Acl) -> String {
    format!("{}:{}:{}", acl.scheme, acl.id, perms_letters(acl.perms))
}

/// A whole ACL as text, entries joined by commas.
pub fn format_acl(acl: &[Acl]) -> String {
    acl.iter()
        .map(format_acl_entry)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses zkCli's ACL text: `scheme:id:perms[,scheme:id:perms...]`. The
/// scheme ends at the first colon and the permissions start after the last
/// one, so an id may contain colons (`digest:user:hash:r`). An x509
/// subject contains commas: an entry ends only at a comma followed by a
/// known scheme and a colon (`x509:CN=a,O=b:r,world:anyone:r`).
///
/// Only the text is checked here (known scheme, perms letters); the server
/// checks the ids.
pub fn parse_acl(text: &str) -> Result<Vec<Acl>, AuthError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(AuthError(
            "empty ACL (expected scheme:id:perms[,...])".into(),
        ));
    }
    let mut out = Vec::new();
    for entry in split_entries(text) {
        let entry = entry.trim();
        let bad = || {
            AuthError(format!(
                "ACL entry {entry:?} is not scheme:id:perms (perms letters from cdrwa)"
            ))
        };
        let (scheme, rest) = entry.split_once(':').ok_or_else(bad)?;
        let (id, letters) = rest.rsplit_once(':').ok_or_else(bad)?;
        if !SCHEMES.contains(&scheme) {
            return Err(AuthError(format!(
                "unknown ACL scheme {scheme:?} in {entry:?} (known: {})",
                SCHEMES.join(", ")
            )));
        }
        let perms =
            parse_perms(letters).map_err(|e| AuthError(format!("in {entry:?}: {}", e.0)))?;
        out.push(Acl {
            perms,
            scheme: scheme.to_string(),
            id: id.to_string(),
        });
    }
    Ok(out)
}

/// Splits at the commas that start a new `scheme:` entry.
fn split_entries(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices(',') {
        let after = text[i + 1..].trim_start();
        if SCHEMES
            .iter()
            .any(|s| after.starts_with(s) && after[s.len()..].starts_with(':'))
        {
            out.push(&text[start..i]);
            start = i + 1;
        }
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeeper() {
        // The super digest ZooKeeper's documentation gives for the
        // password "test".
        assert_eq!(
            digest_id("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        // A password may contain colons; only the first one splits.
        assert_eq!(
            digest_id("u:a:b").unwrap(),
            format!("u:{}", digest_hash("u", "a:b"))
        );
        assert!(digest_id("nocolon").is_err());
        assert!(digest_id(":pw").is_err());
        assert!(digest_id(&format!("u:{}", "x".repeat(CREDENTIALS_BYTES_MAX))).is_err());
    }

    #[test]
    fn digest_ids_are_checked() {
        assert!(check_digest_id("bob:abc=").is_ok());
        for bad in ["bob", "bob:", ":abc", "bob:a:b", ""] {
            assert!(check_digest_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn perms_round_trip() {
        assert_eq!(perms_letters(perms::ALL), "cdrwa");
        assert_eq!(parse_perms("ra").unwrap(), perms::READ | perms::ADMIN);
        assert_eq!(perms_names(perms::READ | perms::ADMIN), "READ|ADMIN");
        assert!(parse_perms("").is_err());
        assert!(parse_perms("rx").is_err());
    }

    #[test]
    fn acl_text() {
        let acl = parse_acl("world:anyone:r,digest:bob:h4sh=:cdrwa,ip:10.0.0.0/8:rw").unwrap();
        assert_eq!(acl.len(), 3);
        assert_eq!(acl[1].scheme, "digest");
        assert_eq!(acl[1].id, "bob:h4sh=");
        assert_eq!(acl[1].perms, perms::ALL);
        assert_eq!(acl[2].id, "10.0.0.0/8");
        assert_eq!(
            format_acl(&acl),
            "world:anyone:r,digest:bob:h4sh=:cdrwa,ip:10.0.0.0/8:rw"
        );
        let x = parse_acl("x509:CN=alice,O=acme:r,auth::cdrwa").unwrap();
        assert_eq!(x[0].id, "CN=alice,O=acme");
        assert_eq!(x[1].scheme, "auth");
        assert_eq!(x[1].id, "");
        for bad in ["", "world", "world:anyone", "foo:bar:r", "world:anyone:q"] {
            assert!(parse_acl(bad).is_err(), "{bad}");
        }
    }
}
