//! The server side of SASL DIGEST-MD5 (RFC 2831), initial authentication
//! with quality of protection `auth` only, as ZooKeeper offers it:
//!
//! 1. the client opens with an empty token; the server challenges
//!    (`realm`, a fresh `nonce`, `qop="auth"`, `charset=utf-8`,
//!    `algorithm=md5-sess`);
//! 2. the client answers with its digest-response; the server checks every
//!    directive, computes the digest from the user's password, and on a
//!    match answers `rspauth=...` (proving it knows the password too):
//!    the exchange is complete and the client is the user it named.
//!
//! ZooKeeper's realm and server name are both `zk-sasl-md5` and its
//! service `zookeeper`: clients send `digest-uri="zookeeper/zk-sasl-md5"`.
//! Integrity and confidentiality layers (`auth-int`, `auth-conf`) and
//! subsequent authentication are not offered.

use md5::{Digest, Md5};

use super::SaslUsers;

/// ZooKeeper's DIGEST-MD5 realm and server name.
pub const ZK_REALM: &str = "zk-sasl-md5";
/// ZooKeeper's SASL service (protocol) name.
pub const ZK_SERVICE: &str = "zookeeper";
/// Largest digest-response accepted (RFC 2831 says 4096 bytes).
pub const RESPONSE_BYTES_MAX: usize = 4096;

/// Why an exchange failed (the client hears only AuthFailed; the log
/// hears this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DIGEST-MD5: {0}")]
pub struct SaslError(pub String);

fn fail<T>(why: impl Into<String>) -> Result<T, SaslError> {
    Err(SaslError(why.into()))
}

/// What one step gives the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not done: send this token and wait for the client's next.
    Challenge(Vec<u8>),
    /// Authenticated as `user` (with `password`, from the table); send
    /// `token` (the rspauth) and the exchange is over.
    Success {
        user: String,
        password: String,
        token: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Challenged,
    Done,
}

/// One DIGEST-MD5 exchange (one connection's).
#[derive(Debug, Clone)]
pub struct DigestMd5Server {
    realm: String,
    service: String,
    host: String,
    nonce: String,
    state: State,
}

impl DigestMd5Server {
    /// An exchange as ZooKeeper runs it, with a fresh random nonce.
    pub fn zookeeper() -> Self {
        use base64::Engine as _;
        let nonce = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>());
        Self::new(ZK_REALM, ZK_SERVICE, ZK_REALM, &nonce)
    }

    /// An exchange for `realm`, accepting `digest-uri` `service/host`,
    /// challenging with `nonce`.
    pub fn new(realm: &str, service: &str, host: &str, nonce: &str) -> Self {
        Self {
            realm: realm.to_string(),
            service: service.to_string(),
            host: host.to_string(),
            nonce: nonce.to_string(),
            state: State::Start,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.state == State::Done
    }

    /// The client's next token; `users` holds the passwords. Any error
    /// ends the exchange.
    pub fn step(&mut self, token: &[u8], users: &SaslUsers) -> Result<Step, SaslError> {
        match self.state {
            State::Start => {
                if !token.is_empty() {
                    self.state = State::Done;
                    return fail(
                        "the client must open with an empty token (no subsequent authentication)",
                    );
                }
                self.state = State::Challenged;
                Ok(Step::Challenge(
                    format!(
                        "realm=\"{}\",nonce=\"{}\",qop=\"auth\",charset=utf-8,algorithm=md5-sess",
                        self.realm, self.nonce
                    )
                    .into_bytes(),
                ))
            }
            State::Challenged => {
                // Whatever happens, this nonce is spent.
                self.state = State::Done;
                self.verify(token, users)
            }
            State::Done => fail("the exchange is already over"),
        }
    }

    fn verify(&self, token: &[u8], users: &SaslUsers) -> Result<Step, SaslError> {
        if token.len() > RESPONSE_BYTES_MAX {
            return fail(format!(
                "the response has {} bytes, more than {RESPONSE_BYTES_MAX}",
                token.len()
            ));
        }
        let text = std::str::from_utf8(token).or_else(|_| fail("the response is not UTF-8"))?;
        let d = parse_directives(text)?;
        let get = |k: &str| d.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let required = |k: &str| get(k).map_or_else(|| fail(format!("no {k} in the response")), Ok);
        let user = required("username")?;
        let nonce = required("nonce")?;
        let cnonce = required("cnonce")?;
        let nc = required("nc")?;
        let uri = required("digest-uri")?;
        let response = required("response")?;
        if nonce != self.nonce {
            return fail("the nonce is not the one this server sent");
        }
        if cnonce.is_empty() {
            return fail("the cnonce is empty");
        }
        if u32::from_str_radix(nc, 16) != Ok(1) || nc.len() != 8 {
            return fail(format!("nc is {nc:?}, expected 00000001"));
        }
        let realm = get("realm").unwrap_or("");
        if realm != self.realm {
            return fail(format!("realm {realm:?} is not {:?}", self.realm));
        }
        let qop = get("qop").unwrap_or("auth");
        if qop != "auth" {
            return fail(format!("qop {qop:?} was not offered (only auth)"));
        }
        if let Some(charset) = get("charset") {
            if !charset.eq_ignore_ascii_case("utf-8") {
                return fail(format!("charset {charset:?} (only utf-8)"));
            }
        }
        let want_uri = format!("{}/{}", self.service, self.host);
        if !uri.eq_ignore_ascii_case(&want_uri) {
            return fail(format!("digest-uri {uri:?} is not {want_uri:?}"));
        }
        // An unknown user costs the same digest as a known one, so the
        // time taken does not say which names exist.
        let known = users.password(user);
        let password = known.unwrap_or("");
        let authzid = get("authzid");
        let parts = Parts {
            user,
            realm,
            password,
            nonce,
            cnonce,
            nc,
            qop,
            digest_uri: uri,
            authzid,
        };
        let expected = parts.response("AUTHENTICATE");
        let matches = crate::auth::same_secret(
            response.to_ascii_lowercase().as_bytes(),
            expected.as_bytes(),
        );
        if known.is_none() {
            return fail(format!("unknown user {user:?}"));
        }
        if !matches {
            return fail(format!("wrong password for user {user:?}"));
        }
        Ok(Step::Success {
            user: user.to_string(),
            password: password.to_string(),
            token: format!("rspauth={}", parts.response("")).into_bytes(),
        })
    }
}

/// The values RFC 2831's digest is computed from.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a> {
    pub user: &'a str,
    pub realm: &'a str,
    pub password: &'a str,
    pub nonce: &'a str,
    pub cnonce: &'a str,
    pub nc: &'a str,
    pub qop: &'a str,
    pub digest_uri: &'a str,
    pub authzid: Option<&'a str>,
}

impl Parts<'_> {
    /// The `response` value (method `AUTHENTICATE`) or the `rspauth`
    /// value (method empty), in lower-case hex.
    pub fn response(&self, method: &str) -> String {
        let mut a1_inner = Md5::new();
        a1_inner.update(latin1_or_utf8(self.user));
        a1_inner.update(b":");
        a1_inner.update(latin1_or_utf8(self.realm));
        a1_inner.update(b":");
        a1_inner.update(latin1_or_utf8(self.password));
        let mut a1 = a1_inner.finalize().to_vec();
        a1.extend_from_slice(format!(":{}:{}", self.nonce, self.cnonce).as_bytes());
        if let Some(z) = self.authzid {
            a1.extend_from_slice(b":");
            a1.extend_from_slice(z.as_bytes());
        }
        let a2 = format!("{method}:{}", self.digest_uri);
        let kd = format!(
            "{}:{}:{}:{}:{}:{}",
            hex(&Md5::digest(&a1)),
            self.nonce,
            self.nc,
            self.cnonce,
            self.qop,
            hex(&Md5::digest(a2.as_bytes()))
        );
        hex(&Md5::digest(kd.as_bytes()))
    }
}

/// RFC 2831 with `charset=utf-8`: a value all of whose characters fit in
/// ISO 8859-1 is hashed in ISO 8859-1, any other in UTF-8.
fn latin1_or_utf8(s: &str) -> Vec<u8> {
    if s.chars().all(|c| (c as u32) <= 0xff) {
        s.chars().map(|c| c as u32 as u8).collect()
    } else {
        s.as_bytes().to_vec()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2831's `#(name=value)` list: values are tokens or quoted strings
/// (`\` quotes the next character); empty elements are allowed. A
/// directive given twice is an error (RFC 2831 allows no repeats in a
/// response).
pub fn parse_directives(text: &str) -> Result<Vec<(String, String)>, SaslError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ',' || c.is_whitespace() {
                break;
            }
            name.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return fail(format!("directive {name:?} has no value"));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return fail(format!("the value of {name:?} is never closed")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        None => return fail(format!("the value of {name:?} is never closed")),
                        Some(c) => value.push(c),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_some_and(|c| *c != ',') {
            return fail(format!("junk after the value of {name:?}"));
        }
        let name = name.to_ascii_lowercase();
        if out.iter().any(|(n, _)| *n == name) {
            return fail(format!("directive {name:?} appears twice"));
        }
        out.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2831 section 4's example: chris, password "secret", IMAP.
    const RFC_RESPONSE: &str = "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",\
        nonce=\"OA6MG9tEQGm2hh\",nc=00000001,cnonce=\"OA6MHXh6VqTrRk\",\
        digest-uri=\"imap/elwood.innosoft.com\",\
        response=d388dad90d4bbd760a152321f2143af7,qop=auth";

    fn rfc_server() -> DigestMd5Server {
        DigestMd5Server::new(
            "elwood.innosoft.com",
            "imap",
            "elwood.innosoft.com",
            "OA6MG9tEQGm2hh",
        )
    }

    fn users(pairs: &[(&str, &str)]) -> SaslUsers {
        SaslUsers::new(
            pairs
                .iter()
                .map(|(u, p)| (u.to_string(), p.to_string()))
                .collect(),
        )
    }

    #[test]
    fn rfc_2831_example_digests() {
        let parts = Parts {
            user: "chris",
            realm: "elwood.innosoft.com",
            password: "secret",
            nonce: "OA6MG9tEQGm2hh",
            cnonce: "OA6MHXh6VqTrRk",
            nc: "00000001",
            qop: "auth",
            digest_uri: "imap/elwood.innosoft.com",
            authzid: None,
        };
        assert_eq!(
            parts.response("AUTHENTICATE"),
            "d388dad90d4bbd760a152321f2143af7"
        );
        assert_eq!(parts.response(""), "ea40f60335c427b5527b84dbabcdfffd");
    }

    #[test]
    fn rfc_2831_example_exchange() {
        let mut s = rfc_server();
        let table = users(&[("chris", "secret")]);
        let Step::Challenge(c) = s.step(b"", &table).unwrap() else {
            panic!("no challenge");
        };
        let c = String::from_utf8(c).unwrap();
        let d = parse_directives(&c).unwrap();
        assert!(
            d.contains(&("realm".into(), "elwood.innosoft.com".into())),
            "{c}"
        );
        assert!(
            d.contains(&("nonce".into(), "OA6MG9tEQGm2hh".into())),
            "{c}"
        );
        assert!(d.contains(&("qop".into(), "auth".into())), "{c}");
        assert!(d.contains(&("algorithm".into(), "md5-sess".into())), "{c}");
        assert!(!s.is_complete());
        match s.step(RFC_RESPONSE.as_bytes(), &table).unwrap() {
            Step::Success { user, token, .. } => {
                assert_eq!(user, "chris");
                assert_eq!(token, b"rspauth=ea40f60335c427b5527b84dbabcdfffd");
            }
            other => panic!("{other:?}"),
        }
        assert!(s.is_complete());
        // Over: a replay of the same response is refused.
        assert!(s.step(RFC_RESPONSE.as_bytes(), &table).is_err());
    }

    #[test]
    fn every_wrong_directive_is_refused() {
        let table = users(&[("chris", "secret")]);
        let refused = |response: &str, table: &SaslUsers| {
            let mut s = rfc_server();
            s.step(b"", table).unwrap();
            s.step(response.as_bytes(), table).unwrap_err().0
        };
        let cases = [
            (
                "wrong password",
                users(&[("chris", "guess")]),
                RFC_RESPONSE.to_string(),
            ),
            (
                "unknown user",
                users(&[("bob", "secret")]),
                RFC_RESPONSE.to_string(),
            ),
            (
                "nonce",
                table.clone(),
                RFC_RESPONSE.replace("OA6MG9tEQGm2hh", "other"),
            ),
            (
                "nc",
                table.clone(),
                RFC_RESPONSE.replace("nc=00000001", "nc=00000002"),
            ),
            (
                "realm",
                table.clone(),
                RFC_RESPONSE.replace("realm=\"elwood.innosoft.com\"", "realm=\"x\""),
            ),
            (
                "digest-uri",
                table.clone(),
                RFC_RESPONSE.replace("imap/elwood", "smtp/elwood"),
            ),
            (
                "qop",
                table.clone(),
                RFC_RESPONSE.replace("qop=auth", "qop=auth-conf"),
            ),
            (
                "no cnonce",
                table.clone(),
                RFC_RESPONSE.replace("cnonce=\"OA6MHXh6VqTrRk\",", ""),
            ),
            (
                "twice",
                table.clone(),
                format!("{RFC_RESPONSE},nc=00000001"),
            ),
            (
                "never closed",
                table.clone(),
                format!("{RFC_RESPONSE},authzid=\"x"),
            ),
            // Right in every way but the digest.
            (
                "wrong password",
                table.clone(),
                RFC_RESPONSE.replace("d388dad9", "d388dad8"),
            ),
        ];
        for (want, table, response) in cases {
            let why = refused(&response, &table);
            assert!(why.contains(want), "{want}: {why}");
        }
        // An initial response is not accepted (no subsequent auth).
        let mut s = rfc_server();
        assert!(s.step(RFC_RESPONSE.as_bytes(), &table).is_err());
        assert!(s.is_complete());
    }

    #[test]
    fn an_authzid_enters_the_digest() {
        let parts = Parts {
            user: "bob",
            realm: ZK_REALM,
            password: "secret",
            nonce: "n",
            cnonce: "c",
            nc: "00000001",
            qop: "auth",
            digest_uri: "zookeeper/zk-sasl-md5",
            authzid: None,
        };
        let with = Parts {
            authzid: Some("bob"),
            ..parts
        };
        assert_ne!(
            parts.response("AUTHENTICATE"),
            with.response("AUTHENTICATE")
        );
        let mut s = DigestMd5Server::new(ZK_REALM, ZK_SERVICE, ZK_REALM, "n");
        let table = users(&[("bob", "secret")]);
        s.step(b"", &table).unwrap();
        let response = format!(
            "username=\"bob\",realm=\"zk-sasl-md5\",nonce=\"n\",nc=00000001,cnonce=\"c\",\
             digest-uri=\"zookeeper/zk-sasl-md5\",maxbuf=65536,response={},qop=auth,authzid=\"bob\"",
            with.response("AUTHENTICATE")
        );
        assert!(matches!(
            s.step(response.as_bytes(), &table),
            Ok(Step::Success { .. })
        ));
    }

    #[test]
    fn non_latin1_values_hash_as_utf8() {
        assert_eq!(latin1_or_utf8("bob"), b"bob");
        assert_eq!(latin1_or_utf8("é"), vec![0xe9]);
        assert_eq!(latin1_or_utf8("€"), "€".as_bytes());
    }

    proptest::proptest! {
        /// Any bytes as a response are refused with a reason, never a
        /// panic; directives built from any text parse back as given.
        #[test]
        fn any_response_is_refused_cleanly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let table = users(&[("chris", "secret")]);
            let mut s = rfc_server();
            s.step(b"", &table).unwrap();
            proptest::prop_assert!(s.step(&bytes, &table).is_err());
        }

        #[test]
        fn quoted_values_round_trip(value in "[ -~]{0,40}") {
            let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
            let d = parse_directives(&format!("a=\"{quoted}\",b=tok")).unwrap();
            proptest::prop_assert_eq!(d, vec![("a".to_string(), value), ("b".to_string(), "tok".to_string())]);
        }
    }

    #[test]
    fn zookeepers_challenge_has_a_fresh_nonce() {
        let table = users(&[("bob", "secret")]);
        let a = DigestMd5Server::zookeeper().step(b"", &table).unwrap();
        let b = DigestMd5Server::zookeeper().step(b"", &table).unwrap();
        assert_ne!(a, b);
        let Step::Challenge(c) = a else { panic!() };
        assert!(String::from_utf8(c)
            .unwrap()
            .starts_with("realm=\"zk-sasl-md5\",nonce=\""));
    }
}
