//! SASL on a ZooKeeper connection: the `sasl` requests (opcode 102) that
//! ZooKeeper's clients send after the handshake when they are configured
//! with a JAAS `Client` section (Java) or `sasl_options` (kazoo). Each
//! carries a token (ZooKeeper's GetSASLRequest); the answer carries the
//! server's (SetSASLResponse).
//!
//! The door runs the exchange itself ([`crate::sasl::digest_md5`], one per
//! connection): it holds nothing replicated, and the client waits for each
//! answer before it sends anything else. Only its outcome goes to the
//! core, which adds the identities to the connection in order with its
//! other requests. A failed exchange is answered as ZooKeeper answers it:
//! AuthFailed with a null token, and the connection closed.

use std::sync::Arc;

use tracing::info;

use super::jute::{Reader, Writer};
use crate::sasl::digest_md5::{DigestMd5Server, Step};
use crate::sasl::SaslUsers;

/// What the door does with one `sasl` request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answer at once with this token; the exchange goes on.
    Continue(Vec<u8>),
    /// The client proved it is `user`: the core adds the identities (of
    /// `user` with a password whose digest is `hash`), then the client
    /// gets `token`.
    Authenticated {
        user: String,
        hash: String,
        token: Vec<u8>,
    },
    /// Answer AuthFailed and close the connection.
    Failed,
}

/// One connection's SASL state.
#[derive(Debug)]
pub struct Sasl {
    /// `None`: SASL is not configured on this server.
    users: Option<Arc<SaslUsers>>,
    exchange: Option<DigestMd5Server>,
}

impl Sasl {
    pub fn new(users: Option<Arc<SaslUsers>>) -> Self {
        Self {
            users,
            exchange: None,
        }
    }

    /// The body of a `sasl` request (after the request header).
    pub fn on_request(&mut self, body: &[u8], peer: std::net::SocketAddr) -> Outcome {
        let Some(users) = &self.users else {
            info!(%peer, "SASL refused: not enabled on this server (start it with --zk-sasl-jaas FILE)");
            return Outcome::Failed;
        };
        let token = match Reader::new(body).buffer_or_null("token") {
            Ok(t) => t.unwrap_or_default(),
            Err(e) => {
                info!(%peer, error = %e, "SASL refused: malformed GetSASLRequest");
                return Outcome::Failed;
            }
        };
        let exchange = self.exchange.get_or_insert_with(DigestMd5Server::zookeeper);
        match exchange.step(&token, users) {
            Ok(Step::Challenge(c)) => Outcome::Continue(c),
            Ok(Step::Success {
                user,
                password,
                token,
            }) => Outcome::Authenticated {
                hash: warden_protocol::auth::digest_hash(&user, &password),
                user,
                token,
            },
            Err(e) => {
                info!(%peer, error = %e, "SASL authentication failed; closing the connection");
                Outcome::Failed
            }
        }
    }
}

/// A SetSASLResponse: the token, or null (a failure's answer).
pub fn response_body(token: Option<&[u8]>) -> Writer {
    let mut w = Writer::default();
    match token {
        Some(t) => {
            w.buffer(t);
        }
        None => {
            w.buffer_or_null(&[], true);
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(token: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.buffer(token);
        w.buf.to_vec()
    }

    #[test]
    fn without_users_every_exchange_fails() {
        let mut s = Sasl::new(None);
        assert_eq!(
            s.on_request(&request(b""), "127.0.0.1:1".parse().unwrap()),
            Outcome::Failed
        );
    }

    #[test]
    fn a_challenge_then_a_bad_response_fails() {
        let users = SaslUsers::new([("bob".to_string(), "secret".to_string())].into());
        let mut s = Sasl::new(Some(Arc::new(users)));
        let peer = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            s.on_request(&request(b""), peer),
            Outcome::Continue(_)
        ));
        assert_eq!(
            s.on_request(&request(b"username=\"bob\""), peer),
            Outcome::Failed
        );
        // A malformed record fails too.
        let mut s = Sasl::new(Some(Arc::new(SaslUsers::default())));
        assert_eq!(s.on_request(&[0, 0], peer), Outcome::Failed);
    }

    #[test]
    fn a_null_token_is_a_null_buffer() {
        assert_eq!(&response_body(None).buf[..], &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            &response_body(Some(b"ab")).buf[..],
            &[0, 0, 0, 2, b'a', b'b']
        );
    }
}
