//! The client's one error type.
//!
//! Every failure a caller can see is an [`Error`], and every [`Error`] maps to
//! a protocol [`ErrorCode`] through [`Error::code`], so code that branches on
//! outcomes (recipes, retries, `wardenctl`'s exit path) can match on the code
//! and ignore where the error was produced.
//!
//! `Display` is made for one-line reports: the code's name first, then the
//! path or the detail, e.g. `NoNode: /a/b`. Server-side details (the
//! response's `message`) stay in a field rather than in the line, so the line
//! is stable and easy to match in scripts and tests.

use std::fmt;

use warden_protocol::ErrorCode;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong with a Warden call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The server (or the client's own argument checks, for `InvalidPath`
    /// and `DataTooLarge`) refused an operation on `path`.
    #[error("{}: {}", code.name(), PathOrMessage(path, message))]
    Api {
        code: ErrorCode,
        /// The path the operation named; empty for operations without one.
        path: String,
        /// Human-readable detail from the server (or the client's check).
        message: String,
    },

    /// Op number `index` (from 0) of a multi failed with `code`; nothing in
    /// the multi was applied.
    #[error("{}: {} (op {index} of the multi)", code.name(), DisplayPath(path))]
    Multi {
        index: usize,
        code: ErrorCode,
        path: String,
        message: String,
    },

    /// Arguments that make no sense together, caught before anything was
    /// sent (e.g. an ephemeral node with a TTL, an empty server list).
    #[error("BadArguments: {0}")]
    BadArguments(String),

    /// The connection broke before the answer came. The operation may or
    /// may not have been applied; the session is still alive and the client
    /// is reconnecting.
    #[error("ConnectionLoss: the connection to the server was lost before the answer came")]
    ConnectionLoss,

    /// The session is gone: the server expired it, or the client could not
    /// reach any server within the session timeout. Its ephemeral nodes are
    /// (or will shortly be) deleted. Every later call on this client fails
    /// with this error; make a new [`Client`](crate::Client).
    #[error("SessionExpired: the session has expired; create a new client")]
    SessionExpired,

    /// No answer within the request timeout.
    #[error("OperationTimeout: no answer within the request timeout")]
    Timeout,

    /// The client was closed (by [`Client::close`](crate::Client::close) or
    /// by the server closing the session).
    #[error("Closed: the client is closed")]
    Closed,

    /// No server accepted a session within the connect timeout.
    #[error("ConnectionLoss: could not connect: {0}")]
    Connect(String),

    /// A persistent watch fell so far behind that its event queue filled up;
    /// events were lost and the watch was removed. Set a new one (and
    /// re-read the state it guards).
    #[error(
        "Throttled: {}: the watch's event queue overflowed and the watch was removed",
        DisplayPath(path)
    )]
    WatchLagged { path: String },
}

impl Error {
    /// The protocol code this error stands for.
    ///
    /// `Closed` maps to `SessionExpired`, as in ZooKeeper: to the caller both
    /// mean "this session is over, ephemerals are gone, make a new client".
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Api { code, .. } | Error::Multi { code, .. } => *code,
            Error::BadArguments(_) => ErrorCode::BadArguments,
            Error::ConnectionLoss | Error::Connect(_) => ErrorCode::ConnectionLoss,
            Error::SessionExpired | Error::Closed => ErrorCode::SessionExpired,
            Error::Timeout => ErrorCode::OperationTimeout,
            Error::WatchLagged { .. } => ErrorCode::Throttled,
        }
    }

    /// The path the error is about, if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            Error::Api { path, .. } | Error::Multi { path, .. } | Error::WatchLagged { path } => {
                Some(path)
            }
            _ => None,
        }
    }

    /// Builds an [`Error::Api`].
    pub fn api(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Api {
            code,
            path: path.into(),
            message: message.into(),
        }
    }

    /// Whether retrying the same call (on the same client) may succeed:
    /// the connection broke or the server was busy, but the session lives.
    /// (`SessionMoved`: a write that turned up after a later write of the
    /// same session, typically across a failover with several writes in
    /// flight; it was not applied, and may be sent again.)
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code(),
            ErrorCode::ConnectionLoss
                | ErrorCode::OperationTimeout
                | ErrorCode::NotReady
                | ErrorCode::Throttled
                | ErrorCode::SessionMoved
        ) && !matches!(self, Error::Connect(_) | Error::WatchLagged { .. })
    }
}

/// Decodes a wire error code; a code this client does not know becomes
/// `SystemError` rather than being mistaken for `Ok` (prost's default).
pub(crate) fn decode_code(raw: i32) -> ErrorCode {
    ErrorCode::try_from(raw).unwrap_or(ErrorCode::SystemError)
}

/// Shows a path as is, unless it holds control characters (a rejected path
/// may): then escaped, so an error always stays on one line.
struct DisplayPath<'a>(&'a str);

/// The path, or for an operation without one (membership changes, say)
/// the server's message, which is then all there is to say.
struct PathOrMessage<'a>(&'a str, &'a str);

impl fmt::Display for PathOrMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() && !self.1.is_empty() {
            DisplayPath(self.1).fmt(f)
        } else {
            DisplayPath(self.0).fmt(f)
        }
    }
}

impl fmt::Display for DisplayPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(no path)")
        } else if self.0.chars().any(char::is_control) {
            write!(f, "{}", self.0.escape_debug())
        } else {
            f.write_str(self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_displays_code_colon_path() {
        let e = Error::api(ErrorCode::NoNode, "/a/b", "node /a/b does not exist");
        assert_eq!(e.to_string(), "NoNode: /a/b");
        assert_eq!(e.code(), ErrorCode::NoNode);
        assert_eq!(e.path(), Some("/a/b"));
    }

    #[test]
    fn an_error_without_a_path_shows_the_servers_message() {
        let e = Error::api(ErrorCode::BadArguments, "", "refused: after adding 5 ...");
        assert_eq!(e.to_string(), "BadArguments: refused: after adding 5 ...");
        let e = Error::api(ErrorCode::OperationTimeout, "", "");
        assert_eq!(e.to_string(), "OperationTimeout: (no path)");
    }

    #[test]
    fn control_characters_are_escaped_to_keep_one_line() {
        let e = Error::api(ErrorCode::InvalidPath, "/a\nb", "");
        assert_eq!(e.to_string(), "InvalidPath: /a\\nb");
    }

    #[test]
    fn multi_error_names_the_failing_op() {
        let e = Error::Multi {
            index: 2,
            code: ErrorCode::BadVersion,
            path: "/x".into(),
            message: String::new(),
        };
        assert_eq!(e.to_string(), "BadVersion: /x (op 2 of the multi)");
        assert_eq!(e.code(), ErrorCode::BadVersion);
    }

    #[test]
    fn every_variant_has_a_code_and_starts_with_its_name() {
        let all = [
            Error::api(ErrorCode::NodeExists, "/n", ""),
            Error::BadArguments("x".into()),
            Error::ConnectionLoss,
            Error::SessionExpired,
            Error::Timeout,
            Error::Connect("refused".into()),
            Error::WatchLagged { path: "/w".into() },
        ];
        for e in all {
            let line = e.to_string();
            assert!(
                line.starts_with(e.code().name()),
                "{line} vs {:?}",
                e.code()
            );
            assert!(!line.contains('\n'));
        }
        assert_eq!(Error::Closed.code(), ErrorCode::SessionExpired);
        assert_eq!(Error::Timeout.code(), ErrorCode::OperationTimeout);
    }

    #[test]
    fn unknown_wire_codes_are_not_ok() {
        assert_eq!(decode_code(0), ErrorCode::Ok);
        assert_eq!(decode_code(1), ErrorCode::NoNode);
        assert_eq!(decode_code(9999), ErrorCode::SystemError);
    }

    #[test]
    fn retryable_errors() {
        assert!(Error::ConnectionLoss.is_retryable());
        assert!(Error::Timeout.is_retryable());
        assert!(!Error::SessionExpired.is_retryable());
        assert!(!Error::api(ErrorCode::NoNode, "/a", "").is_retryable());
        assert!(Error::api(ErrorCode::NotReady, "/a", "").is_retryable());
    }
}
