//! Which znodes are lock contenders: recognised by the shape of their
//! name (and, for the HTTP door's leases, their parent's place), never by
//! who created them, so a lock taken through any door is seen.
//!
//! Every shape ends with the server's 10-digit sequence number; the
//! contender with the lowest one under its parent holds the lock and the
//! others wait. The shapes (see `docs/locks-observability.md`):
//!
//! | kind         | contender name                       | made by |
//! |--------------|--------------------------------------|---------|
//! | `http-lease` | `lease-<32 hex>-<seq>` under `/warden/http-locks/<name>` | the HTTP lock API |
//! | `lease`      | `lease-<32 hex>-<seq>` anywhere else | the recipes' `LeaseLock` |
//! | `mutex`      | `_c_<id>-lock-<seq>`                 | the recipes' `Mutex`, Curator's `InterProcessMutex` |
//! | `kazoo`      | `<32 hex>__lock__<seq>`              | kazoo's `Lock` (and its `Election`) |
//! | `zk-lock`    | `lock-<seq>` or `<guid>-lock-<seq>`  | ZooKeeper's documented lock recipe |
//! | `election`   | `c-<32 hex>-<seq>`                   | the recipes' `LeaderElection` |
//!
//! The check is made for every created or deleted node, so it must be
//! cheap: it looks at the name's last ten bytes first (almost every other
//! name fails there) and allocates nothing.

/// What kind of lock a contender belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    HttpLease,
    Lease,
    Mutex,
    Kazoo,
    ZkLock,
    Election,
}

/// How many kinds there are (array sizes).
pub const KINDS: usize = 6;

impl Kind {
    pub const ALL: [Kind; KINDS] = [
        Kind::HttpLease,
        Kind::Lease,
        Kind::Mutex,
        Kind::Kazoo,
        Kind::ZkLock,
        Kind::Election,
    ];

    /// The `kind` label and JSON value.
    pub fn label(self) -> &'static str {
        match self {
            Kind::HttpLease => "http-lease",
            Kind::Lease => "lease",
            Kind::Mutex => "mutex",
            Kind::Kazoo => "kazoo",
            Kind::ZkLock => "zk-lock",
            Kind::Election => "election",
        }
    }

    pub fn from_label(label: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.label() == label)
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Whether the holder's node is a lease (a TTL node whose data is
    /// `"<ttl_ms>\n<client_id>"`).
    pub fn is_lease(self) -> bool {
        matches!(self, Kind::HttpLease | Kind::Lease)
    }
}

/// Digits of a sequence suffix.
const SEQ_DIGITS: usize = 10;
/// Hex digits of a lease's client key, an election nonce, a kazoo uuid.
const HEX_ID_LEN: usize = 32;

/// Whether `path` ends in ten digits: the first, cheapest look (from the
/// end, so most names fail at their last byte or two).
pub fn ends_with_sequence(path: &str) -> bool {
    let b = path.as_bytes();
    b.len() > SEQ_DIGITS
        && b[b.len() - SEQ_DIGITS..]
            .iter()
            .rev()
            .all(u8::is_ascii_digit)
}

/// The kind and sequence number of the contender at `parent`/`name`, or
/// `None` if the name is no contender's.
pub fn contender(parent: &str, name: &str) -> Option<(Kind, u64)> {
    let split = name.len().checked_sub(SEQ_DIGITS)?;
    let digits = name.as_bytes().get(split..)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let head = &name[..split];
    let kind = kind_of(head)?;
    let kind = if kind == Kind::Lease && is_http_lock(parent) {
        Kind::HttpLease
    } else {
        kind
    };
    let seq = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some((kind, seq))
}

/// The kind a name's part before the sequence number says.
fn kind_of(head: &str) -> Option<Kind> {
    if let Some(id) = head.strip_prefix("lease-") {
        return hex_id_then_dash(id).then_some(Kind::Lease);
    }
    if let Some(rest) = head.strip_prefix("_c_") {
        // Curator's ids are UUIDs (with dashes), ours 32 hex digits.
        let id = rest.strip_suffix("-lock-")?;
        return (!id.is_empty()).then_some(Kind::Mutex);
    }
    if let Some(id) = head.strip_suffix("__lock__") {
        return (id.len() == HEX_ID_LEN && is_hex(id)).then_some(Kind::Kazoo);
    }
    if let Some(id) = head.strip_prefix("c-") {
        return hex_id_then_dash(id).then_some(Kind::Election);
    }
    if head == "lock-" || head.strip_suffix("-lock-").is_some_and(|g| !g.is_empty()) {
        return Some(Kind::ZkLock);
    }
    None
}

/// `<32 hex>-`.
fn hex_id_then_dash(s: &str) -> bool {
    s.len() == HEX_ID_LEN + 1 && s.ends_with('-') && is_hex(&s[..HEX_ID_LEN])
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `parent` is an HTTP lock's directory, `LOCK_ROOT/<name>`.
fn is_http_lock(parent: &str) -> bool {
    parent
        .strip_prefix(crate::http::locks::LOCK_ROOT)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// The lock's name for people: the HTTP lock's own name for the HTTP
/// door's leases, the directory's path for every other kind.
pub fn display_name(kind: Kind, parent: &str) -> &str {
    match kind {
        Kind::HttpLease => parent
            .strip_prefix(crate::http::locks::LOCK_ROOT)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(parent),
        _ => parent,
    }
}

/// `path` split into its parent and its last name, without allocating;
/// `None` for the root or a path without a slash.
pub fn split(path: &str) -> Option<(&str, &str)> {
    let slash = path.rfind('/')?;
    let name = &path[slash + 1..];
    if name.is_empty() {
        return None;
    }
    let parent = if slash == 0 { "/" } else { &path[..slash] };
    Some((parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn every_shape_is_recognised() {
        let cases = [
            (
                "/warden/http-locks/jobs",
                format!("lease-{HEX}-0000000003"),
                Kind::HttpLease,
                3,
            ),
            (
                "/leases/jobs",
                format!("lease-{HEX}-0000000004"),
                Kind::Lease,
                4,
            ),
            // An HTTP lock's name is one segment: deeper is a recipe lease.
            (
                "/warden/http-locks/a/b",
                format!("lease-{HEX}-0000000004"),
                Kind::Lease,
                4,
            ),
            (
                "/locks/m",
                format!("_c_{HEX}-lock-0000000012"),
                Kind::Mutex,
                12,
            ),
            (
                "/curator/m",
                "_c_a1b2c3d4-0000-4000-8000-0123456789ab-lock-0000000000".to_string(),
                Kind::Mutex,
                0,
            ),
            ("/kz", format!("{HEX}__lock__0000000007"), Kind::Kazoo, 7),
            ("/zk", "lock-0000000009".to_string(), Kind::ZkLock, 9),
            ("/zk", "guid-lock-0000000010".to_string(), Kind::ZkLock, 10),
            ("/e", format!("c-{HEX}-0000000001"), Kind::Election, 1),
            (
                "/",
                "lock-4294967295".to_string(),
                Kind::ZkLock,
                4_294_967_295,
            ),
        ];
        for (parent, name, kind, seq) in cases {
            assert_eq!(
                contender(parent, &name),
                Some((kind, seq)),
                "{parent} {name}"
            );
        }
    }

    #[test]
    fn other_names_are_not_contenders() {
        for name in [
            "",
            "0000000001",
            "n1",
            "lock",
            "lock-000000001",
            "lock-00000000x1",
            "-lock-0000000001",
            "_c_-lock-0000000001",
            "_c_abc-READ-0000000001",
            "_c_abc-WRITE-0000000001",
            "lease-abc-0000000001",
            "lease-0123456789abcdef0123456789abcdeg-0000000001",
            "0123456789abcdef__lock__0000000001",
            "0123456789abcdef0123456789abcdef__rlock__0000000001",
            "c-abc-0000000001",
            "queue-0000000001",
            "x-72057594037927936-0000000001",
            "lock-é000000001",
        ] {
            assert_eq!(contender("/p", name), None, "{name}");
        }
    }

    #[test]
    fn the_first_look_is_at_the_last_ten_bytes() {
        assert!(ends_with_sequence("/l/lock-0000000001"));
        assert!(ends_with_sequence("/0000000001"));
        for path in ["/bench/n1", "/a/0000000001x", "0000000001", "/a/b"] {
            assert!(!ends_with_sequence(path), "{path}");
        }
    }

    #[test]
    fn paths_split_and_http_names_show() {
        assert_eq!(split("/a/b"), Some(("/a", "b")));
        assert_eq!(split("/a"), Some(("/", "a")));
        assert_eq!(split("/"), None);
        assert_eq!(
            display_name(Kind::HttpLease, "/warden/http-locks/jobs"),
            "jobs"
        );
        assert_eq!(display_name(Kind::Mutex, "/locks/m"), "/locks/m");
    }
}
