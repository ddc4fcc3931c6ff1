//! When TTL nodes expire: on the leader's monotonic clock, never on a wall
//! clock.
//!
//! A TTL node (and so a lease, `recipes::lease`) must not be removed while
//! the client that last wrote it may still count on it. That client counts
//! its TTL from when it sent the write, on its own clock. Judging expiry by
//! `mtime + ttl` against the leader's wall clock (as ZooKeeper does) breaks
//! that promise whenever the leader's wall clock jumps forward (an NTP step,
//! an operator's `date -s`, a VM resumed): every TTL node would expire at
//! once, and a lease would be granted to a second holder while the first
//! still holds it. A clock jumping back keeps nodes alive for the jump.
//!
//! So the leader keeps a deadline per TTL node, from its own monotonic
//! clock: the first expiry check that sees a node at a new mzxid (created,
//! written, renewed) arms its deadline at `now + ttl`; the node is removed
//! (a guarded delete) at the first check past that deadline once it has no
//! children. Checks run every few ticks, so a deadline is armed at most one
//! check interval after the write applied: late, never early. A new leader
//! starts with an empty table and so re-arms every TTL node with its full
//! TTL, as [`crate::session`] does for sessions: a leader change can only
//! extend a node's life, never shorten it. Wall-clock times remain what
//! users see (`ctime`, `mtime`, a lease's `expires_at_ms`), not what
//! decides.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::proto::GuardedDeleteTxn;
use crate::tree::{DataTree, TtlNode};

/// The leader's TTL deadlines. Empty (and unused) on a follower.
#[derive(Debug, Default)]
pub struct TtlDeadlines {
    armed: HashMap<String, Armed>,
    /// Which check this is; entries not seen by the latest one are gone.
    check: u64,
}

#[derive(Debug)]
struct Armed {
    mzxid: u64,
    deadline: Instant,
    seen: u64,
}

impl TtlDeadlines {
    /// Forgets every deadline: this server became leader (every TTL node is
    /// re-armed with its full TTL) or stopped leading.
    pub fn reset(&mut self) {
        self.armed.clear();
    }

    /// The removals due at `now`: empty containers, and TTL nodes past
    /// their deadline (see the module docs). Arms deadlines for TTL nodes
    /// seen at a new mzxid and forgets those that are gone.
    pub fn removals(&mut self, tree: &DataTree, now: Instant) -> Vec<GuardedDeleteTxn> {
        self.check += 1;
        let check = self.check;
        let armed = &mut self.armed;
        let due = tree.removal_candidates_by(|path, node: TtlNode| {
            match armed.get_mut(path) {
                Some(a) if a.mzxid == node.mzxid => {
                    a.seen = check;
                    now >= a.deadline
                }
                _ => {
                    let ttl = Duration::from_millis(node.ttl_ms);
                    armed.insert(
                        path.to_string(),
                        Armed {
                            mzxid: node.mzxid,
                            // A TTL too large to add is a node that never
                            // expires on this leader.
                            deadline: now
                                .checked_add(ttl)
                                .unwrap_or(now + Duration::from_secs(1 << 40)),
                            seen: check,
                        },
                    );
                    false
                }
            }
        });
        armed.retain(|_, a| a.seen == check);
        due
    }

    /// How many TTL nodes have a deadline (for tests and status).
    pub fn len(&self) -> usize {
        self.armed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{txn::Kind, CreateTxn, DeleteTxn, SetDataTxn, Txn};

    const WALL0: i64 = 1_700_000_000_000;

    fn txn(kind: Kind) -> Txn {
        Txn {
            kind: Some(kind),
            ..Default::default()
        }
    }

    fn create(path: &str, ttl_ms: u64) -> Txn {
        txn(Kind::Create(CreateTxn {
            path: path.into(),
            ttl_ms,
            ..Default::default()
        }))
    }

    fn paths(due: &[GuardedDeleteTxn]) -> Vec<&str> {
        due.iter().map(|g| g.path.as_str()).collect()
    }

    fn delete(path: &str) -> Txn {
        txn(Kind::Delete(DeleteTxn {
            path: path.into(),
            version: None,
        }))
    }

    /// A tree with TTL node /t (1 s, stamped at `wall_ms`; more nodes from
    /// `more`), and a table that saw it at t0.
    fn armed(wall_ms: i64, more: &[Txn]) -> (DataTree, TtlDeadlines, Instant) {
        let mut tree = DataTree::new();
        tree.apply(1, wall_ms, &create("/t", 1_000));
        for (i, t) in more.iter().enumerate() {
            tree.apply(2 + i as u64, wall_ms, t);
        }
        let mut ttl = TtlDeadlines::default();
        let t0 = Instant::now();
        assert!(ttl.removals(&tree, t0).is_empty(), "armed, not due");
        (tree, ttl, t0)
    }

    #[test]
    fn a_ttl_node_expires_a_ttl_after_its_deadline_was_armed_whatever_the_wall_clock_says() {
        // Stamped an hour in the past by the wall clock: ZooKeeper's rule
        // would remove it at once.
        let (tree, mut ttl, t0) = armed(WALL0 - 3_600_000, &[]);
        assert_eq!(ttl.len(), 1);
        assert!(ttl
            .removals(&tree, t0 + Duration::from_millis(999))
            .is_empty());
        assert_eq!(
            paths(&ttl.removals(&tree, t0 + Duration::from_millis(1000))),
            ["/t"]
        );
    }

    #[test]
    fn a_write_rearms_the_deadline() {
        let (mut tree, mut ttl, t0) = armed(WALL0, &[]);
        tree.apply(
            2,
            WALL0,
            &txn(Kind::SetData(SetDataTxn {
                path: "/t".into(),
                data: b"renewed".to_vec(),
                ..Default::default()
            })),
        );
        let t1 = t0 + Duration::from_millis(900);
        assert!(ttl.removals(&tree, t1).is_empty(), "re-armed at t1");
        assert!(ttl
            .removals(&tree, t0 + Duration::from_millis(1500))
            .is_empty());
        assert_eq!(
            paths(&ttl.removals(&tree, t1 + Duration::from_millis(1000))),
            ["/t"]
        );
    }

    #[test]
    fn a_node_with_children_stays_and_a_reset_rearms_everything() {
        let (mut tree, mut ttl, t0) = armed(WALL0, &[create("/t/c", 0)]);
        let later = t0 + Duration::from_secs(5);
        assert!(ttl.removals(&tree, later).is_empty(), "it has a child");
        tree.apply(3, WALL0, &delete("/t/c"));
        // A new leader: the node gets its full TTL again.
        ttl.reset();
        assert!(ttl.removals(&tree, later).is_empty());
        assert_eq!(
            paths(&ttl.removals(&tree, later + Duration::from_secs(1))),
            ["/t"]
        );
    }

    #[test]
    fn deadlines_of_removed_nodes_are_forgotten() {
        let (mut tree, mut ttl, t0) = armed(WALL0, &[]);
        tree.apply(2, WALL0, &delete("/t"));
        assert!(ttl.removals(&tree, t0).is_empty());
        assert!(ttl.is_empty());
    }
}
