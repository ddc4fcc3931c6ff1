//! Leader election: one leader at a time among the candidates of an
//! election path, with a fencing token per term of office.
//!
//! # Design
//!
//! Each candidate creates an *ephemeral*-sequential node
//! `<path>/c-<nonce>-<seq>` holding its id, under the container `<path>`
//! (the queue machinery, protected against lost create answers, is
//! `queue.rs`, shared with every other recipe).
//! The candidate with the lowest sequence number leads; every other one
//! watches only its predecessor (no herd when the leader goes) and looks
//! again when that node goes. Leadership ends when the leader resigns
//! (deletes its node) or its session ends (the server deletes the node);
//! the next candidate in line then leads.
//!
//! The leader's **token** is the czxid of its node: strictly larger than
//! every earlier leader's, so a resource that remembers the largest token
//! it has seen can refuse a deposed leader that has not noticed yet.
//!
//! # Noticing a loss
//!
//! [`Leadership::lost`] resolves only when the leadership is really over:
//! the session ended (the server expired or closed it, or the client gave
//! up reconnecting within the session timeout and calls it expired) or
//! the leader's node was deleted. A disconnect that the session survives
//! is not a loss: the node, and the leadership, outlive it, and `lost`
//! keeps waiting across the reconnect. This is Apache Curator's `LOST`,
//! not its `SUSPENDED`: Curator's default error policy also makes
//! `LeaderLatch` and `LeaderSelector` give up leadership on `SUSPENDED`
//! (the first sign of a lost connection), and its session-only policy
//! waits for `LOST` as `lost` does. A leader that wants the conservative
//! policy watches [`Client::session_events`] for
//! [`SessionState::Disconnected`] itself and pauses its work. While the
//! client is merely disconnected it cannot know whether the server will
//! expire the session at about the time it gives up on it, so a leader
//! that must never overlap with its successor fences its writes with the
//! token rather than rely on noticing in time.
//!
//! [`Leadership::resign`] returns once the node is known gone: it retries
//! the delete across lost connections (a retry that finds no node means
//! an earlier attempt deleted it) until it is deleted or the session is
//! over, and a busy cluster's answers as often as the recipes retry
//! anything ([`RETRIES_MAX`]).
//!
//! [`LeaderElection::observe`] follows the election from outside: a
//! persistent watch on the election path, re-reading the head on each
//! child change and reporting it only when its token changed, so each
//! leader change it sees is reported once.

use std::future::Future;

use futures::{Stream, StreamExt};
use warden_client::{Client, ErrorCode, EventType, PersistentWatch, SessionState};

use tracing::debug;

use crate::error::{Error, Result};
use crate::queue::{
    pause, random_id, Lifetime, Outcome, Parents, Queue, Turn, Wait, WaitOptions, RETRIES_MAX,
    RETRY_PAUSE_MAX,
};

/// Prefix of candidate nodes (the nonce and the sequence follow).
const CANDIDATE_PREFIX: &str = "c-";

/// Who leads an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The id the leader campaigned with.
    pub id: String,
    /// The czxid of its candidate node: its fencing token.
    pub token: u64,
}

/// One candidate (or observer) of the election at `path`.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    client: Client,
    path: String,
    id: String,
    acl: Vec<warden_client::Acl>,
}

impl LeaderElection {
    /// A candidate named `id` in the election at `path` (created, with its
    /// ancestors, as needed). Ids need not be unique; tokens are.
    pub fn new(client: Client, path: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            client,
            path: path.into(),
            id: id.into(),
            acl: Vec::new(),
        }
    }

    /// Creates the election's nodes with `acl` instead of world:anyone
    /// (`auth` entries stand for the session's identities).
    pub fn with_acl(mut self, acl: Vec<warden_client::Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// Joins the election and waits until this candidate leads. Dropping
    /// the future withdraws the candidacy (in the background; at the latest
    /// when the session ends).
    pub async fn campaign(&self) -> Result<Leadership> {
        let queue = election_queue(&self.client, &self.path, self.acl.clone());
        let mut entry = queue
            .join(
                &random_id(),
                "",
                self.id.as_bytes(),
                Lifetime::Ephemeral,
                b"",
            )
            .await?;
        let outcome = queue
            .wait_turn(
                &mut entry,
                Wait::Forever,
                WaitOptions::default(),
                Turn::first_holds,
            )
            .await?;
        match outcome {
            Outcome::Granted => {
                let (node, stat) = entry.take();
                Ok(Leadership {
                    token: stat.czxid,
                    id: self.id.clone(),
                    node,
                    client: self.client.clone(),
                })
            }
            Outcome::Vanished => Err(Error::NotHolder(format!(
                "{}: the candidate node was deleted",
                entry.path()
            ))),
            Outcome::TimedOut => Err(Error::Corrupt(
                "an unbounded campaign ended without leading".into(),
            )),
        }
    }

    /// The current leader, if any.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        current_leader(&self.client, &self.path).await
    }

    /// Every leader change, each reported once: first the current leader
    /// (or `None`), then each new one (or `None` when nobody leads). Ends
    /// after yielding an error (e.g. the session ended).
    pub fn observe(&self) -> impl Stream<Item = Result<Option<LeaderInfo>>> + Send + 'static {
        struct State {
            client: Client,
            path: String,
            watch: Option<PersistentWatch>,
            /// The token last reported (`Some(None)`: "nobody" was).
            reported: Option<Option<u64>>,
            done: bool,
        }
        let state = State {
            client: self.client.clone(),
            path: self.path.clone(),
            watch: None,
            reported: None,
            done: false,
        };
        futures::stream::unfold(state, |mut s| async move {
            if s.done {
                return None;
            }
            loop {
                // Set the watch before reading, so no change falls between.
                let watch = match s.watch.as_mut() {
                    Some(watch) => watch,
                    None => match s.client.watch(&s.path, false).await {
                        Ok(watch) => s.watch.insert(watch),
                        Err(e) => {
                            s.done = true;
                            return Some((Err(e.into()), s));
                        }
                    },
                };
                if s.reported.is_some() {
                    match watch.next().await {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            s.done = true;
                            return Some((Err(e.into()), s));
                        }
                        None => {
                            s.done = true;
                            return Some((Err(Error::Client(warden_client::Error::Closed)), s));
                        }
                    }
                }
                match current_leader(&s.client, &s.path).await {
                    Ok(leader) => {
                        let token = leader.as_ref().map(|l| l.token);
                        if s.reported != Some(token) {
                            s.reported = Some(token);
                            return Some((Ok(leader), s));
                        }
                    }
                    Err(e) => {
                        s.done = true;
                        return Some((Err(e), s));
                    }
                }
            }
        })
    }
}

/// Reads the head of the election at `path`.
async fn current_leader(client: &Client, path: &str) -> Result<Option<LeaderInfo>> {
    let queue = election_queue(client, path, Vec::new());
    loop {
        let Some(head) = queue.list().await?.into_iter().next() else {
            return Ok(None);
        };
        match client.get_data(&queue.path_of(&head.name)).await {
            Ok((data, stat)) => {
                return Ok(Some(LeaderInfo {
                    id: String::from_utf8_lossy(&data).into_owned(),
                    token: stat.czxid,
                }))
            }
            // It went between the two reads: look again.
            Err(e) if e.code() == ErrorCode::NoNode => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The candidates' queue at `path`: a container under persistent
/// ancestors, candidates `c-<nonce>-<seq>`.
fn election_queue(client: &Client, path: &str, acl: Vec<warden_client::Acl>) -> Queue {
    Queue::new(
        client.clone(),
        path,
        acl,
        Parents::Persistent,
        CANDIDATE_PREFIX,
        &[""],
    )
}

/// Leadership won by [`LeaderElection::campaign`].
#[derive(Debug)]
pub struct Leadership {
    /// The fencing token of this term of office (the node's czxid).
    pub token: u64,
    /// The id campaigned with.
    pub id: String,
    /// The leader's candidate node.
    node: String,
    client: Client,
}

impl Leadership {
    /// The candidate node that holds the leadership.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Steps down: deletes the node, so the next candidate leads. Returns
    /// once the node is known to be gone: deleted by this call (or by an
    /// earlier attempt of it whose answer was lost), or by the server
    /// because the session ended. A lost connection is retried (after the
    /// reconnect) for as long as the session lives; a cluster that keeps
    /// answering "busy" (timeouts, `NotReady`) as often as the recipes
    /// retry anything. An error therefore means the delete was refused
    /// (`NoAuth`, say) or the cluster stayed busy; the node goes at the
    /// latest with the session.
    pub async fn resign(self) -> Result<()> {
        let mut attempt = 0;
        let mut busy = 0;
        loop {
            match self.client.delete(&self.node, None).await {
                // Our node's name is ours alone: `NoNode` on a retry means
                // the lost attempt (or the server) deleted it.
                Ok(()) => return Ok(()),
                Err(e) if e.code() == ErrorCode::NoNode => return Ok(()),
                // The session is over: the server deletes its ephemerals.
                Err(e) if e.code() == ErrorCode::SessionExpired => return Ok(()),
                Err(e)
                    if e.is_retryable()
                        && (e.code() == ErrorCode::ConnectionLoss || busy < RETRIES_MAX) =>
                {
                    if e.code() != ErrorCode::ConnectionLoss {
                        busy += 1;
                    }
                    // Waits for the reconnect while disconnected; the
                    // client ends the session if none comes in time.
                    pause(&self.client, attempt).await;
                    attempt = attempt.saturating_add(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Resolves, with the reason, once this leadership is over: the
    /// session ended (`SessionExpired` / `Closed`: the server expired or
    /// closed it, or the client gave up reconnecting within the session
    /// timeout) or the node was deleted (`NotHolder`). A disconnect the
    /// session survives does not resolve it, nor does an error of a read
    /// it makes meanwhile (it looks again): see the module docs.
    /// Cancel-safe; call it as often as wanted.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let client = self.client.clone();
        let node = self.node.clone();
        async move {
            let mut states = client.session_events();
            let deleted = || Error::NotHolder(format!("{node}: the leader's node was deleted"));
            loop {
                if let Some(e) = session_over(*states.borrow_and_update()) {
                    return e;
                }
                let watch = match client.exists_watch(&node).await {
                    Ok((None, _)) => return deleted(),
                    Ok((Some(_), watch)) => watch,
                    Err(e) => {
                        debug!(%node, error = %e, "looking at the leader's node failed; looking again");
                        // Disconnected, a timeout, a busy server: look
                        // again once the session changes state, or after
                        // a pause.
                        tokio::select! {
                            changed = states.changed() => if changed.is_err() {
                                return Error::Client(warden_client::Error::Closed);
                            },
                            _ = tokio::time::sleep(RETRY_PAUSE_MAX) => {}
                        }
                        continue;
                    }
                };
                tokio::pin!(watch);
                loop {
                    tokio::select! {
                        event = &mut watch => match event {
                            Ok(event) if event.event_type == EventType::NodeDeleted => {
                                return deleted()
                            }
                            // A data change, or the watch ended with the
                            // session: the outer loop sorts it out.
                            _ => break,
                        },
                        changed = states.changed() => {
                            if changed.is_err() {
                                return Error::Client(warden_client::Error::Closed);
                            }
                            if let Some(e) = session_over(*states.borrow_and_update()) {
                                return e;
                            }
                            // A disconnect or a reconnect: the watch
                            // survives it (the client sets it again).
                        }
                    }
                }
            }
        }
    }
}

fn session_over(state: SessionState) -> Option<Error> {
    match state {
        SessionState::Expired => Some(Error::Client(warden_client::Error::SessionExpired)),
        SessionState::Closed => Some(Error::Client(warden_client::Error::Closed)),
        SessionState::Connected | SessionState::Disconnected => None,
    }
}
