//! Authentication: which identities a connection holds.
//!
//! Every connection starts with `ip:<peer address>` (and
//! `x509:<certificate subject>` when TLS verified a client certificate).
//! An auth request (ZooKeeper's addAuth) adds one more:
//! `digest:user:base64(sha1("user:password"))`, exactly as ZooKeeper
//! computes it, and for the super user (`--super-digest`) the `super:`
//! identity too, which passes every ACL check.
//! A SASL exchange on the ZooKeeper port ([`crate::sasl`]) adds
//! `sasl:user` and the digest identity of that user and password
//! ([`AuthConfig::sasl_ids`]).
//!
//! What is checked, decided by the operator's flags:
//! - without `--auth-users`, any well-formed `user:password` is accepted
//!   (ZooKeeper's behaviour: the digest is only an identity, and only an
//!   ACL naming that exact digest grants anything);
//! - with `--auth-users FILE`, the user must be listed there with the
//!   digest of the password given;
//! - naming the super user with a wrong password always fails.
//!
//! This module only decides; the core records the identities on the
//! connection and every request carries them (writes inside their `Txn`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use warden_protocol::auth::{check_digest_id, digest_hash, split_credentials};

use crate::proto::AuthId;
use crate::tree::acl::SUPER_SCHEME;

/// Most identities one connection may collect (a client that keeps adding
/// auths is refused beyond this, not given an unbounded list).
pub const CONN_IDS_MAX: usize = 16;
/// Largest `--auth-users` file read, in bytes.
pub const AUTH_USERS_FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// The operator's authentication settings, validated once at start-up.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// `--super-digest`: the super user's name and stored hash.
    super_user: Option<(String, String)>,
    /// `--auth-users`: user -> stored hash. `None`: no user list, every
    /// well-formed credential is accepted.
    users: Option<HashMap<String, String>>,
}

impl AuthConfig {
    /// From `--super-digest user:BASE64HASH` and `--auth-users FILE`.
    pub fn new(super_digest: Option<&str>, users_file: Option<&Path>) -> Result<Self, String> {
        let super_user = match super_digest {
            None => None,
            Some(s) => {
                let (user, hash) =
                    check_digest_id(s.trim()).map_err(|e| format!("--super-digest: {e}"))?;
                Some((user.to_string(), hash.to_string()))
            }
        };
        let users = match users_file {
            None => None,
            Some(path) => Some(load_users(path)?),
        };
        Ok(AuthConfig { super_user, users })
    }

    /// Whether the password of `user` can be checked here (the super user,
    /// or a user list is given): the HTTP door says 401 for a wrong one.
    pub fn verifies_passwords(&self) -> bool {
        self.super_user.is_some() || self.users.is_some()
    }

    /// Whether `--super-digest` names a super user: the cluster's admin
    /// ([`crate::authority`]).
    pub fn has_super_user(&self) -> bool {
        self.super_user.is_some()
    }

    /// Whether a password of `user` that [`authenticate`](Self::authenticate)
    /// accepts was checked against something the operator configured
    /// (the super user, or a user list): the HTTP door's gateway opens a
    /// session for such a credential without asking the tree.
    pub fn vouches_for(&self, user: &str) -> bool {
        self.users.is_some()
            || self
                .super_user
                .as_ref()
                .is_some_and(|(name, _)| name == user)
    }

    /// The identities an auth request adds, or why it is refused.
    pub fn authenticate(&self, scheme: &str, auth: &[u8]) -> Result<Vec<AuthId>, String> {
        if scheme != "digest" {
            return Err(format!(
                "unknown auth scheme {:?}: only digest (user:password) is accepted; \
                 ip and x509 identities come from the connection itself",
                scheme.escape_debug().to_string()
            ));
        }
        let credentials = std::str::from_utf8(auth)
            .map_err(|_| "digest credentials are not UTF-8".to_string())?;
        let (user, password) = split_credentials(credentials).map_err(|e| e.0)?;
        let hash = digest_hash(user, password);
        let digest = AuthId {
            scheme: "digest".into(),
            id: format!("{user}:{hash}"),
        };
        if let Some((super_name, super_hash)) = &self.super_user {
            if user == super_name {
                if !same_secret(hash.as_bytes(), super_hash.as_bytes()) {
                    return Err(format!("wrong password for the super user {user:?}"));
                }
                let sup = AuthId {
                    scheme: SUPER_SCHEME.into(),
                    id: String::new(),
                };
                return Ok(vec![sup, digest]);
            }
        }
        match &self.users {
            None => Ok(vec![digest]),
            Some(users) => match users.get(user) {
                Some(stored) if same_secret(hash.as_bytes(), stored.as_bytes()) => Ok(vec![digest]),
                Some(_) => Err(format!("wrong password for user {user:?}")),
                None => Err(format!("unknown user {user:?}")),
            },
        }
    }
}

impl AuthConfig {
    /// The identities a completed SASL exchange gives `user`, whose
    /// password has the digest `hash`: `sasl:USER`, as ZooKeeper gives
    /// it (ACLs with scheme sasl), and the digest identity of the same
    /// user and password (ACLs written for digest auth); the super user
    /// too when that identity is `--super-digest`'s.
    pub fn sasl_ids(&self, user: &str, hash: &str) -> Vec<AuthId> {
        let mut ids = vec![
            AuthId {
                scheme: SASL_SCHEME.into(),
                id: user.to_string(),
            },
            AuthId {
                scheme: "digest".into(),
                id: format!("{user}:{hash}"),
            },
        ];
        if let Some((super_name, super_hash)) = &self.super_user {
            if user == super_name && same_secret(hash.as_bytes(), super_hash.as_bytes()) {
                ids.insert(
                    0,
                    AuthId {
                        scheme: SUPER_SCHEME.into(),
                        id: String::new(),
                    },
                );
            }
        }
        ids
    }
}

/// The scheme of the identity a SASL exchange gives (ZooKeeper's).
pub const SASL_SCHEME: &str = "sasl";

/// Compares two secrets (hashes, tokens) without stopping at the first
/// difference, so the time taken does not say how much of a guess was
/// right. The one such comparison of the server: every door's check of a
/// password, token or SASL response calls it.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads an `--auth-users` file: one `user:BASE64HASH` per line (what
/// `warden digest user:password` prints); blank lines and lines starting
/// with `#` are skipped.
fn load_users(path: &Path) -> Result<HashMap<String, String>, String> {
    let what = |e: &dyn std::fmt::Display| format!("--auth-users {}: {e}", path.display());
    let len = std::fs::metadata(path).map_err(|e| what(&e))?.len();
    if len > AUTH_USERS_FILE_BYTES_MAX {
        return Err(what(&format_args!(
            "{len} bytes exceeds the limit of {AUTH_USERS_FILE_BYTES_MAX}"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| what(&e))?;
    parse_users(&text).map_err(|e| what(&e))
}

fn parse_users(text: &str) -> Result<HashMap<String, String>, String> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (user, hash) = check_digest_id(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        if users.insert(user.to_string(), hash.to_string()).is_some() {
            return Err(format!("line {}: user {user:?} is listed twice", n + 1));
        }
    }
    Ok(users)
}

/// The identities a connection starts with: its peer's address, and the
/// subject of its verified client certificate, if any.
pub fn connection_ids(peer: SocketAddr, tls_subject: Option<&str>) -> Vec<AuthId> {
    // An IPv4 client on a dual-stack socket shows up as ::ffff:a.b.c.d;
    // ACLs name it as a.b.c.d.
    let mut ids = vec![AuthId {
        scheme: "ip".into(),
        id: peer.ip().to_canonical().to_string(),
    }];
    if let Some(subject) = tls_subject {
        ids.push(AuthId {
            scheme: "x509".into(),
            id: subject.to_string(),
        });
    }
    ids
}

/// Adds `new` to a connection's identities (once each), all or none.
pub fn add_ids(ids: &mut Vec<AuthId>, new: Vec<AuthId>) -> Result<(), String> {
    let mut fresh: Vec<AuthId> = Vec::new();
    for id in new {
        if !ids.contains(&id) && !fresh.contains(&id) {
            fresh.push(id);
        }
    }
    if ids.len() + fresh.len() > CONN_IDS_MAX {
        return Err(format!(
            "this connection already holds {} identities (at most {CONN_IDS_MAX})",
            ids.len()
        ));
    }
    ids.extend(fresh);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::acl::allowed;
    use warden_protocol::auth::digest_id;
    use warden_protocol::pb::Acl;
    use warden_protocol::perms;

    fn config(super_digest: Option<&str>, users: Option<&str>) -> AuthConfig {
        AuthConfig {
            super_user: super_digest.map(|s| {
                let (u, h) = check_digest_id(s).unwrap();
                (u.to_string(), h.to_string())
            }),
            users: users.map(|u| parse_users(u).unwrap()),
        }
    }

    #[test]
    fn any_well_formed_digest_without_a_user_list() {
        let c = config(None, None);
        let ids = c.authenticate("digest", b"bob:secret").unwrap();
        assert_eq!(ids.len(), 1);
        assert_eq!(ids[0].scheme, "digest");
        assert_eq!(ids[0].id, digest_id("bob:secret").unwrap());
        assert!(c.authenticate("digest", b"bob").is_err());
        assert!(c.authenticate("digest", b":pw").is_err());
        assert!(c.authenticate("digest", &[0xff, b':', b'x']).is_err());
        assert!(c.authenticate("kerberos", b"bob:secret").is_err());
        assert!(c.authenticate("ip", b"127.0.0.1").is_err());
        assert!(!c.verifies_passwords());
    }

    #[test]
    fn the_user_list_checks_passwords() {
        let list = format!(
            "# users\n\n{}\n  {}  \n",
            digest_id("bob:secret").unwrap(),
            digest_id("alice:pw:with:colons").unwrap()
        );
        let c = config(None, Some(&list));
        assert!(c.verifies_passwords());
        assert!(c.authenticate("digest", b"bob:secret").is_ok());
        assert!(c.authenticate("digest", b"alice:pw:with:colons").is_ok());
        let wrong = c.authenticate("digest", b"bob:guess").unwrap_err();
        assert!(wrong.contains("wrong password"), "{wrong}");
        let unknown = c.authenticate("digest", b"carol:x").unwrap_err();
        assert!(unknown.contains("unknown user"), "{unknown}");
        assert!(parse_users("bob").is_err());
        assert!(parse_users("bob:a\nbob:b").is_err());
    }

    #[test]
    fn the_super_user_passes_every_check() {
        let c = config(Some(&digest_id("admin:root-pw").unwrap()), None);
        let ids = c.authenticate("digest", b"admin:root-pw").unwrap();
        assert!(ids.iter().any(|i| i.scheme == SUPER_SCHEME));
        let locked = vec![Acl {
            perms: perms::READ,
            scheme: "digest".into(),
            id: digest_id("bob:x").unwrap(),
        }];
        assert!(allowed(&locked, &ids, perms::ADMIN));
        assert!(c
            .authenticate("digest", b"admin:wrong")
            .unwrap_err()
            .contains("super user"));
        // Other users are still accepted as in ZooKeeper (no user list).
        assert_eq!(c.authenticate("digest", b"bob:x").unwrap().len(), 1);
    }

    #[test]
    fn sasl_users_get_the_sasl_and_digest_identities() {
        let bob_hash = digest_hash("bob", "secret");
        let c = config(None, None);
        let ids = c.sasl_ids("bob", &bob_hash);
        assert_eq!(
            ids,
            vec![
                AuthId {
                    scheme: "sasl".into(),
                    id: "bob".into()
                },
                AuthId {
                    scheme: "digest".into(),
                    id: digest_id("bob:secret").unwrap()
                },
            ]
        );
        // The super user's name and password make the super identity.
        let c = config(Some(&digest_id("admin:root-pw").unwrap()), None);
        let admin = c.sasl_ids("admin", &digest_hash("admin", "root-pw"));
        assert_eq!(admin[0].scheme, SUPER_SCHEME);
        let other = c.sasl_ids("admin", &digest_hash("admin", "other-pw"));
        assert!(other.iter().all(|i| i.scheme != SUPER_SCHEME));
    }

    #[test]
    fn connection_identities() {
        let ids = connection_ids("[::ffff:10.1.2.3]:5000".parse().unwrap(), None);
        assert_eq!(ids[0].id, "10.1.2.3");
        let ids = connection_ids("127.0.0.1:1".parse().unwrap(), Some("CN=alice,O=acme"));
        assert_eq!(ids.len(), 2);
        // The x509 identity matches an x509 ACL entry for that subject,
        // and nothing else.
        let acl = vec![Acl {
            perms: perms::WRITE,
            scheme: "x509".into(),
            id: "CN=alice,O=acme".into(),
        }];
        assert!(allowed(&acl, &ids, perms::WRITE));
        assert!(!allowed(&acl, &ids[..1], perms::WRITE));
        let other = connection_ids("127.0.0.1:1".parse().unwrap(), Some("CN=mallory,O=acme"));
        assert!(!allowed(&acl, &other, perms::WRITE));
    }

    #[test]
    fn identities_are_bounded_and_not_repeated() {
        let mut ids = connection_ids("127.0.0.1:1".parse().unwrap(), None);
        let c = config(None, None);
        add_ids(&mut ids, c.authenticate("digest", b"a:b").unwrap()).unwrap();
        add_ids(&mut ids, c.authenticate("digest", b"a:b").unwrap()).unwrap();
        assert_eq!(ids.len(), 2);
        for n in 0..CONN_IDS_MAX {
            let cred = format!("u{n}:p");
            let _ = add_ids(&mut ids, c.authenticate("digest", cred.as_bytes()).unwrap());
        }
        assert_eq!(ids.len(), CONN_IDS_MAX);
        assert!(add_ids(&mut ids, c.authenticate("digest", b"z:z").unwrap()).is_err());
    }
}
