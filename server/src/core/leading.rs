//! Leader-only memory: what this server keeps only while it leads, built
//! from the tree when it becomes leader and dropped when it stops.
//!
//! A leader's proposal dies with its leadership unless the next leader
//! finds it in its log; nothing tells the old leader which of its
//! proposals died. So nothing a leader remembers about its own proposals
//! may outlive its leadership: a server that leads again starts from the
//! tree, and proposes again whatever the tree says is still due. Each
//! piece of leader-only memory, and how it keeps to that:
//!
//! - the TTL deadlines ([`crate::ttl`]) and the TTL and container removals
//!   in flight (here): both dropped at every role change, so a removal
//!   lost with a leadership is proposed again, a full TTL after this
//!   server leads once more at the latest (a guarded delete applies at most
//!   once: a second one finds the node gone or changed and does nothing);
//! - the session deadlines and the session closes in flight
//!   ([`crate::session::Sessions`]: `promote` re-arms every session of the
//!   table, `demote` forgets them), handled next to this in
//!   `Machine::role_changed`;
//! - heartbeat round trips to each peer (`super::peer_view`), cleared when
//!   this server stops leading.
//!
//! What a server remembers of its clients' proposals is no leader's
//! memory: it holds on any role ([`super::proposals`]) and is retried by
//! time (a membership change or a reconfig's next step, every
//! `CONF_CHANGE_RETRY`) or at every leader change (client writes; the
//! forwards held for the old leader are dropped then, [`super::forwards`]).

use std::collections::HashSet;
use std::time::Instant;

use tracing::{debug, warn};

use crate::proto::GuardedDeleteTxn;
use crate::tree::DataTree;
use crate::ttl::TtlDeadlines;

/// What this server remembers only while it leads (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Leading {
    /// TTL deadlines on this leader's monotonic clock.
    ttl: TtlDeadlines,
    /// Guarded deletes proposed in this leadership and not yet applied
    /// (path).
    removals_inflight: HashSet<String>,
    /// KNOWN-BAD (`--unsafe-keep-removals-across-roles`): removals in flight
    /// outlive a role change, as before they were dropped with it.
    keep_removals: bool,
    /// Test hook (`--unsafe-lose-removal-proposals N`): this many removal
    /// proposals are counted in flight but never handed to raft, as if lost
    /// with the leadership.
    lose_removals: u64,
}

impl Leading {
    pub fn new(keep_removals: bool, lose_removals: u64) -> Self {
        if keep_removals {
            warn!("--unsafe-keep-removals-across-roles: TTL and container removals in flight are kept across role changes, so one lost with a leadership is never proposed again; a known-bad mode for testing the test suite only");
        }
        if lose_removals > 0 {
            warn!(
                count = lose_removals,
                "--unsafe-lose-removal-proposals: the first removal proposals of this server are never handed to raft, as if lost with its leadership; for tests only"
            );
        }
        Self {
            keep_removals,
            lose_removals,
            ..Self::default()
        }
    }

    /// This server became leader or stopped leading: what it remembered
    /// as leader goes (a new leader re-arms every TTL node with its full
    /// TTL and proposes again every removal still due).
    pub fn role_changed(&mut self) {
        self.ttl.reset();
        if !self.keep_removals {
            self.removals_inflight.clear();
        }
    }

    /// The removals to propose at `now` (empty containers, TTL nodes past
    /// their deadline) that are not in flight already; each counts as in
    /// flight from now on.
    pub fn removals_due(&mut self, tree: &DataTree, now: Instant) -> Vec<GuardedDeleteTxn> {
        let mut due = Vec::new();
        for guarded in self.ttl.removals(tree, now) {
            if !self.removals_inflight.insert(guarded.path.clone()) {
                continue;
            }
            if self.lose_removals > 0 {
                self.lose_removals -= 1;
                warn!(path = %guarded.path, "--unsafe-lose-removal-proposals: removal not proposed, as if lost with the leadership");
                continue;
            }
            debug!(path = %guarded.path, "proposing removal of empty container / expired TTL node");
            due.push(guarded);
        }
        due
    }

    /// The removal of `path` was not proposed after all (raft refused it).
    pub fn removal_not_proposed(&mut self, path: &str) {
        self.removals_inflight.remove(path);
    }

    /// A guarded delete of `path` applied (it may have removed nothing).
    pub fn removal_applied(&mut self, path: &str) {
        self.removals_inflight.remove(path);
    }

    #[cfg(test)]
    fn inflight(&self) -> usize {
        self.removals_inflight.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::{txn::Kind, CreateTxn, Txn};
    use crate::session::Sessions;

    fn tree_with_ttl_node() -> DataTree {
        let mut tree = DataTree::new();
        let create = Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: "/lease".into(),
                ttl_ms: 1_000,
                ..Default::default()
            })),
            ..Default::default()
        };
        tree.apply(1, 1_700_000_000_000, &create);
        tree
    }

    fn paths(due: &[GuardedDeleteTxn]) -> Vec<&str> {
        due.iter().map(|g| g.path.as_str()).collect()
    }

    /// Leads, arms /lease's deadline at t0, and proposes its removal a TTL
    /// later: (memory, the removal's time).
    fn proposed(keep: bool, lose: u64) -> (Leading, DataTree, Instant) {
        let tree = tree_with_ttl_node();
        let mut l = Leading::new(keep, lose);
        l.role_changed();
        let t0 = Instant::now();
        assert!(l.removals_due(&tree, t0).is_empty(), "armed, not due");
        let t1 = t0 + Duration::from_secs(1);
        (l, tree, t1)
    }

    #[test]
    fn a_removal_lost_with_the_leadership_is_proposed_again_when_this_server_leads_again() {
        let (mut l, tree, t1) = proposed(false, 0);
        assert_eq!(paths(&l.removals_due(&tree, t1)), ["/lease"]);
        // In flight: not proposed twice while this leadership lasts.
        assert!(l
            .removals_due(&tree, t1 + Duration::from_secs(5))
            .is_empty());
        // The leadership, and the proposal with it, is lost; the entry
        // never applies. This server leads again later.
        l.role_changed();
        assert_eq!(l.inflight(), 0, "dropped with the leadership");
        l.role_changed();
        let t2 = t1 + Duration::from_secs(10);
        assert!(l.removals_due(&tree, t2).is_empty(), "re-armed in full");
        assert_eq!(
            paths(&l.removals_due(&tree, t2 + Duration::from_secs(1))),
            ["/lease"],
            "proposed again a TTL after leading again"
        );
    }

    #[test]
    fn the_known_bad_switch_keeps_a_lost_removal_stuck() {
        let (mut l, tree, t1) = proposed(true, 0);
        assert_eq!(paths(&l.removals_due(&tree, t1)), ["/lease"]);
        l.role_changed();
        l.role_changed();
        let t2 = t1 + Duration::from_secs(10);
        assert!(l.removals_due(&tree, t2).is_empty());
        assert!(
            l.removals_due(&tree, t2 + Duration::from_secs(60))
                .is_empty(),
            "the old defect: never proposed again"
        );
    }

    #[test]
    fn a_lost_removal_proposal_is_in_flight_but_not_proposed_and_an_applied_one_is_forgotten() {
        let (mut l, tree, t1) = proposed(false, 1);
        assert!(l.removals_due(&tree, t1).is_empty(), "lost");
        assert_eq!(l.inflight(), 1, "but counted in flight");
        l.role_changed();
        l.role_changed();
        let t2 = t1 + Duration::from_secs(10);
        assert!(l.removals_due(&tree, t2).is_empty());
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(paths(&l.removals_due(&tree, t3)), ["/lease"]);
        l.removal_applied("/lease");
        assert_eq!(l.inflight(), 0);
        // Refused by raft: due again at the next check.
        assert_eq!(paths(&l.removals_due(&tree, t3)), ["/lease"]);
        l.removal_not_proposed("/lease");
        assert_eq!(paths(&l.removals_due(&tree, t3)), ["/lease"]);
    }

    /// The other leader-only memory of the same kind: a session close
    /// proposed by a leader that then lost its leadership is proposed again
    /// when it leads again.
    #[test]
    fn a_session_close_lost_with_the_leadership_is_proposed_again_when_this_server_leads_again() {
        let mut s = Sessions::default();
        let timeout = Duration::from_secs(1);
        let t0 = Instant::now();
        s.promote([(7, timeout)], t0);
        let t1 = t0 + timeout;
        assert_eq!(s.take_expired(t1), [7]);
        assert!(s.take_expired(t1).is_empty(), "its close is in flight");
        s.demote();
        assert!(
            s.take_expired(t1 + timeout).is_empty(),
            "a follower closes nothing"
        );
        let t2 = t1 + Duration::from_secs(10);
        s.promote([(7, timeout)], t2);
        assert!(s.take_expired(t2).is_empty(), "re-armed in full");
        assert_eq!(s.take_expired(t2 + timeout), [7], "proposed again");
    }
}
