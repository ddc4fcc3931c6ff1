//! Building blocks shared by the queue-shaped recipes (read-write lock,
//! semaphore, barrier): the container that holds the contenders, a
//! contender node created safely across connection loss, the waiting on a
//! one-shot watch with an optional deadline, and the removal of a node
//! that nobody awaits any more (a dropped guard, a cancelled waiter).
//!
//! # Protected contenders
//!
//! A contender is an ephemeral-sequential child of the recipe's container,
//! named `_c_<id>-<KIND><seq>`: `<id>` is a random 128-bit id fresh for
//! each attempt, `<KIND>` says what the contender wants (`READ-`,
//! `WRITE-`, `lease-`) and `<seq>` is the server's 10-digit sequence
//! number. The id is what makes the create safe to retry: when a create
//! fails with `ConnectionLoss` it may still have been applied, and the
//! only way to know is to look among the children for our id. Without it
//! the retry would leave an orphan node in the queue that nobody watches
//! and that blocks everyone behind it until the session ends.
//!
//! The same lookup cleans up after a caller that gave up (dropped its
//! future) while a create was in flight: the create may still land, and a
//! background task finds the node by id and deletes it.
//!
//! Order is by `<seq>` alone (the id in front would scramble a plain
//! string sort), see [`sequence_of`].
//!
//! # Containers
//!
//! The parent is a container node: the leader deletes it once it has had
//! children and has none left, so an idle lock leaves nothing behind. The
//! flip side is that it may vanish between our check and our create; every
//! create here answers `NoNode` by creating the container again.
//!
//! # ACLs
//!
//! Every node created here (container, missing ancestors, contenders)
//! gets the ACL the recipe was given; an empty one means the server's
//! default, world:anyone. A create the ACLs refuse is not retried: the
//! caller gets the `NoAuth` at once, naming the node. A container that
//! exists already is fine even where the caller may not create it.
//!
//! Nothing here blocks forever without a watch set: every wait is on a
//! one-shot watch (which the session's end resolves with an error) and,
//! when the caller gave one, a deadline.

use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Acl, Client, CreateOptions, ErrorCode, OneshotWatch, Stat};

use crate::error::{Error, Result};

/// Prefix of every protected contender name.
pub(crate) const PROTECTED_PREFIX: &str = "_c_";

/// Digits of a sequence suffix (ZooKeeper's `%010d`).
pub(crate) const SEQUENCE_DIGITS: usize = 10;

/// Attempts at one operation that failed with a retryable error
/// (`ConnectionLoss`, `OperationTimeout`, ...) before giving up. With the
/// pauses below that is about 8 s of retrying: long enough to ride out a
/// leader election and a reconnect, and close to the default session
/// timeout (10 s), past which the session is likely gone anyway.
pub(crate) const RETRIES_MAX: u32 = 20;

/// First pause between retries; doubled each time up to
/// [`RETRY_PAUSE_MAX`].
pub(crate) const RETRY_PAUSE_MIN: Duration = Duration::from_millis(20);

/// Longest pause between retries.
pub(crate) const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Levels of missing ancestors [`ensure_container`] creates before it
/// gives up (a path cannot be deeper than this in practice; the bound keeps
/// a parent that keeps vanishing from looping forever).
const CONTAINER_DEPTH_MAX: u32 = 64;

/// The pause before retry number `attempt` (from 0).
pub(crate) fn retry_pause(attempt: u32) -> Duration {
    RETRY_PAUSE_MIN
        .saturating_mul(1 << attempt.min(16))
        .min(RETRY_PAUSE_MAX)
}

/// Makes sure `path` exists, creating it (and any missing ancestor) as a
/// container node. `data` goes into `path` only if this call creates it;
/// ancestors get none. Every node created gets `acl` (empty: world:anyone).
/// An existing node is left alone, whatever it holds and whatever its ACL.
pub async fn ensure_container(client: &Client, path: &str, data: &[u8], acl: &[Acl]) -> Result<()> {
    // Walk up until a create succeeds or finds the node, then back down.
    let mut missing: Vec<&str> = vec![path];
    let mut retries = 0;
    while let Some(&current) = missing.last() {
        let payload: &[u8] = if current == path { data } else { &[] };
        match client
            .create(
                current,
                payload,
                CreateOptions::container().acl(acl.to_vec()),
            )
            .await
        {
            Ok(_) => {
                missing.pop();
            }
            Err(e) if e.code() == ErrorCode::NodeExists => {
                missing.pop();
            }
            // CREATE is checked before existence (as in ZooKeeper): a node
            // that exists under a parent we may not create in answers
            // NoAuth. It is there, which is all we need.
            Err(e) if e.code() == ErrorCode::NoAuth => {
                if retrying(|| client.exists(current)).await?.is_none() {
                    return Err(e.into());
                }
                missing.pop();
            }
            Err(e) if e.code() == ErrorCode::NoNode => {
                let parent = parent_of(current);
                if parent == "/" || missing.len() as u32 >= CONTAINER_DEPTH_MAX {
                    return Err(e.into());
                }
                missing.push(parent);
            }
            Err(e) if e.is_retryable() && retries < RETRIES_MAX => {
                tokio::time::sleep(retry_pause(retries)).await;
                retries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The parent of an absolute path (`"/"` for a top-level node).
pub(crate) fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// A contender node this process created.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Full path, e.g. `/locks/db/_c_9f…-WRITE-0000000004`.
    pub path: String,
    /// The last path segment.
    pub name: String,
    /// Its stat when created (or found after a connection loss); `czxid`
    /// is the fencing token.
    pub stat: Stat,
}

/// Creates an ephemeral-sequential contender `dir/_c_<id>-<kind><seq>`
/// with a fresh random id, protected against connection loss: a create
/// whose answer was lost is looked up by its id rather than repeated
/// blindly. If `dir` is missing (never made, or a container the leader
/// reaped), it is created with [`ensure_container`] holding
/// `container_data`. The contender (and any node made for it) gets `acl`.
pub async fn create_contender(
    client: &Client,
    dir: &str,
    kind: &str,
    container_data: &[u8],
    acl: &[Acl],
) -> Result<Contender> {
    let id = format!("{:032x}", rand::random::<u128>());
    let own_prefix = format!("{PROTECTED_PREFIX}{id}-");
    let requested = format!("{dir}/{own_prefix}{kind}");
    // If the caller drops us while a create is in flight, the node may
    // appear with nobody to own it: the guard then finds it by id and
    // deletes it in the background.
    let mut pending = PendingCreate {
        client: client.clone(),
        dir: dir.to_string(),
        own_prefix: own_prefix.clone(),
        settled: false,
    };
    let mut retries = 0;
    loop {
        match client
            .create(
                &requested,
                &[],
                CreateOptions::ephemeral_sequential().acl(acl.to_vec()),
            )
            .await
        {
            Ok((path, stat)) => {
                pending.settled = true;
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                return Ok(Contender { path, name, stat });
            }
            Err(e) if e.code() == ErrorCode::NoNode && retries < RETRIES_MAX => {
                retries += 1;
                ensure_container(client, dir, container_data, acl).await?;
            }
            Err(e) if e.is_retryable() => {
                // The create may have been applied: look for our id, and
                // create again only once we know it was not (a second node
                // would be an orphan that blocks the queue).
                loop {
                    if retries >= RETRIES_MAX {
                        return Err(e.into());
                    }
                    tokio::time::sleep(retry_pause(retries)).await;
                    retries += 1;
                    match find_own(client, dir, &own_prefix).await {
                        Ok(Some(found)) => {
                            pending.settled = true;
                            return Ok(found);
                        }
                        Ok(None) => break,
                        Err(Error::Client(e)) if e.is_retryable() => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Cleans up after a [`create_contender`] that was dropped, or failed,
/// while a create may have been applied unseen.
struct PendingCreate {
    client: Client,
    dir: String,
    own_prefix: String,
    /// The node was handed to the caller (who owns it now).
    settled: bool,
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let dir = std::mem::take(&mut self.dir);
        let own_prefix = std::mem::take(&mut self.own_prefix);
        runtime.spawn(async move {
            for attempt in 0..RETRIES_MAX {
                match find_own(&client, &dir, &own_prefix).await {
                    Ok(Some(orphan)) => {
                        let _ = delete_node(&client, &orphan.path).await;
                        return;
                    }
                    Ok(None) => return,
                    Err(Error::Client(e)) if e.is_retryable() => {
                        tokio::time::sleep(retry_pause(attempt)).await;
                    }
                    Err(_) => return,
                }
            }
        });
    }
}

/// The child of `dir` whose name starts with `own_prefix`, if any.
async fn find_own(client: &Client, dir: &str, own_prefix: &str) -> Result<Option<Contender>> {
    // Linearizable: a lost create that was committed must be found even
    // through a server that has not applied it yet.
    let children = match client.get_children_linearizable(dir).await {
        Ok((children, _)) => children,
        Err(e) if e.code() == ErrorCode::NoNode => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(own_prefix)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    match client.exists(&path).await? {
        Some(stat) => Ok(Some(Contender { path, name, stat })),
        None => Ok(None),
    }
}

/// The sequence number at the end of a contender's name, if it has one.
pub fn sequence_of(name: &str) -> Option<i64> {
    let start = name.len().checked_sub(SEQUENCE_DIGITS)?;
    name.get(start..)?.parse().ok()
}

/// What a protected contender asks for: `"READ-"` from
/// `_c_<id>-READ-0000000001`. `None` for names not in that shape.
pub fn kind_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PROTECTED_PREFIX)?;
    let after_id = &rest[rest.find('-')? + 1..];
    let end = after_id.len().checked_sub(SEQUENCE_DIGITS)?;
    sequence_of(name)?;
    after_id.get(..end)
}

/// The protected contenders among `children` whose kind passes `keep`,
/// sorted by sequence number. Other children (someone else's nodes, the
/// barrier's `ready`) are ignored.
pub fn sorted_contenders(children: Vec<String>, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut contenders: Vec<(i64, String)> = children
        .into_iter()
        .filter(|name| kind_of(name).is_some_and(&keep))
        .filter_map(|name| Some((sequence_of(&name)?, name)))
        .collect();
    contenders.sort();
    contenders.into_iter().map(|(_, name)| name).collect()
}

/// How long an attempt may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all (`try_acquire`).
    Never,
    /// Until a deadline (`acquire_timeout`).
    Until(Instant),
    /// As long as the session lives (`acquire`).
    Forever,
}

impl Wait {
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline) => Some(deadline),
            Wait::Never | Wait::Forever => None,
        }
    }
}

/// How a wait on a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The watch fired (or the connection blipped): look again.
    Recheck,
    /// The caller's deadline passed first.
    TimedOut,
}

/// Waits for `watch` to fire, or `deadline` (if any) to pass. A session
/// that ended is an error; anything retryable just means "look again".
pub(crate) async fn wait_watch(watch: OneshotWatch, deadline: Option<Instant>) -> Result<Woken> {
    let fired = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, watch).await {
            Ok(fired) => fired,
            Err(_) => return Ok(Woken::TimedOut),
        },
        None => watch.await,
    };
    match fired {
        Ok(_) => Ok(Woken::Recheck),
        Err(e) if e.is_retryable() => Ok(Woken::Recheck),
        Err(e) => Err(e.into()),
    }
}

/// Whether `deadline` has passed.
pub(crate) fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Deletes `path`, retrying through connection loss; a node already gone
/// counts as deleted.
pub async fn delete_node(client: &Client, path: &str) -> Result<()> {
    let mut retries = 0;
    loop {
        match client.delete(path, None).await {
            Ok(()) => return Ok(()),
            Err(e) if e.code() == ErrorCode::NoNode => return Ok(()),
            Err(e) if e.is_retryable() && retries < RETRIES_MAX => {
                tokio::time::sleep(retry_pause(retries)).await;
                retries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Retries a read through connection loss. `Error::Client` errors that are
/// not retryable come back at once.
pub(crate) async fn retrying<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = warden_client::Result<T>>,
{
    let mut retries = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && retries < RETRIES_MAX => {
                tokio::time::sleep(retry_pause(retries)).await;
                retries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Owns a contender node until disarmed: dropping it (a cancelled
/// `acquire`, a guard dropped without `release`) deletes the node in the
/// background, so a waiter that went away never blocks the queue until
/// its session ends. Without a tokio runtime at drop time the node is
/// left to the session's end.
#[derive(Debug)]
pub struct NodeOwner {
    client: Client,
    path: String,
    armed: bool,
}

impl NodeOwner {
    pub fn new(client: Client, path: String) -> Self {
        NodeOwner {
            client,
            path,
            armed: true,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Deletes the node now and waits for the answer.
    pub async fn delete(mut self) -> Result<()> {
        self.armed = false;
        delete_node(&self.client, &self.path).await
    }
}

impl Drop for NodeOwner {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let path = std::mem::take(&mut self.path);
        runtime.spawn(async move {
            if let Err(e) = delete_node(&client, &path).await {
                tracing::debug!(%path, error = %e, "background delete of a contender failed");
            }
        });
    }
}

/// Maps an absent node that must exist to the recipes' error.
pub(crate) fn vanished(path: &str) -> Error {
    Error::NotHolder(format!(
        "{path}: our contender node is gone (session expired or someone deleted it)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        let n = "_c_0123abcd-WRITE-0000000042";
        assert_eq!(sequence_of(n), Some(42));
        assert_eq!(kind_of(n), Some("WRITE-"));
        assert_eq!(kind_of("_c_ab-lease-0000000001"), Some("lease-"));
        assert_eq!(kind_of("ready"), None);
        assert_eq!(kind_of("_c_ab-READ-12"), None);
        assert_eq!(sequence_of("x"), None);
    }

    #[test]
    fn contenders_sort_by_sequence_not_by_id() {
        let children = vec![
            "_c_ff-READ-0000000003".to_string(),
            "_c_00-WRITE-0000000007".to_string(),
            "_c_aa-READ-0000000001".to_string(),
            "ready".to_string(),
        ];
        assert_eq!(
            sorted_contenders(children.clone(), |_| true),
            vec![
                "_c_aa-READ-0000000001",
                "_c_ff-READ-0000000003",
                "_c_00-WRITE-0000000007"
            ]
        );
        assert_eq!(
            sorted_contenders(children, |k| k == "WRITE-"),
            vec!["_c_00-WRITE-0000000007"]
        );
    }

    #[test]
    fn parents_and_pauses() {
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/a/b/c"), "/a/b");
        assert_eq!(retry_pause(0), RETRY_PAUSE_MIN);
        assert_eq!(retry_pause(30), RETRY_PAUSE_MAX);
    }
}
