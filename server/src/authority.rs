//! Who may do the cluster's admin actions: change its membership, take
//! the whole tree as a backup, ask the operator's four-letter words and
//! AdminServer commands, read the metrics. One decision per action, for
//! every door: the native and ZooKeeper doors (in the core, for
//! AddMember/RemoveMember and reconfig), the ZooKeeper port's four-letter
//! words (`zk/mod.rs`) and the HTTP door (`http/snapshot.rs`,
//! `http/admin.rs`, `http/metrics.rs`) ask [`Authority::check`]; none of
//! them decides on its own. docs/security.md has the table.
//!
//! The rule:
//! - Membership changes and backups are the super user's (`--super-digest`,
//!   the only admin identity Warden has; [`crate::auth`] gives the `super`
//!   identity to whoever proves that password, on any door). A server
//!   started without `--super-digest` has no admin: it lets callers on its
//!   own host (a loopback source address) do them, so that `warden serve`
//!   with no flags stays usable, and refuses everyone else, saying how to
//!   configure one.
//! - A four-letter word is answered only if it is on the whitelist
//!   (`--4lw-whitelist`, ZooKeeper's `4lw.commands.whitelist`); a word
//!   carries no identity, so nothing else can let it through. Others are
//!   answered as ZooKeeper answers them: `WORD is not executed because it
//!   is not in the whitelist.`
//! - An AdminServer command is answered to anyone if its word is on the
//!   whitelist, and otherwise needs the admin, as a backup does (HTTP
//!   callers authenticate with Basic or a bearer token).
//! - Metrics (`/metrics`) are everyone's: counts and latencies, no session
//!   id, no path.
//!
//! Restores have no door: `warden restore` writes a data dir of a stopped
//! server, so whoever may write that directory may restore (the operating
//! system decides). Reads, writes and ACL changes are decided by the
//! node's ACL where the request is served or applied ([`crate::tree::acl`]),
//! never here.
//!
//! A refusal is counted (`warden_authority_refusals_total{action,door}`)
//! and logged at warn with the caller's identities and address. This
//! module decides and records; it never answers the caller (each door
//! words the refusal in its own protocol).

use std::net::IpAddr;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::warn;

use crate::proto::AuthId;
use crate::zk::fourletter::{Word, WORDS};

/// An admin action some door offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Adding, removing, promoting or demoting a member: native
    /// AddMember/RemoveMember (`wardenctl cluster add/remove`), ZooKeeper's
    /// reconfig.
    MembershipChange,
    /// The whole tree, whatever its ACLs, with session passwords:
    /// `GET /api/v1/snapshot` (`wardenctl snapshot save`).
    Backup,
    /// A four-letter word on the ZooKeeper port.
    FourLetterWord(Word),
    /// An AdminServer command (`GET /commands/NAME`) on the HTTP port.
    AdminCommand(Word),
    /// `GET /metrics`.
    Metrics,
}

impl Action {
    /// The metric label: a bounded set (16 words each way).
    pub fn label(self) -> String {
        match self {
            Action::MembershipChange => "membership_change".into(),
            Action::Backup => "backup".into(),
            Action::FourLetterWord(w) => format!("4lw_{}", word_name(w)),
            Action::AdminCommand(w) => format!("admin_{}", word_name(w)),
            Action::Metrics => "metrics".into(),
        }
    }

    /// What the action is, for a refusal's message.
    fn what(self) -> String {
        match self {
            Action::MembershipChange => {
                "changing the cluster's membership (it decides which servers hold the data)".into()
            }
            Action::Backup => {
                "a backup (it holds every znode whatever its ACL, and every session's password)"
                    .into()
            }
            Action::FourLetterWord(w) => format!("the four-letter word {}", word_name(w)),
            Action::AdminCommand(w) => format!(
                "the AdminServer command {} ({})",
                w.command(),
                word_policy(w).why
            ),
            Action::Metrics => "the metrics".into(),
        }
    }
}

/// Where a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The native protocol (`--listen`).
    Native,
    /// ZooKeeper's protocol and its four-letter words (`--zk-listen`).
    ZooKeeper,
    /// The HTTP API, the AdminServer and `/metrics` (`--http-listen`).
    Http,
    /// The gRPC lock API (`--grpc-listen`): no admin action is offered
    /// there.
    Grpc,
}

impl Door {
    pub fn label(self) -> &'static str {
        match self {
            Door::Native => "native",
            Door::ZooKeeper => "zookeeper",
            Door::Http => "http",
            Door::Grpc => "grpc",
        }
    }
}

impl From<crate::core::Door> for Door {
    fn from(d: crate::core::Door) -> Door {
        match d {
            crate::core::Door::Native => Door::Native,
            crate::core::Door::ZooKeeper => Door::ZooKeeper,
        }
    }
}

/// Who asks: the identities its connection holds (`ip:`, `x509:`,
/// `digest:`, `sasl:`, `super:`; for HTTP, those of its credentials) and
/// the address it connects from.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub ids: &'a [AuthId],
    pub addr: IpAddr,
}

impl Caller<'_> {
    fn is_super(&self) -> bool {
        crate::ops::acl::is_super(self.ids)
    }

    /// Whether it connects from this host. An IPv4 client of a dual-stack
    /// socket shows up as `::ffff:127.0.0.1`.
    fn is_local(&self) -> bool {
        self.addr.to_canonical().is_loopback()
    }

    /// Whether it presented credentials (beyond what its connection
    /// gives everyone: its address, its certificate).
    fn authenticated(&self) -> bool {
        self.ids
            .iter()
            .any(|i| i.scheme != "ip" && i.scheme != "x509")
    }
}

/// Why an action was refused: the message the door passes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `--super-digest` is set and the caller did not prove it.
    #[error(
        "{what} is the super user's: authenticate as the --super-digest user \
         (this caller is {who})"
    )]
    NotSuper {
        what: String,
        who: String,
        /// Whether the caller gave credentials at all (HTTP: 403, else 401).
        authenticated: bool,
    },
    /// No `--super-digest`, and the caller is not on this host.
    #[error(
        "{what} needs an admin, and this server has none configured: without one only \
         callers on its own host (loopback) may, and {addr} is not one. Start every server \
         with --super-digest USER:HASH (`warden digest USER:PASSWORD` prints it) and \
         authenticate as USER"
    )]
    NoAdmin { what: String, addr: IpAddr },
    /// A four-letter word off the whitelist: ZooKeeper's own answer.
    #[error("{word} is not executed because it is not in the whitelist.")]
    NotWhitelisted { word: &'static str },
}

impl Refusal {
    /// Whether the caller could be let in by giving credentials it did
    /// not give (an HTTP door answers 401 then, 403 otherwise).
    pub fn wants_credentials(&self) -> bool {
        matches!(
            self,
            Refusal::NotSuper {
                authenticated: false,
                ..
            }
        )
    }
}

/// A word's place in the default whitelist, and why.
#[derive(Debug, Clone, Copy)]
pub struct WordPolicy {
    pub word: Word,
    /// On the whitelist when `--4lw-whitelist` is not given.
    pub default: bool,
    pub why: &'static str,
}

/// Each word: whether it is answered by default, and why. On by default:
/// the words that show no session id, no client address and no znode
/// path, and change nothing. (ZooKeeper's own default is `srvr` alone;
/// Warden's monitoring (`ruok`, `mntr`, `isro`) and kazoo's
/// `server_version()` (`envi`) need more.)
pub const WORD_POLICIES: [WordPolicy; 16] = [
    WordPolicy {
        word: Word::Ruok,
        default: true,
        why: "answers imok, nothing else",
    },
    WordPolicy {
        word: Word::Srvr,
        default: true,
        why: "version, latencies, counts, mode, last zxid",
    },
    WordPolicy {
        word: Word::Mntr,
        default: true,
        why: "counts and latencies (the figures of /metrics)",
    },
    WordPolicy {
        word: Word::Isro,
        default: true,
        why: "rw, ro or null",
    },
    WordPolicy {
        word: Word::Conf,
        default: true,
        why: "ports, timeouts, server id, the data dir's path and size",
    },
    WordPolicy {
        word: Word::Envi,
        default: true,
        why: "version, host name, OS, the user, home and working directories, pid",
    },
    WordPolicy {
        word: Word::Dirs,
        default: true,
        why: "the data dir's size",
    },
    WordPolicy {
        word: Word::Wchs,
        default: true,
        why: "how many connections watch how many paths: counts only",
    },
    WordPolicy {
        word: Word::Hash,
        default: true,
        why: "a digest of the whole tree at one zxid: no node's content can be read from it",
    },
    WordPolicy {
        word: Word::Stat,
        default: false,
        why: "lists every client's address",
    },
    WordPolicy {
        word: Word::Cons,
        default: false,
        why: "lists every client's address and session id",
    },
    WordPolicy {
        word: Word::Dump,
        default: false,
        why: "lists session ids and their ephemeral nodes' paths",
    },
    WordPolicy {
        word: Word::Wchc,
        default: false,
        why: "lists session ids and the paths they watch",
    },
    WordPolicy {
        word: Word::Wchp,
        default: false,
        why: "lists watched paths and the session ids watching them",
    },
    WordPolicy {
        word: Word::Srst,
        default: false,
        why: "resets the server's statistics",
    },
    WordPolicy {
        word: Word::Crst,
        default: false,
        why: "resets every connection's statistics",
    },
];

/// The policy of `word`.
pub fn word_policy(word: Word) -> WordPolicy {
    WORD_POLICIES
        .iter()
        .copied()
        .find(|p| p.word == word)
        .expect("WORD_POLICIES names every word")
}

fn word_name(word: Word) -> &'static str {
    WORDS
        .iter()
        .find(|(w, _, _)| *w == word)
        .map(|(_, name, _)| *name)
        .expect("WORDS names every word")
}

/// The four-letter words answered to anyone (`--4lw-whitelist`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whitelist {
    words: Vec<Word>,
}

impl Default for Whitelist {
    /// The words of [`WORD_POLICIES`] that are on by default.
    fn default() -> Self {
        Whitelist {
            words: WORD_POLICIES
                .iter()
                .filter(|p| p.default)
                .map(|p| p.word)
                .collect(),
        }
    }
}

impl Whitelist {
    /// ZooKeeper's `4lw.commands.whitelist`: words separated by commas
    /// (blanks around them ignored), `*` for all of them, empty for none.
    /// A word ZooKeeper does not have is refused, naming it (ZooKeeper
    /// would ignore it; a typo should not silently leave a word off).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut words = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "*" {
                return Ok(Whitelist {
                    words: WORDS.iter().map(|(w, _, _)| *w).collect(),
                });
            }
            let word = item
                .as_bytes()
                .try_into()
                .ok()
                .and_then(|b: &[u8; 4]| Word::parse(b))
                .ok_or_else(|| {
                    let known: Vec<&str> = WORDS.iter().map(|(_, n, _)| *n).collect();
                    format!(
                        "--4lw-whitelist: {:?} is not a four-letter word (known: {}, or * for all)",
                        item.escape_debug().to_string(),
                        known.join(" ")
                    )
                })?;
            if !words.contains(&word) {
                words.push(word);
            }
        }
        Ok(Whitelist { words })
    }

    pub fn allows(&self, word: Word) -> bool {
        self.words.contains(&word)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabel {
    action: String,
    door: String,
}

/// `warden_authority_refusals_total{action,door}`: one family, shared by
/// every [`Authority`] of a server (they are clones of one
/// [`crate::opmetrics::OpMetrics`]'s).
#[derive(Debug, Clone, Default)]
pub struct RefusalCounter {
    family: Family<RefusalLabel, Counter>,
}

impl RefusalCounter {
    /// Adds the family to `registry`; the refusals most worth an alert
    /// (membership changes and backups) start at 0.
    pub fn register(&self, registry: &mut Registry) {
        for (action, door) in [
            (Action::MembershipChange, Door::Native),
            (Action::MembershipChange, Door::ZooKeeper),
            (Action::Backup, Door::Http),
        ] {
            let _ = self.family.get_or_create(&label(action, door));
        }
        registry.register(
            "authority_refusals",
            "Admin actions refused by the authority model (membership changes, backups, four-letter words, AdminServer commands), by action and door",
            self.family.clone(),
        );
    }

    fn inc(&self, action: Action, door: Door) {
        self.family.get_or_create(&label(action, door)).inc();
    }

    /// Refusals of `action` at `door` so far.
    pub fn get(&self, action: Action, door: Door) -> u64 {
        self.family.get_or_create(&label(action, door)).get()
    }
}

fn label(action: Action, door: Door) -> RefusalLabel {
    RefusalLabel {
        action: action.label(),
        door: door.label().to_string(),
    }
}

/// The decisions of one server: its admin (`--super-digest` or none) and
/// its whitelist, with the counter refusals go to.
#[derive(Debug, Clone)]
pub struct Authority {
    super_configured: bool,
    whitelist: Whitelist,
    refusals: RefusalCounter,
}

impl Authority {
    pub fn new(
        auth: &crate::auth::AuthConfig,
        whitelist: Whitelist,
        metrics: &crate::opmetrics::OpMetrics,
    ) -> Self {
        Authority {
            super_configured: auth.has_super_user(),
            whitelist,
            refusals: metrics.authority_refusals.clone(),
        }
    }

    /// Whether `caller` may do `action`: the decision alone, nothing
    /// recorded.
    pub fn decide(&self, action: Action, caller: &Caller<'_>) -> Result<(), Refusal> {
        match action {
            Action::Metrics => Ok(()),
            Action::FourLetterWord(word) if self.whitelist.allows(word) => Ok(()),
            Action::FourLetterWord(word) => Err(Refusal::NotWhitelisted {
                word: word_name(word),
            }),
            Action::AdminCommand(word) if self.whitelist.allows(word) => Ok(()),
            Action::AdminCommand(_) | Action::MembershipChange | Action::Backup => {
                self.admin(action, caller)
            }
        }
    }

    /// The admin's actions: the super user's, or with no super user
    /// configured, this host's.
    fn admin(&self, action: Action, caller: &Caller<'_>) -> Result<(), Refusal> {
        if caller.is_super() {
            return Ok(());
        }
        if self.super_configured {
            return Err(Refusal::NotSuper {
                what: action.what(),
                who: crate::tree::acl::describe(caller.ids),
                authenticated: caller.authenticated(),
            });
        }
        if caller.is_local() {
            return Ok(());
        }
        Err(Refusal::NoAdmin {
            what: action.what(),
            addr: caller.addr.to_canonical(),
        })
    }

    /// [`decide`](Self::decide), and a refusal counted and logged: what
    /// every door calls.
    pub fn check(&self, action: Action, door: Door, caller: &Caller<'_>) -> Result<(), Refusal> {
        let decided = self.decide(action, caller);
        if let Err(why) = &decided {
            self.refusals.inc(action, door);
            let fix = match why {
                Refusal::NotWhitelisted { .. } => "--4lw-whitelist lists the words answered",
                Refusal::NotSuper { .. } => "authenticate as the --super-digest user",
                Refusal::NoAdmin { .. } => "configure --super-digest",
            };
            warn!(
                action = %action.label(),
                door = door.label(),
                from = %caller.addr.to_canonical(),
                ids = %crate::tree::acl::describe(caller.ids),
                %why,
                fix,
                "admin action refused"
            );
        }
        decided
    }
}

#[cfg(test)]
mod tests;
