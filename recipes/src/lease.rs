//! Lease locks: named locks with a TTL, for callers without a long-lived
//! session (the lock-service API: acquire with a TTL and a wait timeout,
//! renew, release, fencing tokens).
//!
//! # Design
//!
//! A lease named `N` under root `R` lives in the container node `R/N`.
//! Every client id has at most one child there: a *persistent*-sequential
//! node **with a TTL** (`lease-<key>-<seq>`, data
//! `"<ttl_ms>\n<client_id>"`, where `<key>` is 32 hex digits of the SHA-1
//! of the client id). The queue machinery (protected create, orphan sweep,
//! waiting) is `queue.rs`, shared with every other recipe.
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
//! the Unix epoch) plus the TTL. The server measures the TTL itself on the
//! leader's monotonic clock from when it saw the write (a new leader
//! re-arms it whole), so a wall-clock jump moves no expiry and
//! `expires_at_ms` is the earliest it can go, by a clock that did not jump.
//!
//! # A renewal may ask for another TTL
//!
//! Every write of a lease node (the grant's stamp, a waiter's touch, a
//! renewal) is a `set_data` that also gives the node the TTL the request
//! asked for ([`Client::set_data_with_ttl`]), with the data naming that
//! TTL: the node's data and TTL change together in one write, so the
//! expiry read back from the data is the server's. A renewal therefore
//! sets the lease's TTL to what it asks for (`extend_time_ms: 5000` on a
//! 10 s lease: 5 s from now), and so does an acquire that re-enters its
//! own grant or waiting place.
//!
//! # Acquires are idempotent per client id
//!
//! Because the node's name carries the client id's key, an acquire first
//! looks (linearizably) for a node of that client id. If it holds the
//! lease, the acquire answers that grant: the same fencing token, its
//! expiry refreshed with the acquire's TTL (a renewal). If it waits, the
//! acquire takes up that place in the queue instead of queueing a second
//! time (with its TTL). So a caller whose
//! acquire failed with a timeout or a lost connection (an HTTP 503) just
//! retries it with the same client id: it can neither end up behind its
//! own lease nor hold two places. A node of ours that a lost create left
//! behind is swept by the same rule: of the nodes of one client id, the
//! lowest is kept and the others deleted. Two requests of one client id
//! that run at once share its place; the first to give up (timeout,
//! cancellation) removes it, and the other queues again at the back.
//!
//! # Reading and watching the holder
//!
//! [`LeaseLock::state`] is a plain read, [`LeaseLock::state_synced`] a
//! linearizable one (sync, then read). [`LeaseLock::view`] adds a version
//! (a zxid, see [`LeaseView`]), and [`LeaseLock::watch`] yields the holder
//! as each change of holder, token or expiry lands (`lease/watch.rs`).
//! [`LeaseLock::acquire_notified`] tells its caller when it is in line.
//!
//! # TTL granularity
//!
//! The server checks TTL nodes periodically (every 5 ticks: 500 ms at the
//! default 100 ms tick). A lease is removed at the first check after its
//! deadline, so it may outlive its TTL by up to two intervals (one to see
//! the write, one to see the deadline pass), and a
//! renewal that commits before that check still succeeds. Nobody else can
//! be granted the lease meanwhile, so that is safe; but a holder must not
//! count on a lease beyond `expires_at_ms`, and a protected resource should
//! check fencing tokens rather than clocks.

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;
use warden_client::{Acl, Client, ErrorCode, Stat};

use crate::error::{Error, Result};
use crate::queue::{
    join_path, retrying, Entry, Lifetime, Outcome, Parents, Queue, Turn, Wait, WaitOptions,
};

mod watch;
pub use watch::LeaseWatch;

/// Prefix of a lease's queue nodes (the client id's key and the sequence
/// follow).
const LEASE_NODE_PREFIX: &str = "lease-";
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

/// A lease's holder as of a version: what [`LeaseLock::view`] reads and
/// [`LeaseWatch`] yields.
///
/// `version` is a zxid: at or after the last change that made this
/// holder (grant, renewal, release, lapse) and before the next one, so
/// the versions of successive holder states rise strictly. It is the
/// larger of the queue's `pzxid` (its last child created or deleted) and
/// the holder node's `mzxid` (its last write); for a lease without a
/// queue node, the root's `pzxid` (at or after the queue's removal).
/// Waiters joining or leaving may move it without a holder change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// `None` when the lease is free.
    pub holder: Option<Lease>,
    /// Queued acquires behind the holder.
    pub waiters: usize,
    pub version: u64,
}

impl LeaseView {
    fn free(version: u64) -> Self {
        LeaseView {
            holder: None,
            waiters: 0,
            version,
        }
    }

    /// Same holder, token and expiry (waiters and version aside).
    pub fn same_holder(&self, other: &LeaseView) -> bool {
        self.holder == other.holder
    }
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

    /// The client (session) this lock runs on.
    pub fn client(&self) -> &Client {
        &self.client
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
        self.acquire_notified(name, client_id, ttl, wait_timeout, || {})
            .await
    }

    /// [`acquire`](Self::acquire), calling `queued` once the caller's node
    /// is in the queue (made, or found from an earlier acquire of the same
    /// client id), before waiting for the turn: from then on a later
    /// acquire by another client id queues behind it. The HTTP door's push
    /// waits tell their callers `queued` on it.
    pub async fn acquire_notified(
        &self,
        name: &str,
        client_id: &str,
        ttl: Duration,
        wait_timeout: Duration,
        queued: impl FnOnce() + Send,
    ) -> Result<Option<Lease>> {
        let ttl_ms = check_args(name, ttl)?;
        let mut queued = Some(queued);
        let deadline = Instant::now() + wait_timeout;
        let wait = Wait::Until(deadline);
        let queue = self.queue(name);
        let key = client_key(client_id);
        let data = encode(ttl_ms, client_id);
        let touch_interval = (ttl / TOUCHES_PER_TTL).max(Duration::from_millis(1));
        let mut entry = match self.rejoin(&queue, name, client_id, &key, ttl).await? {
            Some(entry) => entry,
            None => queue.join(&key, "", &data, Lifetime::Ttl(ttl), b"").await?,
        };
        if let Some(queued) = queued.take() {
            queued();
        }
        loop {
            let options = WaitOptions {
                keepalive: Some((touch_interval, &data, Some(ttl))),
                woken: None,
            };
            let outcome = queue
                .wait_turn(&mut entry, wait, options, Turn::first_holds)
                .await?;
            match outcome {
                Outcome::Granted => {
                    // Stamp the grant, so the lease starts with a full TTL
                    // (and a re-acquire by the holder renews it). The same
                    // write again is harmless, so a lost answer is retried.
                    let path = entry.path();
                    let stamp = retrying(&self.client, || {
                        self.client.set_data_with_ttl(&path, &data, None, ttl)
                    });
                    match stamp.await {
                        Ok(stat) => {
                            entry.take();
                            return Ok(Some(Lease {
                                name: name.to_string(),
                                client_id: client_id.to_string(),
                                fencing_token: stat.czxid,
                                expires_at_ms: expires_at_ms(&stat, ttl_ms),
                            }));
                        }
                        // Lapsed just now: the next look finds it gone.
                        Err(e) if e.code() == ErrorCode::NoNode => continue,
                        Err(e) => return Err(e),
                    }
                }
                Outcome::TimedOut => return Ok(None),
                Outcome::Vanished => {
                    // Our node expired while we waited (we could not touch
                    // it in time), or another request of this client id
                    // gave up on it: queue again, at the back.
                    debug!(lease = name, node = %entry.path(), "waiter node gone; queueing again");
                    entry.take();
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    entry = queue.join(&key, "", &data, Lifetime::Ttl(ttl), b"").await?;
                }
            }
        }
    }

    /// The node `client_id` already has in lease `name`'s queue (holding
    /// or waiting), to carry on with instead of queueing again; `None` if
    /// it has none. A TTL other than that node's becomes its TTL now (as a
    /// renewal's would).
    async fn rejoin(
        &self,
        queue: &Queue,
        name: &str,
        client_id: &str,
        key: &str,
        ttl: Duration,
    ) -> Result<Option<Entry>> {
        let ttl_ms = check_args(name, ttl)?;
        let Some((member, _)) = queue.find(key).await? else {
            return Ok(None);
        };
        let path = queue.path_of(&member.name);
        let (data, stat) = match self.client.get_data(&path).await {
            Ok(found) => found,
            Err(e) if e.code() == ErrorCode::NoNode => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let (held_ttl_ms, holder_id) = decode(&data)
            .ok_or_else(|| Error::Corrupt(format!("{path}: not a lease node's data")))?;
        if holder_id != client_id {
            return Err(Error::Corrupt(format!(
                "{path}: holds client {holder_id:?}, whose key is that of {client_id:?}"
            )));
        }
        let stat = if held_ttl_ms == ttl_ms {
            stat
        } else {
            let data = encode(ttl_ms, client_id);
            let changed = self.client.set_data_with_ttl(&path, &data, None, ttl).await;
            match changed {
                Ok(stat) => stat,
                Err(e) if e.code() == ErrorCode::NoNode => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        };
        debug!(lease = name, node = %path, held_ttl_ms, ttl_ms, "acquire by a client id already in the queue");
        Ok(Some(queue.rejoin(member, stat)))
    }

    /// Extends lease `name` held by `client_id` with `token` by `ttl` from
    /// now (the server's clock): `ttl` is the lease's TTL from now on,
    /// whatever the acquire asked for. `NotHolder` if that lease has lapsed
    /// or is held by someone else (a stale token, another client id).
    pub async fn renew(
        &self,
        name: &str,
        client_id: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease> {
        let ttl_ms = check_args(name, ttl)?;
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let (path, stat) = self.holder(name, client_id, token).await?;
            let data = encode(ttl_ms, client_id);
            let renewed = self
                .client
                .set_data_with_ttl(&path, &data, Some(stat.version), ttl)
                .await;
            match renewed {
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
            let (path, stat) = self.holder(name, client_id, token).await?;
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
        let queue = self.queue(name);
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let members = queue.list().await?;
            let Some(head) = members.first() else {
                return Ok(None);
            };
            let path = queue.path_of(&head.name);
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
                waiters: members.len() - 1,
            }));
        }
        Ok(None)
    }

    /// [`state`](Self::state), linearizable: a `sync` first (ZooKeeper's
    /// sync-then-read), so the answer reflects every write committed
    /// before the call, whichever server the session is on.
    pub async fn state_synced(&self, name: &str) -> Result<Option<LeaseState>> {
        check_name(name)?;
        retrying(&self.client, || self.client.sync(&self.root)).await?;
        self.state(name).await
    }

    /// Lease `name`'s holder, waiters and version (see [`LeaseView`]): a
    /// plain read, as [`state`](Self::state).
    pub async fn view(&self, name: &str) -> Result<LeaseView> {
        Ok(self.view_with_head(name).await?.0)
    }

    /// The view and the holder's node name (`None` when free).
    async fn view_with_head(&self, name: &str) -> Result<(LeaseView, Option<String>)> {
        check_name(name)?;
        let dir = self.dir(name);
        for _ in 0..GUARDED_ATTEMPTS_MAX {
            let listed = retrying(&self.client, || self.client.get_children(&dir)).await;
            let (children, dir_stat) = match listed {
                Ok(found) => found,
                Err(e) if e.code() == ErrorCode::NoNode => {
                    // No queue at all: the root's pzxid is at or after the
                    // removal of the last queue of this name.
                    let root = retrying(&self.client, || self.client.exists(&self.root)).await?;
                    let version = root.map_or(0, |s| s.pzxid);
                    return Ok((LeaseView::free(version), None));
                }
                Err(e) => return Err(e),
            };
            let members = crate::queue::sorted_members(&children, LEASE_NODE_PREFIX, &[""]);
            let Some(head) = members.first() else {
                return Ok((LeaseView::free(dir_stat.pzxid), None));
            };
            let path = join_path(&dir, &head.name);
            let (data, stat) = match self.client.get_data(&path).await {
                Ok(found) => found,
                // The holder went between the two reads: look again.
                Err(e) if e.code() == ErrorCode::NoNode => continue,
                Err(e) => return Err(e.into()),
            };
            let (ttl_ms, client_id) = decode(&data)
                .ok_or_else(|| Error::Corrupt(format!("{path}: not a lease node's data")))?;
            let view = LeaseView {
                holder: Some(Lease {
                    name: name.to_string(),
                    client_id,
                    fencing_token: stat.czxid,
                    expires_at_ms: expires_at_ms(&stat, ttl_ms),
                }),
                waiters: members.len() - 1,
                version: dir_stat.pzxid.max(stat.mzxid),
            };
            return Ok((view, Some(head.name.clone())));
        }
        Err(Error::Client(warden_client::Error::api(
            ErrorCode::BadVersion,
            dir,
            "the holder kept changing while read",
        )))
    }

    /// The current holder's node: path and stat, if it is
    /// `client_id`'s grant `token`; `NotHolder` otherwise.
    async fn holder(&self, name: &str, client_id: &str, token: u64) -> Result<(String, Stat)> {
        let queue = self.queue(name);
        let Some(head) = queue.list().await?.into_iter().next() else {
            return Err(lapsed(name, token));
        };
        let path = queue.path_of(&head.name);
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
        let (_, holder_id) = decode(&data)
            .ok_or_else(|| Error::Corrupt(format!("{path}: not a lease node's data")))?;
        if holder_id != client_id {
            return Err(Error::NotHolder(format!(
                "{name}: token {token} is not held by client {client_id:?}"
            )));
        }
        Ok((path, stat))
    }

    fn dir(&self, name: &str) -> String {
        join_path(&self.root, name)
    }

    /// Lease `name`'s queue: a container under the (persistent) root.
    fn queue(&self, name: &str) -> Queue {
        Queue::new(
            self.client.clone(),
            self.dir(name),
            self.acl.clone(),
            Parents::Persistent,
            LEASE_NODE_PREFIX,
            &[""],
        )
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

/// The key of a client id in its node's name: 32 hex digits of its SHA-1
/// (names cannot hold every byte a client id may have).
fn client_key(client_id: &str) -> String {
    let mut key = sha1_smol::Sha1::from(client_id.as_bytes())
        .digest()
        .to_string();
    key.truncate(32);
    key
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
        let names: Vec<String> = crate::queue::sorted_members(&children, LEASE_NODE_PREFIX, &[""])
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(
            names,
            vec![
                "lease-aaaa-0000000001",
                "lease-ffff-0000000003",
                "lease-0000-0000000010"
            ]
        );
        let seq = |n: &str| crate::queue::parse_member(n, "c-").map(|m| m.seq);
        assert_eq!(seq("c-12-0000000042"), Some(42));
        assert_eq!(seq("c-12-42"), None);
    }

    #[test]
    fn client_keys_are_stable_and_distinct() {
        // SHA-1 of "worker-7": the same on every server and every build.
        assert_eq!(client_key("worker-7").len(), 32);
        assert_eq!(client_key("worker-7"), client_key("worker-7"));
        assert_ne!(client_key("worker-7"), client_key("worker-8"));
        assert_eq!(client_key(""), "da39a3ee5e6b4b0d3255bfef95601890");
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
        assert_eq!(join_path("/", "a"), "/a");
        assert_eq!(join_path("/leases", "a"), "/leases/a");
    }
}
