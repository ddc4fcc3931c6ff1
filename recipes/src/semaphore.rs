//! A counting semaphore: at most `max_leases` holders at once, granted in
//! order of arrival.
//!
//! ```text
//! /semaphores/pool  (data "3")      container; data = max_leases
//!   _c_<id>-lease-0000000000        holds   (index 0 < 3), data "held"
//!   _c_<id>-lease-0000000001        holds   (index 1)
//!   _c_<id>-lease-0000000002        holds   (index 2)
//!   _c_<id>-lease-0000000003        first waiter: watches the child list
//!   _c_<id>-lease-0000000004        waits on ...0003 (its predecessor)
//! ```
//!
//! Each `acquire` creates an ephemeral-sequential contender (see
//! `queue.rs`). A contender holds a lease while its index among the
//! contenders sorted by sequence number is below `max_leases`: arrival
//! order is grant order (FIFO), and a late comer never overtakes a waiter.
//!
//! # Who watches what
//!
//! Any holder's release must promote the *first* waiter, so that one
//! watches the children list. Every later waiter only watches its
//! immediate predecessor, so a release wakes one or two contenders rather
//! than the whole queue (no herd). What wakes a later waiter when its
//! predecessor is promoted, rather than deleted? The promoted contender
//! writes `held` into its node before returning the lease: the data
//! change fires its successor's exists-watch, and the successor, now
//! first waiter, moves its watch to the children list. A successor that
//! sets its watch after that write sees the node's version above 0 and
//! looks again at once instead of waiting. The price: a contender that is
//! promoted and then stalls before writing the mark (a long network
//! partition) holds up the waiter behind it until it writes it or its
//! session ends, even if more leases have come free meanwhile.
//!
//! # Agreeing on `max_leases`
//!
//! The semaphore node's data holds `max_leases` in decimal, written by
//! whoever creates it. An `acquire` with a different value fails with
//! [`Error::BadArguments`] before queueing: users that disagree would
//! otherwise each count the same queue differently and together exceed the
//! bound. (When the container is reaped, idle, the next user writes its
//! own value.)
//!
//! A waiter that gives up deletes its node; a [`SemaphoreLease`] deletes it on
//! [`SemaphoreLease::release`] or, dropped, in the background; a holder whose
//! session ends loses its node, and so its lease, to the server.

use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Acl, Client, ErrorCode, Stat};

use crate::error::{Error, Result};
use crate::queue::{
    random_id, retrying, vanished, Entry, Lifetime, NodeOwner, Outcome, Parents, Queue, Turn, Wait,
    WaitOptions,
};

/// Prefix of every contender's name, before its random id.
const CONTENDER_PREFIX: &str = "_c_";

/// Kind prefix of a semaphore contender.
pub const LEASE_KIND: &str = "lease-";

/// What a contender writes into its node when it becomes a holder, to wake
/// the waiter right behind it.
const HELD_MARK: &[u8] = b"held";

/// A counting semaphore at `path` allowing `max_leases` holders at once.
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    path: String,
    max_leases: u32,
    acl: Vec<Acl>,
}

impl Semaphore {
    /// The semaphore at `path` (created on first use, as a container).
    /// Every user of `path` must pass the same `max_leases`; a mismatch,
    /// or zero, is refused at `acquire`.
    pub fn new(client: Client, path: impl Into<String>, max_leases: u32) -> Self {
        Semaphore {
            client,
            path: path.into(),
            max_leases,
            acl: Vec::new(),
        }
    }

    /// Creates the semaphore's nodes (its container, missing parents, and
    /// the lease contenders) with `acl` instead of world:anyone, like
    /// Curator's ACL provider; an `auth` entry stands for the session's
    /// identities. A contender the ACLs refuse gets `NoAuth` naming the
    /// node. Users need READ on the semaphore node (its lease count and
    /// queue), CREATE and DELETE (to queue and leave), and WRITE (a new
    /// holder marks its own node, which carries this ACL too).
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The semaphore's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many leases may be held at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Waits as long as it takes for a lease. Fails if the session ends.
    pub async fn acquire(&self) -> Result<SemaphoreLease> {
        let lease = self.attempt(Wait::Forever).await?;
        Ok(lease.expect("waiting forever only ends with a lease or an error"))
    }

    /// Takes a lease if one is free right now (and nobody is queued
    /// before us); `None` otherwise, leaving no node behind.
    pub async fn try_acquire(&self) -> Result<Option<SemaphoreLease>> {
        self.attempt(Wait::No).await
    }

    /// Waits at most `timeout` for a lease; `None` if none came (and the
    /// waiter's node is removed).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<SemaphoreLease>> {
        self.attempt(Wait::Until(Instant::now() + timeout)).await
    }

    /// Checks (creating the node if needed) that the semaphore's recorded
    /// `max_leases` is ours.
    async fn check_max_leases(&self) -> Result<Vec<u8>> {
        if self.max_leases == 0 {
            return Err(Error::BadArguments(format!(
                "{}: max_leases must be at least 1",
                self.path
            )));
        }
        let ours = self.max_leases.to_string().into_bytes();
        self.queue().ensure_dir(&ours).await?;
        let data = match retrying(&self.client, || self.client.get_data(&self.path)).await {
            Ok((data, _)) => data,
            // Reaped between the two calls: it will be made again with ours.
            Err(e) if e.code() == ErrorCode::NoNode => return Ok(ours),
            Err(e) => return Err(e),
        };
        let recorded: u32 = std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "{}: the semaphore node does not hold a lease count ({} bytes)",
                    self.path,
                    data.len()
                ))
            })?;
        if recorded != self.max_leases {
            return Err(Error::BadArguments(format!(
                "{}: max_leases {} disagrees with {} recorded by the semaphore's users",
                self.path, self.max_leases, recorded
            )));
        }
        Ok(ours)
    }

    fn queue(&self) -> Queue {
        Queue::new(
            self.client.clone(),
            self.path.clone(),
            self.acl.clone(),
            Parents::Containers,
            CONTENDER_PREFIX,
            &[LEASE_KIND],
        )
    }

    async fn attempt(&self, wait: Wait) -> Result<Option<SemaphoreLease>> {
        let ours = self.check_max_leases().await?;
        let queue = self.queue();
        let mut entry = queue
            .join(&random_id(), LEASE_KIND, b"", Lifetime::Ephemeral, &ours)
            .await?;
        let max = self.max_leases as usize;
        let outcome = queue
            .wait_turn(&mut entry, wait, WaitOptions::default(), |_, index| {
                if index < max {
                    Turn::Granted
                } else if index == max {
                    // First waiter: any holder's release promotes us.
                    Turn::WaitChildren
                } else {
                    // Later waiter: our predecessor's release or promotion
                    // (its mark) moves us up.
                    Turn::WaitOn {
                        index: index - 1,
                        or_modified: true,
                    }
                }
            })
            .await?;
        match outcome {
            Outcome::Granted => self.grant(entry).await.map(Some),
            Outcome::TimedOut => Ok(None),
            Outcome::Vanished => Err(vanished(&entry.path())),
        }
    }

    /// Marks our node as a holder (waking the waiter behind us) and hands
    /// out the lease.
    async fn grant(&self, entry: Entry) -> Result<SemaphoreLease> {
        let path = entry.path();
        match retrying(&self.client, || {
            self.client.set_data(&path, HELD_MARK, None)
        })
        .await
        {
            Ok(_) => {
                let (owner, stat) = entry.into_owner();
                Ok(SemaphoreLease { owner, stat })
            }
            Err(e) if e.code() == ErrorCode::NoNode => Err(vanished(&path)),
            Err(e) => Err(e),
        }
    }
}

/// A held lease. Release it with [`release`](Self::release) to know it
/// went; dropping it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the lease releases it"]
pub struct SemaphoreLease {
    owner: NodeOwner,
    stat: Stat,
}

impl SemaphoreLease {
    /// The path of the contender node that holds the lease.
    pub fn node_path(&self) -> &str {
        self.owner.path()
    }

    /// The czxid of the lease's node, larger than that of every lease
    /// granted before it was requested.
    pub fn fencing_token(&self) -> u64 {
        self.stat.czxid
    }

    /// Gives the lease back and waits until the node is deleted.
    pub async fn release(self) -> Result<()> {
        self.owner.delete().await
    }
}
