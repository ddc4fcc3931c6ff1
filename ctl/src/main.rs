//! `wardenctl`: the command-line client.
//!
//! Each invocation opens a session, runs one command, and closes the
//! session. Output is for people by default and, with `--json`, one JSON
//! object per line for scripts. On failure it prints exactly one line to
//! stderr, `error: <Code>: <path or detail>` (e.g. `error: NoNode: /a/b`),
//! and exits non-zero; usage errors exit 2, as clap does.
//!
//! Logs (the client library's `tracing` output) are off unless
//! `--log-level` or `WARDEN_LOG` asks for them (see warden-log), so that
//! stderr carries only that one error line.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use serde::Serialize;
use warden_client::{
    Client, ConnectOptions, CreateOptions, ErrorCode, Stat, TlsOptions, WatchEvent,
};
use warden_protocol::path;

mod acl;
mod bench;
mod elect;
mod http_get;
mod lock;
mod locks;
mod snapshot;

/// How many times `rmr` re-lists a node that gained a child while it was
/// being emptied, before giving up with `NotEmpty`.
const RMR_NOT_EMPTY_RETRIES_MAX: u32 = 16;
/// Session timeout of wardenctl's own session.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(
    name = "wardenctl",
    version = warden_log::VERSION,
    about = "Command-line client for Warden",
    long_about = "Command-line client for Warden. Each run opens a session, runs one command \
                  and closes the session, so ephemeral nodes it creates are deleted when it exits."
)]
struct Cli {
    #[command(flatten)]
    log: warden_log::LogArgs,

    /// Servers to connect to, "host:port,host:port".
    #[arg(
        long,
        global = true,
        env = "WARDEN_SERVERS",
        default_value = "127.0.0.1:7000"
    )]
    servers: String,

    /// Print one JSON object per line instead of human-readable output.
    #[arg(long, global = true)]
    json: bool,

    /// How long to wait to connect, and for each answer, in milliseconds.
    #[arg(long, global = true, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,

    /// Connect with TLS, trusting the CA certificate(s) in FILE (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "WARDEN_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,

    /// With --tls-ca: present this certificate (PEM) to servers that ask
    /// for one (--tls-client-auth, the x509 ACL scheme).
    #[arg(long, global = true, value_name = "FILE", env = "WARDEN_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", env = "WARDEN_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,

    /// Authenticate as this digest identity (ZooKeeper's addauth digest)
    /// before running the command.
    #[arg(
        long,
        global = true,
        env = "WARDEN_AUTH",
        value_name = "USER:PASSWORD",
        hide_env_values = true
    )]
    auth: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a node and print its path (with its sequence suffix, if any).
    ///
    /// An --ephemeral node belongs to wardenctl's own session, which ends
    /// when wardenctl exits: the node is deleted right away. That is
    /// expected; use the client library to hold ephemeral nodes.
    Create {
        /// Ephemeral: owned by wardenctl's own session, so it is deleted
        /// when wardenctl exits (expected; hold ephemerals with the library).
        #[arg(long)]
        ephemeral: bool,
        /// Append a 10-digit, increasing sequence number to the name.
        #[arg(long)]
        sequential: bool,
        /// Deleted by the server once it has had children and has none left.
        #[arg(long)]
        container: bool,
        /// Deleted once unmodified for this many milliseconds and childless.
        #[arg(long, value_name = "MS")]
        ttl: Option<u64>,
        /// The node's ACL, `scheme:id:perms[,...]` (perms from cdrwa, e.g.
        /// `digest:bob:HASH:cdrwa,world:anyone:r`, or `auth::cdrwa` for
        /// the --auth identity); default world:anyone:cdrwa.
        #[arg(long, value_name = "ACL")]
        acl: Option<String>,
        path: String,
        /// The node's data (UTF-8); empty if omitted.
        data: Option<String>,
    },
    /// Print a node's ACL, one `scheme:id:perms` per line.
    Getacl { path: String },
    /// Replace a node's ACL: `scheme:id:perms[,...]` (perms from cdrwa).
    Setacl {
        /// Only if the node's ACL version (aversion) is N.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        version: Option<i32>,
        path: String,
        acl: String,
    },
    /// Print the digest of USER:PASSWORD (`USER:BASE64HASH`), the form
    /// `warden serve --super-digest`, --auth-users files and digest ACL
    /// entries take. Connects to nothing.
    Digest { credentials: String },
    /// Print a node's data.
    Get { path: String },
    /// Replace a node's data.
    Set {
        /// Only if the node's version is N.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        version: Option<i32>,
        path: String,
        data: String,
    },
    /// Delete a node (it must have no children).
    Delete {
        /// Only if the node's version is N.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        version: Option<i32>,
        path: String,
    },
    /// List a node's children.
    Ls { path: String },
    /// Print a node's stat.
    Stat { path: String },
    /// Print a node and all its descendants, indented.
    Tree {
        #[arg(default_value = "/")]
        path: String,
    },
    /// Delete a node and all its descendants.
    Rmr { path: String },
    /// Print every change to a node (with --recursive, to its subtree too),
    /// one line each, until interrupted (Ctrl-C).
    Watch {
        #[arg(long)]
        recursive: bool,
        path: String,
    },
    /// Cluster membership: status, add, remove.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Load the service with N clients in a closed loop and report ops/s
    /// and latency percentiles.
    Bench(bench::BenchArgs),
    /// Run COMMAND while holding the lock NAME (fencing token in
    /// $WARDEN_FENCING_TOKEN); exit with its exit code, 3 if --wait ran
    /// out, 4 if the lock was lost while it ran.
    Lock(lock::LockArgs),
    /// Print who holds the lock NAME; exit 1 (printing nothing) if free.
    LockHolder(lock::HolderArgs),
    /// Campaign in election NAME as ID; print `leader ID token=N` on
    /// winning, hold until Ctrl-C/SIGTERM, then resign. Exits non-zero if
    /// leadership is lost.
    Elect(elect::ElectArgs),
    /// List every lock the servers recognise (HTTP leases, the recipes'
    /// locks, ZooKeeper clients' locks): kind, name, holder, fencing
    /// token, waiters. Over HTTP (`--http ADDR`).
    Locks(locks::LocksArgs),
    /// Backups: `snapshot save FILE --http ADDR`.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Every member: id, address, role, term, commit and applied index, lag.
    Status,
    /// Add server ID (peer address ADDR) as a voter, or with --learner as a
    /// non-voting read replica; adding an existing learner without
    /// --learner promotes it. Start the server with `warden serve --join`
    /// first. Refused when the group would be left with fewer voters heard
    /// from lately than a quorum (a voter that is not running).
    Add {
        id: u64,
        addr: String,
        #[arg(long)]
        learner: bool,
        /// Skip the quorum check: disaster recovery only (the group may
        /// be left unable to commit anything).
        #[arg(long)]
        force: bool,
    },
    /// Remove server ID from the group. Refused, as `add`, when it would
    /// leave no quorum of voters heard from.
    Remove {
        id: u64,
        /// Skip the quorum check: disaster recovery only.
        #[arg(long)]
        force: bool,
    },
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Warden(#[from] warden_client::Error),
    #[error("writing output: {0}")]
    Io(#[from] io::Error),
    /// Exit with `code`, printing `error: {message}` unless it is empty.
    #[error("{message}")]
    Exit { code: u8, message: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if warden_log::parse_only() {
        return ExitCode::SUCCESS;
    }
    if let Err(e) = warden_log::init(&cli.log, warden_log::Level::Off) {
        eprintln!("error: BadArguments: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: SystemError: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // `wardenctl tree | head`: the reader went away; not our failure.
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Exit { code, message }) => {
            if !message.is_empty() {
                eprintln!("error: {message}");
            }
            ExitCode::from(code)
        }
        Err(Failure::Warden(e)) => {
            eprintln!("error: {}", warden_line(&e));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The error line for a client error. Refusals about who you are carry
/// the server's detail, which names the path and what was missing
/// (`NoAuth: /app: WRITE not granted to digest:bob:...|ip:127.0.0.1`).
fn warden_line(e: &warden_client::Error) -> String {
    match e {
        warden_client::Error::Api { code, message, .. }
            if !message.is_empty()
                && matches!(
                    code,
                    ErrorCode::NoAuth | ErrorCode::InvalidAcl | ErrorCode::AuthFailed
                ) =>
        {
            format!("{code}: {}", message.replace('\n', " "))
        }
        other => other.to_string(),
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let out = Output { json: cli.json };
    if let Command::Digest { credentials } = &cli.command {
        return acl::digest(credentials, &out);
    }
    let timeout = Duration::from_millis(cli.timeout_ms);
    let options = ConnectOptions {
        session_timeout: lock::session_timeout(&cli.command).unwrap_or(SESSION_TIMEOUT),
        connect_timeout: timeout,
        request_timeout: timeout,
    };
    let tls = match (&cli.tls_ca, &cli.tls_cert, &cli.tls_key) {
        (Some(ca), cert, key) => Some(TlsOptions::from_files(ca, cert.as_deref(), key.as_deref())?),
        (None, None, None) => None,
        (None, _, _) => return Err(warden_client::Error::BadArguments(
            "--tls-cert and --tls-key need --tls-ca (the CA that signed the servers' certificates)"
                .into(),
        )
        .into()),
    };
    if let Command::Snapshot(cmd) = &cli.command {
        // Over HTTP, without a session.
        return snapshot::run(cmd, tls, cli.auth.as_deref(), timeout).await;
    }
    if let Command::Locks(args) = &cli.command {
        return locks::run(args, tls, cli.auth.as_deref(), timeout, &out).await;
    }
    let client = connect(&cli.servers, options.clone(), tls.clone()).await?;
    if let Some(credentials) = &cli.auth {
        if let Err(e) = client.add_auth("digest", credentials.as_bytes()).await {
            let _ = client.close().await;
            return Err(e.into());
        }
    }
    let result = match cli.command {
        // The bench opens sessions of its own, so it needs the flags too.
        Command::Bench(args) => bench::run(&client, &cli.servers, options, tls, args, &out).await,
        command => execute(&client, command, &out).await,
    };
    // Close even after a failure, so the session (and any ephemeral node)
    // ends now rather than at its timeout. Its own failure matters less
    // than the command's.
    let closed = client.close().await;
    result?;
    closed?;
    Ok(())
}

/// Opens a session, over TLS when `tls` is given.
pub(crate) async fn connect(
    servers: &str,
    options: ConnectOptions,
    tls: Option<TlsOptions>,
) -> warden_client::Result<Client> {
    match tls {
        None => Client::connect(servers, options).await,
        Some(tls) => Client::connect_tls(servers, options, tls).await,
    }
}

async fn execute(client: &Client, command: Command, out: &Output) -> Result<(), Failure> {
    match command {
        Command::Create {
            ephemeral,
            sequential,
            container,
            ttl,
            acl,
            path,
            data,
        } => {
            let options = CreateOptions {
                ephemeral,
                sequential,
                container,
                ttl: ttl.map(Duration::from_millis),
                acl: match acl {
                    Some(text) => acl::parse(&text)?,
                    None => Vec::new(),
                },
            };
            let data = data.unwrap_or_default();
            let (created, stat) = client.create(&path, data.as_bytes(), options).await?;
            out.line(&created, || NodeJson::new(&created, &stat))
        }
        Command::Getacl { path } => acl::get(client, &path, out).await,
        Command::Setacl { version, path, acl } => acl::set(client, &path, &acl, version, out).await,
        Command::Digest { .. } => unreachable!("run() answers digest without a server"),
        Command::Snapshot(_) => unreachable!("run() saves snapshots over HTTP"),
        Command::Locks(_) => unreachable!("run() lists locks over HTTP"),
        Command::Get { path } => {
            let (data, stat) = client.get_data(&path).await?;
            if out.json {
                out.json_line(&DataJson {
                    path: &path,
                    data: &String::from_utf8_lossy(&data),
                    stat: StatJson::from(&stat),
                })
            } else {
                // Raw bytes, so binary data survives a pipe.
                let mut stdout = io::stdout().lock();
                stdout.write_all(&data)?;
                stdout.write_all(b"\n")?;
                Ok(())
            }
        }
        Command::Set {
            version,
            path,
            data,
        } => {
            let stat = client.set_data(&path, data.as_bytes(), version).await?;
            out.json_only(|| NodeJson::new(&path, &stat))
        }
        Command::Delete { version, path } => {
            client.delete(&path, version).await?;
            out.json_only(|| DeletedJson {
                path: &path,
                deleted: 1,
            })
        }
        Command::Ls { path } => {
            let (children, _) = client.get_children(&path).await?;
            if out.json {
                out.json_line(&ChildrenJson {
                    path: &path,
                    children: &children,
                })
            } else {
                let mut stdout = io::stdout().lock();
                for child in children {
                    writeln!(stdout, "{child}")?;
                }
                Ok(())
            }
        }
        Command::Stat { path } => {
            let stat = client
                .exists(&path)
                .await?
                .ok_or_else(|| warden_client::Error::api(ErrorCode::NoNode, &path, ""))?;
            if out.json {
                out.json_line(&NodeJson::new(&path, &stat))
            } else {
                let mut stdout = io::stdout().lock();
                write!(stdout, "{}", stat_human(&stat))?;
                Ok(())
            }
        }
        Command::Tree { path } => tree(client, &path, out).await,
        Command::Rmr { path } => {
            let deleted = rmr(client, &path).await?;
            out.json_only(|| DeletedJson {
                path: &path,
                deleted,
            })
        }
        Command::Watch { recursive, path } => watch(client, &path, recursive, out).await,
        Command::Elect(args) => elect::run(client, args, out).await,
        Command::Cluster(ClusterCommand::Status) => {
            let status = client.cluster_status().await?;
            if out.json {
                for m in &status.members {
                    out.json_line(&MemberJson::new(m, status.leader_id))?;
                }
                Ok(())
            } else {
                let mut stdout = io::stdout().lock();
                writeln!(
                    stdout,
                    "{:>4}  {:<22} {:<22} {:<10} {:>6} {:>10} {:>10} {:>6}",
                    "id", "peer addr", "client addr", "role", "term", "commit", "applied", "lag"
                )?;
                for m in &status.members {
                    let role = if m.reachable {
                        m.role.as_str()
                    } else {
                        "unreachable"
                    };
                    writeln!(
                        stdout,
                        "{:>4}  {:<22} {:<22} {:<10} {:>6} {:>10} {:>10} {:>6}",
                        m.id,
                        m.addr,
                        m.client_addr,
                        role,
                        m.term,
                        m.commit_index,
                        m.applied_index,
                        m.lag
                    )?;
                }
                Ok(())
            }
        }
        Command::Cluster(ClusterCommand::Add {
            id,
            addr,
            learner,
            force,
        }) => {
            let r = warden_protocol::pb::AddMemberRequest {
                id,
                addr,
                learner,
                force,
            };
            client.add_member_with(r).await?;
            Ok(())
        }
        Command::Cluster(ClusterCommand::Remove { id, force }) => {
            let r = warden_protocol::pb::RemoveMemberRequest { id, force };
            client.remove_member_with(r).await?;
            Ok(())
        }
        Command::Bench(_) => unreachable!("run() hands the bench to its module"),
        Command::Lock(args) => lock::lock(client, args).await,
        Command::LockHolder(args) => lock::holder(client, args, out).await,
    }
}

/// One member in `cluster status --json`.
#[derive(Serialize)]
struct MemberJson<'a> {
    id: u64,
    addr: &'a str,
    client_addr: &'a str,
    role: &'a str,
    term: u64,
    commit_index: u64,
    applied_index: u64,
    lag: u64,
    voter: bool,
    reachable: bool,
    leader: bool,
}

impl<'a> MemberJson<'a> {
    fn new(m: &'a warden_client::MemberStatus, leader_id: u64) -> Self {
        MemberJson {
            id: m.id,
            addr: &m.addr,
            client_addr: &m.client_addr,
            role: &m.role,
            term: m.term,
            commit_index: m.commit_index,
            applied_index: m.applied_index,
            lag: m.lag,
            voter: m.voter,
            reachable: m.reachable,
            leader: m.id == leader_id,
        }
    }
}

/// Depth-first, children in name order; a node deleted during the walk is
/// skipped (only the starting node must exist).
async fn tree(client: &Client, root: &str, out: &Output) -> Result<(), Failure> {
    let mut stack = vec![(root.to_string(), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        let (children, stat) = match client.get_children(&node).await {
            Ok(found) => found,
            Err(e) if e.code() == ErrorCode::NoNode && depth > 0 => continue,
            Err(e) => return Err(e.into()),
        };
        let name = if depth == 0 {
            node.as_str()
        } else {
            path::name(&node)
        };
        let human = format!("{:indent$}{name}", "", indent = depth * 2);
        out.line(&human, || NodeJson::new(&node, &stat))?;
        for child in children.iter().rev() {
            stack.push((path::join(&node, child), depth + 1));
        }
    }
    Ok(())
}

/// Deletes `root` and everything under it, children first. Nodes others
/// delete meanwhile are fine; nodes others add meanwhile are deleted too,
/// up to [`RMR_NOT_EMPTY_RETRIES_MAX`] times. The root node `/` itself
/// cannot be deleted, so `rmr /` empties it. Returns how many nodes went.
async fn rmr(client: &Client, root: &str) -> Result<u64, warden_client::Error> {
    // (path, children already listed and pushed above it)
    let mut stack = vec![(root.to_string(), false)];
    let mut deleted = 0;
    let mut retries = 0;
    while let Some((node, listed)) = stack.pop() {
        if !listed {
            match client.get_children(&node).await {
                Ok((children, _)) => {
                    stack.push((node.clone(), true));
                    for child in children {
                        stack.push((path::join(&node, &child), false));
                    }
                }
                Err(e) if e.code() == ErrorCode::NoNode && node != root => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        if node == "/" {
            continue;
        }
        match client.delete(&node, None).await {
            Ok(()) => deleted += 1,
            Err(e) if e.code() == ErrorCode::NoNode => {}
            Err(e) if e.code() == ErrorCode::NotEmpty && retries < RMR_NOT_EMPTY_RETRIES_MAX => {
                retries += 1;
                stack.push((node, false));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Prints events until Ctrl-C, or until the watch ends with an error.
async fn watch(client: &Client, path: &str, recursive: bool, out: &Output) -> Result<(), Failure> {
    let mut events = client.watch(path, recursive).await?;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            _ = &mut interrupted => break,
            event = events.next() => match event {
                Some(Ok(event)) => out.line(&event_human(&event), || EventJson::from(&event))?,
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
        }
    }
    // The session is closed next anyway; this just says goodbye politely.
    let _ = events.remove().await;
    Ok(())
}

/// Where results go: people or scripts.
struct Output {
    json: bool,
}

impl Output {
    /// One line: `human` for people, `json()` for scripts.
    fn line<T: Serialize>(&self, human: &str, json: impl FnOnce() -> T) -> Result<(), Failure> {
        if self.json {
            self.json_line(&json())
        } else {
            writeln!(io::stdout().lock(), "{human}")?;
            Ok(())
        }
    }

    /// Commands that print nothing on success for people.
    fn json_only<T: Serialize>(&self, json: impl FnOnce() -> T) -> Result<(), Failure> {
        if self.json {
            self.json_line(&json())
        } else {
            Ok(())
        }
    }

    fn json_line<T: Serialize>(&self, value: &T) -> Result<(), Failure> {
        let line = serde_json::to_string(value).map_err(io::Error::other)?;
        writeln!(io::stdout().lock(), "{line}")?;
        Ok(())
    }
}

// JSON shapes, as structs so that keys keep a stable, documented order.

/// A node's stat, field for field as on the wire.
#[derive(Debug, Serialize)]
struct StatJson {
    czxid: u64,
    mzxid: u64,
    pzxid: u64,
    ctime_ms: i64,
    mtime_ms: i64,
    version: i32,
    cversion: i32,
    aversion: i32,
    ephemeral_owner: u64,
    data_length: u32,
    num_children: u32,
}

impl From<&Stat> for StatJson {
    fn from(s: &Stat) -> Self {
        Self {
            czxid: s.czxid,
            mzxid: s.mzxid,
            pzxid: s.pzxid,
            ctime_ms: s.ctime_ms,
            mtime_ms: s.mtime_ms,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            data_length: s.data_length,
            num_children: s.num_children,
        }
    }
}

/// `create`, `set`, `stat`, and each line of `tree`.
#[derive(Debug, Serialize)]
struct NodeJson<'a> {
    path: &'a str,
    stat: StatJson,
}

impl<'a> NodeJson<'a> {
    fn new(path: &'a str, stat: &Stat) -> Self {
        Self {
            path,
            stat: stat.into(),
        }
    }
}

/// `get`: data as UTF-8 (invalid bytes replaced).
#[derive(Debug, Serialize)]
struct DataJson<'a> {
    path: &'a str,
    data: &'a str,
    stat: StatJson,
}

/// `ls`.
#[derive(Debug, Serialize)]
struct ChildrenJson<'a> {
    path: &'a str,
    children: &'a [String],
}

/// `delete` (always 1) and `rmr` (how many nodes went).
#[derive(Debug, Serialize)]
struct DeletedJson<'a> {
    path: &'a str,
    deleted: u64,
}

/// `watch`: one per event.
#[derive(Debug, Serialize)]
struct EventJson<'a> {
    #[serde(rename = "type")]
    event_type: &'static str,
    path: &'a str,
    zxid: u64,
}

impl<'a> From<&'a WatchEvent> for EventJson<'a> {
    fn from(e: &'a WatchEvent) -> Self {
        Self {
            event_type: e.event_type.name(),
            path: &e.path,
            zxid: e.zxid,
        }
    }
}

fn stat_human(s: &Stat) -> String {
    format!(
        "czxid = {}\nmzxid = {}\npzxid = {}\nctime_ms = {}\nmtime_ms = {}\nversion = {}\n\
         cversion = {}\naversion = {}\nephemeral_owner = {:#x}\ndata_length = {}\nnum_children = {}\n",
        s.czxid,
        s.mzxid,
        s.pzxid,
        s.ctime_ms,
        s.mtime_ms,
        s.version,
        s.cversion,
        s.aversion,
        s.ephemeral_owner,
        s.data_length,
        s.num_children
    )
}

fn event_human(e: &WatchEvent) -> String {
    format!("{} {} zxid={}", e.event_type, e.path, e.zxid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_globals_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "wardenctl",
            "set",
            "--version",
            "3",
            "/a",
            "x",
            "--json",
            "--servers",
            "h:1",
        ])
        .unwrap();
        assert!(cli.json);
        assert_eq!(cli.servers, "h:1");
        assert!(matches!(
            cli.command,
            Command::Set {
                version: Some(3),
                ..
            }
        ));
    }

    #[test]
    fn create_flags() {
        let cli = Cli::try_parse_from([
            "wardenctl",
            "create",
            "--ephemeral",
            "--sequential",
            "--ttl",
            "500",
            "/a/",
            "data",
        ])
        .unwrap();
        match cli.command {
            Command::Create {
                ephemeral,
                sequential,
                container,
                ttl,
                path,
                data,
                ..
            } => {
                assert!(ephemeral && sequential && !container);
                assert_eq!(ttl, Some(500));
                assert_eq!(path, "/a/");
                assert_eq!(data.as_deref(), Some("data"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tree_defaults_to_the_root() {
        let cli = Cli::try_parse_from(["wardenctl", "tree"]).unwrap();
        assert!(matches!(cli.command, Command::Tree { ref path } if path == "/"));
    }

    #[test]
    fn json_shapes() {
        let stat = Stat {
            czxid: 1,
            num_children: 2,
            ..Default::default()
        };
        let line = serde_json::to_string(&DataJson {
            path: "/a",
            data: "hi",
            stat: StatJson::from(&stat),
        })
        .unwrap();
        assert_eq!(
            line,
            r#"{"path":"/a","data":"hi","stat":{"czxid":1,"mzxid":0,"pzxid":0,"ctime_ms":0,"mtime_ms":0,"version":0,"cversion":0,"aversion":0,"ephemeral_owner":0,"data_length":0,"num_children":2}}"#
        );
        let e = WatchEvent {
            event_type: warden_client::EventType::NodeCreated,
            path: "/a".into(),
            zxid: 5,
        };
        assert_eq!(
            serde_json::to_string(&EventJson::from(&e)).unwrap(),
            r#"{"type":"NodeCreated","path":"/a","zxid":5}"#
        );
        assert_eq!(event_human(&e), "NodeCreated /a zxid=5");
    }
}
