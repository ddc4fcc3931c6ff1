//! Who leads, as this server last heard from raft (its soft state): the
//! role, the leader, and whether a new leader became known since the core
//! last acted on it (it then proposes again what the old one may have
//! lost, and asks its reads again).
//!
//! Only [`RoleView::update`] changes it, once per soft-state change in the
//! Ready loop (`Machine::role_changed`, which also settles what depends on
//! the role: leader-only memory, session deadlines, read-only mode).

use raft::StateRole;

#[derive(Debug)]
pub(super) struct RoleView {
    role: StateRole,
    /// 0: none known.
    leader: u64,
    /// A new leader became known and the core has not acted on it yet.
    leader_changed: bool,
    /// How many times a new leader became known (for `/metrics`).
    leader_changes: u64,
}

/// What one soft-state change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoleChange {
    pub was_leader: bool,
    /// Another leader than the one known before (not "none").
    pub new_leader: bool,
}

impl Default for RoleView {
    fn default() -> Self {
        Self {
            role: StateRole::Follower,
            leader: 0,
            leader_changed: false,
            leader_changes: 0,
        }
    }
}

impl RoleView {
    pub fn role(&self) -> StateRole {
        self.role
    }

    pub fn is_leader(&self) -> bool {
        self.role == StateRole::Leader
    }

    /// The leader this server knows (0: none).
    pub fn leader(&self) -> u64 {
        self.leader
    }

    /// A leader is known and this server is not campaigning.
    pub fn has_leader(&self) -> bool {
        self.leader != 0 && !matches!(self.role, StateRole::Candidate | StateRole::PreCandidate)
    }

    pub fn leader_changes(&self) -> u64 {
        self.leader_changes
    }

    /// Raft's soft state changed to `role` under `leader` (0: none).
    pub fn update(&mut self, role: StateRole, leader: u64) -> RoleChange {
        let change = RoleChange {
            was_leader: self.is_leader(),
            new_leader: leader != 0 && leader != self.leader,
        };
        if change.new_leader {
            self.leader_changed = true;
            self.leader_changes += 1;
        }
        self.role = role;
        self.leader = leader;
        change
    }

    /// Whether a new leader became known since the last call.
    pub fn take_leader_changed(&mut self) -> bool {
        std::mem::take(&mut self.leader_changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_leader_is_counted_once_and_taken_once() {
        let mut v = RoleView::default();
        assert!(!v.has_leader());
        let c = v.update(StateRole::Follower, 2);
        assert!(c.new_leader && !c.was_leader);
        assert!(!v.update(StateRole::Follower, 2).new_leader);
        assert!(v.take_leader_changed());
        assert!(!v.take_leader_changed());
        // Losing the leader is no new leader; a campaign has none.
        assert!(!v.update(StateRole::PreCandidate, 0).new_leader);
        assert!(!v.has_leader());
        let c = v.update(StateRole::Leader, 1);
        assert!(c.new_leader && v.is_leader() && v.has_leader());
        assert!(v.update(StateRole::Follower, 3).was_leader);
        assert_eq!(v.leader_changes(), 3);
    }
}
