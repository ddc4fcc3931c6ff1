//! The members a recipe has made and not yet handed to its caller
//! ([`Entry`]), the held nodes it has ([`NodeOwner`]), and what dropping
//! either does.
//!
//! # An abandoned join leaves no member behind
//!
//! A join that is cancelled (its future dropped) or gives up (an error)
//! while one of its creates is in flight has no answer to go by: the
//! create may have been applied, may never be, or may still be applied
//! later, for example when it was sent on a connection that broke and the
//! server it reached proposes it after the client has moved on. A look-up
//! alone cannot tell "not there" from "not there *yet*": a create that
//! lands after it stays for the session's life (an ephemeral member) or
//! its TTL (a lease's), and blocks everyone queued behind it.
//!
//! So the clean-up first **settles** the session's writes
//! ([`Queue::settle_writes`]): it makes one write of its own, a multi that
//! only checks that the queue's directory exists and so changes nothing,
//! and waits until the tree has answered it. A session's writes carry
//! increasing request ids (the client never reuses or resets them across
//! reconnects), and the tree refuses a session's write that arrives after
//! a later write of the same session was applied (`SessionMoved`, not
//! applied). Once the settling write is answered, every earlier create of
//! ours has therefore either been applied already or never will be,
//! whichever server or connection it is stuck on. Then a **linearizable**
//! look-up by protection id finds every member it made, and each is
//! deleted. Errors along the way are retried ([`retrying`](super::retrying));
//! while disconnected, each step waits for the reconnect.
//!
//! Why not the others ways to close the window: waiting for the client's
//! outstanding requests does not help (a broken connection's requests are
//! failed by the client at once, whatever the servers still do with
//! them); a clean-up that keeps looking for the session's life costs a
//! watch per abandoned join and still races the late create; and a node
//! the server removes when the join's token is dropped needs a new kind
//! of node. The settling write costs one write per abandoned join whose
//! create was in doubt, and none otherwise: an entry whose create was
//! answered, and swept once by [`Queue::wait_turn`], just deletes its
//! member. [`Queue::join`] makes the same settling write before it looks
//! for a create whose answer was lost, for the same reason.

use tracing::{debug, warn};
use warden_client::{Client, Op, Stat};

use super::{delete_node, pause, Queue, RETRIES_MAX};
use crate::error::{Error, Result};

/// A member this process made (or rejoined) and has not handed to the
/// caller yet. Dropping it deletes the member in the background; if a
/// create of it may have been in flight, every member of its id is found
/// after the session's writes settled, and deleted (see the module docs).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(super) queue: Queue,
    pub(super) id: String,
    /// Name and stat once known.
    pub(super) node: Option<(String, Stat)>,
    pub(super) armed: bool,
    /// A create of this entry may have been applied (or may still be)
    /// without `node` naming it: a create has not answered yet, or one
    /// found after a lost answer was adopted and the queue has not been
    /// swept since (another create of ours may have landed too).
    pub(super) unsettled: bool,
}

impl Entry {
    /// An entry about to send its first create.
    pub(super) fn new(queue: Queue, id: String) -> Entry {
        Entry {
            queue,
            id,
            node: None,
            armed: true,
            unsettled: true,
        }
    }

    /// The member's name (empty before the create answered).
    pub(crate) fn name(&self) -> &str {
        self.node.as_ref().map_or("", |(n, _)| n.as_str())
    }

    /// The member's full path.
    pub(crate) fn path(&self) -> String {
        self.queue.path_of(self.name())
    }

    /// The member's stat when made or found: `czxid` is the fencing token.
    pub(crate) fn stat(&self) -> Stat {
        self.node.as_ref().map(|(_, s)| *s).unwrap_or_default()
    }

    /// Deletes the member now.
    pub(crate) async fn delete(&mut self) -> Result<()> {
        if self.node.is_some() {
            delete_node(&self.queue.client, &self.path()).await?;
        }
        self.armed = false;
        Ok(())
    }

    /// The member is the caller's now: its path and stat.
    pub(crate) fn take(mut self) -> (String, Stat) {
        self.armed = false;
        (self.path(), self.stat())
    }

    /// The member, owned by a guard that deletes it when dropped.
    pub(crate) fn into_owner(self) -> (NodeOwner, Stat) {
        let client = self.queue.client.clone();
        let (path, stat) = self.take();
        (NodeOwner::new(client, path), stat)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let queue = self.queue.clone();
        let id = std::mem::take(&mut self.id);
        let known = self.node.take().map(|(name, _)| queue.path_of(&name));
        let unsettled = self.unsettled;
        spawn_detached(async move {
            let paths = if unsettled {
                match queue.settled_members(&id).await {
                    Ok(found) => found,
                    Err(e) => {
                        warn!(dir = %queue.dir, error = %e, "abandoned member not looked for");
                        known.into_iter().collect()
                    }
                }
            } else {
                known.into_iter().collect()
            };
            for path in paths {
                if let Err(e) = delete_node(&queue.client, &path).await {
                    warn!(node = %path, error = %e, "abandoned member not deleted");
                }
            }
        });
    }
}

impl Queue {
    /// Returns once no write this session sent before the call can be
    /// applied any more: it has been, or it never will be (see the module
    /// docs). An error means the session is over or the cluster did not
    /// answer within the retries.
    pub(crate) async fn settle_writes(&self) -> Result<()> {
        let fence = vec![Op::check(self.dir.clone(), None)];
        let mut attempt = 0;
        loop {
            match self.client.multi(fence.clone()).await {
                Ok(_) => return Ok(()),
                // A retry is a new write with a later id: it settles
                // everything the first one would have.
                Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                    pause(&self.client, attempt).await;
                    attempt += 1;
                }
                // The tree applied the check and it failed (the directory
                // is gone, or we may not read it): settled just the same.
                Err(warden_client::Error::Multi { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The paths of every member of id `id`, looked up linearizably once
    /// the session's writes have settled: nothing of ours can turn up
    /// after it.
    async fn settled_members(&self, id: &str) -> Result<Vec<String>> {
        self.settle_writes().await?;
        let found = self.find_own(id).await?;
        debug!(dir = %self.dir, id, found = found.len(), "abandoned join: members of ours after settling");
        Ok(found.iter().map(|m| self.path_of(&m.name)).collect())
    }
}

/// Runs `future` on the current runtime, if any. Without one (a guard
/// dropped outside tokio) the node goes when its session ends or its TTL
/// passes.
pub(crate) fn spawn_detached(future: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(future);
    }
}

/// Owns a granted node until disarmed: dropping it (a guard dropped
/// without `release`) deletes the node in the background.
#[derive(Debug)]
pub(crate) struct NodeOwner {
    client: Client,
    path: String,
    armed: bool,
}

impl NodeOwner {
    pub(crate) fn new(client: Client, path: String) -> Self {
        NodeOwner {
            client,
            path,
            armed: true,
        }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Deletes the node now and waits for the answer.
    pub(crate) async fn delete(mut self) -> Result<()> {
        self.armed = false;
        delete_node(&self.client, &self.path).await
    }
}

impl Drop for NodeOwner {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let path = std::mem::take(&mut self.path);
        spawn_detached(async move {
            if let Err(e) = delete_node(&client, &path).await {
                debug!(%path, error = %e, "background delete of a held node failed");
            }
        });
    }
}

/// A member's node that must exist is gone.
pub(crate) fn vanished(path: &str) -> Error {
    Error::NotHolder(format!(
        "{path}: our contender node is gone (session expired or someone deleted it)"
    ))
}
