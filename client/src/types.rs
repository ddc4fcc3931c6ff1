//! The plain values of the client API: options, session states, watch
//! events. Nothing here does I/O; the checks on options live here so they
//! can be unit-tested without a server.

use std::time::Duration;

use warden_protocol::{pb, ErrorCode, DATA_BYTES_MAX};

use crate::error::{Error, Result};

/// A znode's metadata, exactly as the server sends it (zxids are Raft log
/// indexes; times are milliseconds since the Unix epoch).
pub type Stat = pb::Stat;

/// An access-control entry (ZooKeeper's model); see
/// [`warden_protocol::perms`] for the permission bits.
pub type Acl = pb::Acl;

/// How a [`Client`](crate::Client) connects and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Session timeout asked of the server (which may clamp it): how long
    /// the session survives without the server hearing from the client.
    /// The client pings at a third of the negotiated value.
    pub session_timeout: Duration,
    /// How long [`Client::connect`](crate::Client::connect) keeps trying the
    /// servers before giving up; also the bound on one connection attempt
    /// while reconnecting.
    pub connect_timeout: Duration,
    /// How long one call waits for its answer before failing with
    /// [`Error::Timeout`].
    pub request_timeout: Duration,
}

/// Default session timeout.
pub const SESSION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default connect timeout.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// Default request timeout.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// The session timeout travels as `u32` milliseconds; anything longer is
/// refused rather than silently truncated.
const SESSION_TIMEOUT_MAX: Duration = Duration::from_millis(u32::MAX as u64);

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            session_timeout: SESSION_TIMEOUT_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
        }
    }
}

impl ConnectOptions {
    /// Refuses zero timeouts and a session timeout that does not fit the
    /// wire's `u32` milliseconds.
    pub fn validate(&self) -> Result<()> {
        let millis = |d: Duration| d.as_millis();
        if millis(self.session_timeout) == 0 {
            return Err(Error::BadArguments(
                "session_timeout must be at least 1 ms".into(),
            ));
        }
        if self.session_timeout > SESSION_TIMEOUT_MAX {
            return Err(Error::BadArguments(format!(
                "session_timeout must be at most {} ms",
                SESSION_TIMEOUT_MAX.as_millis()
            )));
        }
        if millis(self.connect_timeout) == 0 {
            return Err(Error::BadArguments(
                "connect_timeout must be at least 1 ms".into(),
            ));
        }
        if millis(self.request_timeout) == 0 {
            return Err(Error::BadArguments(
                "request_timeout must be at least 1 ms".into(),
            ));
        }
        Ok(())
    }

    /// The session timeout as the wire carries it.
    pub(crate) fn session_timeout_ms(&self) -> u32 {
        u32::try_from(self.session_timeout.as_millis()).unwrap_or(u32::MAX)
    }
}

/// What kind of node a create makes. The default is a plain persistent node
/// with the open ACL (world:anyone, all permissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Deleted when the creating session ends.
    pub ephemeral: bool,
    /// The server appends a 10-digit, strictly increasing suffix.
    pub sequential: bool,
    /// Deleted by the server once it has had a child and has none left.
    pub container: bool,
    /// Deleted once unmodified for this long and childless (persistent
    /// nodes only). Millisecond resolution.
    pub ttl: Option<Duration>,
    /// Empty means the open ACL.
    pub acl: Vec<Acl>,
}

impl CreateOptions {
    /// A persistent node (same as `default()`).
    pub fn persistent() -> Self {
        Self::default()
    }

    /// A node deleted when this session ends.
    pub fn ephemeral() -> Self {
        Self {
            ephemeral: true,
            ..Self::default()
        }
    }

    /// A persistent node with a sequence suffix.
    pub fn sequential() -> Self {
        Self {
            sequential: true,
            ..Self::default()
        }
    }

    /// An ephemeral node with a sequence suffix (the lock/election recipe's
    /// building block).
    pub fn ephemeral_sequential() -> Self {
        Self {
            ephemeral: true,
            sequential: true,
            ..Self::default()
        }
    }

    /// A container node.
    pub fn container() -> Self {
        Self {
            container: true,
            ..Self::default()
        }
    }

    /// A persistent node with a time-to-live.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    /// These options with `acl` instead of the open ACL.
    pub fn acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// Checks the combination (ZooKeeper's rules: containers are plain
    /// persistent nodes; TTLs are for persistent nodes only) and converts
    /// the TTL to wire milliseconds (0 = none).
    pub fn validate(&self, path: &str) -> Result<u64> {
        let bad = |why: &str| Err(Error::BadArguments(format!("{path}: {why}")));
        if self.container && (self.ephemeral || self.sequential || self.ttl.is_some()) {
            return bad("a container node cannot be ephemeral, sequential or have a TTL");
        }
        match self.ttl {
            None => Ok(0),
            Some(_) if self.ephemeral => bad("an ephemeral node cannot have a TTL"),
            Some(ttl) => match u64::try_from(ttl.as_millis()) {
                Ok(0) => bad("a TTL must be at least 1 ms"),
                Ok(ms) => Ok(ms),
                Err(_) => bad("the TTL is too long"),
            },
        }
    }
}

/// Refuses data the server would refuse, without a round trip.
pub(crate) fn check_data(path: &str, data: &[u8]) -> Result<()> {
    if data.len() > DATA_BYTES_MAX {
        return Err(Error::api(
            ErrorCode::DataTooLarge,
            path,
            format!(
                "{} bytes of data exceed the limit of {DATA_BYTES_MAX} bytes",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses an illegal path without a round trip.
pub(crate) fn check_path(path: &str) -> Result<()> {
    warden_protocol::path::validate(path)
        .map_err(|e| Error::api(ErrorCode::InvalidPath, path, e.reason))
}

/// Like [`check_path`] for a create, whose sequential path may end in `/`.
pub(crate) fn check_create_path(path: &str, sequential: bool) -> Result<()> {
    warden_protocol::path::validate_create(path, sequential)
        .map_err(|e| Error::api(ErrorCode::InvalidPath, path, e.reason))
}

/// The session as the client sees it. Published on
/// [`Client::session_events`](crate::Client::session_events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Connected to a server; calls go through.
    Connected,
    /// The connection broke; the client is reconnecting and the session may
    /// still be alive. Calls fail fast with `ConnectionLoss` meanwhile.
    Disconnected,
    /// The session is gone (terminal).
    Expired,
    /// The client or the server closed the session (terminal).
    Closed,
}

impl SessionState {
    /// Whether no later state can follow.
    pub fn is_terminal(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Closed)
    }
}

/// What changed, in a [`WatchEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

impl EventType {
    /// The name tools print, e.g. `NodeCreated`.
    pub fn name(self) -> &'static str {
        match self {
            EventType::NodeCreated => "NodeCreated",
            EventType::NodeDeleted => "NodeDeleted",
            EventType::NodeDataChanged => "NodeDataChanged",
            EventType::NodeChildrenChanged => "NodeChildrenChanged",
        }
    }

    /// Decodes the wire value; `None` for `UNSPECIFIED` or a type this
    /// client does not know.
    pub(crate) fn from_wire(raw: i32) -> Option<Self> {
        match pb::EventType::try_from(raw).ok()? {
            pb::EventType::Unspecified => None,
            pb::EventType::NodeCreated => Some(EventType::NodeCreated),
            pb::EventType::NodeDeleted => Some(EventType::NodeDeleted),
            pb::EventType::NodeDataChanged => Some(EventType::NodeDataChanged),
            pb::EventType::NodeChildrenChanged => Some(EventType::NodeChildrenChanged),
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A change to a watched node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub path: String,
    /// The zxid of the change that fired the watch.
    pub zxid: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_options_defaults_are_valid() {
        let o = ConnectOptions::default();
        assert_eq!(o.session_timeout, Duration::from_secs(10));
        assert_eq!(o.connect_timeout, Duration::from_secs(5));
        assert_eq!(o.request_timeout, Duration::from_secs(30));
        assert_eq!(o.validate(), Ok(()));
        assert_eq!(o.session_timeout_ms(), 10_000);
    }

    #[test]
    fn connect_options_refuse_zero_and_oversized_timeouts() {
        for o in [
            ConnectOptions {
                session_timeout: Duration::ZERO,
                ..Default::default()
            },
            ConnectOptions {
                session_timeout: Duration::from_micros(999),
                ..Default::default()
            },
            ConnectOptions {
                session_timeout: Duration::from_secs(u64::from(u32::MAX)),
                ..Default::default()
            },
            ConnectOptions {
                connect_timeout: Duration::ZERO,
                ..Default::default()
            },
            ConnectOptions {
                request_timeout: Duration::ZERO,
                ..Default::default()
            },
        ] {
            let err = o.validate().unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadArguments, "{o:?}");
        }
    }

    #[test]
    fn create_options_constructors() {
        assert_eq!(CreateOptions::persistent(), CreateOptions::default());
        assert!(CreateOptions::ephemeral().ephemeral);
        let es = CreateOptions::ephemeral_sequential();
        assert!(es.ephemeral && es.sequential && !es.container);
        assert!(CreateOptions::container().container);
        assert_eq!(
            CreateOptions::with_ttl(Duration::from_secs(2)).validate("/t"),
            Ok(2000)
        );
        let acl = warden_protocol::open_acl();
        assert_eq!(CreateOptions::ephemeral().acl(acl.clone()).acl, acl);
    }

    #[test]
    fn create_options_refuse_nonsense_combinations() {
        let bad = [
            CreateOptions {
                container: true,
                ephemeral: true,
                ..Default::default()
            },
            CreateOptions {
                container: true,
                sequential: true,
                ..Default::default()
            },
            CreateOptions {
                container: true,
                ttl: Some(Duration::from_secs(1)),
                ..Default::default()
            },
            CreateOptions {
                ephemeral: true,
                ttl: Some(Duration::from_secs(1)),
                ..Default::default()
            },
            CreateOptions::with_ttl(Duration::from_micros(10)),
        ];
        for o in bad {
            let err = o.validate("/p").unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadArguments, "{o:?}");
            assert!(err.to_string().starts_with("BadArguments: /p: "), "{err}");
        }
        let ok = [
            CreateOptions::default(),
            CreateOptions::ephemeral_sequential(),
            CreateOptions::sequential(),
            CreateOptions {
                sequential: true,
                ttl: Some(Duration::from_millis(5)),
                ..Default::default()
            },
        ];
        for o in ok {
            assert!(o.validate("/p").is_ok(), "{o:?}");
        }
    }

    #[test]
    fn path_and_data_checks() {
        assert!(check_path("/a/b").is_ok());
        let e = check_path("a/b").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidPath);
        assert_eq!(e.to_string(), "InvalidPath: a/b");
        assert!(check_create_path("/lock/", true).is_ok());
        assert!(check_create_path("/lock/", false).is_err());
        assert!(check_data("/d", &vec![0u8; DATA_BYTES_MAX]).is_ok());
        let e = check_data("/d", &vec![0u8; DATA_BYTES_MAX + 1]).unwrap_err();
        assert_eq!(e.to_string(), "DataTooLarge: /d");
    }

    #[test]
    fn event_types_decode_from_the_wire() {
        assert_eq!(EventType::from_wire(1), Some(EventType::NodeCreated));
        assert_eq!(
            EventType::from_wire(4),
            Some(EventType::NodeChildrenChanged)
        );
        assert_eq!(EventType::from_wire(0), None);
        assert_eq!(EventType::from_wire(77), None);
        assert_eq!(EventType::NodeDataChanged.to_string(), "NodeDataChanged");
    }
}
