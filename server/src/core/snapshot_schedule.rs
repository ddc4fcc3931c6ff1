//! When this server snapshots its tree and compacts its log: the room
//! that counts what was applied since the latest snapshot, knows the
//! latest one taken (or being built) and its size, remembers that a new
//! member wants a snapshot including it at once, and what the leader last
//! said every member has (a follower compacts its own log no further).
//!
//! `Core::drive` asks it after every turn; the Ready loop's side
//! (`Machine`) tells it what applied and what was installed.

/// See the module docs.
#[derive(Debug)]
pub(super) struct SnapshotSchedule {
    /// `--snapshot-entries`, `--snapshot-bytes`.
    every_entries: u64,
    every_bytes: u64,
    /// The index of the latest snapshot taken or being built.
    last_index: u64,
    /// Size of the last snapshot this server took, in bytes.
    last_bytes: u64,
    /// Bytes of entries applied since the latest snapshot.
    applied_bytes: u64,
    /// A member was added: a snapshot that includes it is taken at once,
    /// so the new member can be initialized from it.
    member_added: bool,
    /// Set every tick and after a snapshot: the log is compacted after the
    /// next Ready loop.
    compaction_due: bool,
    /// What the leader last said every member has in its log.
    leader_floor: u64,
}

impl SnapshotSchedule {
    /// `applied`: the index the tree was restored at.
    pub fn new(every_entries: u64, every_bytes: u64, applied: u64) -> Self {
        Self {
            every_entries,
            every_bytes,
            last_index: applied,
            last_bytes: 0,
            applied_bytes: 0,
            member_added: false,
            compaction_due: false,
            leader_floor: 0,
        }
    }

    /// An entry of `bytes` applied.
    pub fn applied(&mut self, bytes: u64) {
        self.applied_bytes += bytes;
    }

    /// A leader's snapshot was installed: the bytes count from it.
    pub fn installed(&mut self) {
        self.applied_bytes = 0;
    }

    pub fn member_added(&mut self) {
        self.member_added = true;
    }

    /// Whether a member was added since the last call.
    pub fn take_member_added(&mut self) -> bool {
        std::mem::take(&mut self.member_added)
    }

    /// Whether a snapshot is due at `applied`, counted from the latest
    /// snapshot, this server's or the leader's installed at `installed`
    /// (a million-znode snapshot is not taken again at once).
    pub fn due(&self, applied: u64, installed: u64) -> bool {
        let latest = self.last_index.max(installed);
        applied >= latest + self.every_entries || self.applied_bytes >= self.every_bytes
    }

    /// The latest snapshot taken or being built.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// A snapshot at `index` is started (or built at once).
    pub fn started(&mut self, index: u64) {
        self.last_index = index;
        self.applied_bytes = 0;
    }

    /// A snapshot of `bytes` is durable and recorded: the log may shrink.
    pub fn recorded(&mut self, bytes: u64) {
        self.last_bytes = bytes;
        self.compaction_due = true;
    }

    pub fn last_bytes(&self) -> u64 {
        self.last_bytes
    }

    /// A tick: the log is looked at after the next Ready loop.
    pub fn tick(&mut self) {
        self.compaction_due = true;
    }

    /// Whether the log is to be looked at now.
    pub fn take_compaction_due(&mut self) -> bool {
        std::mem::take(&mut self.compaction_due)
    }

    pub fn leader_floor(&self) -> u64 {
        self.leader_floor
    }

    /// The leader says every member has its log from `floor` on.
    pub fn set_leader_floor(&mut self, floor: u64) {
        self.leader_floor = floor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_by_entries_from_the_latest_snapshot_or_by_bytes() {
        let mut s = SnapshotSchedule::new(100, 1_000, 50);
        assert!(!s.due(149, 0));
        assert!(s.due(150, 0));
        assert!(!s.due(150, 120), "a leader's snapshot at 120 counts");
        s.applied(999);
        assert!(!s.due(60, 0));
        s.applied(1);
        assert!(s.due(60, 0));
        s.started(60);
        assert!(!s.due(61, 0) && s.last_index() == 60);
        s.applied(2_000);
        s.installed();
        assert!(!s.due(61, 0), "bytes count from the installed snapshot");
    }

    #[test]
    fn flags_are_taken_once() {
        let mut s = SnapshotSchedule::new(1, 1, 0);
        s.member_added();
        assert!(s.take_member_added() && !s.take_member_added());
        s.recorded(42);
        assert_eq!(s.last_bytes(), 42);
        assert!(s.take_compaction_due() && !s.take_compaction_due());
        s.tick();
        assert!(s.take_compaction_due());
    }
}
