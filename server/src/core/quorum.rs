//! The one rule every membership change obeys, on every door that can make
//! one (native AddMember/RemoveMember, ZooKeeper's reconfig): a change
//! that alters the voter set is refused when fewer of the new voters have
//! been heard from lately than a quorum of them, for the group could then
//! never commit again (etcd's `--strict-reconfig-check`, ZooKeeper's
//! NewConfigNoQuorum). Changes of learners alone leave the quorum as it is
//! and pass. An explicit `force` (disaster recovery) skips the rule.
//!
//! "Heard from" is this server's own record ([`Contacts`]): any frame a
//! peer sent it within [`live_window`], the server itself always. A server
//! not yet a member counts when it has called in: a server started with
//! `--join` dials the members at once, so `cluster add` of it right after
//! passes, while an address nobody answers at is refused. The native door
//! gives a joining server a moment to call in ([`JOIN_WAIT`]) before it
//! refuses: the usual order is to start it and add it at once.
//!
//! etcd lets a second member join a one-member cluster unchecked; the rule
//! here has no such exception (it is exactly the change that leaves a
//! single server waiting for ever for a peer that does not exist): the
//! second server passes once it is heard from.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use raft::eraftpb::ConfChangeType;
use tracing::{info, warn};
use warden_protocol::pb::ErrorCode;

use super::clients::Slot;
use super::{frames, Core, STATUS_TICKS};
use crate::limits;
use crate::ops::Failure;
use crate::watch::ConnId;

/// How long a native AddMember of a voter that is not a member yet, and
/// would pass the rule once it is heard from, waits for it to call in
/// before it is refused. A server started with `--join` calls in on its
/// first tick; an address where nothing runs never does. Short: the
/// request holds its connection's answers (pings too) while it waits.
pub const JOIN_WAIT: Duration = Duration::from_secs(3);

/// How recently a voter must have been heard from to count as live: the
/// longest election timeout (raft-rs draws it from `election_ticks` to
/// twice that), and never less than two rounds of status frames (the only
/// frames one follower gets from another). One second with the defaults.
pub fn live_window(tick: Duration, election_ticks: usize) -> Duration {
    let ticks = (2 * election_ticks as u64).max(2 * STATUS_TICKS);
    tick * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// When this server last heard from each peer: members, and servers that
/// are not members yet (a server started with `--join` dials the group
/// before it is added). Bounded: a peer port open to anyone could
/// otherwise fill it with made-up ids.
#[derive(Debug, Default)]
pub struct Contacts {
    last: HashMap<u64, Instant>,
}

impl Contacts {
    /// A frame from `id` arrived `now`.
    pub fn heard(&mut self, id: u64, now: Instant) {
        if !self.last.contains_key(&id) && self.last.len() >= limits::PEER_CONTACTS_MAX {
            // The oldest goes: a peer heard from lately is one that counts.
            if let Some(oldest) = self
                .last
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, _)| *id)
            {
                self.last.remove(&oldest);
            }
        }
        self.last.insert(id, now);
    }

    /// The peers heard from within `window` before `now`.
    pub fn recent(&self, window: Duration, now: Instant) -> BTreeSet<u64> {
        self.last
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < window)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// One change of a membership, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub kind: ConfChangeType,
    pub id: u64,
}

/// A change the rule refuses: what it would leave, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// "adding 5", "removing 2", "promoting 4", "making 3 a learner".
    pub what: String,
    pub voters: usize,
    pub live: usize,
    pub needed: usize,
    /// The voters after the change not heard from lately.
    pub silent: Vec<u64>,
    pub window: Duration,
}

impl Refusal {
    /// The refusal every door answers with.
    pub fn message(&self) -> String {
        let silent = self
            .silent
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "refused: after {what} the cluster would have {voters} voters, {live} of them \
             heard from in the last {window:?}, {needed} needed (not heard from: {silent}); \
             start the servers that are down (a new one with --join before it is added), \
             or add a new server as a learner first and make it a voter once it has caught \
             up; --force skips this check, for disaster recovery only",
            what = self.what,
            voters = self.voters,
            live = self.live,
            window = self.window,
            needed = self.needed,
        )
    }

    pub fn failure(&self) -> Failure {
        Failure::new(ErrorCode::BadArguments, self.message())
    }
}

/// The rule: `voters` is the voter set now, `steps` the changes in the
/// order they are made, `heard` the servers heard from within `window`
/// (this server among them). Each step that alters the voter set must
/// leave a quorum of voters heard from.
pub fn check(
    voters: &BTreeSet<u64>,
    steps: &[Step],
    heard: &BTreeSet<u64>,
    window: Duration,
) -> Result<(), Refusal> {
    let mut voters = voters.clone();
    for s in steps {
        let was_voter = voters.contains(&s.id);
        let what = match s.kind {
            ConfChangeType::AddNode if was_voter => continue,
            ConfChangeType::AddNode => {
                voters.insert(s.id);
                format!("adding {} as a voter", s.id)
            }
            ConfChangeType::AddLearnerNode if was_voter => {
                voters.remove(&s.id);
                format!("making {} a learner", s.id)
            }
            ConfChangeType::RemoveNode if was_voter => {
                voters.remove(&s.id);
                format!("removing {}", s.id)
            }
            // A learner comes or goes: the quorum is as it was.
            ConfChangeType::AddLearnerNode | ConfChangeType::RemoveNode => continue,
        };
        let live = voters.iter().filter(|id| heard.contains(id)).count();
        let needed = voters.len() / 2 + 1;
        if live < needed {
            return Err(Refusal {
                what,
                voters: voters.len(),
                live,
                needed,
                silent: voters
                    .iter()
                    .filter(|id| !heard.contains(id))
                    .copied()
                    .collect(),
                window,
            });
        }
    }
    Ok(())
}

/// A native AddMember waiting for the server it adds to call in.
#[derive(Debug)]
pub(super) struct JoinWait {
    conn: ConnId,
    request_id: u64,
    id: u64,
    addr: String,
    since: Instant,
}

/// What the rule says of a native membership change.
enum Verdict {
    Go,
    /// Passes once the server added, not a member yet, is heard from.
    WaitFor(Refusal),
    Refuse(Refusal),
}

impl Core {
    /// The servers heard from lately, this one included.
    pub(super) fn heard_recently(&self) -> BTreeSet<u64> {
        let mut heard = self
            .m
            .contacts
            .recent(self.live_window(), self.m.clock.now());
        heard.insert(self.m.node_id);
        heard
    }

    pub(super) fn live_window(&self) -> Duration {
        live_window(self.m.cfg.tick, self.m.cfg.election_ticks)
    }

    fn verdict(&self, kind: ConfChangeType, id: u64) -> Verdict {
        let voters: BTreeSet<u64> = self.raft.conf_state().voters.into_iter().collect();
        let mut heard = self.heard_recently();
        let step = [Step { kind, id }];
        let window = self.live_window();
        match check(&voters, &step, &heard, window) {
            Ok(()) => Verdict::Go,
            Err(refusal) => {
                let member = self.raft.conf_state().learners.contains(&id) || voters.contains(&id);
                heard.insert(id);
                let would_pass = check(&voters, &step, &heard, window).is_ok();
                if kind == ConfChangeType::AddNode && !member && would_pass {
                    Verdict::WaitFor(refusal)
                } else {
                    Verdict::Refuse(refusal)
                }
            }
        }
    }

    /// A native membership change (the caller may make it): refused by the
    /// rule, held for the server it adds to call in, or proposed.
    pub(super) fn member_change_slot(
        &mut self,
        conn: ConnId,
        xid: u64,
        kind: ConfChangeType,
        id: u64,
        addr: String,
        force: bool,
    ) -> Slot {
        let zxid = self.m.tree.applied_index();
        let request_id = self.m.proposals.next_id();
        if force {
            warn!(
                node_id = id,
                change = ?kind,
                "membership change forced: the quorum check is skipped"
            );
        } else {
            match self.verdict(kind, id) {
                Verdict::Go => {}
                Verdict::WaitFor(refusal) => {
                    info!(node_id = id, why = %refusal.message(), "membership change waits for the server it adds to call in");
                    self.m.join_waits.push(JoinWait {
                        conn,
                        request_id,
                        id,
                        addr,
                        since: self.m.clock.now(),
                    });
                    return Slot::Write { xid, request_id };
                }
                Verdict::Refuse(refusal) => {
                    let f = refusal.failure();
                    info!(node_id = id, change = ?kind, why = %f.message, "membership change refused");
                    return Slot::Done(frames::error(xid, zxid, f));
                }
            }
        }
        match self.propose_member_change(conn, request_id, kind, id, addr) {
            Ok(()) => Slot::Write { xid, request_id },
            Err(f) => Slot::Done(frames::error(xid, zxid, f)),
        }
    }

    /// Each tick: the AddMembers waiting for their server go ahead once
    /// it called in (and the rule passes), or are refused after
    /// [`JOIN_WAIT`].
    pub(super) fn settle_join_waits(&mut self) {
        if self.m.join_waits.is_empty() {
            return;
        }
        let now = self.m.clock.now();
        let waits = std::mem::take(&mut self.m.join_waits);
        let kind = ConfChangeType::AddNode;
        for w in waits {
            let answer = match self.verdict(kind, w.id) {
                Verdict::Go => self.propose_member_change(w.conn, w.request_id, kind, w.id, w.addr),
                Verdict::WaitFor(_) if now.duration_since(w.since) < JOIN_WAIT => {
                    self.m.join_waits.push(w);
                    continue;
                }
                Verdict::WaitFor(refusal) => {
                    let f = Failure::new(
                        ErrorCode::BadArguments,
                        format!(
                            "{} (server {} did not call in within {JOIN_WAIT:?}: is it running, \
                             started with --join, at that address?)",
                            refusal.message(),
                            w.id
                        ),
                    );
                    info!(node_id = w.id, why = %f.message, "membership change refused");
                    Err(f)
                }
                Verdict::Refuse(refusal) => {
                    let f = refusal.failure();
                    info!(node_id = w.id, why = %f.message, "membership change refused");
                    Err(f)
                }
            };
            if let Err(f) = answer {
                let zxid = self.m.tree.applied_index();
                self.m
                    .clients
                    .complete_write(w.conn, w.request_id, &self.m.tree, |xid| {
                        frames::error(xid, zxid, f)
                    });
            }
        }
    }
}

/// The voters of a membership given as id -> voter.
pub fn voters_of(members: &BTreeMap<u64, (bool, String)>) -> BTreeSet<u64> {
    members
        .iter()
        .filter(|(_, (voter, _))| *voter)
        .map(|(id, _)| *id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfChangeType::*;

    const W: Duration = Duration::from_secs(1);

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    fn one(kind: ConfChangeType, id: u64) -> Vec<Step> {
        vec![Step { kind, id }]
    }

    #[test]
    fn a_dead_second_voter_of_a_single_server_is_refused() {
        let r = check(&set(&[1]), &one(AddNode, 5), &set(&[1]), W).unwrap_err();
        assert_eq!((r.voters, r.live, r.needed), (2, 1, 2));
        assert_eq!(r.silent, [5]);
        let m = r.message();
        assert!(
            m.starts_with(
                "refused: after adding 5 as a voter the cluster would have 2 voters, \
                 1 of them heard from in the last 1s, 2 needed (not heard from: 5)"
            ),
            "{m}"
        );
        // Once it has called in (started with --join), it may join: no
        // one-member exception is needed, nor taken.
        assert!(check(&set(&[1]), &one(AddNode, 5), &set(&[1, 5]), W).is_ok());
        // As a learner, always: the quorum is as it was.
        assert!(check(&set(&[1]), &one(AddLearnerNode, 5), &set(&[1]), W).is_ok());
    }

    #[test]
    fn three_voters_one_down() {
        let voters = set(&[1, 2, 3]);
        let heard = set(&[1, 2]);
        // A fourth that is not running: 2 live of 4, 3 needed.
        let r = check(&voters, &one(AddNode, 4), &heard, W).unwrap_err();
        assert_eq!((r.voters, r.live, r.needed), (4, 2, 3));
        assert_eq!(r.silent, [3, 4]);
        // Removing a live one: 1 live of 2, 2 needed.
        let r = check(&voters, &one(RemoveNode, 2), &heard, W).unwrap_err();
        assert_eq!((r.voters, r.live, r.needed), (2, 1, 2));
        assert!(r.message().contains("after removing 2"), "{}", r.message());
        // Demoting a live one is a removal from the voters.
        let r = check(&voters, &one(AddLearnerNode, 2), &heard, W).unwrap_err();
        assert!(r.message().contains("after making 2 a learner"));
        // Removing the one that is down leaves 2 of 2.
        assert!(check(&voters, &one(RemoveNode, 3), &heard, W).is_ok());
        // All three up: one unknown voter more still leaves 3 of 4.
        assert!(check(&voters, &one(AddNode, 4), &set(&[1, 2, 3]), W).is_ok());
    }

    #[test]
    fn learners_and_no_ops_pass_whatever_is_down() {
        let voters = set(&[1, 2, 3]);
        let heard = set(&[1]);
        assert!(check(&voters, &one(RemoveNode, 9), &heard, W).is_ok());
        assert!(check(&voters, &one(AddLearnerNode, 9), &heard, W).is_ok());
        // Adding a voter that is one already changes nothing.
        assert!(check(&voters, &one(AddNode, 2), &heard, W).is_ok());
    }

    #[test]
    fn every_step_of_a_list_is_checked() {
        // Add 4 then remove 3 with 3 down: after the first step 3 voters
        // of 4 are live (1, 2, 4), after the second 3 of 3.
        let steps = [
            Step {
                kind: AddNode,
                id: 4,
            },
            Step {
                kind: RemoveNode,
                id: 3,
            },
        ];
        assert!(check(&set(&[1, 2, 3]), &steps, &set(&[1, 2, 4]), W).is_ok());
        // With 4 silent the first step already fails.
        let r = check(&set(&[1, 2, 3]), &steps, &set(&[1, 2]), W).unwrap_err();
        assert!(r.message().contains("after adding 4 as a voter"));
    }

    #[test]
    fn contacts_are_recent_and_bounded() {
        let start = Instant::now();
        let mut c = Contacts::default();
        c.heard(2, start);
        c.heard(3, start + Duration::from_millis(900));
        let now = start + Duration::from_millis(1500);
        assert_eq!(c.recent(W, now), set(&[3]));
        for id in 100..100 + limits::PEER_CONTACTS_MAX as u64 {
            c.heard(id, now);
        }
        assert_eq!(c.last.len(), limits::PEER_CONTACTS_MAX);
        assert!(!c.last.contains_key(&2), "the oldest went first");
    }

    #[test]
    fn the_window_is_the_longest_election_timeout_or_two_status_rounds() {
        let tick = Duration::from_millis(100);
        assert_eq!(live_window(tick, 5), Duration::from_secs(1));
        assert_eq!(live_window(tick, 10), Duration::from_secs(2));
        assert_eq!(live_window(tick, 2), Duration::from_secs(1));
    }
}
