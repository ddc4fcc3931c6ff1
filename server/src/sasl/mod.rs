//! SASL on the ZooKeeper port: the DIGEST-MD5 mechanism (RFC 2831) that
//! Kafka, HBase and Hadoop deployments use, with users and passwords from
//! the `Server` section of a JAAS file, as ZooKeeper reads them.
//!
//! - [`jaas`] reads the file (`--zk-sasl-jaas`) into a [`SaslUsers`]
//!   table, once at start-up;
//! - [`digest_md5`] is the server side of one exchange: challenge, verify
//!   the client's response, answer with `rspauth`.
//!
//! The ZooKeeper door drives an exchange per connection
//! ([`crate::zk::sasl`]); when it succeeds the core adds the identities
//! [`crate::auth::AuthConfig::sasl_ids`] gives (`sasl:USER` and the
//! digest identity of the same user and password).

pub mod digest_md5;
pub mod jaas;

use std::collections::BTreeMap;

/// The SASL users this server knows: name -> password. Passwords never
/// leave this table but as digests; its `Debug` shows names only.
#[derive(Clone, Default)]
pub struct SaslUsers {
    users: BTreeMap<String, String>,
}

impl SaslUsers {
    pub fn new(users: BTreeMap<String, String>) -> Self {
        Self { users }
    }

    pub fn password(&self, user: &str) -> Option<&str> {
        self.users.get(user).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

impl std::fmt::Debug for SaslUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslUsers")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_passwords() {
        let users = SaslUsers::new([("bob".to_string(), "secret".to_string())].into());
        let shown = format!("{users:?}");
        assert!(shown.contains("bob"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
