//! Proposals in flight: what this server handed to raft and who waits for
//! the answer. One table, keyed by the request id that travels in the
//! proposal (or in a conf change's context) and comes back when the entry
//! applies.
//!
//! The table decides three things over time: which waiters raft has not
//! settled within [`PROPOSAL_TIMEOUT`] (they get an error), which
//! membership changes to propose again (raft silently drops one proposed
//! while another is pending), and which proposals may be made again after
//! a leader change (those whose second apply changes nothing).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use prost::Message as _;
use raft::eraftpb::ConfChange;
use rand::rngs::StdRng;
use rand::Rng as _;

use crate::proto::{Proposal, Txn};
use crate::watch::ConnId;

/// How long a write or a linearizable read may wait for raft before it is
/// answered with an error (a leader change or a lost quorum otherwise
/// leaves it waiting for ever). The outcome of such a write is unknown.
pub const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an unapplied membership change is proposed again.
pub const CONF_CHANGE_RETRY: Duration = Duration::from_secs(1);

/// Who waits for an entry this server proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// A new session for this connection.
    Connect { conn: ConnId, timeout_ms: u32 },
    /// A resumed session's bind to this connection (ZooKeeper door).
    Resume { conn: ConnId, timeout_ms: u32 },
    /// A write request (or membership change) in `conn`'s queue.
    Request { conn: ConnId },
}

#[derive(Debug)]
struct Waiting {
    waiter: Waiter,
    since: Instant,
    /// The encoded proposal, when it is safe to propose again after a
    /// leader change (applying it twice changes nothing).
    again: Option<Vec<u8>>,
    /// A membership change, and when it was last proposed.
    conf_change: Option<(ConfChange, Instant)>,
    /// A reconfig's changes still to make after `conf_change`, in order;
    /// its answer is the membership after the last.
    then: VecDeque<ConfChange>,
    reconfig: bool,
    /// Whether raft ever took it (false: held since no leader was known,
    /// so certainly not applied).
    handed: bool,
}

/// What an applied conf change means for its waiter
/// ([`Proposals::conf_change_applied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfApplied {
    /// Nobody waits for this change.
    Unknown,
    /// A reconfig's next change is due now.
    Next,
    /// The last (or only) change applied: answer `waiter` (with the
    /// membership, for a reconfig).
    Done { waiter: Waiter, reconfig: bool },
}

/// What the tree says of a proposal whose entry a snapshot held.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// A CreateSession: the session (id, password).
    Session(u64, Vec<u8>),
    /// A client write: the answer the tree recorded for it.
    Answer(warden_protocol::pb::Response),
}

/// A waiter raft did not settle in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub request_id: u64,
    pub waiter: Waiter,
    /// Raft took the proposal (its fate is unknown); false: it never left
    /// this server, so it is not applied.
    pub handed: bool,
}

#[derive(Debug)]
pub struct Proposals {
    waiting: HashMap<u64, Waiting>,
    next_id: u64,
    /// Proposals handed to raft (for `/metrics`).
    proposed: u64,
}

impl Proposals {
    /// An empty table whose ids start at a point drawn from `rng` (the
    /// core's).
    pub fn new(rng: &mut StdRng) -> Self {
        Self {
            waiting: HashMap::new(),
            // Random start: ids stay unique across restarts, so an entry of
            // an earlier life replayed from the log never answers a new
            // request.
            next_id: rng.random::<u64>() >> 1,
            proposed: 0,
        }
    }

    /// A fresh request id (never 0: 0 means "nobody waits").
    pub fn next_id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.next_id
    }

    /// The log entry for `txn`, proposed by `node_id` for `request_id` at
    /// wall time `time_ms` (the proposer's clock; a leader stamps its own
    /// on what followers forward, see [`restamp`]).
    pub fn encode(&mut self, node_id: u64, request_id: u64, txn: Txn, time_ms: i64) -> Vec<u8> {
        self.proposed += 1;
        Proposal {
            origin_node: node_id,
            request_id,
            time_ms,
            txn: Some(txn),
        }
        .encode_to_vec()
    }

    /// How many proposals this server made.
    pub fn proposed(&self) -> u64 {
        self.proposed
    }

    /// `waiter` waits for the entry of `request_id`; `again`: the encoded
    /// proposal, if it may be proposed again after a leader change;
    /// `handed`: whether raft took it (a held one is proposed with the
    /// next leader).
    pub fn register(
        &mut self,
        request_id: u64,
        waiter: Waiter,
        again: Option<Vec<u8>>,
        handed: bool,
        now: Instant,
    ) {
        debug_assert!(handed || again.is_some(), "a held proposal must be kept");
        self.waiting.insert(
            request_id,
            Waiting {
                waiter,
                since: now,
                again,
                conf_change: None,
                then: VecDeque::new(),
                reconfig: false,
                handed,
            },
        );
    }

    /// Raft took the proposal of `request_id` (proposed again).
    pub fn handed(&mut self, request_id: u64) {
        if let Some(w) = self.waiting.get_mut(&request_id) {
            w.handed = true;
        }
    }

    /// A membership change for `conn`'s request, proposed now.
    pub fn register_conf_change(
        &mut self,
        request_id: u64,
        conn: ConnId,
        change: ConfChange,
        now: Instant,
    ) {
        self.waiting.insert(
            request_id,
            Waiting {
                waiter: Waiter::Request { conn },
                since: now,
                again: None,
                conf_change: Some((change, now)),
                then: VecDeque::new(),
                reconfig: false,
                handed: true,
            },
        );
    }

    /// A reconfig for `conn`'s request: `first` proposed now, then each
    /// of `then` in turn once the one before has applied.
    pub fn register_reconfig(
        &mut self,
        request_id: u64,
        conn: ConnId,
        first: ConfChange,
        then: Vec<ConfChange>,
        now: Instant,
    ) {
        self.register_conf_change(request_id, conn, first, now);
        if let Some(w) = self.waiting.get_mut(&request_id) {
            w.then = then.into();
            w.reconfig = true;
        }
    }

    /// A conf change carrying `request_id` applied: what it means for
    /// whoever waits. A change that is not the one awaited (a duplicate
    /// of an earlier step, proposed again and applied twice) means
    /// nothing; a reconfig's step makes its next change due at once
    /// ([`Proposals::conf_changes_due`]), with a full timeout of its own.
    pub fn conf_change_applied(
        &mut self,
        request_id: u64,
        change: &ConfChange,
        now: Instant,
    ) -> ConfApplied {
        let Some(w) = self.waiting.get_mut(&request_id) else {
            return ConfApplied::Unknown;
        };
        if let Some((awaited, _)) = &w.conf_change {
            if (awaited.change_type, awaited.node_id) != (change.change_type, change.node_id) {
                return ConfApplied::Unknown;
            }
        }
        if let Some(next) = w.then.pop_front() {
            // Due at once: "last proposed" a retry interval ago.
            let due = now.checked_sub(CONF_CHANGE_RETRY).unwrap_or(now);
            w.conf_change = Some((next, due));
            w.since = now;
            return ConfApplied::Next;
        }
        let reconfig = w.reconfig;
        let waiter = w.waiter;
        self.waiting.remove(&request_id);
        ConfApplied::Done { waiter, reconfig }
    }

    /// The entry of `request_id` applied: who waited for it, if anyone.
    pub fn complete(&mut self, request_id: u64) -> Option<Waiter> {
        self.waiting.remove(&request_id).map(|w| w.waiter)
    }

    /// New sessions proposed and not yet applied.
    pub fn connects_pending(&self) -> usize {
        self.waiting
            .values()
            .filter(|w| matches!(w.waiter, Waiter::Connect { .. }))
            .count()
    }

    /// The waiters raft has not settled within [`PROPOSAL_TIMEOUT`],
    /// forgotten here (sorted by request id).
    pub fn take_expired(&mut self, now: Instant) -> Vec<Expired> {
        let mut expired: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| now.duration_since(w.since) >= PROPOSAL_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        expired.sort_unstable();
        expired
            .into_iter()
            .filter_map(|id| {
                self.waiting.remove(&id).map(|w| Expired {
                    request_id: id,
                    waiter: w.waiter,
                    handed: w.handed,
                })
            })
            .collect()
    }

    /// Membership changes not applied [`CONF_CHANGE_RETRY`] after they were
    /// last proposed: to propose again (applying one twice is a no-op).
    /// In request id order (proposed in that order, whatever the table's).
    pub fn conf_changes_due(&mut self, now: Instant) -> Vec<ConfChange> {
        let mut due = Vec::new();
        for (id, w) in self.waiting.iter_mut() {
            if let Some((change, last)) = &mut w.conf_change {
                if now.duration_since(*last) >= CONF_CHANGE_RETRY {
                    *last = now;
                    due.push((*id, change.clone()));
                }
            }
        }
        due.sort_unstable_by_key(|(id, _)| *id);
        due.into_iter().map(|(_, change)| change).collect()
    }

    /// After a leader snapshot replaced the tree: the waiters whose entries
    /// it holds, settled and forgotten here, with what the tree says of
    /// them (a session it has, the answer it recorded for a write). The
    /// others wait on: their entries come after the snapshot.
    pub fn settled_in(&mut self, tree: &crate::tree::DataTree) -> Vec<(u64, Waiter, Settled)> {
        let mut settled = Vec::new();
        for (id, w) in &self.waiting {
            let Some(txn) = w
                .again
                .as_ref()
                .and_then(|p| Proposal::decode(&p[..]).ok())
                .and_then(|p| p.txn)
            else {
                continue;
            };
            let found = match (&w.waiter, &txn.kind) {
                (Waiter::Connect { .. }, Some(crate::proto::txn::Kind::CreateSession(cs))) => tree
                    .session(cs.session_id)
                    .map(|s| Settled::Session(cs.session_id, s.password.clone())),
                (Waiter::Request { .. }, _) => tree
                    .recorded(&txn)
                    .map(|r| Settled::Answer(crate::ops::recorded_answer(&txn, &r))),
                _ => None,
            };
            if let Some(found) = found {
                settled.push((*id, w.waiter, found));
            }
        }
        settled.sort_by_key(|(id, _, _)| *id);
        for (id, _, _) in &settled {
            self.waiting.remove(id);
        }
        settled
    }

    /// After a leader change: the proposals that may be made again (their
    /// first one may have died with the old leader, or was held for want
    /// of a leader), each waiting a full timeout from now; by request id.
    pub fn for_reproposal(&mut self, now: Instant) -> Vec<(u64, Vec<u8>)> {
        let mut again = Vec::new();
        for (id, w) in self.waiting.iter_mut() {
            if let Some(p) = &w.again {
                w.since = now;
                again.push((*id, p.clone()));
            }
        }
        again.sort_unstable_by_key(|(id, _)| *id);
        again
    }
}

/// The leader's stamp on the proposals a follower forwarded: node times
/// (ctime, mtime, and so when a TTL node expires) come from the leader's
/// clock only, whichever server took the write, as in ZooKeeper. Entries
/// that are no proposal are left as they are.
pub fn restamp(entries: &mut [raft::eraftpb::Entry], now_ms: i64) {
    for entry in entries {
        if entry.get_entry_type() != raft::eraftpb::EntryType::EntryNormal || entry.data.is_empty()
        {
            continue;
        }
        if let Ok(mut proposal) = Proposal::decode(&entry.data[..]) {
            proposal.time_ms = now_ms;
            entry.data = proposal.encode_to_vec().into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(28)
    }

    #[test]
    fn ids_are_fresh_and_never_zero() {
        let mut p = Proposals::new(&mut rng());
        p.next_id = u64::MAX;
        assert_eq!(p.next_id(), 1);
        assert_eq!(p.next_id(), 2);
    }

    #[test]
    fn complete_answers_once() {
        let mut p = Proposals::new(&mut rng());
        let now = Instant::now();
        p.register(7, Waiter::Request { conn: 3 }, None, true, now);
        p.register(
            8,
            Waiter::Connect {
                conn: 4,
                timeout_ms: 10,
            },
            None,
            true,
            now,
        );
        assert_eq!(p.connects_pending(), 1);
        assert_eq!(p.complete(7), Some(Waiter::Request { conn: 3 }));
        assert_eq!(p.complete(7), None);
        assert_eq!(p.complete(9), None);
    }

    #[test]
    fn expiry_after_the_timeout_and_reproposal_restarts_the_clock() {
        let mut p = Proposals::new(&mut rng());
        let t0 = Instant::now();
        p.register(1, Waiter::Request { conn: 1 }, Some(vec![1]), true, t0);
        p.register(2, Waiter::Request { conn: 2 }, None, true, t0);
        p.register(3, Waiter::Request { conn: 3 }, Some(vec![3]), false, t0);
        assert!(p.take_expired(t0 + PROPOSAL_TIMEOUT / 2).is_empty());
        // Only the idempotent ones are proposed again, with a fresh clock.
        let later = t0 + PROPOSAL_TIMEOUT / 2;
        assert_eq!(p.for_reproposal(later), vec![(1, vec![1]), (3, vec![3])]);
        assert_eq!(
            p.take_expired(t0 + PROPOSAL_TIMEOUT),
            vec![Expired {
                request_id: 2,
                waiter: Waiter::Request { conn: 2 },
                handed: true
            }]
        );
        // One held for want of a leader says so when it expires.
        let expired = p.take_expired(later + PROPOSAL_TIMEOUT);
        assert_eq!(
            expired
                .iter()
                .map(|e| (e.request_id, e.handed))
                .collect::<Vec<_>>(),
            vec![(1, true), (3, false)]
        );
        assert_eq!(p.complete(1), None);
    }

    #[test]
    fn conf_changes_are_retried_each_interval() {
        let mut p = Proposals::new(&mut rng());
        let t0 = Instant::now();
        let change = ConfChange {
            node_id: 4,
            ..Default::default()
        };
        p.register_conf_change(5, 9, change.clone(), t0);
        assert!(p.conf_changes_due(t0 + CONF_CHANGE_RETRY / 2).is_empty());
        assert_eq!(p.conf_changes_due(t0 + CONF_CHANGE_RETRY), vec![change]);
        assert!(p.conf_changes_due(t0 + CONF_CHANGE_RETRY).is_empty());
        assert_eq!(p.complete(5), Some(Waiter::Request { conn: 9 }));
    }

    /// Several changes due at once are proposed in request id order,
    /// whatever order the table keeps them in (it differs per process).
    #[test]
    fn conf_changes_due_together_come_in_request_order() {
        let mut p = Proposals::new(&mut rng());
        let t0 = Instant::now();
        let ids = [41, 3, 27, 9, 15, 2, 33, 20];
        for id in ids {
            let change = ConfChange {
                node_id: id,
                ..Default::default()
            };
            p.register_conf_change(id, 1, change, t0);
        }
        let due: Vec<u64> = p
            .conf_changes_due(t0 + CONF_CHANGE_RETRY)
            .iter()
            .map(|c| c.node_id)
            .collect();
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        assert_eq!(due, sorted);
    }

    /// A reconfig's changes are due one after the other; a duplicate of
    /// an earlier one applied again advances nothing.
    #[test]
    fn a_reconfig_proposes_its_changes_in_turn() {
        use raft::eraftpb::ConfChangeType::*;
        let mut p = Proposals::new(&mut rng());
        let t0 = Instant::now();
        let change = |change_type, node_id| ConfChange {
            change_type,
            node_id,
            ..Default::default()
        };
        let (add, promote, remove) = (
            change(AddLearnerNode, 4),
            change(AddNode, 4),
            change(RemoveNode, 3),
        );
        p.register_reconfig(7, 2, add.clone(), vec![promote.clone(), remove.clone()], t0);
        assert_eq!(p.conf_change_applied(7, &add, t0), ConfApplied::Next);
        // Due at once, not a retry interval later.
        assert_eq!(p.conf_changes_due(t0), vec![promote.clone()]);
        assert_eq!(p.conf_change_applied(7, &add, t0), ConfApplied::Unknown);
        // Each change has a whole timeout of its own.
        let later = t0 + PROPOSAL_TIMEOUT / 2;
        assert_eq!(p.conf_change_applied(7, &promote, later), ConfApplied::Next);
        assert_eq!(
            p.conf_change_applied(7, &promote, later),
            ConfApplied::Unknown
        );
        assert!(p.take_expired(t0 + PROPOSAL_TIMEOUT).is_empty());
        assert_eq!(
            p.conf_change_applied(7, &remove, later),
            ConfApplied::Done {
                waiter: Waiter::Request { conn: 2 },
                reconfig: true
            }
        );
        assert_eq!(
            p.conf_change_applied(7, &remove, later),
            ConfApplied::Unknown
        );
        // A single membership change is answered plainly.
        p.register_conf_change(8, 3, remove.clone(), t0);
        assert_eq!(
            p.conf_change_applied(8, &remove, t0),
            ConfApplied::Done {
                waiter: Waiter::Request { conn: 3 },
                reconfig: false
            }
        );
    }

    #[test]
    fn restamp_changes_the_time_only() {
        let mut p = Proposals::new(&mut rng());
        let mut entries = vec![
            raft::eraftpb::Entry {
                data: p.encode(3, 42, Txn::default(), 99).into(),
                ..Default::default()
            },
            raft::eraftpb::Entry {
                data: vec![0xff; 4].into(),
                ..Default::default()
            },
        ];
        restamp(&mut entries, 1234);
        let decoded = Proposal::decode(&entries[0].data[..]).unwrap();
        assert_eq!(
            (decoded.origin_node, decoded.request_id, decoded.time_ms),
            (3, 42, 1234)
        );
        assert_eq!(
            &entries[1].data[..],
            &[0xff; 4],
            "not a proposal: untouched"
        );
    }

    #[test]
    fn encode_counts_and_carries_the_origin() {
        let mut p = Proposals::new(&mut rng());
        let bytes = p.encode(3, 42, Txn::default(), 1234);
        let decoded = Proposal::decode(&bytes[..]).unwrap();
        assert_eq!(
            (decoded.origin_node, decoded.request_id, decoded.time_ms),
            (3, 42, 1234)
        );
        assert_eq!(p.proposed(), 1);
    }
}
