//! A double barrier: a group of `count` members start a phase together
//! ([`enter`](DoubleBarrier::enter) returns once all have entered) and end
//! it together ([`leave`](DoubleBarrier::leave) returns once all have
//! left), after Curator's `DistributedDoubleBarrier`.
//!
//! ```text
//! /barriers/job       container
//!   alice             ephemeral: alice has entered
//!   bob               ephemeral
//!   carol             ephemeral
//!   ready             persistent: made by whoever saw `count` members
//! ```
//!
//! # Enter
//!
//! A member first sets an exists-watch on `ready`, then creates its own
//! ephemeral node, named by its member id, and counts the members. If it
//! sees `count` of them it creates `ready`; otherwise it waits for its
//! watch. Setting the watch *before* creating its node is what makes the
//! wake-up certain: `ready` can only appear after every member's node
//! exists, so after every member's watch is set.
//!
//! # Leave
//!
//! Members leave in an order that wakes few of them at a time: the member
//! whose node sorts first (the "lowest") waits, watching the highest, until
//! it is alone, then deletes its node; every other member deletes its own
//! node and waits on the lowest. When the lowest goes, everyone has gone.
//! The member that finds no one left deletes `ready`, so the container is
//! empty and the leader reaps it, and the barrier can be used again.
//!
//! A member whose session ends loses its node: during `enter` it no longer
//! counts; during `leave` it counts as having left.
//!
//! One round at a time: a member that enters while `ready` is still there
//! from a round whose members have not all left passes at once, as in
//! Curator. Wait for `leave` to return everywhere before the next round.

use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Acl, Client, CreateOptions, ErrorCode, OneshotWatch};

use crate::error::{Error, Result};
use crate::queue::{
    delete_node, ensure_parent, pause, retrying, watch_until, Parents, RETRIES_MAX,
};

/// Name of the node that says "all members have entered".
pub const READY_NODE: &str = "ready";

/// A double barrier at `path` for `count` members; this process is the
/// member `member_id`.
#[derive(Debug, Clone)]
pub struct DoubleBarrier {
    client: Client,
    path: String,
    member_id: String,
    count: u32,
    acl: Vec<Acl>,
}

impl DoubleBarrier {
    /// The barrier at `path` (created on first use, as a container) for
    /// `count` members, joined as `member_id`. The id must be unique among
    /// the members, non-empty, without `/`, and not `ready`; a bad id or a
    /// zero count is refused at `enter`.
    pub fn new(
        client: Client,
        path: impl Into<String>,
        member_id: impl Into<String>,
        count: u32,
    ) -> Self {
        DoubleBarrier {
            client,
            path: path.into(),
            member_id: member_id.into(),
            count,
            acl: Vec::new(),
        }
    }

    /// Creates the barrier's nodes (its container, missing parents, the
    /// member nodes and `ready`) with `acl` instead of world:anyone, like
    /// Curator's ACL provider; an `auth` entry stands for the session's
    /// identities. A create the ACLs refuse gets `NoAuth` naming the node.
    /// Members need READ on the barrier node (to count), CREATE and DELETE
    /// (to enter and leave).
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The barrier's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    fn member_path(&self) -> String {
        format!("{}/{}", self.path, self.member_id)
    }

    fn ready_path(&self) -> String {
        format!("{}/{READY_NODE}", self.path)
    }

    /// Joins the barrier and waits until `count` members have joined.
    pub async fn enter(&self) -> Result<()> {
        self.enter_until(None).await.map(drop)
    }

    /// Like [`enter`](Self::enter), giving up after `timeout`: `false` if
    /// the group did not fill up in time. A member that gives up removes
    /// its node so that it is no longer counted — unless `ready` appeared
    /// meanwhile, which makes it `true`. (If `ready` appears in the instant
    /// between that check and the removal, the others pass without us.)
    pub async fn enter_timeout(&self, timeout: Duration) -> Result<bool> {
        self.enter_until(Some(Instant::now() + timeout)).await
    }

    /// Leaves the barrier and waits until every member has left.
    pub async fn leave(&self) -> Result<()> {
        self.leave_until(None).await.map(drop)
    }

    /// Like [`leave`](Self::leave), giving up after `timeout`: `false` if
    /// others were still there. This member's node may already be gone
    /// then (it counts as having left); calling `leave` again finishes.
    pub async fn leave_timeout(&self, timeout: Duration) -> Result<bool> {
        self.leave_until(Some(Instant::now() + timeout)).await
    }

    fn check_arguments(&self) -> Result<()> {
        let id = &self.member_id;
        if self.count == 0 {
            return Err(Error::BadArguments(format!(
                "{}: a barrier needs at least one member",
                self.path
            )));
        }
        if id.is_empty() || id.contains('/') || id == READY_NODE {
            return Err(Error::BadArguments(format!(
                "{}: member id {id:?} must be non-empty, without '/', and not {READY_NODE:?}",
                self.path
            )));
        }
        Ok(())
    }

    async fn enter_until(&self, deadline: Option<Instant>) -> Result<bool> {
        self.check_arguments()?;
        let client = &self.client;
        let ready_path = self.ready_path();
        ensure_parent(client, &self.path, &[], &self.acl, Parents::Containers).await?;
        // The watch comes first: see the module comment.
        let (ready, mut ready_watch) =
            retrying(client, || client.exists_watch(&ready_path)).await?;
        self.create_member_node().await?;
        if ready.is_some() {
            return Ok(true);
        }
        loop {
            let members = self.members().await?;
            if members.len() >= self.count as usize {
                match retrying(client, || {
                    client.create(
                        &ready_path,
                        &[],
                        CreateOptions::persistent().acl(self.acl.clone()),
                    )
                })
                .await
                {
                    Ok(_) => return Ok(true),
                    Err(e) if e.code() == ErrorCode::NodeExists => return Ok(true),
                    Err(e) => return Err(e),
                }
            }
            if !watch_until(ready_watch, deadline).await? {
                return self.give_up_entering().await;
            }
            let (ready, watch) = retrying(client, || client.exists_watch(&ready_path)).await?;
            if ready.is_some() {
                return Ok(true);
            }
            ready_watch = watch;
        }
    }

    /// After an enter timed out: `true` if `ready` made it after all,
    /// else removes our node and says `false`.
    async fn give_up_entering(&self) -> Result<bool> {
        let ready_path = self.ready_path();
        if retrying(&self.client, || self.client.exists(&ready_path))
            .await?
            .is_some()
        {
            return Ok(true);
        }
        delete_node(&self.client, &self.member_path()).await?;
        Ok(false)
    }

    /// Creates our ephemeral member node. Retrying after a connection loss
    /// may find it made by the first try; that is ours if our session owns
    /// it. Another session's node under our id is an error.
    async fn create_member_node(&self) -> Result<()> {
        let client = &self.client;
        let path = self.member_path();
        let mut retries = 0;
        loop {
            match client
                .create(&path, &[], CreateOptions::ephemeral().acl(self.acl.clone()))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == ErrorCode::NodeExists => {
                    return match retrying(client, || client.exists(&path)).await? {
                        Some(stat) if stat.ephemeral_owner == client.session_id() => Ok(()),
                        // Its owner just left: try again.
                        None if retries < RETRIES_MAX => {
                            retries += 1;
                            continue;
                        }
                        _ => Err(Error::BadArguments(format!(
                            "{path}: member id {:?} is taken by another session",
                            self.member_id
                        ))),
                    };
                }
                Err(e) if e.code() == ErrorCode::NoNode && retries < RETRIES_MAX => {
                    retries += 1;
                    ensure_parent(client, &self.path, &[], &self.acl, Parents::Containers).await?;
                }
                Err(e) if e.is_retryable() && retries < RETRIES_MAX => {
                    pause(client, retries).await;
                    retries += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The members present now (every child but `ready`), sorted by name.
    /// A missing barrier node has none.
    async fn members(&self) -> Result<Vec<String>> {
        match retrying(&self.client, || self.client.get_children(&self.path)).await {
            Ok((mut children, _)) => {
                children.retain(|c| c != READY_NODE);
                children.sort();
                Ok(children)
            }
            Err(e) if e.code() == ErrorCode::NoNode => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn leave_until(&self, deadline: Option<Instant>) -> Result<bool> {
        self.check_arguments()?;
        let client = &self.client;
        let own_path = self.member_path();
        // Whether our node is still there as far as we know; it is not once
        // we deleted it, and finding it gone before that is an error.
        let mut own_present = true;
        loop {
            let members = self.members().await?;
            let own_index = members.iter().position(|m| *m == self.member_id);
            if members.is_empty() {
                // Everyone has left: tidy up so the container can go.
                delete_node(client, &self.ready_path()).await?;
                return Ok(true);
            }
            if own_present && own_index.is_none() {
                return Err(Error::NotHolder(format!(
                    "{own_path}: our member node is gone (never entered, or the session expired)"
                )));
            }
            let watch_on = match own_index {
                Some(0) if members.len() == 1 => {
                    // Last one here.
                    delete_node(client, &own_path).await?;
                    own_present = false;
                    continue;
                }
                // Lowest: wait for the others, watching the highest.
                Some(0) => &members[members.len() - 1],
                _ => {
                    if own_present {
                        delete_node(client, &own_path).await?;
                        own_present = false;
                    }
                    &members[0]
                }
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            let Some(watch) = self.watch_member(watch_on).await? else {
                continue; // gone already: look again
            };
            if !watch_until(watch, deadline).await? {
                return Ok(false);
            }
        }
    }

    /// An exists-watch on member `name`; `None` if it is gone already.
    async fn watch_member(&self, name: &str) -> Result<Option<OneshotWatch>> {
        let path = format!("{}/{name}", self.path);
        let (stat, watch) = retrying(&self.client, || self.client.exists_watch(&path)).await?;
        Ok(stat.map(|_| watch))
    }
}
