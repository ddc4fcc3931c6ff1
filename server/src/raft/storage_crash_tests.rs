//! Tests of [`super`] over the simulator's disk (`MemFiles`, the log in a
//! `FileLog`): what a power loss, a torn write and a damaged journal do
//! to the storage, and that its checks refuse what they must — the same
//! code the simulator runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::raft::files::{Crash, Kept, MemFiles};
use raft::Storage;

fn raft_dir() -> PathBuf {
    PathBuf::from("/node1/raft")
}

fn open(files: &MemFiles) -> Result<DiskStorage, StorageError> {
    DiskStorage::open_on(
        files.as_files(),
        LogKind::Files,
        &raft_dir(),
        Path::new("/node1/snapshots"),
    )
}

fn open_unchecked(files: &MemFiles) -> Result<DiskStorage, StorageError> {
    DiskStorage::open_on_unsafe_unchecked(
        files.as_files(),
        LogKind::Files,
        &raft_dir(),
        Path::new("/node1/snapshots"),
    )
}

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: vec![index as u8; 100].into(),
        ..Default::default()
    }
}

fn log_file(files: &MemFiles) -> PathBuf {
    FileLog::segments(files, &raft_dir())
        .unwrap()
        .pop()
        .expect("a log file")
}

#[test]
fn fjall_is_refused_over_a_simulated_disk() {
    let files = MemFiles::seeded(1);
    let err = DiskStorage::open_on(
        files.as_files(),
        LogKind::Fjall,
        &raft_dir(),
        Path::new("/node1/snapshots"),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("LogKind::Files"), "{err}");
    assert!(
        !Path::new("/node1").exists(),
        "nothing written to the real disk"
    );
}

#[test]
fn a_crash_loses_the_unsynced_entries_and_the_rest_opens() {
    let files = MemFiles::seeded(1);
    {
        let mut s = open(&files).unwrap();
        s.bootstrap(vec![1]).unwrap();
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]).unwrap();
        s.sync().unwrap();
        s.append(&[entry(4, 1), entry(5, 1)]).unwrap();
    }
    files.crash(Crash::LoseUnsynced);
    let s = open(&files).expect("a crash is no damage");
    assert_eq!(s.last_index().unwrap(), 3);
    assert_eq!(s.initial_state().unwrap().conf_state.voters, vec![1]);
}

#[test]
fn a_torn_last_record_is_cut_and_the_log_goes_on_after_it() {
    let files = MemFiles::seeded(1);
    {
        let mut s = open(&files).unwrap();
        s.bootstrap(vec![1]).unwrap();
        s.append(&[entry(1, 1), entry(2, 1)]).unwrap();
        s.sync().unwrap();
        s.append(&[entry(3, 1)]).unwrap();
    }
    let torn = Kept {
        writes: 1,
        torn_bytes: Some(30),
    };
    files.crash(Crash::Exact(BTreeMap::from([(log_file(&files), torn)])));
    {
        let mut s = open(&files).expect("a torn unsynced record is no damage");
        assert_eq!(s.last_index().unwrap(), 2);
        s.append(&[entry(3, 2)]).unwrap();
        s.sync().unwrap();
    }
    files.crash(Crash::LoseUnsynced);
    let s = open(&files).unwrap();
    assert_eq!(
        s.entries(1, 4, None, GetEntriesContext::empty(false))
            .unwrap(),
        vec![entry(1, 1), entry(2, 1), entry(3, 2)]
    );
}

/// 200 synced entries, each its own record.
fn synced_log(files: &MemFiles) {
    let mut s = open(files).unwrap();
    s.bootstrap(vec![1]).unwrap();
    for i in 1..=200u64 {
        s.append(&[entry(i, 1)]).unwrap();
        s.sync().unwrap();
    }
}

#[test]
fn a_flipped_bit_in_the_middle_of_the_log_is_refused_naming_what_is_missing() {
    for percent in [20u64, 40, 60, 80] {
        let files = MemFiles::seeded(percent);
        synced_log(&files);
        let path = log_file(&files);
        let len = files.read(&path).unwrap().len() as u64;
        files.flip_bit(&path, len * percent / 100, 5).unwrap();
        let msg = open(&files).err().expect("refused").to_string();
        assert!(
            msg.contains("entries up to 200 (term 1) were synced, but the log ends at entry")
                && msg.contains("/node1/raft"),
            "{percent}%: {msg}"
        );
        // Without the check the loss goes unseen: that is what it is for.
        let s = open_unchecked(&files).expect("unchecked, it opens");
        let last = s.last_index().unwrap();
        assert!(last < 200, "{percent}%: the log ends at {last}");
    }
}

/// Entries 1-2 and a hard state at term 1 synced, then a vote for 3 in
/// `term` synced after them; the journal's tail (the vote's record) is
/// then damaged on the disk.
fn a_vote_lost_to_a_damaged_tail(files: &MemFiles, term: u64) {
    {
        let mut s = open(files).unwrap();
        s.bootstrap(vec![1, 2, 3]).unwrap();
        s.append(&[entry(1, 1), entry(2, 1)]).unwrap();
        s.set_hard_state(HardState {
            term: 1,
            commit: 2,
            ..Default::default()
        })
        .unwrap();
        s.sync().unwrap();
        s.set_hard_state(HardState {
            term,
            vote: 3,
            commit: 2,
            ..Default::default()
        })
        .unwrap();
        s.sync().unwrap();
    }
    let path = log_file(files);
    let len = files.read(&path).unwrap().len() as u64;
    files.flip_bit(&path, len - 1, 0).unwrap();
}

#[test]
fn a_vote_lost_to_a_damaged_journal_tail_is_refused_at_open() {
    for term in [1, 2] {
        let files = MemFiles::seeded(term);
        a_vote_lost_to_a_damaged_tail(&files, term);
        let msg = open(&files).err().expect("refused").to_string();
        assert!(
            msg.contains(&format!("term {term} with a vote for 3 was synced"))
                && msg.contains("vote twice")
                && msg.contains("/node1/raft/raft-synced"),
            "{msg}"
        );
        assert!(!msg.contains("  "), "one line, single spaces: {msg:?}");
    }
}

/// The defect the check above exists for, shown: with the watermark check
/// off (known-bad), the same damaged journal opens with the vote gone, and
/// this node could vote for another candidate in a term it voted in.
#[test]
fn without_the_watermark_check_a_vote_lost_to_a_damaged_tail_goes_unseen() {
    let files = MemFiles::seeded(2);
    a_vote_lost_to_a_damaged_tail(&files, 2);
    let s = open_unchecked(&files).expect("unchecked, it opens");
    let hs = s.initial_state().unwrap().hard_state;
    assert_eq!(
        (hs.term, hs.vote),
        (1, 0),
        "the vote for 3 in term 2 is gone"
    );
}

/// Found by the simulator (issue 28, `--seed 10582` of 20 s before the
/// fix): after a power loss the mark on disk may be older than the log
/// synced (raising it is not synced), and it stayed so until the server's
/// next write; a server that wrote nothing (cut off from its leader) and
/// was then killed opened a damaged last record as a torn write, losing an
/// entry it had acknowledged. A start now syncs what it found and raises
/// the mark to it, so only the start right after a power loss checks less.
#[test]
fn a_start_raises_the_mark_to_what_it_found_so_a_later_start_checks_it() {
    let files = MemFiles::seeded(3);
    {
        let mut s = open(&files).unwrap();
        s.bootstrap(vec![1]).unwrap();
        for i in 1..=3 {
            s.append(&[entry(i, 1)]).unwrap();
            s.sync().unwrap();
        }
    }
    // The power loss keeps the synced log, not the mark's raises.
    files.crash(Crash::LoseUnsynced);
    {
        let s = open(&files).expect("the synced log opens");
        assert_eq!(s.last_index().unwrap(), 3);
        // Nothing written; the process is killed (the OS keeps its writes).
    }
    let path = log_file(&files);
    let len = files.read(&path).unwrap().len() as u64;
    files.flip_bit(&path, len - 1, 3).unwrap();
    let msg = open(&files).err().expect("refused").to_string();
    assert!(
        msg.contains("entries up to 3 (term 1) were synced, but the log ends at entry 2"),
        "{msg}"
    );
}

#[test]
fn a_seeded_crash_anywhere_opens_with_at_least_what_was_synced() {
    for seed in 0..40u64 {
        let files = MemFiles::seeded(seed);
        // The log may end no earlier than this after a crash: the last
        // synced entry, or where a new leader cut the log back since.
        let mut floor = 0u64;
        let mut synced_term = 0u64;
        {
            let mut s = open(&files).unwrap();
            s.bootstrap(vec![1, 2, 3]).unwrap();
            let mut term = 1;
            let mut last = 0;
            for step in 0..60u64 {
                match (step * 7 + seed) % 5 {
                    0 => {
                        term += 1;
                        s.set_hard_state(HardState {
                            term,
                            vote: 1 + step % 3,
                            commit: s.hard_state().commit,
                            ..Default::default()
                        })
                        .unwrap();
                    }
                    1 if last > 3 => {
                        // A new leader cuts the log back.
                        last -= 2;
                        floor = floor.min(last - 1);
                        s.append(&[entry(last, term)]).unwrap();
                    }
                    2 => {
                        s.sync().unwrap();
                        (floor, synced_term) = (last, term);
                    }
                    _ => {
                        last += 1;
                        s.append(&[entry(last, term)]).unwrap();
                    }
                }
            }
        }
        let report = files.crash(Crash::Seeded);
        let s = open(&files)
            .unwrap_or_else(|e| panic!("seed {seed}: a crash refused as damage: {e}\n{report}"));
        assert!(
            s.last_index().unwrap() >= floor && s.hard_state().term >= synced_term,
            "seed {seed}: synced up to {floor} in term {synced_term}, found last {} term {}\n{report}",
            s.last_index().unwrap(),
            s.hard_state().term
        );
    }
}

#[test]
fn skipping_the_fsync_loses_synced_entries_to_a_crash() {
    for skip in [false, true] {
        let files = MemFiles::seeded(1);
        {
            let mut s = open(&files).unwrap();
            s.bootstrap(vec![1]).unwrap();
            if skip {
                s.set_unsafe_skip_fsync();
            }
            s.append(&[entry(1, 1), entry(2, 1)]).unwrap();
            s.sync().unwrap();
        }
        files.crash(Crash::LoseUnsynced);
        let s = open(&files).unwrap();
        assert_eq!(
            s.last_index().unwrap(),
            if skip { 0 } else { 2 },
            "skip {skip}"
        );
    }
}

#[test]
fn a_forgotten_vote_is_gone_after_a_restart_and_the_watermark_does_not_see_it() {
    for forget in [false, true] {
        let files = MemFiles::seeded(1);
        {
            let mut s = open(&files).unwrap();
            s.bootstrap(vec![1, 2, 3]).unwrap();
            s.set_hard_state(HardState {
                term: 1,
                ..Default::default()
            })
            .unwrap();
            s.sync().unwrap();
            if forget {
                s.set_unsafe_forget_votes();
            }
            s.set_hard_state(HardState {
                term: 2,
                vote: 3,
                ..Default::default()
            })
            .unwrap();
            assert_eq!(
                s.initial_state().unwrap().hard_state.vote,
                3,
                "raft is told"
            );
            s.append(&[entry(1, 2)]).unwrap();
            s.set_commit(1).unwrap();
            s.sync().unwrap();
        }
        // A restart, no power loss: only what was written is read back.
        let s = open(&files).expect("the watermark holds what was written");
        let hs = s.initial_state().unwrap().hard_state;
        let want = if forget { (1, 0, 1) } else { (2, 3, 1) };
        assert_eq!((hs.term, hs.vote, hs.commit), want, "forget {forget}");
    }
}
