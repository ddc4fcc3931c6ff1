//! A shared/exclusive lock: many readers at once, or one writer.
//!
//! ```text
//! /locks/table                      container
//!   _c_<id>-READ-0000000000         reader, holds (no writer before it)
//!   _c_<id>-READ-0000000001         reader, holds
//!   _c_<id>-WRITE-0000000002        writer, waits on ...0001 (its predecessor)
//!   _c_<id>-READ-0000000003         reader, waits on ...0002 (nearest writer before it)
//! ```
//!
//! Every attempt creates one ephemeral-sequential contender (see
//! `queue.rs` for the protected name, the orphan sweep and the container)
//! and then looks
//! at the queue sorted by sequence number:
//!
//! - a **writer** holds when it is first in the queue; otherwise it watches
//!   its immediate predecessor, whatever that is;
//! - a **reader** holds when no writer precedes it; otherwise it watches the
//!   nearest writer before it.
//!
//! When the watched node goes, the waiter looks again (the node it must
//! wait for may now be an earlier one). Each node is watched by the few
//! contenders that directly depend on it, so a release wakes only them,
//! not the whole queue. Because a reader queues behind every writer that
//! came before it, a waiting writer is never starved by a stream of later
//! readers: order of arrival is order of grant, as in Curator's
//! `InterProcessReadWriteLock`.
//!
//! A waiter that gives up (a timeout, `try_acquire` finding the lock busy,
//! or its future being dropped) deletes its node, so it does not block the
//! queue until its session ends. A guard deletes its node on
//! [`RwLockGuard::release`], or in the background when dropped. If the
//! session expires, the server deletes the node: a holder must treat
//! `SessionExpired` as having lost the lock, and use the
//! [fencing token](RwLockGuard::fencing_token) to guard what it writes.
//!
//! The lock is not reentrant: a second `acquire` by the same process queues
//! behind the first (and a writer behind its own read lock waits forever).

use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Acl, Client, Stat};

use crate::error::Result;
use crate::queue::{
    random_id, vanished, Lifetime, Member, NodeOwner, Outcome, Parents, Queue, Turn, Wait,
    WaitOptions,
};

/// Prefix of every contender's name, before its random id.
const CONTENDER_PREFIX: &str = "_c_";

/// Kind prefix of a reader's contender node.
pub const READ_KIND: &str = "READ-";
/// Kind prefix of a writer's contender node.
pub const WRITE_KIND: &str = "WRITE-";

/// Which side of the lock a handle takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwLockMode {
    /// Shared with other readers; excludes writers.
    Read,
    /// Excludes everyone.
    Write,
}

impl RwLockMode {
    fn kind(self) -> &'static str {
        match self {
            RwLockMode::Read => READ_KIND,
            RwLockMode::Write => WRITE_KIND,
        }
    }
}

/// A read-write lock at `path`. Cheap to clone; every clone, and every
/// handle made from it, shares the client's session.
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    client: Client,
    path: String,
    acl: Vec<Acl>,
}

impl ReadWriteLock {
    /// The lock at `path` (created on first use, as a container).
    pub fn new(client: Client, path: impl Into<String>) -> Self {
        ReadWriteLock {
            client,
            path: path.into(),
            acl: Vec::new(),
        }
    }

    /// Creates the lock's nodes (its container, missing parents, and the
    /// contenders of both sides) with `acl` instead of world:anyone, like
    /// Curator's ACL provider; an `auth` entry stands for the session's
    /// identities. Handles and clones made before keep theirs. A contender the ACLs
    /// refuse gets `NoAuth` naming the node. Users need READ on the lock
    /// node (to see the queue) and CREATE and DELETE (to queue and leave).
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A handle that takes the lock shared.
    pub fn read_lock(&self) -> RwLockHandle {
        self.handle(RwLockMode::Read)
    }

    /// A handle that takes the lock exclusively.
    pub fn write_lock(&self) -> RwLockHandle {
        self.handle(RwLockMode::Write)
    }

    fn handle(&self, mode: RwLockMode) -> RwLockHandle {
        RwLockHandle {
            client: self.client.clone(),
            path: self.path.clone(),
            acl: self.acl.clone(),
            mode,
        }
    }
}

/// One side (read or write) of a [`ReadWriteLock`]. Each `acquire` is a
/// new contender; the handle itself holds nothing.
#[derive(Debug, Clone)]
pub struct RwLockHandle {
    client: Client,
    path: String,
    acl: Vec<Acl>,
    mode: RwLockMode,
}

impl RwLockHandle {
    /// Which side this handle takes.
    pub fn mode(&self) -> RwLockMode {
        self.mode
    }

    /// Waits as long as it takes for the lock. Fails if the session ends.
    pub async fn acquire(&self) -> Result<RwLockGuard> {
        let guard = self.attempt(Wait::Forever).await?;
        Ok(guard.expect("waiting forever only ends with a guard or an error"))
    }

    /// Takes the lock if it is free for this side right now; `None`
    /// otherwise (and no node is left behind).
    pub async fn try_acquire(&self) -> Result<Option<RwLockGuard>> {
        self.attempt(Wait::No).await
    }

    /// Waits at most `timeout` for the lock; `None` if it did not come (and
    /// the waiter's node is removed).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<RwLockGuard>> {
        self.attempt(Wait::Until(Instant::now() + timeout)).await
    }

    async fn attempt(&self, wait: Wait) -> Result<Option<RwLockGuard>> {
        let queue = Queue::new(
            self.client.clone(),
            self.path.clone(),
            self.acl.clone(),
            Parents::Containers,
            CONTENDER_PREFIX,
            &[READ_KIND, WRITE_KIND],
        );
        let mut entry = queue
            .join(
                &random_id(),
                self.mode.kind(),
                b"",
                Lifetime::Ephemeral,
                b"",
            )
            .await?;
        // From here on, leaving by `?` or by being dropped deletes the node.
        let mode = self.mode;
        let outcome = queue
            .wait_turn(
                &mut entry,
                wait,
                WaitOptions::default(),
                |members, index| match blocker(mode, &members[..index]) {
                    None => Turn::Granted,
                    Some(index) => Turn::WaitOn {
                        index,
                        or_modified: false,
                    },
                },
            )
            .await?;
        match outcome {
            Outcome::Granted => {
                let (owner, stat) = entry.into_owner();
                Ok(Some(RwLockGuard { owner, stat, mode }))
            }
            Outcome::TimedOut => Ok(None),
            Outcome::Vanished => Err(vanished(&entry.path())),
        }
    }
}

/// The index of the contender a contender of `mode` must wait for, given
/// the contenders ahead of it (sorted); `None` if it may hold the lock.
fn blocker(mode: RwLockMode, ahead: &[Member]) -> Option<usize> {
    match mode {
        RwLockMode::Write => ahead.len().checked_sub(1),
        RwLockMode::Read => ahead.iter().rposition(|m| m.kind == WRITE_KIND),
    }
}

/// A held read or write lock. Release it with [`release`](Self::release)
/// to know it went; dropping it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct RwLockGuard {
    owner: NodeOwner,
    stat: Stat,
    mode: RwLockMode,
}

impl RwLockGuard {
    /// The czxid of this grant's node: larger than the token of every
    /// grant whose node was created before it (in particular every writer
    /// that held before this grant). Pass it to the resource being
    /// protected, which refuses tokens lower than one it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.stat.czxid
    }

    /// Which side is held.
    pub fn mode(&self) -> RwLockMode {
        self.mode
    }

    /// The path of the contender node that holds the lock.
    pub fn node_path(&self) -> &str {
        self.owner.path()
    }

    /// Releases the lock and waits until the node is deleted.
    pub async fn release(self) -> Result<()> {
        self.owner.delete().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(kinds: &[&str]) -> Vec<Member> {
        let names: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| format!("_c_{i:x}-{k}{i:010}"))
            .collect();
        crate::queue::sorted_members(&names, CONTENDER_PREFIX, &[READ_KIND, WRITE_KIND])
    }

    #[test]
    fn writers_wait_on_their_predecessor_readers_on_the_nearest_writer() {
        let q = names(&[READ_KIND, WRITE_KIND, READ_KIND, READ_KIND, WRITE_KIND]);
        // Reader at 0 and writer at 0: free.
        assert_eq!(blocker(RwLockMode::Read, &q[..0]), None);
        assert_eq!(blocker(RwLockMode::Write, &q[..0]), None);
        // Writer at 1 waits on the reader at 0.
        assert_eq!(blocker(RwLockMode::Write, &q[..1]), Some(0));
        // Readers at 2 and 3 wait on the writer at 1, not their neighbours.
        assert_eq!(blocker(RwLockMode::Read, &q[..2]), Some(1));
        assert_eq!(blocker(RwLockMode::Read, &q[..3]), Some(1));
        // Writer at 4 waits on the reader at 3.
        assert_eq!(blocker(RwLockMode::Write, &q[..4]), Some(3));
        // A reader after only readers holds.
        let r = names(&[READ_KIND, READ_KIND]);
        assert_eq!(blocker(RwLockMode::Read, &r[..1]), None);
    }
}
