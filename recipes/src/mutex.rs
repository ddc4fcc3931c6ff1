//! [`Mutex`]: a distributed, re-entrant lock with fencing tokens
//! (the semantics of Curator's `InterProcessMutex`).
//!
//! ```no_run
//! use std::time::Duration;
//! use warden_client::{Client, ConnectOptions};
//! use warden_recipes::Mutex;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("127.0.0.1:7000", ConnectOptions::default()).await?;
//! let lock = Mutex::new(client, "/locks/backup")?;
//! if let Some(guard) = lock.acquire_timeout(Duration::from_secs(5)).await? {
//!     let token = guard.fencing_token(); // send it with every write
//!     let lost = guard.lost(); // resolves if the lock is lost meanwhile
//!     # let _ = (token, lost);
//!     guard.release().await?; // dropping the guard releases too
//! }
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! The lock is a container node (`/locks/payments`, say). Each contender
//! creates one ephemeral-sequential child, `_c_<random id>-lock-<seq>`, and
//! the contender whose child has the lowest sequence number holds the lock.
//! Everyone else watches only the child just before its own (its
//! *predecessor*) with an exists-watch: a release wakes exactly one waiter,
//! never the whole queue (no herd effect). When a predecessor goes, the
//! waiter lists the children again rather than assuming it is now first,
//! because the predecessor may have been a waiter that gave up, not the
//! holder.
//!
//! Because the children are ephemeral, a holder whose process dies loses the
//! lock once its session times out: the server deletes the node and the
//! next waiter's watch fires.
//!
//! # Fencing tokens
//!
//! A grant's fencing token is the czxid of the winning node. Sequence
//! numbers and zxids are assigned in the same (Raft log) order, so the
//! holder always has the lowest czxid still present, and every later grant
//! goes to a node created later: tokens strictly increase across grants.
//! Hand the token to whatever the lock protects and let it refuse older
//! tokens (see [`FencedResource`](crate::FencedResource)); that is what
//! makes a holder that paused past its session timeout harmless.
//!
//! # Protected creation
//!
//! A create that fails with `ConnectionLoss` may still have been applied.
//! Retrying blindly could leave an orphan node nobody will ever delete
//! until the session ends — and that orphan would block the lock. So every
//! attempt carries the same random id in the node's name; after a
//! connection loss the contender looks for it with a linearizable listing
//! before creating again, and while it waits it sweeps any other node of
//! its id (a lost create that committed late). The queue machinery is
//! shared by every recipe: see `recipes/src/queue.rs`.
//!
//! # Re-entrancy and handles
//!
//! A [`Mutex`] handle is one owner. Acquiring through a handle that already
//! holds the lock just counts; the node is deleted by the last release.
//! Clones share the client and the path but *not* the ownership: a clone is
//! a separate contender, which is what another task of the same process
//! wants. (Curator ties re-entrancy to a thread; tasks have no identity, so
//! the handle plays that part.)
//!
//! # Cancellation
//!
//! A waiter that stops waiting — [`Mutex::acquire_timeout`] running out, or
//! any acquire future being dropped — must not leave its node behind, or it
//! would hold the lock later for nobody. A drop guard deletes the node in
//! the background (or, if the create may have been in flight, finds it by
//! its id and deletes it). A timeout deletes it before returning.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use warden_client::{Acl, Client, ErrorCode, EventType, SessionState};
use warden_protocol::path;

use crate::error::{Error, Result};
use crate::queue::{
    delete_node, pause, random_id, sorted_members, spawn_detached, Lifetime, Member, Outcome,
    Parents, Queue, Turn, Wait, WaitOptions,
};

/// Prefix of a contender's node name, before its random id.
const CONTENDER_PREFIX: &str = "_c_";
/// What a contender's node name has between its id and its sequence
/// number (`_c_<id>-lock-<seq>`).
const LOCK_KIND: &str = "lock-";
/// Pause before [`MutexGuard::lost`] looks again after a failed read.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How many times [`Mutex::holder`] re-reads when the holder's node vanishes
/// between the listing and the stat.
const HOLDER_READS_MAX: u32 = 16;

/// A distributed, re-entrant mutex with fencing tokens.
///
/// Contenders queue as ephemeral-sequential children of the lock's path;
/// the lowest holds, each waiter watches only its predecessor. A handle is
/// one owner: acquiring again through a handle that holds the lock counts,
/// and the last release deletes the node; a clone is a separate contender.
/// A waiter that times out or is cancelled leaves no node behind. (The
/// design, at length, is in the comment atop `recipes/src/mutex.rs`.)
#[derive(Debug)]
pub struct Mutex {
    shared: Arc<Shared>,
    owner: Arc<Owner>,
}

/// What all clones share.
#[derive(Debug)]
struct Shared {
    client: Client,
    path: String,
    /// The contender queue under `path`, whose nodes get the lock's ACL.
    queue: Queue,
}

impl Shared {
    fn new(client: Client, path: String, acl: Vec<Acl>) -> Shared {
        let queue = Queue::new(
            client.clone(),
            path.clone(),
            acl,
            Parents::Containers,
            CONTENDER_PREFIX,
            &[LOCK_KIND],
        );
        Shared {
            client,
            path,
            queue,
        }
    }
}

/// One owner's state: what it holds, and the counters tests read.
#[derive(Debug, Default)]
struct Owner {
    /// Serialises acquisitions through this handle, so that two tasks using
    /// the same handle never both create a node.
    acquiring: tokio::sync::Mutex<()>,
    held: std::sync::Mutex<Option<Held>>,
    waits_woken: AtomicU64,
}

/// The grant an owner holds, and how many times it re-entered.
#[derive(Debug, Clone)]
struct Held {
    node: String,
    token: u64,
    count: u32,
}

impl Clone for Mutex {
    /// A separate contender on the same lock (see the module docs).
    fn clone(&self) -> Self {
        Mutex {
            shared: self.shared.clone(),
            owner: Arc::default(),
        }
    }
}

/// Who holds a lock, as [`Mutex::holder`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Full path of the holder's node.
    pub node: String,
    /// The holder's session (the node's ephemeral owner).
    pub session_id: u64,
    /// The grant's fencing token (the node's czxid).
    pub fencing_token: u64,
    /// When the holder's node was created, in milliseconds since the Unix
    /// epoch (the holder waited in line from then; it may have been granted
    /// later).
    pub since_ms: i64,
}

/// Why [`MutexGuard::lost`] resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockLost {
    /// The node was deleted (by someone else, or by our own release).
    NodeDeleted,
    /// The session expired: the server deleted the node.
    SessionExpired,
    /// The session was closed.
    SessionClosed,
}

impl std::fmt::Display for LockLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LockLost::NodeDeleted => "the lock node was deleted",
            LockLost::SessionExpired => "the session expired",
            LockLost::SessionClosed => "the session was closed",
        })
    }
}

impl Mutex {
    /// A handle on the lock whose container node is `path` (created on
    /// demand, parents too, as containers). Nothing is sent yet.
    pub fn new(client: Client, path: impl Into<String>) -> Result<Mutex> {
        let path = path.into();
        if let Err(e) = path::validate(&path) {
            return Err(Error::BadArguments(format!(
                "lock path {path:?}: {}",
                e.reason
            )));
        }
        if path == "/" {
            return Err(Error::BadArguments("the lock path cannot be /".into()));
        }
        Ok(Mutex {
            shared: Arc::new(Shared::new(client, path, Vec::new())),
            owner: Arc::default(),
        })
    }

    /// Creates the lock's nodes (its container, missing parents, and the
    /// contenders) with `acl` instead of world:anyone, like Curator's
    /// ACL provider; an `auth` entry stands for the session's identities.
    /// Set it before the first acquire: clones made before keep theirs.
    /// A contender the ACLs refuse gets `NoAuth` naming the node.
    pub fn with_acl(self, acl: Vec<Acl>) -> Mutex {
        Mutex {
            shared: Arc::new(Shared::new(
                self.shared.client.clone(),
                self.shared.path.clone(),
                acl,
            )),
            owner: self.owner,
        }
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// Waits as long as it takes for the lock.
    pub async fn acquire(&self) -> Result<MutexGuard> {
        let guard = self.acquire_until(Wait::Forever).await?;
        guard.ok_or_else(|| Error::Corrupt("an unbounded wait ended without the lock".into()))
    }

    /// Takes the lock if it is free now; `None` if someone else holds it
    /// (nothing is left behind).
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        self.acquire_until(Wait::No).await
    }

    /// Waits at most `timeout` for the lock; `None` if it did not come, in
    /// which case this contender's node is already deleted.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        self.acquire_until(Wait::Until(Instant::now() + timeout))
            .await
    }

    /// How many times a waiter of this handle was woken by its
    /// predecessor's watch. With no herd effect, one release wakes one
    /// waiter in the whole queue.
    pub fn waits_woken(&self) -> u64 {
        self.owner.waits_woken.load(Ordering::Relaxed)
    }

    /// Whether this handle holds the lock, as far as it knows (the session
    /// may have ended since; see [`MutexGuard::lost`]).
    pub fn is_held_here(&self) -> bool {
        self.owner.held().is_some()
    }

    /// The current holder, or `None` if the lock is free.
    pub async fn holder(&self) -> Result<Option<Holder>> {
        Ok(self.holder_in(&self.list().await?).await?.map(|(_, h)| h))
    }

    /// Waits until the holder differs from `last` (by node), then returns
    /// the new one (`None`: the lock became free). Pass the value of
    /// [`holder`](Self::holder) to follow every change.
    pub async fn holder_changed(&self, last: Option<&Holder>) -> Result<Option<Holder>> {
        let client = &self.shared.client;
        let last_node = last.map(|h| h.node.as_str());
        loop {
            match client.get_children_watch(&self.shared.path).await {
                Ok((children, _, changed)) => {
                    let contenders = sorted_members(&children, CONTENDER_PREFIX, &[LOCK_KIND]);
                    let now = self.holder_in(&contenders).await?.map(|(_, h)| h);
                    if now.as_ref().map(|h| h.node.as_str()) != last_node {
                        return Ok(now);
                    }
                    changed.await?;
                }
                Err(e) if e.code() == ErrorCode::NoNode => {
                    if last.is_some() {
                        return Ok(None);
                    }
                    // Free and no container yet: wait for it to appear.
                    let (stat, created) = client.exists_watch(&self.shared.path).await?;
                    if stat.is_none() {
                        created.await?;
                    }
                }
                Err(e) if e.is_retryable() => pause(client, 0).await,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The sorted contenders now (empty if the container does not exist).
    async fn list(&self) -> Result<Vec<Member>> {
        self.shared.queue.list().await
    }

    /// The first contender of `contenders` that still exists, with its
    /// stat; re-lists when nodes vanish under us.
    async fn holder_in(&self, contenders: &[Member]) -> Result<Option<(Member, Holder)>> {
        let client = &self.shared.client;
        let mut contenders = contenders.to_vec();
        for _ in 0..HOLDER_READS_MAX {
            let Some(first) = contenders.first() else {
                return Ok(None);
            };
            let node = path::join(&self.shared.path, &first.name);
            if let Some(stat) = client.exists(&node).await? {
                let holder = Holder {
                    node,
                    session_id: stat.ephemeral_owner,
                    fencing_token: stat.czxid,
                    since_ms: stat.ctime_ms,
                };
                return Ok(Some((first.clone(), holder)));
            }
            contenders = self.list().await?;
        }
        Err(Error::Corrupt(format!(
            "{}: the holder kept vanishing while being read",
            self.shared.path
        )))
    }

    async fn acquire_until(&self, wait: Wait) -> Result<Option<MutexGuard>> {
        let serial = match wait {
            Wait::Until(deadline) => {
                match tokio::time::timeout_at(deadline, self.owner.acquiring.lock()).await {
                    Ok(serial) => serial,
                    Err(_) => return Ok(None),
                }
            }
            Wait::Forever | Wait::No => self.owner.acquiring.lock().await,
        };
        if let Some(guard) = self.reenter().await? {
            return Ok(Some(guard));
        }
        let queue = &self.shared.queue;
        let mut entry = queue
            .join(&random_id(), LOCK_KIND, b"", Lifetime::Ephemeral, b"")
            .await?;
        let options = WaitOptions {
            woken: Some(&self.owner.waits_woken),
            ..WaitOptions::default()
        };
        match queue
            .wait_turn(&mut entry, wait, options, Turn::first_holds)
            .await?
        {
            Outcome::Granted => {}
            // Deleted before returning, so that a caller that looks finds
            // nothing left behind.
            Outcome::TimedOut => return Ok(None),
            Outcome::Vanished => {
                return Err(Error::NotHolder(format!(
                    "{}: our contender node vanished while waiting (session expired?)",
                    entry.path()
                )))
            }
        }
        let (node, stat) = entry.take();
        let token = stat.czxid;
        *self.owner.lock_held() = Some(Held {
            node: node.clone(),
            token,
            count: 1,
        });
        drop(serial);
        Ok(Some(self.guard(node, token)))
    }

    /// A second acquisition by a handle that holds the lock: counts, after
    /// checking the grant still stands.
    async fn reenter(&self) -> Result<Option<MutexGuard>> {
        let Some(held) = self.owner.held() else {
            return Ok(None);
        };
        if self.shared.client.exists(&held.node).await?.is_none() {
            *self.owner.lock_held() = None;
            return Err(Error::NotHolder(format!(
                "{}: the lock was lost ({} is gone)",
                self.shared.path, held.node
            )));
        }
        let mut state = self.owner.lock_held();
        match state.as_mut() {
            Some(h) if h.node == held.node => {
                h.count += 1;
                Ok(Some(self.guard(held.node, held.token)))
            }
            // Released meanwhile by a guard's drop: acquire afresh.
            _ => Ok(None),
        }
    }

    fn guard(&self, node: String, token: u64) -> MutexGuard {
        MutexGuard {
            shared: self.shared.clone(),
            owner: self.owner.clone(),
            node,
            token,
            released: false,
        }
    }
}

impl Owner {
    fn lock_held(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        // A panic while holding this std mutex leaves plain data behind;
        // the data is still consistent, so carry on.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self) -> Option<Held> {
        self.lock_held().clone()
    }

    /// Counts one release of `node`; true if it was the last one (the node
    /// must go now).
    fn release_one(&self, node: &str) -> bool {
        let mut state = self.lock_held();
        match state.as_mut() {
            Some(h) if h.node == node && h.count > 1 => {
                h.count -= 1;
                false
            }
            Some(h) if h.node == node => {
                *state = None;
                true
            }
            // Already forgotten (lost and re-acquired): still delete ours.
            _ => true,
        }
    }
}

/// A grant of the lock. Release it with [`release`](Self::release); dropping
/// it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct MutexGuard {
    shared: Arc<Shared>,
    owner: Arc<Owner>,
    node: String,
    token: u64,
    released: bool,
}

impl MutexGuard {
    /// The grant's fencing token: the czxid of its node, strictly larger
    /// than every earlier grant's.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The full path of the node that holds the lock.
    pub fn node_path(&self) -> &str {
        &self.node
    }

    /// Resolves when the lock is lost: the node is deleted (by someone
    /// else, or by our own release), or the session expires or is closed.
    /// It does not resolve on a mere disconnect: the session (and the lock)
    /// may outlive it. The future owns what it needs, so it can be spawned
    /// and outlive the guard.
    pub fn lost(&self) -> impl Future<Output = LockLost> + Send + 'static {
        watch_lost(self.shared.client.clone(), self.node.clone())
    }

    /// Releases this grant (the node is deleted by the last release of a
    /// re-entered lock).
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        if self.owner.release_one(&self.node) {
            delete_node(&self.shared.client, &self.node).await?;
        }
        Ok(())
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.owner.release_one(&self.node) {
            let client = self.shared.client.clone();
            let node = self.node.clone();
            spawn_detached(async move {
                if let Err(e) = delete_node(&client, &node).await {
                    tracing::warn!(%node, error = %e, "lock node not deleted on drop");
                }
            });
        }
    }
}

/// The terminal reading of a session state, if it is one.
fn ended(state: SessionState) -> Option<LockLost> {
    match state {
        SessionState::Expired => Some(LockLost::SessionExpired),
        SessionState::Closed => Some(LockLost::SessionClosed),
        SessionState::Connected | SessionState::Disconnected => None,
    }
}

async fn watch_lost(client: Client, node: String) -> LockLost {
    let mut session: watch::Receiver<SessionState> = client.session_events();
    loop {
        if let Some(lost) = ended(*session.borrow_and_update()) {
            return lost;
        }
        let gone = match client.exists_watch(&node).await {
            Ok((None, _)) => return LockLost::NodeDeleted,
            Ok((Some(_), gone)) => gone,
            Err(_) => {
                // Disconnected, or a timeout: look again once something
                // changes, or after a pause.
                tokio::select! {
                    changed = session.changed() => if changed.is_err() {
                        return LockLost::SessionClosed;
                    },
                    _ = tokio::time::sleep(RETRY_PAUSE) => {}
                }
                continue;
            }
        };
        tokio::pin!(gone);
        loop {
            tokio::select! {
                event = &mut gone => match event {
                    Ok(e) if e.event_type == EventType::NodeDeleted => return LockLost::NodeDeleted,
                    // A data change (someone wrote to it) or the session
                    // ending: the outer loop sorts it out.
                    _ => break,
                },
                changed = session.changed() => {
                    if changed.is_err() {
                        return LockLost::SessionClosed;
                    }
                    if let Some(lost) = ended(*session.borrow_and_update()) {
                        return lost;
                    }
                    // A disconnect or reconnect: the watch survives it.
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_counts_reentries() {
        let owner = Owner::default();
        *owner.lock_held() = Some(Held {
            node: "/l/n".into(),
            token: 5,
            count: 2,
        });
        assert!(!owner.release_one("/l/n"));
        assert!(owner.release_one("/l/n"));
        assert!(owner.held().is_none());
        // A stale guard of a forgotten grant still deletes its own node.
        assert!(owner.release_one("/l/other"));
    }
}
