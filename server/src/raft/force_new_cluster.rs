//! `warden serve --force-new-cluster`: the way back when a group has lost
//! its quorum for good. The server is made the only voter of its group,
//! keeping everything it has (its log and its tree), as etcd's flag of the
//! same name does.
//!
//! Done on the storage before the raft node starts, the way raft itself
//! would have done it: every entry this server holds is taken as committed
//! (nobody is left to say otherwise), and membership changes are appended
//! after them, in this server's current term, also committed: this server
//! made a voter if it was not one, then every other server that is or may
//! become a member (the conf state's, and any the log's tail adds) removed.
//! All of it is synced before the node starts. Replaying the log then
//! ends, whatever it held, with this server alone; the changes are in the
//! log, so every later start, and every server added back and initialized
//! from this one, sees the same group.
//!
//! It never decides what the data is: nothing of the log is dropped or
//! rewritten, only appended to.

use std::collections::BTreeSet;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};
use raft::{GetEntriesContext, Storage as _};

use super::storage::{DiskStorage, StorageError};

/// What the forced start changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// Servers removed from the group.
    pub removed: Vec<u64>,
    /// This server was a learner (or not a member) and is a voter now.
    pub promoted: bool,
    /// The index of the last change appended (the new commit index).
    pub commit: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ForceError {
    #[error("--force-new-cluster needs this server's data, and its data dir holds none (a server that never ran, or started with --join and never added)")]
    NoData,
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("reading the log: {0}")]
    Raft(#[from] raft::Error),
    #[error("a membership change in the log at index {index} cannot be read: {detail}")]
    BadEntry { index: u64, detail: String },
}

/// Makes server `me` the only voter of the group `storage` holds; `None`
/// if it is one already and the log adds nobody.
///
/// Every server the conf state or the log names as added is removed,
/// also one the log removes again later (removing a server that is not a
/// member changes nothing): each start with the flag makes this server
/// alone, servers added back since included. Hence: once, then without.
pub fn make_sole_voter(storage: &mut DiskStorage, me: u64) -> Result<Option<Forced>, ForceError> {
    if !storage.is_initialized() {
        return Err(ForceError::NoData);
    }
    let state = storage.initial_state()?;
    let conf = state.conf_state;
    let mut hs = state.hard_state;
    let first = storage.first_index()?;
    let last = storage.last_index()?;

    // Everyone who is or may become a member once the log is replayed.
    let mut others: BTreeSet<u64> = conf.voters.iter().chain(&conf.learners).copied().collect();
    let mut promoted = !conf.voters.contains(&me);
    if last >= first {
        for entry in storage.entries(first, last + 1, None, GetEntriesContext::empty(false))? {
            if entry.get_entry_type() != EntryType::EntryConfChange {
                continue;
            }
            let cc = super::wire_guard::decode_conf_change(&entry.data).map_err(|e| {
                ForceError::BadEntry {
                    index: entry.index,
                    detail: e.to_string(),
                }
            })?;
            match cc.get_change_type() {
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                    others.insert(cc.node_id);
                }
                // Removed later in the log: removing it again is a no-op.
                ConfChangeType::RemoveNode => {}
            }
            // The log may yet demote or remove this server: make it a
            // voter again after it all.
            if cc.node_id == me && cc.get_change_type() != ConfChangeType::AddNode {
                promoted = true;
            }
        }
    }
    others.remove(&me);
    others.remove(&0);
    if others.is_empty() && !promoted {
        // Alone already: it commits its log by itself once it leads.
        return Ok(None);
    }

    let term = hs.term.max(storage.term(last)?);
    let change = |kind: ConfChangeType, node_id: u64| ConfChange {
        change_type: kind,
        node_id,
        ..Default::default()
    };
    let mut changes = Vec::new();
    if promoted {
        changes.push(change(ConfChangeType::AddNode, me));
    }
    changes.extend(
        others
            .iter()
            .map(|id| change(ConfChangeType::RemoveNode, *id)),
    );
    let mut entries = Vec::with_capacity(changes.len());
    for (i, cc) in changes.iter().enumerate() {
        let data = cc.write_to_bytes().map_err(|e| StorageError::Corrupt {
            what: "conf change",
            detail: e.to_string(),
        })?;
        let mut e = Entry {
            term,
            index: last + 1 + i as u64,
            data: data.into(),
            ..Default::default()
        };
        e.set_entry_type(EntryType::EntryConfChange);
        entries.push(e);
    }
    storage.append(&entries)?;
    let commit = last + entries.len() as u64;
    hs.term = term;
    hs.commit = commit;
    storage.set_hard_state(hs)?;
    storage.sync()?;
    Ok(Some(Forced {
        removed: others.into_iter().collect(),
        promoted,
        commit,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::HardState;

    fn open(dir: &std::path::Path) -> DiskStorage {
        DiskStorage::open(&dir.join("raft"), &dir.join("snapshots")).unwrap()
    }

    fn conf_entry(index: u64, kind: ConfChangeType, id: u64) -> Entry {
        let cc = ConfChange {
            change_type: kind,
            node_id: id,
            ..Default::default()
        };
        let mut e = Entry {
            term: 2,
            index,
            data: cc.write_to_bytes().unwrap().into(),
            ..Default::default()
        };
        e.set_entry_type(EntryType::EntryConfChange);
        e
    }

    fn normal(index: u64) -> Entry {
        Entry {
            term: 2,
            index,
            data: b"x".to_vec().into(),
            ..Default::default()
        }
    }

    fn changes(s: &DiskStorage, from: u64) -> Vec<(ConfChangeType, u64)> {
        let last = s.last_index().unwrap();
        s.entries(from, last + 1, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| {
                assert_eq!(e.get_entry_type(), EntryType::EntryConfChange);
                let cc = ConfChange::parse_from_bytes(&e.data).unwrap();
                (cc.get_change_type(), cc.node_id)
            })
            .collect()
    }

    #[test]
    fn every_other_member_is_removed_after_the_whole_log_durably() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = open(dir.path());
            s.bootstrap(vec![1, 2, 3]).unwrap();
            // The tail adds 4 (uncommitted here) and a learner 5.
            s.append(&[
                normal(1),
                normal(2),
                conf_entry(3, ConfChangeType::AddNode, 4),
                conf_entry(4, ConfChangeType::AddLearnerNode, 5),
                normal(5),
            ])
            .unwrap();
            s.set_hard_state(HardState {
                term: 3,
                vote: 2,
                commit: 2,
                ..Default::default()
            })
            .unwrap();
            s.sync().unwrap();
            let forced = make_sole_voter(&mut s, 1).unwrap().unwrap();
            assert_eq!(forced.removed, [2, 3, 4, 5]);
            assert!(!forced.promoted);
            assert_eq!(forced.commit, 9);
        }
        // After a restart: the log is whole, the changes follow it in the
        // current term, and everything is committed.
        let s = open(dir.path());
        assert_eq!(s.last_index().unwrap(), 9);
        assert_eq!(s.hard_state().commit, 9);
        assert_eq!(s.term(9).unwrap(), 3);
        assert_eq!(
            changes(&s, 6),
            [
                (ConfChangeType::RemoveNode, 2),
                (ConfChangeType::RemoveNode, 3),
                (ConfChangeType::RemoveNode, 4),
                (ConfChangeType::RemoveNode, 5)
            ]
        );
    }

    #[test]
    fn a_learner_is_made_a_voter_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        s.bootstrap(vec![1, 2]).unwrap();
        s.set_conf_state(raft::eraftpb::ConfState {
            voters: vec![1, 2],
            learners: vec![3],
            ..Default::default()
        })
        .unwrap();
        s.append(&[normal(1)]).unwrap();
        s.set_hard_state(HardState {
            term: 2,
            vote: 0,
            commit: 1,
            ..Default::default()
        })
        .unwrap();
        let forced = make_sole_voter(&mut s, 3).unwrap().unwrap();
        assert!(forced.promoted);
        assert_eq!(forced.removed, [1, 2]);
        assert_eq!(
            changes(&s, 2),
            [
                (ConfChangeType::AddNode, 3),
                (ConfChangeType::RemoveNode, 1),
                (ConfChangeType::RemoveNode, 2)
            ]
        );
    }

    #[test]
    fn a_sole_voter_with_everything_committed_is_left_alone_and_no_data_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        assert!(matches!(
            make_sole_voter(&mut s, 1),
            Err(ForceError::NoData)
        ));
        s.bootstrap(vec![1]).unwrap();
        s.append(&[normal(1)]).unwrap();
        s.set_hard_state(HardState {
            term: 2,
            vote: 1,
            commit: 1,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(make_sole_voter(&mut s, 1).unwrap(), None);
    }
}
