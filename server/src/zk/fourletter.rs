//! ZooKeeper's four-letter words, every one ZooKeeper 3.8 has: `conf cons
//! crst dump envi dirs ruok srst srvr stat wchs wchc wchp mntr isro hash`.
//! Each is answered in plain text, laid out as ZooKeeper lays it out, and
//! the connection closed. Four bytes that are no word are read as the
//! length of a ZooKeeper packet, as ZooKeeper reads them: far beyond the
//! packet bound, so the connection is closed without an answer, which is
//! ZooKeeper's answer to an unknown word.
//!
//! The figures come from the core ([`crate::core::admin`]); this file only
//! asks for them and lays them out. The AdminServer's JSON
//! ([`crate::http::admin`]) lays out the same figures.

use std::fmt::Write as _;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::core::admin::{AdminAsk, AdminReport, ConnReport};
use crate::core::CoreMsg;
use crate::tls::Stream;

/// The version ZooKeeper clients see: digits they parse as 3.8.0 (kazoo's
/// `server_version()` reads them from `envi`), then Warden's own.
pub const ZK_VERSION: &str = concat!("3.8.0-warden-", env!("CARGO_PKG_VERSION"));
/// ZooKeeper's "full version" line (`srvr`, `envi`, `mntr`).
pub const FULL_VERSION: &str = concat!(
    "3.8.0-warden-",
    env!("CARGO_PKG_VERSION"),
    ", built by Warden ",
    env!("CARGO_PKG_VERSION")
);
/// What ZooKeeper says when it has no quorum to serve with.
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    Conf,
    Cons,
    Crst,
    Dump,
    Envi,
    Dirs,
    Ruok,
    Srst,
    Srvr,
    Stat,
    Wchs,
    Wchc,
    Wchp,
    Mntr,
    Isro,
    Hash,
}

/// Every word, with its AdminServer command name and aliases (the first
/// name is the one the JSON's `command` field carries).
pub const WORDS: [(Word, &str, &[&str]); 16] = [
    (Word::Conf, "conf", &["configuration", "conf", "config"]),
    (Word::Cons, "cons", &["connections", "cons"]),
    (Word::Crst, "crst", &["connection_stat_reset", "crst"]),
    (Word::Dump, "dump", &["dump"]),
    (Word::Envi, "envi", &["environment", "env", "envi"]),
    (Word::Dirs, "dirs", &["dirs"]),
    (Word::Ruok, "ruok", &["ruok"]),
    (Word::Srst, "srst", &["stat_reset", "srst"]),
    (Word::Srvr, "srvr", &["server_stats", "srvr"]),
    (Word::Stat, "stat", &["stats", "stat"]),
    (Word::Wchs, "wchs", &["watch_summary", "wchs"]),
    (Word::Wchc, "wchc", &["watches", "wchc"]),
    (Word::Wchp, "wchp", &["watches_by_path", "wchp"]),
    (Word::Mntr, "mntr", &["monitor", "mntr"]),
    (Word::Isro, "isro", &["is_read_only", "isro"]),
    (Word::Hash, "hash", &["hash"]),
];

impl Word {
    pub fn parse(b: &[u8; 4]) -> Option<Word> {
        WORDS
            .iter()
            .find(|(_, w, _)| w.as_bytes() == b)
            .map(|(word, _, _)| *word)
    }

    /// The word an AdminServer command name or alias stands for.
    pub fn from_command(name: &str) -> Option<Word> {
        WORDS
            .iter()
            .find(|(_, _, names)| names.contains(&name))
            .map(|(word, _, _)| *word)
    }

    /// The AdminServer's name for it.
    pub fn command(self) -> &'static str {
        WORDS
            .iter()
            .find(|(w, _, _)| *w == self)
            .map(|(_, _, names)| names[0])
            .unwrap_or("")
    }

    /// What to ask the core for.
    pub fn ask(self) -> AdminAsk {
        AdminAsk {
            connections: matches!(self, Word::Cons | Word::Stat | Word::Dump),
            watches: matches!(self, Word::Wchs | Word::Wchc | Word::Wchp),
            sessions: self == Word::Dump,
            digest: self == Word::Hash,
            reset_server: self == Word::Srst,
            reset_connections: self == Word::Crst,
        }
    }

    /// Answered even when the server has no quorum (as in ZooKeeper).
    pub fn always_answered(self) -> bool {
        matches!(self, Word::Ruok | Word::Envi | Word::Isro)
    }
}

/// ZooKeeper's server state: `standalone`, `leader`, `follower`,
/// `observer` for a Raft learner, or `read-only` in read-only mode.
pub fn mode(r: &AdminReport) -> &'static str {
    if r.stats.read_only {
        "read-only"
    } else if r.stats.members == 1 {
        "standalone"
    } else if r.stats.status.role == "leader" {
        "leader"
    } else if r.learner {
        "observer"
    } else {
        "follower"
    }
}

/// Whether the server serves clients: it knows a leader and is not
/// campaigning.
pub fn serving(r: &AdminReport) -> bool {
    r.stats.status.leader_id != 0 && r.stats.status.role != "candidate"
}

/// Whether the server answers the words that need a running server: it
/// serves, or serves reads in read-only mode (as ZooKeeper's read-only
/// server does).
pub fn answering(r: &AdminReport) -> bool {
    serving(r) || r.stats.read_only
}

/// `isro`: `ro` in read-only mode, `rw` while serving, `null` otherwise
/// (ZooKeeper's answer when no server runs).
pub fn isro(r: &AdminReport) -> &'static str {
    if r.stats.read_only {
        "ro"
    } else if serving(r) {
        "rw"
    } else {
        "null"
    }
}

/// A double as Java prints ZooKeeper's: rounded to 4 places, `0.0` not `0`.
pub fn java_double(x: f64) -> String {
    let r = (x * 10_000.0).round() / 10_000.0;
    if r.fract() == 0.0 {
        format!("{r:.1}")
    } else {
        format!("{r}")
    }
}

/// `/127.0.0.1:1234`, as Java prints a socket address.
fn java_addr(addr: &std::net::SocketAddr) -> String {
    format!("/{addr}")
}

/// Facts about this process and machine for `envi` (name, value), after
/// `zookeeper.version`.
pub fn environment(data_dir: &Path) -> Vec<(&'static str, String)> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    // The login name, or the name /etc/passwd gives our uid.
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() }.to_string();
            read("/etc/passwd")
                .lines()
                .find(|l| l.split(':').nth(2) == Some(uid.as_str()))
                .and_then(|l| l.split(':').next())
                .unwrap_or_default()
                .to_string()
        });
    let os = match std::env::consts::OS {
        "linux" => "Linux".to_string(),
        other => other.to_string(),
    };
    vec![
        ("zookeeper.version", FULL_VERSION.to_string()),
        ("warden.version", env!("CARGO_PKG_VERSION").to_string()),
        ("host.name", read("/proc/sys/kernel/hostname")),
        ("os.name", os),
        ("os.arch", std::env::consts::ARCH.to_string()),
        ("os.version", read("/proc/sys/kernel/osrelease")),
        ("user.name", user),
        ("user.home", env("HOME")),
        (
            "user.dir",
            std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        ),
        ("warden.data.dir", data_dir.display().to_string()),
        ("process.id", std::process::id().to_string()),
    ]
}

/// Bytes of every file under `dir` (ZooKeeper's dataDirSize).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Open file descriptors of this process, and the most it may open.
pub fn file_descriptors() -> (u64, u64) {
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    (open, max)
}

/// What the process-level words need besides the core's report.
#[derive(Debug, Clone, Default)]
pub struct Host {
    pub data_dir_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
}

impl Host {
    pub fn read(data_dir: &Path) -> Host {
        let (open_fds, max_fds) = file_descriptors();
        Host {
            data_dir_bytes: dir_bytes(data_dir),
            open_fds,
            max_fds,
        }
    }
}

/// One `cons` line; `brief` as in `stat` (packets only).
fn cons_line(out: &mut String, c: &ConnReport, brief: bool) {
    let f = &c.figures;
    let _ = write!(
        out,
        " {}[1](queued={},recved={},sent={}",
        java_addr(&c.peer),
        c.outstanding,
        f.received,
        f.sent
    );
    if !brief && c.session_id != 0 {
        let _ = write!(
            out,
            ",sid=0x{:x},lop={},est={},to={}",
            c.session_id, f.last_op, f.established_ms, c.session_timeout_ms
        );
        if let Some(cxid) = f.last_cxid {
            let _ = write!(out, ",lcxid=0x{cxid:x}");
        }
        let l = &f.latency;
        let _ = write!(
            out,
            ",lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            f.last_zxid,
            f.last_response_ms,
            l.last_ms(),
            l.min_ms(),
            l.avg_ms() as u64,
            l.max_ms()
        );
    }
    out.push_str(")\n");
}

/// The line ZooKeeper prints for the connection asking (it is one too).
fn own_line(out: &mut String, asker: Option<&std::net::SocketAddr>) {
    if let Some(a) = asker {
        let _ = writeln!(out, " {}[0](queued=0,recved=1,sent=0)", java_addr(a));
    }
}

/// `mntr`'s lines (key without the `zk_` prefix, value), shared with the
/// AdminServer's `monitor`.
pub fn monitor(r: &AdminReport, host: &Host, asker: bool) -> Vec<(&'static str, String)> {
    let s = &r.stats;
    let l = &r.server.latency;
    let mut out = vec![
        ("version", FULL_VERSION.to_string()),
        ("server_state", mode(r).to_string()),
        ("avg_latency", java_double(l.avg_ms())),
        ("max_latency", l.max_ms().to_string()),
        ("min_latency", l.min_ms().to_string()),
        ("packets_received", r.server.received.to_string()),
        ("packets_sent", r.server.sent.to_string()),
        (
            "num_alive_connections",
            (s.connections + usize::from(asker)).to_string(),
        ),
        ("outstanding_requests", r.outstanding.to_string()),
        ("znode_count", s.nodes.to_string()),
        ("watch_count", s.watches.to_string()),
        ("ephemerals_count", s.ephemerals.to_string()),
        ("approximate_data_size", r.data_bytes.to_string()),
        ("global_sessions", s.sessions.to_string()),
        ("local_sessions", s.read_only_sessions.to_string()),
        ("open_file_descriptor_count", host.open_fds.to_string()),
        ("max_file_descriptor_count", host.max_fds.to_string()),
        (
            "uptime",
            (r.server.started.elapsed().as_millis() as u64).to_string(),
        ),
    ];
    if s.members > 1 {
        let peer_state = match mode(r) {
            "leader" => "leading - broadcast",
            "observer" => "observing - broadcast",
            _ if serving(r) => "following - broadcast",
            _ => "looking",
        };
        out.push(("peer_state", peer_state.to_string()));
    }
    if mode(r) == "leader" {
        out.push(("learners", r.learners.to_string()));
        out.push(("synced_followers", r.synced_followers.to_string()));
        out.push((
            "synced_non_voting_followers",
            r.synced_non_voting.to_string(),
        ));
        out.push(("synced_observers", "0".to_string()));
        out.push(("pending_syncs", "0".to_string()));
    }
    out
}

/// The answer to `word`. `asker` is the address of the connection that
/// asked through the client port (ZooKeeper counts and lists it).
pub fn render(
    word: Word,
    r: &AdminReport,
    host: &Host,
    asker: Option<&std::net::SocketAddr>,
) -> String {
    let s = &r.stats;
    if !word.always_answered() && !answering(r) {
        return format!("{NOT_SERVING}\n");
    }
    let mut out = String::new();
    match word {
        Word::Ruok => out.push_str("imok"),
        Word::Isro => out.push_str(isro(r)),
        Word::Srvr | Word::Stat => {
            let _ = writeln!(out, "Zookeeper version: {FULL_VERSION}");
            if word == Word::Stat {
                out.push_str("Clients:\n");
                for c in &r.connections {
                    cons_line(&mut out, c, true);
                }
                own_line(&mut out, asker);
                out.push('\n');
            }
            let l = &r.server.latency;
            let _ = write!(
                out,
                "Latency min/avg/max: {}/{}/{}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
                l.min_ms(),
                java_double(l.avg_ms()),
                l.max_ms(),
                r.server.received,
                r.server.sent,
                s.connections + usize::from(asker.is_some()),
                r.outstanding,
                s.status.applied_index,
                mode(r),
                s.nodes
            );
        }
        Word::Cons => {
            for c in &r.connections {
                cons_line(&mut out, c, false);
            }
            own_line(&mut out, asker);
            out.push('\n');
        }
        Word::Crst => out.push_str("Connection stats reset.\n"),
        Word::Srst => out.push_str("Server stats reset.\n"),
        Word::Mntr => {
            for (k, v) in monitor(r, host, asker.is_some()) {
                let _ = writeln!(out, "zk_{k}\t{v}");
            }
        }
        Word::Conf => {
            let (port, secure) = if s.zk_tls {
                (-1, i64::from(s.zk_port))
            } else {
                (i64::from(s.zk_port), -1)
            };
            let dir = s.data_dir.display();
            let _ = write!(
                out,
                "clientPort={port}\nsecureClientPort={secure}\ndataDir={dir}\ndataDirSize={size}\ndataLogDir={dir}\ndataLogSize={size}\ntickTime={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\nclientPortListenBacklog=-1\nserverId={}\n",
                s.tick_ms,
                s.max_client_cnxns,
                s.min_session_timeout_ms,
                s.max_session_timeout_ms,
                s.status.id,
                size = host.data_dir_bytes,
            );
        }
        Word::Envi => {
            out.push_str("Environment:\n");
            for (k, v) in environment(&s.data_dir) {
                let _ = writeln!(out, "{k}={v}");
            }
        }
        Word::Dirs => {
            let _ = write!(
                out,
                "datadir_size: {0}\nlogdir_size: {0}\n",
                host.data_dir_bytes
            );
        }
        Word::Wchs => {
            let paths: std::collections::BTreeSet<&String> =
                r.watches.iter().flat_map(|(_, p)| p).collect();
            let _ = write!(
                out,
                "{} connections watching {} paths\nTotal watches:{}\n",
                r.watches.len(),
                paths.len(),
                s.watches
            );
        }
        Word::Wchc => {
            for (session, paths) in &r.watches {
                let _ = writeln!(out, "0x{session:x}");
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push('\n');
        }
        Word::Wchp => {
            let mut by_path: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
            for (session, paths) in &r.watches {
                for p in paths {
                    by_path.entry(p).or_default().push(*session);
                }
            }
            for (p, sessions) in by_path {
                let _ = writeln!(out, "{p}");
                for s in sessions {
                    let _ = writeln!(out, "\t0x{s:x}");
                }
            }
            out.push('\n');
        }
        Word::Dump => {
            out.push_str("SessionTracker dump:\n");
            let _ = writeln!(out, "Global Sessions({}):", r.sessions.len());
            for sess in &r.sessions {
                let _ = writeln!(out, "0x{:x}\t{}ms", sess.session_id, sess.timeout_ms);
            }
            out.push_str("ephemeral nodes dump:\n");
            let with: Vec<_> = r
                .sessions
                .iter()
                .filter(|s| !s.ephemerals.is_empty())
                .collect();
            let _ = writeln!(out, "Sessions with Ephemerals ({}):", with.len());
            for sess in with {
                let _ = writeln!(out, "0x{:x}:", sess.session_id);
                for p in &sess.ephemerals {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push_str("Connections dump:\n");
            let n = r.connections.len() + usize::from(asker.is_some());
            let _ = writeln!(out, "Connections Sets (1)/({n}):");
            let _ = writeln!(out, "{n} connections:");
            if let Some(a) = asker {
                let _ = writeln!(out, "\tip: {} sessionId: 0x0", java_addr(a));
            }
            for c in &r.connections {
                let _ = writeln!(
                    out,
                    "\tip: {} sessionId: 0x{:x}",
                    java_addr(&c.peer),
                    c.session_id
                );
            }
        }
        Word::Hash => {
            if let Some(d) = &r.digest {
                let _ = writeln!(out, "{:x}: {}", d.zxid, d.digest);
            }
        }
    }
    out
}

/// Asks the core for what `word` needs; `None` if the core is gone.
pub async fn report(core: &mpsc::Sender<CoreMsg>, word: Word) -> Option<AdminReport> {
    let (tx, rx) = oneshot::channel();
    core.send(CoreMsg::Admin {
        ask: word.ask(),
        reply: tx,
    })
    .await
    .ok()?;
    rx.await.ok()
}

/// Reads what only the host knows (directory sizes, descriptors) off the
/// async threads.
pub async fn host(data_dir: std::path::PathBuf, word: Word) -> Host {
    if !matches!(
        word,
        Word::Conf | Word::Dirs | Word::Mntr | Word::Srvr | Word::Stat
    ) {
        return Host::default();
    }
    tokio::task::spawn_blocking(move || Host::read(&data_dir))
        .await
        .unwrap_or_default()
}

/// Answers `word` on `stream` (one write: clients such as kazoo read the
/// answer with a single `recv`) and closes it.
pub async fn answer(
    stream: Stream,
    word: Word,
    core: mpsc::Sender<CoreMsg>,
    asker: std::net::SocketAddr,
) {
    let Some(r) = report(&core, word).await else {
        return;
    };
    let host = host(r.stats.data_dir.clone(), word).await;
    reply(stream, &render(word, &r, &host, Some(&asker))).await;
}

/// Answers a word the authority refused with its reason (ZooKeeper's
/// line for a word off the whitelist) and closes the connection.
pub async fn refuse(stream: Stream, why: &crate::authority::Refusal) {
    reply(stream, &format!("{why}\n")).await;
}

/// Writes `text` in one write and closes `stream`.
async fn reply(mut stream: Stream, text: &str) {
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
    drain(&mut stream).await;
}

/// Reads and drops what the asker sent after its word (`echo mntr | nc`
/// sends a newline) until it closes its side, so the socket is not
/// closed with unread bytes: that sends a reset instead of an orderly
/// close, and nc, seeing the socket's error, printed nothing. Bounded in
/// time and bytes, so an asker that never closes cannot hold the task.
async fn drain(stream: &mut Stream) {
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        let mut left = 64 * 1024usize;
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            left = left.saturating_sub(n);
            if left == 0 {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
