//! The safety properties checked after every step of a run. A violation
//! stops the run; it carries which property broke and the facts that
//! broke it.
//!
//! - **Election safety**: at most one leader per term, and under it, one
//!   vote per node per term (a vote granted to two candidates of one term
//!   is what lets two leaders be elected; checked on the votes sent).
//! - **State machine safety**: every node applies the same entry at an
//!   index (term and data), including after a restart replays its log.
//! - **Leader completeness**: an acknowledged write (committed and applied
//!   on the node that proposed it) is in the log of every later leader.
//! - **Commit bound**: no node applies past the commit index it knows.
//! - **Crash recovery**: a crash alone never keeps a node from starting
//!   (the storage's checks refuse damage, and a crash is not damage). With
//!   disk faults a read may flip a bit at a start, so only a refusal that
//!   lasts [`FAILED_STARTS_MAX`] tries is a violation then.

use std::collections::BTreeMap;
use std::fmt;

/// One entry as the checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

pub const ONE_LEADER_PER_TERM: &str = "one leader per term";
pub const ONE_VOTE_PER_TERM: &str = "one vote per node per term";
pub const SAME_ENTRY_AT_AN_INDEX: &str = "same applied entry at an index";
pub const ACKED_IN_LATER_LEADERS: &str = "acknowledged writes in every later leader's log";
pub const APPLIED_WITHIN_COMMIT: &str = "no apply past the commit index";
pub const CRASH_RECOVERABLE: &str = "a crash alone never keeps a node from starting";
/// Starts in a row a node may fail when its disk flips bits on reads.
pub const FAILED_STARTS_MAX: u32 = 5;
/// raft-rs's own assertions (it panics on a log it finds lost or
/// truncated, such as a commit index past its last entry).
pub const RAFT_ASSERTION: &str = "raft's own assertion";

#[derive(Debug, Default)]
pub struct Invariants {
    leaders: BTreeMap<u64, u64>,
    /// (voter, term) -> the candidate it granted its vote.
    votes: BTreeMap<(u64, u64), u64>,
    /// Each index as it was first applied anywhere.
    applied: BTreeMap<u64, (u64, Vec<u8>, u64)>,
    acked: Vec<Applied>,
}

pub fn show(data: &[u8]) -> String {
    if data.is_empty() {
        "(empty)".into()
    } else {
        String::from_utf8_lossy(data).into_owned()
    }
}

impl Invariants {
    pub fn became_leader(&mut self, node: u64, term: u64) -> Result<(), Violation> {
        match self.leaders.insert(term, node) {
            Some(other) if other != node => Err(Violation {
                invariant: ONE_LEADER_PER_TERM,
                detail: format!("n{other} and n{node} both led term {term}"),
            }),
            _ => Ok(()),
        }
    }

    /// `voter` sent `candidate` its vote for `term`.
    pub fn voted(&mut self, voter: u64, term: u64, candidate: u64) -> Result<(), Violation> {
        match self.votes.insert((voter, term), candidate) {
            Some(other) if other != candidate => Err(Violation {
                invariant: ONE_VOTE_PER_TERM,
                detail: format!(
                    "n{voter} voted for n{other} and then for n{candidate} in term {term}"
                ),
            }),
            _ => Ok(()),
        }
    }

    pub fn applied(&mut self, node: u64, e: &Applied) -> Result<(), Violation> {
        match self.applied.get(&e.index) {
            None => {
                self.applied
                    .insert(e.index, (e.term, e.data.clone(), node));
                Ok(())
            }
            Some((term, data, first)) if *term != e.term || *data != e.data => Err(Violation {
                invariant: SAME_ENTRY_AT_AN_INDEX,
                detail: format!(
                    "n{node} applied {} (term {}) at index {}, where n{first} applied {} (term {term})",
                    show(&e.data),
                    e.term,
                    e.index,
                    show(data)
                ),
            }),
            Some(_) => Ok(()),
        }
    }

    pub fn within_commit(node: u64, applied: u64, commit: u64) -> Result<(), Violation> {
        if applied > commit {
            return Err(Violation {
                invariant: APPLIED_WITHIN_COMMIT,
                detail: format!("n{node} applied index {applied} with commit index {commit}"),
            });
        }
        Ok(())
    }

    pub fn acked(&mut self, e: Applied) {
        self.acked.push(e);
    }

    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }

    /// A node that became leader of `term` holds every write acknowledged
    /// so far; `log(index)` reads its log: (term, data), `None` if absent.
    pub fn leader_holds_acked(
        &self,
        node: u64,
        term: u64,
        log: impl Fn(u64) -> Option<(u64, Vec<u8>)>,
    ) -> Result<(), Violation> {
        for a in &self.acked {
            let found = log(a.index);
            if found.as_ref() != Some(&(a.term, a.data.clone())) {
                return Err(Violation {
                    invariant: ACKED_IN_LATER_LEADERS,
                    detail: format!(
                        "n{node}, leader of term {term}, has {} at index {} where the acknowledged write {} (term {}) was",
                        found
                            .map(|(t, d)| format!("{} (term {t})", show(&d)))
                            .unwrap_or_else(|| "nothing".into()),
                        a.index,
                        show(&a.data),
                        a.term
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64, data: &str) -> Applied {
        Applied {
            index,
            term,
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn two_leaders_of_one_term_break_election_safety() {
        let mut inv = Invariants::default();
        inv.became_leader(1, 2).expect("first");
        inv.became_leader(1, 2).expect("the same node again");
        inv.became_leader(2, 3).expect("another term");
        let v = inv
            .became_leader(3, 2)
            .expect_err("second leader of term 2");
        assert_eq!(v.invariant, ONE_LEADER_PER_TERM);
    }

    #[test]
    fn a_second_vote_in_one_term_is_caught() {
        let mut inv = Invariants::default();
        inv.voted(1, 4, 2).expect("first");
        inv.voted(1, 4, 2).expect("the same vote again (a resend)");
        inv.voted(1, 5, 3).expect("another term");
        let v = inv.voted(1, 4, 3).expect_err("another candidate");
        assert_eq!(v.invariant, ONE_VOTE_PER_TERM);
    }

    #[test]
    fn a_different_entry_at_an_applied_index_is_caught() {
        let mut inv = Invariants::default();
        inv.applied(1, &e(1, 1, "a")).expect("first");
        inv.applied(2, &e(1, 1, "a")).expect("the same");
        let v = inv.applied(3, &e(1, 2, "b")).expect_err("another");
        assert_eq!(v.invariant, SAME_ENTRY_AT_AN_INDEX);
    }

    #[test]
    fn a_leader_missing_an_acked_write_is_caught() {
        let mut inv = Invariants::default();
        inv.acked(e(2, 1, "w"));
        let log_with = |i: u64| (i == 2).then(|| (1, b"w".to_vec()));
        inv.leader_holds_acked(1, 2, log_with).expect("held");
        let v = inv.leader_holds_acked(2, 3, |_| None).expect_err("missing");
        assert_eq!(v.invariant, ACKED_IN_LATER_LEADERS);
        assert!(Invariants::within_commit(1, 5, 4).is_err());
        assert!(Invariants::within_commit(1, 4, 4).is_ok());
    }
}
