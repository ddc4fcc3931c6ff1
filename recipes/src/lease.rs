//! Lease locks: named locks with a TTL, for callers without a long-lived
//! session (the lock-service API: acquire with a TTL and a wait timeout,
//! renew, release, fencing tokens).
//!
//! # Design
//!
//! A lease named `N` under root `R` lives in the container node `R/N`.
//! Every acquire creates one child there: a *persistent*-sequential node
//! **with a TTL** (`lease-<nonce>-<seq>`, data `"<ttl_ms>\n<client_id>"`).
//! It is not ephemeral, because a lease must outlive the session that asked
//! for it: a web handler may acquire, answer, and renew from another
//! process later, by token. What frees a lease is therefore one of:
//!
//! - [`LeaseLock::release`]: a version-guarded delete;
//! - the server's TTL removal: the leader deletes a TTL node that has not
//!   been modified for its TTL. [`LeaseLock::renew`] is a version-guarded
//!   `set_data`, which resets the node's mtime. The server's delete is
//!   itself guarded (it applies only if the node is unchanged since the
//!   leader decided), so a renewal that commits first always wins.
//!
//! The child with the lowest sequence number holds the lease; the others
//! wait in FIFO order, each watching only its predecessor (no herd when the
//! holder goes). A waiter's node has the same TTL, so a waiter that dies
//! leaves the queue by itself; a live waiter therefore *touches* its node
//! every third of the TTL while it waits, and stamps it once more when it
//! reaches the head, so that a grant always starts with a full TTL.
//!
//! The fencing token of a grant is the czxid of its node: strictly larger
//! than that of every earlier grant of the same lease (zxids only grow).
//! `expires_at_ms` is the node's mtime (the Raft leader's clock, in ms since
//! the Unix epoch) plus the TTL.
//!
//! # TTL granularity
//!
//! The server checks TTL nodes periodically (every 5 ticks: 500 ms at the
//! default 100 ms tick). A lease is removed at the first check *after*
//! `expires_at_ms`, so it may outlive its TTL by up to that interval, and a
//! renewal that commits before that check still succeeds. Nobody else can
//! be granted the lease meanwhile, so that is safe; but a holder must not
//! count on a lease beyond `expires_at_ms`, and a protected resource should
//! check fencing tokens rather than clocks.
//!
//! A node's TTL is fixed when it is created, so a renewal must ask for the
//! same TTL as the acquire did (anything else is `BadArguments`).

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;
use warden_client::{Acl, Client, CreateOptions, ErrorCode, Stat};

use crate::error::{Error, Result};

/// Prefix of a lease's queue nodes (the nonce and the sequence follow).
const LEASE_NODE_PREFIX: &str = "lease-";
/// How many times one create is retried after the connection broke.
pub(crate) const CREATE_ATTEMPTS_MAX: u32 = 10;
/// Pause before retrying a create (or a guarded write) that may have
/// failed because the connection broke.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How many times a renew or release re-reads the holder after losing a
/// version race (to a concurrent renew by the same holder).
const GUARDED_ATTEMPTS_MAX: u32 = 8;
/// A waiter touches its node this many times per TTL.
const TOUCHES_PER_TTL: u32 = 3;

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub client_id: String,
    /// The czxid of the lease's node: larger than every earlier grant's.
    pub fencing_token: u64,
    /// When the lease lapses unless renewed: the server's clock, ms since
    /// the Unix epoch (the server removes it at its next TTL check after
    /// this).
    pub expires_at_ms: i64,
}

/// A held lease as seen by [`LeaseLock::state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    pub holder: Lease,
    /// Queued acquires behind the holder.
    pub waiters: usize,
}

/// Lease locks under one root path (e.g. `/leases`).
#[derive(Debug, Clone)]
pub struct LeaseLock {
    client: Client,
    root: String,
    /// The ACL of every node this lock creates; empty: world:anyone.
    acl: Vec<Acl>,
}

impl LeaseLock {
    /// Lease locks kept under `root` (created, with its ancestors, as
    /// needed).
    pub fn new(client: Client, root: impl Into<String>) -> Self {
        Self {
            client,
            root: root.into(),
            acl: Vec::new(),
        }
    }

    /// Creates every node (root, ancestors, lease containers and queue
    /// nodes) with `acl` instead of world:anyone. An `auth` entry stands
    /// for the session's authenticated identities. Operations the ACLs
    /// refuse fail with `NoAuth`, naming the node.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// Acquires lease `name` for `client_id` for `ttl`, waiting (FIFO) at
    /// most `wait_timeout` for the current holder and earlier waiters.
    /// `Ok(None)` if the wait timed out; the waiter's node is then removed.
    /// A zero `wait_timeout` is a try-lock.
    ///
    /// If this future is dropped while waiting, its waiter node is removed
    /// in the background (or, failing that, by its TTL).
    pub async fn acquire(
        &self,
        name: &str,
        client_id: &str,
        ttl: Duration,
        wait_timeout: Duration,
    ) -> Result<Option<Lease>> {
        let ttl_ms = check_args(name, ttl)?;
        let deadline = Instant::now() + wait_timeout;
        let dir = self.dir(name);
        let data = encode(ttl_ms, client_id);
        let options = CreateOptions {
            sequential: true,
            ttl: Some(ttl),
            acl: self.acl.clone(),
            ..CreateOptions::default()
        };
        let touch_interval = (ttl / TOUCHES_PER_TTL).max(Duration::from_millis(1));
        let (me, _) = create_member(&self.client, &dir, LEASE_NODE_PREFIX, &data, &options).await?;
        let mut guard = NodeGuard::new(self.client.clone(), me);
        loop {
            let me = guard.path().to_string();
            let children = match self.client.get_children(&dir).await {
                Ok((children, _)) => children,
                // The container went with our node (it expired).
                Err(e) if e.code() == ErrorCode::NoNode => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let queue = sorted_members(&children);
            let Some(pos) = queue.iter().position(|c| dir_join(&dir, c) == me) else {
                // Our node expired while we waited (we could not touch it
                // in time): queue again, at the back.
                debug!(lease = name, node = %me, "waiter node expired; queueing again");
                if Instant::now() >= deadline {
                    guard.disarm();
                    return Ok(None);
                }
                let (again, _) =
                    create_member(&self.client, &dir, LEASE_NODE_PREFIX, &data, &options).await?;
                guard.replace(again);
                continue;
            };
            if pos == 0 {
                // Stamp the grant, so the lease starts with a full TTL.
                match self.client.set_data(&me, &data, None).await {
                    Ok(stat) => {
                        guard.disarm();
                        return Ok(Some(Lease {
                            name: name.to_string(),
                            client_id: client_id.to_string(),
                            fencing_token: stat.czxid,
                            expires_at_ms: expires_at_ms(&stat, ttl_ms),
                        }));
                    }
                    Err(e) if e.code() == ErrorCode::NoNode => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if Instant::now() >= deadline {
                guard.remove().await;
                return Ok(None);
            }
            let predecessor = dir_join(&dir, &queue[pos - 1]);
            let (stat, watch) = self.client.exists_watch(&predecessor).await?;
            if stat.is_none() {
                continue;
            }
            tokio::pin!(watch);
            let mut next_touch = Instant::now() + touch_interval;
            loop {
                tokio::select! {
                    event = &mut watch => {
                        event?;
                        break;
                    }
                    _ = tokio::time::sleep_until(next_touch) => {
                        next_touch = Instant::now() + touch_interval;
                        match self.client.set_data(&me, &data, None).await {
                            Ok(_) => {}
                            // Expired: found gone at the next look.
                            Err(e) if e.code() == ErrorCode::NoNode => break,
                            Err(e) if e.is_retryable() => {
                                debug!(lease = name, error = %e, "touching the waiter node failed");
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
        }
    }

    /// Extends lease `name` held by `client_id` with `token` by `ttl` from
    /// now (the server's clock). `NotHolder` if that lease has lapsed or is
    /// held by someone else (a stale token, another client id);
    /// `BadArguments` if `ttl` differs from the acquire's.
    pub async fn renew(
        &self,
        name: &str,
        client_id: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease> {
        let ttl_ms = check_args(name, ttl)?;
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let (path, data, stat, held_ttl_ms) = self.holder(name, client_id, token).await?;
            if held_ttl_ms != ttl_ms {
                return Err(Error::BadArguments(format!(
                    "{name}: a lease keeps the TTL it was acquired with ({held_ttl_ms} ms), \
                     not {ttl_ms} ms"
                )));
            }
            match self.client.set_data(&path, &data, Some(stat.version)).await {
                Ok(stat) => {
                    return Ok(Lease {
                        name: name.to_string(),
                        client_id: client_id.to_string(),
                        fencing_token: token,
                        expires_at_ms: expires_at_ms(&stat, ttl_ms),
                    })
                }
                Err(e) if e.code() == ErrorCode::NoNode => return Err(lapsed(name, token)),
                // A concurrent renew by the same holder: look again.
                Err(e) if e.code() == ErrorCode::BadVersion => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Client(warden_client::Error::api(
            ErrorCode::BadVersion,
            self.dir(name),
            "renew kept losing version races",
        )))
    }

    /// Releases lease `name` held by `client_id` with `token`; the next
    /// waiter, if any, gets it. `NotHolder` if that lease has lapsed or is
    /// held by someone else.
    pub async fn release(&self, name: &str, client_id: &str, token: u64) -> Result<()> {
        check_name(name)?;
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let (path, _, stat, _) = self.holder(name, client_id, token).await?;
            match self.client.delete(&path, Some(stat.version)).await {
                Ok(()) => return Ok(()),
                Err(e) if e.code() == ErrorCode::NoNode => return Err(lapsed(name, token)),
                Err(e) if e.code() == ErrorCode::BadVersion => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Client(warden_client::Error::api(
            ErrorCode::BadVersion,
            self.dir(name),
            "release kept losing version races",
        )))
    }

    /// Who holds lease `name` now and how many wait behind it; `None` when
    /// it is free. A plain read: it may be a moment behind the leader.
    pub async fn state(&self, name: &str) -> Result<Option<LeaseState>> {
        check_name(name)?;
        let dir = self.dir(name);
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let children = match self.client.get_children(&dir).await {
                Ok((children, _)) => children,
                Err(e) if e.code() == ErrorCode::NoNode => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let queue = sorted_members(&children);
            let Some(head) = queue.first() else {
                return Ok(None);
            };
            let path = dir_join(&dir, head);
            let (data, stat) = match self.client.get_data(&path).await {
                Ok(found) => found,
                // The holder went between the two reads: look again.
                Err(e) if e.code() == ErrorCode::NoNode => continue,
                Err(e) => return Err(e.into()),
            };
            let (ttl_ms, client_id) = decode(&data)
                .ok_or_else(|| Error::Corrupt(format!("{path}: not a lease node's data")))?;
            return Ok(Some(LeaseState {
                holder: Lease {
                    name: name.to_string(),
                    client_id,
                    fencing_token: stat.czxid,
                    expires_at_ms: expires_at_ms(&stat, ttl_ms),
                },
                waiters: queue.len() - 1,
            }));
        }
        Ok(None)
    }

    /// The current holder's node: path, data, stat and TTL, if it is
    /// `client_id`'s grant `token`; `NotHolder` otherwise.
    async fn holder(
        &self,
        name: &str,
        client_id: &str,
        token: u64,
    ) -> Result<(String, Vec<u8>, Stat, u64)> {
        let dir = self.dir(name);
        let children = match self.client.get_children(&dir).await {
            Ok((children, _)) => children,
            Err(e) if e.code() == ErrorCode::NoNode => return Err(lapsed(name, token)),
            Err(e) => return Err(e.into()),
        };
        let Some(head) = sorted_members(&children).into_iter().next() else {
            return Err(lapsed(name, token));
        };
        let path = dir_join(&dir, &head);
        let (data, stat) = match self.client.get_data(&path).await {
            Ok(found) => found,
            Err(e) if e.code() == ErrorCode::NoNode => return Err(lapsed(name, token)),
            Err(e) => return Err(e.into()),
        };
        if stat.czxid != token {
            return Err(Error::NotHolder(format!(
                "{name}: token {token} does not hold the lease (the holder's is {})",
                stat.czxid
            )));
        }
        let (ttl_ms, holder_id) = decode(&data)
            .ok_or_else(|| Error::Corrupt(format!("{path}: not a lease node's data")))?;
        if holder_id != client_id {
            return Err(Error::NotHolder(format!(
                "{name}: token {token} is not held by client {client_id:?}"
            )));
        }
        Ok((path, data, stat, ttl_ms))
    }

    fn dir(&self, name: &str) -> String {
        dir_join(&self.root, name)
    }
}

fn lapsed(name: &str, token: u64) -> Error {
    Error::NotHolder(format!("{name}: lease {token} has lapsed or was released"))
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') {
        return Err(Error::BadArguments(format!(
            "lease name {name:?} must be non-empty and have no '/'"
        )));
    }
    Ok(())
}

/// Checks the name and TTL; the TTL in ms.
fn check_args(name: &str, ttl: Duration) -> Result<u64> {
    check_name(name)?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ttl_ms == 0 {
        return Err(Error::BadArguments(format!(
            "{name}: a lease's TTL must be at least 1 ms"
        )));
    }
    Ok(ttl_ms)
}

fn expires_at_ms(stat: &Stat, ttl_ms: u64) -> i64 {
    stat.mtime_ms
        .saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

/// A lease node's data: the TTL in ms, a newline, the client id.
fn encode(ttl_ms: u64, client_id: &str) -> Vec<u8> {
    format!("{ttl_ms}\n{client_id}").into_bytes()
}

fn decode(data: &[u8]) -> Option<(u64, String)> {
    let text = std::str::from_utf8(data).ok()?;
    let (ttl, client_id) = text.split_once('\n')?;
    Some((ttl.parse().ok()?, client_id.to_string()))
}

// Helpers shared with the election recipe: queues of sequential nodes
// under one container.

/// `parent/name`, for a parent that may be `/`.
pub(crate) fn dir_join(parent: &str, name: &str) -> String {
    if parent.ends_with('/') {
        format!("{parent}{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The sequence number of a sequential node's name (its last 10 digits).
pub(crate) fn sequence_of(name: &str) -> Option<u64> {
    let (_, digits) = name.rsplit_once('-')?;
    if digits.len() != 10 {
        return None;
    }
    digits.parse().ok()
}

/// The names of the queue members among `children`, by sequence number.
/// Names that are not sequential members are ignored.
pub(crate) fn sorted_members(children: &[String]) -> Vec<String> {
    let mut members: Vec<(u64, &String)> = children
        .iter()
        .filter_map(|c| Some((sequence_of(c)?, c)))
        .collect();
    members.sort();
    members.into_iter().map(|(_, c)| c.clone()).collect()
}

/// Creates `path` as a container, and its ancestors as persistent nodes,
/// as needed, all with `acl`.
pub(crate) async fn ensure_container(client: &Client, path: &str, acl: &[Acl]) -> Result<()> {
    let mut missing = vec![path.to_string()];
    // Walk up to the first ancestor that exists, then create downwards.
    loop {
        let Some(current) = missing.last().cloned() else {
            return Ok(());
        };
        let options = if current == path {
            CreateOptions::container()
        } else {
            CreateOptions::persistent()
        }
        .acl(acl.to_vec());
        match client.create(&current, b"", options).await {
            Ok(_) => {
                missing.pop();
            }
            Err(e) if e.code() == ErrorCode::NodeExists => {
                missing.pop();
            }
            Err(e) if e.code() == ErrorCode::NoNode => {
                let parent = match current.rfind('/') {
                    Some(0) | None => return Err(e.into()),
                    Some(i) => current[..i].to_string(),
                };
                missing.push(parent);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Creates a sequential member `dir/<prefix><nonce>-<seq>`. The random
/// nonce lets a retry after a broken connection find the node the lost
/// attempt may have created, instead of leaving an orphan in the queue.
/// Recreates the container `dir` if it is missing.
pub(crate) async fn create_member(
    client: &Client,
    dir: &str,
    prefix: &str,
    data: &[u8],
    options: &CreateOptions,
) -> Result<(String, Stat)> {
    let nonce = format!("{:016x}", rand::random::<u64>());
    let base = dir_join(dir, &format!("{prefix}{nonce}-"));
    let mut last = None;
    for _ in 0..CREATE_ATTEMPTS_MAX {
        match client.create(&base, data, options.clone()).await {
            Ok(created) => return Ok(created),
            Err(e) if e.code() == ErrorCode::NoNode => {
                ensure_container(client, dir, &options.acl).await?
            }
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(RETRY_PAUSE).await;
                if let Ok((children, _)) = client.get_children(dir).await {
                    if let Some(child) = children.iter().find(|c| c.contains(&nonce)) {
                        let path = dir_join(dir, child);
                        let (_, stat) = client.get_data(&path).await?;
                        return Ok((path, stat));
                    }
                }
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(match last {
        Some(e) => e.into(),
        None => Error::Client(warden_client::Error::api(
            ErrorCode::NoNode,
            dir,
            "the container kept vanishing",
        )),
    })
}

/// Deletes a queue node that was not handed to the caller, if the future
/// owning it is dropped (cancelled) or fails: in the background, or
/// failing that by its TTL or its session's end.
pub(crate) struct NodeGuard {
    client: Client,
    path: Option<String>,
}

impl NodeGuard {
    pub(crate) fn new(client: Client, path: String) -> Self {
        Self {
            client,
            path: Some(path),
        }
    }

    pub(crate) fn path(&self) -> &str {
        self.path.as_deref().unwrap_or_default()
    }

    pub(crate) fn replace(&mut self, path: String) {
        self.path = Some(path);
    }

    /// The node is the caller's now.
    pub(crate) fn disarm(&mut self) -> String {
        self.path.take().unwrap_or_default()
    }

    /// Deletes the node now (a node already gone is fine).
    pub(crate) async fn remove(&mut self) {
        if let Some(path) = self.path.take() {
            delete_quietly(&self.client, &path).await;
        }
    }
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            runtime.spawn(async move { delete_quietly(&client, &path).await });
        }
    }
}

async fn delete_quietly(client: &Client, path: &str) {
    match client.delete(path, None).await {
        Ok(()) => {}
        Err(e) if e.code() == ErrorCode::NoNode => {}
        Err(e) => {
            debug!(node = path, error = %e, "could not delete a queue node; it goes at its TTL or session end")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_data_round_trips() {
        assert_eq!(
            decode(&encode(3000, "worker-7")),
            Some((3000, "worker-7".to_string()))
        );
        assert_eq!(decode(&encode(1, "a\nb")), Some((1, "a\nb".to_string())));
        assert_eq!(decode(b"x\nid"), None);
        assert_eq!(decode(b"no newline"), None);
    }

    #[test]
    fn members_sort_by_sequence_not_by_nonce() {
        let children = vec![
            "lease-ffff-0000000003".to_string(),
            "lease-0000-0000000010".to_string(),
            "junk".to_string(),
            "lease-aaaa-0000000001".to_string(),
        ];
        assert_eq!(
            sorted_members(&children),
            vec![
                "lease-aaaa-0000000001",
                "lease-ffff-0000000003",
                "lease-0000-0000000010"
            ]
        );
        assert_eq!(sequence_of("c-12-0000000042"), Some(42));
        assert_eq!(sequence_of("c-12-42"), None);
    }

    #[test]
    fn arguments_are_checked() {
        assert!(matches!(check_name(""), Err(Error::BadArguments(_))));
        assert!(matches!(check_name("a/b"), Err(Error::BadArguments(_))));
        assert!(matches!(
            check_args("a", Duration::ZERO),
            Err(Error::BadArguments(_))
        ));
        assert_eq!(check_args("a", Duration::from_secs(2)).ok(), Some(2000));
        assert_eq!(dir_join("/", "a"), "/a");
        assert_eq!(dir_join("/leases", "a"), "/leases/a");
    }
}
