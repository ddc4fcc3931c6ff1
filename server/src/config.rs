//! Command-line flags and their defaults, validated once at start-up.
//! `warden serve` with no flags runs a working single-node service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Flags of `warden serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// This server's id in the Raft group (non-zero, unique).
    #[arg(long, default_value_t = 1, env = "WARDEN_ID")]
    pub id: u64,
    /// Where the Raft log, hard state and snapshots live.
    #[arg(long, default_value = "warden-data", env = "WARDEN_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Address for client connections (native protocol). Port 0 picks one.
    #[arg(long, default_value = "127.0.0.1:7000", env = "WARDEN_LISTEN")]
    pub listen: SocketAddr,
    /// Address for Raft traffic from peers.
    #[arg(long, default_value = "127.0.0.1:7100", env = "WARDEN_PEER_LISTEN")]
    pub peer_listen: SocketAddr,
    /// Address for ZooKeeper clients (ZooKeeper's own protocol); `off`
    /// disables it.
    #[arg(long, default_value = "127.0.0.1:2181", env = "WARDEN_ZK_LISTEN")]
    pub zk_listen: String,
    /// Address for the HTTP API (lands with the HTTP issue; parsed now).
    #[arg(long, default_value = "127.0.0.1:7200", env = "WARDEN_HTTP_LISTEN")]
    pub http_listen: SocketAddr,
    /// The Raft group: `ID=HOST:PORT,...` including this server. Empty:
    /// a single-node group of this server alone.
    #[arg(long, default_value = "", env = "WARDEN_PEERS")]
    pub peers: String,
    /// Join an existing group instead of forming one from --peers: the
    /// node starts empty and waits for the leader (after `wardenctl cluster
    /// add`). --peers must still list the members' addresses.
    #[arg(long)]
    pub join: bool,
    /// Raft tick.
    #[arg(long, default_value_t = 100, env = "WARDEN_TICK_MS")]
    pub tick_ms: u64,
    /// Ticks without a leader's heartbeat before a follower starts an
    /// election (randomized between this and twice this).
    #[arg(long, default_value_t = 5)]
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats; must be less than
    /// --election-ticks.
    #[arg(long, default_value_t = 1)]
    pub heartbeat_ticks: usize,
    /// Smallest session timeout granted to clients.
    #[arg(long, default_value_t = 1000)]
    pub min_session_timeout_ms: u32,
    /// Largest session timeout granted to clients.
    #[arg(long, default_value_t = 60_000)]
    pub max_session_timeout_ms: u32,
    /// Take a snapshot and compact the log every this many applied entries.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_entries: u64,
    /// The super user, who passes every ACL check: `user:BASE64HASH`, as
    /// ZooKeeper's superDigest (`warden digest user:password` prints it).
    #[arg(long, value_name = "USER:BASE64HASH", env = "WARDEN_SUPER_DIGEST")]
    pub super_digest: Option<String>,
    /// Users whose passwords digest auth checks: a file of `user:BASE64HASH`
    /// lines (`#` comments). Without it any well-formed user:password is
    /// accepted as that digest identity (ZooKeeper's behaviour).
    #[arg(long, value_name = "FILE", env = "WARDEN_AUTH_USERS")]
    pub auth_users: Option<PathBuf>,
    /// A bearer token of the HTTP lock API and the digest identity it
    /// stands for (repeatable).
    #[arg(long = "http-token", value_name = "TOKEN=USER:PASSWORD")]
    pub http_tokens: Vec<String>,
    /// The ACL of the nodes the HTTP lock API creates, in zkCli's text
    /// form (`digest:svc:HASH:cdrwa,world:anyone:r`); default
    /// world:anyone:cdrwa.
    #[arg(long, value_name = "ACL")]
    pub http_lock_acl: Option<String>,
}

/// A peer in the Raft group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub addr: String,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub id: u64,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub peer_listen: SocketAddr,
    pub http_listen: SocketAddr,
    /// None: the ZooKeeper door is off.
    pub zk_listen: Option<SocketAddr>,
    pub peers: Vec<Peer>,
    pub join: bool,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    pub snapshot_entries: u64,
    /// Super user and user list for digest auth.
    pub auth: crate::auth::AuthConfig,
    /// HTTP bearer token -> `user:password`.
    pub http_tokens: Vec<(String, String)>,
    /// ACL of the HTTP lock API's nodes; empty: world:anyone.
    pub http_lock_acl: Vec<warden_protocol::pb::Acl>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--id must be non-zero")]
    ZeroId,
    #[error("--tick-ms must be between 1 and 10000, got {0}")]
    Tick(u64),
    #[error(
        "--min-session-timeout-ms ({min}) must be > 0 and <= --max-session-timeout-ms ({max})"
    )]
    SessionTimeouts { min: u32, max: u32 },
    #[error("--heartbeat-ticks ({heartbeat}) must be at least 1 and less than --election-ticks ({election})")]
    Ticks { election: usize, heartbeat: usize },
    #[error("--snapshot-entries must be at least 1")]
    SnapshotEntries,
    #[error("--zk-listen: {0:?} is neither HOST:PORT nor `off`")]
    ZkListen(String),
    #[error("--peers: {0}")]
    Peers(String),
    #[error("{0}")]
    Auth(String),
}

impl ServeArgs {
    pub fn validate(self) -> Result<Config, ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        if !(1..=10_000).contains(&self.tick_ms) {
            return Err(ConfigError::Tick(self.tick_ms));
        }
        if self.min_session_timeout_ms == 0
            || self.min_session_timeout_ms > self.max_session_timeout_ms
        {
            return Err(ConfigError::SessionTimeouts {
                min: self.min_session_timeout_ms,
                max: self.max_session_timeout_ms,
            });
        }
        if self.heartbeat_ticks == 0 || self.heartbeat_ticks >= self.election_ticks {
            return Err(ConfigError::Ticks {
                election: self.election_ticks,
                heartbeat: self.heartbeat_ticks,
            });
        }
        if self.snapshot_entries == 0 {
            return Err(ConfigError::SnapshotEntries);
        }
        let peers = parse_peers(&self.peers, self.id, &self.peer_listen)?;
        let zk_listen = match self.zk_listen.trim() {
            "off" | "" => None,
            a => Some(
                a.parse()
                    .map_err(|_| ConfigError::ZkListen(a.to_string()))?,
            ),
        };
        let auth =
            crate::auth::AuthConfig::new(self.super_digest.as_deref(), self.auth_users.as_deref())
                .map_err(ConfigError::Auth)?;
        let http_tokens = parse_http_tokens(&self.http_tokens)?;
        let http_lock_acl = match &self.http_lock_acl {
            None => Vec::new(),
            Some(text) => warden_protocol::auth::parse_acl(text)
                .map_err(|e| ConfigError::Auth(format!("--http-lock-acl: {e}")))?,
        };
        Ok(Config {
            id: self.id,
            data_dir: self.data_dir,
            listen: self.listen,
            peer_listen: self.peer_listen,
            http_listen: self.http_listen,
            zk_listen,
            peers,
            join: self.join,
            tick: Duration::from_millis(self.tick_ms),
            election_ticks: self.election_ticks,
            heartbeat_ticks: self.heartbeat_ticks,
            min_session_timeout_ms: self.min_session_timeout_ms,
            max_session_timeout_ms: self.max_session_timeout_ms,
            snapshot_entries: self.snapshot_entries,
            auth,
            http_tokens,
            http_lock_acl,
        })
    }
}

/// `TOKEN=user:password`, each token once.
fn parse_http_tokens(specs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for spec in specs {
        let bad = |why: &str| ConfigError::Auth(format!("--http-token: {why}"));
        let (token, credentials) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected TOKEN=USER:PASSWORD"))?;
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the token must be non-empty, without spaces"));
        }
        warden_protocol::auth::split_credentials(credentials).map_err(|e| bad(&e.0))?;
        if out.iter().any(|(t, _)| t == token) {
            return Err(bad("a token is given twice"));
        }
        out.push((token.to_string(), credentials.to_string()));
    }
    Ok(out)
}

fn parse_peers(spec: &str, id: u64, peer_listen: &SocketAddr) -> Result<Vec<Peer>, ConfigError> {
    if spec.trim().is_empty() {
        return Ok(vec![Peer {
            id,
            addr: peer_listen.to_string(),
        }]);
    }
    let mut peers = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (pid, addr) = item
            .split_once('=')
            .ok_or_else(|| ConfigError::Peers(format!("{item:?} is not ID=HOST:PORT")))?;
        let pid: u64 = pid
            .parse()
            .map_err(|_| ConfigError::Peers(format!("{pid:?} is not a numeric id")))?;
        if pid == 0 {
            return Err(ConfigError::Peers("peer ids must be non-zero".into()));
        }
        if peers.iter().any(|p: &Peer| p.id == pid) {
            return Err(ConfigError::Peers(format!("id {pid} appears twice")));
        }
        if addr.is_empty() {
            return Err(ConfigError::Peers(format!("peer {pid} has no address")));
        }
        peers.push(Peer {
            id: pid,
            addr: addr.to_string(),
        });
    }
    if !peers.iter().any(|p| p.id == id) {
        return Err(ConfigError::Peers(format!(
            "this server's id {id} is not listed"
        )));
    }
    peers.sort_by_key(|p| p.id);
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        let mut all = vec!["warden"];
        all.extend_from_slice(args);
        Cli::parse_from(all).serve.validate()
    }

    #[test]
    fn defaults_make_a_single_node() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.id, 1);
        assert_eq!(
            c.peers,
            vec![Peer {
                id: 1,
                addr: "127.0.0.1:7100".into()
            }]
        );
        assert_eq!(c.tick, Duration::from_millis(100));
    }

    #[test]
    fn peers_are_parsed_and_checked() {
        let c = parse(&["--id", "2", "--peers", "1=a:1, 2=b:2,3=c:3"]).unwrap();
        assert_eq!(c.peers.len(), 3);
        assert!(parse(&["--peers", "2=b:2"])
            .unwrap_err()
            .to_string()
            .contains("id 1 is not listed"));
        assert!(parse(&["--peers", "x=b:2"]).is_err());
        assert!(parse(&["--peers", "1=a:1,1=b:2"]).is_err());
        assert!(parse(&["--id", "0"]).is_err());
        assert_eq!(parse(&["--zk-listen", "off"]).unwrap().zk_listen, None);
        assert!(parse(&["--zk-listen", "nope"]).is_err());
        assert!(parse(&["--election-ticks", "3", "--heartbeat-ticks", "3"]).is_err());
        assert!(parse(&["--super-digest", "nocolon"]).is_err());
        assert!(parse(&["--super-digest", "admin:aGFzaA=="]).is_ok());
        assert!(parse(&["--auth-users", "/nonexistent/users"]).is_err());
        let c = parse(&["--http-token", "t1=bob:pw", "--http-token", "t2=al:x:y"]).unwrap();
        assert_eq!(c.http_tokens[1], ("t2".to_string(), "al:x:y".to_string()));
        assert!(parse(&["--http-token", "t1"]).is_err());
        assert!(parse(&["--http-token", "t1=bob"]).is_err());
        assert!(parse(&["--http-token", "t=a:b", "--http-token", "t=c:d"]).is_err());
        assert_eq!(
            parse(&["--http-lock-acl", "digest:svc:aA==:cdrwa,world:anyone:r"])
                .unwrap()
                .http_lock_acl
                .len(),
            2
        );
        assert!(parse(&["--http-lock-acl", "bogus"]).is_err());
        assert!(parse(&[
            "--min-session-timeout-ms",
            "5",
            "--max-session-timeout-ms",
            "4"
        ])
        .is_err());
    }
}
