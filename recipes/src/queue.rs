//! The contender queue every recipe stands on: [`Mutex`](crate::Mutex),
//! [`LeaseLock`](crate::LeaseLock), [`LeaderElection`](crate::LeaderElection),
//! [`ReadWriteLock`](crate::ReadWriteLock), [`Semaphore`](crate::Semaphore)
//! and the parent and retry handling of
//! [`DoubleBarrier`](crate::DoubleBarrier).
//!
//! # Shape
//!
//! A queue is a directory node (`dir`, a container) whose children are
//! sequential *members*, named `<prefix><id>-<kind><seq>`:
//!
//! - `<prefix>` says which recipe made it (`_c_` for the mutex, the
//!   read-write lock and the semaphore, `lease-` for lease locks, `c-` for
//!   election candidates);
//! - `<id>` is the member's *protection id*: random for each attempt, or
//!   derived from the caller's identity where a retry by the same caller
//!   must find the same member (a lease's client id);
//! - `<kind>` says what it wants (`lock-`, `READ-`, `WRITE-`, `lease-`, or
//!   nothing), `<seq>` is the server's 10-digit sequence number.
//!
//! Order is by `<seq>` alone. Which members hold and whom a waiter watches
//! is each recipe's rule ([`Turn`]); the rest is here.
//!
//! # Protected create, and finding our own after a lost answer
//!
//! A create whose answer is lost (`ConnectionLoss`, a timeout, a leader
//! election in between) may have been applied, or may still be applied
//! later. Creating again blindly can leave two members of ours in the
//! queue; the one we do not know about blocks everyone behind it for as
//! long as it lives (the session, or a TTL). So:
//!
//! 1. after a retryable failure, [`Queue::join`] looks for a member with
//!    our id with a **linearizable** listing (a follower may not have
//!    applied the create yet), and an error of that look-up is retried,
//!    never read as "not there";
//! 2. a create that commits *after* the look-up (the request was still
//!    in flight somewhere) would be missed, so the look-up comes after a
//!    **settling write** ([`Queue::settle_writes`], `queue/entry.rs`): on
//!    Warden a session's write that arrives after a later write of the
//!    same session is refused, so once it is answered every earlier create
//!    of ours has landed or never will. With two lost answers the look-up
//!    may find both creates, or the first only (the second then never
//!    lands). Every pass of the wait loop also **sweeps**: of the members
//!    with our id, the lowest is ours (it keeps the earlier place in the
//!    queue) and the others are deleted.
//!
//! The same rule makes concurrent attempts with a shared id (two requests
//! of one lease client, through different servers) converge on one
//! member.
//!
//! # Cancellation
//!
//! An [`Entry`] is a member not yet handed to the caller. Dropping it (a
//! cancelled acquire, an error) deletes the member in the background. If
//! a create of it may have been in flight or applied unknown (not
//! answered yet, or adopted after a lost answer and not swept since: a
//! second create may have landed too), the clean-up first settles
//! the session's writes, so that no create of ours can still land, then
//! finds every member with our id linearizably and deletes them
//! (`queue/entry.rs` says why that closes the window). A member that
//! timed out is deleted before the call returns. A member that was there
//! before the call ([`Queue::rejoin`]: a lease's client id already in
//! line) is left as it was when the call fails or is dropped.
//!
//! # Parents
//!
//! `dir` is a container: the leader deletes it once emptied, so an idle
//! lock leaves nothing behind; every create answers `NoNode` by making it
//! again. Its missing ancestors are containers too, or persistent nodes,
//! as each recipe has always made them ([`Parents`]). Every node made here
//! gets the recipe's ACL (empty: world:anyone). A level that exists where
//! we may not create answers `NoAuth` and is fine.
//!
//! # One retry policy
//!
//! Every step that fails with a retryable error (`ConnectionLoss`,
//! `OperationTimeout`, ...) is retried up to [`RETRIES_MAX`] times: while
//! disconnected after waiting for the reconnect, otherwise after a pause
//! doubling from [`RETRY_PAUSE_MIN`] to [`RETRY_PAUSE_MAX`]. Then the error
//! goes to the caller.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;
use warden_client::{Acl, Client, CreateOptions, ErrorCode, OneshotWatch, SessionState, Stat};

use crate::error::Result;

mod entry;
pub(crate) use entry::{spawn_detached, vanished, Entry, NodeOwner};

/// Digits of a sequence suffix (ZooKeeper's `%010d`).
pub(crate) const SEQUENCE_DIGITS: usize = 10;

/// Attempts at one step that failed with a retryable error before the
/// error goes to the caller.
pub(crate) const RETRIES_MAX: u32 = 20;

/// First pause between retries while connected; doubled each time up to
/// [`RETRY_PAUSE_MAX`].
pub(crate) const RETRY_PAUSE_MIN: Duration = Duration::from_millis(20);

/// Longest pause between retries while connected.
pub(crate) const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Levels of missing ancestors [`ensure_parent`] creates before it gives
/// up (the bound keeps a parent that keeps vanishing from looping forever).
const PARENT_DEPTH_MAX: usize = 64;

/// The pause before retry number `attempt` (from 0) while connected.
pub(crate) fn retry_pause(attempt: u32) -> Duration {
    RETRY_PAUSE_MIN
        .saturating_mul(1 << attempt.min(16))
        .min(RETRY_PAUSE_MAX)
}

/// Waits before retry number `attempt`: for the reconnect if the client is
/// disconnected (at most a default session timeout; the session's end
/// makes the next step fail for good), else [`retry_pause`].
pub(crate) async fn pause(client: &Client, attempt: u32) {
    let mut state = client.session_events();
    if *state.borrow() == SessionState::Disconnected {
        let _ = tokio::time::timeout(
            warden_client::SESSION_TIMEOUT_DEFAULT,
            state.wait_for(|s| *s != SessionState::Disconnected),
        )
        .await;
    } else {
        tokio::time::sleep(retry_pause(attempt)).await;
    }
}

/// Runs `op` until it succeeds, fails for good, or has failed retryably
/// [`RETRIES_MAX`] times.
pub(crate) async fn retrying<T, F, Fut>(client: &Client, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = warden_client::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                pause(client, attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Deletes `path`, retrying; a node already gone, or whose session is over
/// (the server deletes it), counts as deleted.
pub(crate) async fn delete_node(client: &Client, path: &str) -> Result<()> {
    match retrying(client, || client.delete(path, None)).await {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.code(), ErrorCode::NoNode | ErrorCode::SessionExpired) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `parent/name`, for a parent that may be `/`.
pub(crate) fn join_path(parent: &str, name: &str) -> String {
    if parent.ends_with('/') {
        format!("{parent}{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The parent of an absolute path (`"/"` for a top-level node).
pub(crate) fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// What the missing ancestors of a queue's directory are made as (the
/// directory itself is always a container).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parents {
    /// Containers: reaped once emptied (mutex, read-write lock, semaphore,
    /// barrier).
    Containers,
    /// Persistent nodes: a root such as `/leases` stays (lease locks,
    /// elections).
    Persistent,
}

/// Makes sure `path` exists, creating it as a container holding `data`
/// (only if this call creates it) and its missing ancestors as `parents`
/// says, all with `acl`. An existing node is left alone.
pub(crate) async fn ensure_parent(
    client: &Client,
    path: &str,
    data: &[u8],
    acl: &[Acl],
    parents: Parents,
) -> Result<()> {
    // Walk up until a create succeeds or finds the node, then back down.
    let mut missing: Vec<&str> = vec![path];
    let mut attempt = 0;
    while let Some(&current) = missing.last() {
        let (payload, options): (&[u8], CreateOptions) = if current == path {
            (data, CreateOptions::container())
        } else if parents == Parents::Containers {
            (&[], CreateOptions::container())
        } else {
            (&[], CreateOptions::persistent())
        };
        match client
            .create(current, payload, options.acl(acl.to_vec()))
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
                if retrying(client, || client.exists(current)).await?.is_none() {
                    return Err(e.into());
                }
                missing.pop();
            }
            Err(e) if e.code() == ErrorCode::NoNode => {
                let parent = parent_of(current);
                if parent == "/" || missing.len() >= PARENT_DEPTH_MAX {
                    return Err(e.into());
                }
                missing.push(parent);
            }
            Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                pause(client, attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits for a one-shot `watch` to fire, or `deadline` (if any) to pass:
/// `false` if the deadline came first. A session that ended is an error;
/// anything retryable just means "look again" (`true`).
pub(crate) async fn watch_until(watch: OneshotWatch, deadline: Option<Instant>) -> Result<bool> {
    let fired = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, watch).await {
            Ok(fired) => fired,
            Err(_) => return Ok(false),
        },
        None => watch.await,
    };
    match fired {
        Ok(_) => Ok(true),
        Err(e) if e.is_retryable() => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// A member of a queue, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The node's name (the last path segment).
    pub name: String,
    /// Its protection id.
    pub id: String,
    /// What it asks for (`"READ-"`, `"lock-"`, `""`).
    pub kind: String,
    /// The server's sequence number.
    pub seq: u64,
}

/// Parses `<prefix><id>-<kind><seq>`; `None` for any other name.
pub(crate) fn parse_member(name: &str, prefix: &str) -> Option<Member> {
    let rest = name.strip_prefix(prefix)?;
    let (id, tail) = rest.split_once('-')?;
    let split = tail.len().checked_sub(SEQUENCE_DIGITS)?;
    let (kind, digits) = (tail.get(..split)?, tail.get(split..)?);
    if id.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Member {
        name: name.to_string(),
        id: id.to_string(),
        kind: kind.to_string(),
        seq: digits.parse().ok()?,
    })
}

/// The members among `children` with `prefix` and one of `kinds`, lowest
/// sequence first. Other children (someone else's, a barrier's `ready`)
/// are ignored.
pub(crate) fn sorted_members(children: &[String], prefix: &str, kinds: &[&str]) -> Vec<Member> {
    let mut members: Vec<Member> = children
        .iter()
        .filter_map(|c| parse_member(c, prefix))
        .filter(|m| kinds.contains(&m.kind.as_str()))
        .collect();
    members.sort_by_key(|m| m.seq);
    members
}

/// What a sweep does with the members of id `id` when ours is `own`:
/// `None` if `own` is our only one (or we have none); else the lowest to
/// adopt (if it is not `own`) and the others to delete.
fn sweep_plan<'a>(
    members: &'a [Member],
    id: &str,
    own: &str,
) -> Option<(Option<&'a Member>, Vec<&'a Member>)> {
    let ours: Vec<&Member> = members.iter().filter(|m| m.id == id).collect();
    match ours.as_slice() {
        [] => None,
        [only] if only.name == own => None,
        [lowest, others @ ..] => {
            let adopt = (lowest.name != own).then_some(*lowest);
            Some((adopt, others.to_vec()))
        }
    }
}

/// A fresh random protection id.
pub(crate) fn random_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a new member is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lifetime {
    /// Ephemeral: goes with the session.
    Ephemeral,
    /// Persistent with a TTL: goes when unmodified this long.
    Ttl(Duration),
}

/// One recipe's queue at `dir`.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    client: Client,
    dir: String,
    acl: Vec<Acl>,
    parents: Parents,
    prefix: &'static str,
    kinds: &'static [&'static str],
}

/// Whether a member holds, and if not what it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It holds.
    Granted,
    /// It waits until the member at this index is deleted (or, with
    /// `or_modified`, written: a semaphore's promotion mark).
    WaitOn { index: usize, or_modified: bool },
    /// It waits for any change of the member list.
    WaitChildren,
}

impl Turn {
    /// An exclusive FIFO queue's rule: the lowest member holds; each other
    /// waits for the one just before it.
    pub(crate) fn first_holds(_members: &[Member], index: usize) -> Turn {
        match index {
            0 => Turn::Granted,
            i => Turn::WaitOn {
                index: i - 1,
                or_modified: false,
            },
        }
    }
}

/// How long a join may wait for its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not at all (a try-lock).
    No,
    /// Until a deadline.
    Until(Instant),
    /// As long as the session lives.
    Forever,
}

impl Wait {
    fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline) => Some(deadline),
            Wait::No | Wait::Forever => None,
        }
    }

    fn expired(self) -> bool {
        match self {
            Wait::No => true,
            Wait::Until(deadline) => Instant::now() >= deadline,
            Wait::Forever => false,
        }
    }
}

/// How a wait for a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The member holds (see [`Entry::stat`]).
    Granted,
    /// The wait ran out; the member has been deleted.
    TimedOut,
    /// No member of ours is left (session expired, TTL passed, or someone
    /// deleted it).
    Vanished,
}

/// What [`Queue::wait_turn`] does besides waiting.
#[derive(Debug, Default)]
pub(crate) struct WaitOptions<'a> {
    /// Rewrite the member with this data this often while waiting (a TTL
    /// member would otherwise lapse), and with this TTL, given one (so a
    /// member's data and TTL always change together).
    pub keepalive: Option<(Duration, &'a [u8], Option<Duration>)>,
    /// Counts the watches that woke this waiter.
    pub woken: Option<&'a AtomicU64>,
}

impl Queue {
    pub(crate) fn new(
        client: Client,
        dir: impl Into<String>,
        acl: Vec<Acl>,
        parents: Parents,
        prefix: &'static str,
        kinds: &'static [&'static str],
    ) -> Queue {
        Queue {
            client,
            dir: dir.into(),
            acl,
            parents,
            prefix,
            kinds,
        }
    }

    /// The full path of member `name`.
    pub(crate) fn path_of(&self, name: &str) -> String {
        join_path(&self.dir, name)
    }

    /// Makes the directory (and ancestors) as needed; `data` goes into the
    /// directory only if this creates it.
    pub(crate) async fn ensure_dir(&self, data: &[u8]) -> Result<()> {
        ensure_parent(&self.client, &self.dir, data, &self.acl, self.parents).await
    }

    /// The members now, lowest first (none if the directory is missing).
    /// A plain read: it sees every write of this session, and what it
    /// misses of others' is caught by the watches.
    pub(crate) async fn list(&self) -> Result<Vec<Member>> {
        match retrying(&self.client, || self.client.get_children(&self.dir)).await {
            Ok((children, _)) => Ok(sorted_members(&children, self.prefix, self.kinds)),
            Err(e) if e.code() == ErrorCode::NoNode => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Our members (id `id`), lowest first, read linearizably: a create
    /// whose answer was lost is found even through a server that has not
    /// applied it yet. Errors are retried, then returned: never "none".
    async fn find_own(&self, id: &str) -> Result<Vec<Member>> {
        let client = &self.client;
        match retrying(client, || client.get_children_linearizable(&self.dir)).await {
            Ok((children, _)) => Ok(sorted_members(&children, self.prefix, self.kinds)
                .into_iter()
                .filter(|m| m.id == id)
                .collect()),
            Err(e) if e.code() == ErrorCode::NoNode => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// The lowest member with id `id` that exists, with its stat, if any.
    pub(crate) async fn find(&self, id: &str) -> Result<Option<(Member, Stat)>> {
        for _ in 0..RETRIES_MAX {
            let Some(first) = self.find_own(id).await?.into_iter().next() else {
                return Ok(None);
            };
            let path = self.path_of(&first.name);
            if let Some(stat) = retrying(&self.client, || self.client.exists(&path)).await? {
                return Ok(Some((first, stat)));
            }
            // Deleted between the two reads: look again.
        }
        Ok(None)
    }

    /// An entry for member `member` (found by [`find`](Self::find)), to
    /// wait with as if this call had made it. It was there before this
    /// call, so dropping the entry (an error, a cancellation) leaves it as
    /// it was; only a wait that runs out deletes it.
    pub(crate) fn rejoin(&self, member: Member, stat: Stat) -> Entry {
        let mut entry = Entry::new(self.clone(), member.id.clone());
        entry.node = Some((member.name, stat));
        entry.armed = false;
        entry.unsettled = false;
        entry
    }

    /// Creates a member `<prefix><id>-<kind><seq>` holding `data`,
    /// protected against lost answers (see the module docs); makes the
    /// directory (holding `dir_data` if this makes it) when missing.
    pub(crate) async fn join(
        &self,
        id: &str,
        kind: &str,
        data: &[u8],
        lifetime: Lifetime,
        dir_data: &[u8],
    ) -> Result<Entry> {
        let client = &self.client;
        let requested = self.path_of(&format!("{}{id}-{kind}", self.prefix));
        let options = match lifetime {
            Lifetime::Ephemeral => CreateOptions::ephemeral_sequential(),
            Lifetime::Ttl(ttl) => CreateOptions {
                sequential: true,
                ttl: Some(ttl),
                ..CreateOptions::default()
            },
        }
        .acl(self.acl.clone());
        // Armed (and unsettled) from here: if we are dropped while a
        // create is in flight, every member of ours is found once the
        // session's writes settled, and deleted in the background.
        let mut entry = Entry::new(self.clone(), id.to_string());
        let mut attempt = 0;
        loop {
            match client.create(&requested, data, options.clone()).await {
                Ok((path, stat)) => {
                    let name = path.rsplit('/').next().unwrap_or_default().to_string();
                    entry.node = Some((name, stat));
                    // An earlier create whose answer was lost was settled
                    // and not found: it never lands.
                    entry.unsettled = false;
                    return Ok(entry);
                }
                Err(e) if e.code() == ErrorCode::NoNode && attempt < RETRIES_MAX => {
                    attempt += 1;
                    self.ensure_dir(dir_data).await?;
                }
                Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                    // The create may have been applied: create again only
                    // once we know it was not. Settled first, so that no
                    // create of ours can land after the look-up: else,
                    // with two lost answers, the look-up could adopt the
                    // first and the second land later, unknown.
                    pause(client, attempt).await;
                    attempt += 1;
                    self.settle_writes().await?;
                    if let Some((member, stat)) = self.find(id).await? {
                        debug!(node = %self.path_of(&member.name), "adopted a create whose answer was lost");
                        // Unsettled until the first sweep: a second
                        // create of ours may have landed too.
                        entry.node = Some((member.name, stat));
                        return Ok(entry);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits until `turn` says `entry` holds, the wait runs out (the
    /// member is then deleted) or our member is gone. Each pass lists the
    /// queue, sweeps our orphans (see the module docs) and asks `turn`
    /// with the members and our index among them.
    pub(crate) async fn wait_turn(
        &self,
        entry: &mut Entry,
        wait: Wait,
        options: WaitOptions<'_>,
        turn: impl Fn(&[Member], usize) -> Turn,
    ) -> Result<Outcome> {
        let client = &self.client;
        let mut attempt = 0;
        loop {
            let members = self.list().await?;
            if self.sweep(entry, &members).await? {
                continue;
            }
            // Swept after our create answered: a lost create of ours
            // landed before it or never will (see the module docs).
            entry.unsettled = false;
            let Some(index) = members.iter().position(|m| m.name == entry.name()) else {
                return Ok(Outcome::Vanished);
            };
            let turn_now = turn(&members, index);
            if turn_now == Turn::Granted {
                return Ok(Outcome::Granted);
            }
            if wait.expired() {
                entry.delete().await?;
                return Ok(Outcome::TimedOut);
            }
            let watch = match turn_now {
                Turn::Granted => unreachable!("handled above"),
                Turn::WaitOn { index, or_modified } => {
                    let path = self.path_of(&members[index].name);
                    match client.exists_watch(&path).await {
                        Ok((Some(stat), watch)) if !or_modified || stat.version == 0 => {
                            attempt = 0;
                            watch
                        }
                        // Gone (or marked) before the watch was set.
                        Ok(_) => continue,
                        Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                            pause(client, attempt).await;
                            attempt += 1;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Turn::WaitChildren => match client.get_children_watch(&self.dir).await {
                    Ok((children, _, watch)) => {
                        let members = sorted_members(&children, self.prefix, self.kinds);
                        match members.iter().position(|m| m.name == entry.name()) {
                            Some(i) if turn(&members, i) == Turn::WaitChildren => {
                                attempt = 0;
                                watch
                            }
                            _ => continue, // moved meanwhile: look again
                        }
                    }
                    Err(e) if e.code() == ErrorCode::NoNode => return Ok(Outcome::Vanished),
                    Err(e) if e.is_retryable() && attempt < RETRIES_MAX => {
                        pause(client, attempt).await;
                        attempt += 1;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            match self.wait_watch(entry, watch, wait, &options).await? {
                Woken::TimedOut => {
                    entry.delete().await?;
                    return Ok(Outcome::TimedOut);
                }
                Woken::Fired => {
                    if let Some(woken) = options.woken {
                        woken.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Woken::Recheck => {}
            }
        }
    }

    /// Of our members in `members`, keeps the lowest (adopting it if it is
    /// not `entry`'s) and deletes the others. True if anything changed.
    async fn sweep(&self, entry: &mut Entry, members: &[Member]) -> Result<bool> {
        let Some((adopt, orphans)) = sweep_plan(members, &entry.id, entry.name()) else {
            return Ok(false);
        };
        if let Some(lowest) = adopt {
            let path = self.path_of(&lowest.name);
            if let Some(stat) = retrying(&self.client, || self.client.exists(&path)).await? {
                debug!(node = %path, "adopting an earlier member of ours");
                entry.node = Some((lowest.name.clone(), stat));
            }
        }
        for orphan in orphans {
            let path = self.path_of(&orphan.name);
            debug!(node = %path, "deleting an orphaned member of ours");
            delete_node(&self.client, &path).await?;
        }
        Ok(true)
    }

    /// Waits for `watch`, the deadline, and meanwhile keeps `entry` alive.
    async fn wait_watch(
        &self,
        entry: &Entry,
        watch: OneshotWatch,
        wait: Wait,
        options: &WaitOptions<'_>,
    ) -> Result<Woken> {
        let deadline = wait.deadline();
        let never = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        tokio::pin!(watch);
        let mut next_touch = options
            .keepalive
            .map_or(never, |(every, _, _)| Instant::now() + every);
        loop {
            tokio::select! {
                fired = &mut watch => return match fired {
                    Ok(_) => Ok(Woken::Fired),
                    // The connection blipped: look again.
                    Err(e) if e.is_retryable() => Ok(Woken::Recheck),
                    Err(e) => Err(e.into()),
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or(never)) => return Ok(Woken::TimedOut),
                _ = tokio::time::sleep_until(next_touch) => {
                    let Some((every, data, ttl)) = options.keepalive else {
                        continue;
                    };
                    next_touch = Instant::now() + every;
                    let path = entry.path();
                    let touched = match ttl {
                        Some(ttl) => self.client.set_data_with_ttl(&path, data, None, ttl).await,
                        None => self.client.set_data(&path, data, None).await,
                    };
                    match touched {
                        Ok(_) => {}
                        // Lapsed: found gone at the next look.
                        Err(e) if e.code() == ErrorCode::NoNode => return Ok(Woken::Recheck),
                        Err(e) if e.is_retryable() => {
                            debug!(node = %entry.path(), error = %e, "touching a waiting member failed");
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
}

/// How a wait on a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// The watch fired: look again.
    Fired,
    /// Something else happened (a connection blip, our member lapsed):
    /// look again.
    Recheck,
    /// The deadline passed first.
    TimedOut,
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
