//! Tests of [`super`]: the log, hard state, snapshots and the synced
//! watermark on a real fjall database in a temp dir, and those of what
//! the storage keeps on the simulator's disk as well ([`Disk::both`]).

use super::*;
use crate::raft::files::MemFiles;
use crate::raft::logstore::log_key;
use crate::raft::snapfile;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use raft::Storage;

const KEY_HARD_STATE: &[u8] = b"hard_state";
const KEY_LEGACY_SNAPSHOT: &[u8] = b"snapshot";
const KEY_LOG_BASE: &[u8] = b"log_base";

fn open(dir: &Path) -> Result<DiskStorage, StorageError> {
    DiskStorage::open(&dir.join("raft"), &dir.join("snapshots"))
}

/// Where a test's storage lives: the server's (a temp dir, fjall, opened
/// by [`DiskStorage::open`]) or the simulator's (`MemFiles`, the file log).
/// The tests of what the storage keeps run on both.
enum Disk {
    Os(tempfile::TempDir),
    Mem(MemFiles),
}

impl Disk {
    fn both() -> [Disk; 2] {
        [
            Disk::Os(tempfile::tempdir().unwrap()),
            Disk::Mem(MemFiles::seeded(1)),
        ]
    }

    fn open(&self) -> Result<DiskStorage, StorageError> {
        match self {
            Disk::Os(dir) => open(dir.path()),
            Disk::Mem(files) => DiskStorage::open_on(
                files.as_files(),
                LogKind::Files,
                Path::new("/n/raft"),
                Path::new("/n/snapshots"),
            ),
        }
    }

    fn files(&self) -> Arc<dyn Files> {
        match self {
            Disk::Os(_) => files::os(),
            Disk::Mem(files) => files.as_files(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Disk::Os(_) => "OsFiles + fjall",
            Disk::Mem(_) => "MemFiles + file log",
        }
    }
}

/// Writes a whole file durably, as the snapshot receiver leaves one.
fn write_file(disk: &Disk, path: &Path, bytes: &[u8]) {
    let mut f = disk.files().create(path).unwrap();
    f.append(bytes).unwrap();
    f.sync_all().unwrap();
}

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry {
        index,
        term,
        data: data.to_vec().into(),
        ..Default::default()
    }
}

#[test]
fn entries_hard_state_and_snapshot_survive_reopen() {
    for disk in Disk::both() {
        {
            let mut s = disk.open().unwrap();
            assert!(!s.is_initialized());
            s.bootstrap(vec![1]).unwrap();
            s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 2, b"c")])
                .unwrap();
            s.set_hard_state(HardState {
                term: 2,
                commit: 3,
                ..Default::default()
            })
            .unwrap();
            s.sync().unwrap();
            s.store_snapshot(2, b"tree@2".to_vec()).unwrap();
            assert_eq!(
                s.first_index().unwrap(),
                1,
                "a snapshot alone drops no entry"
            );
            assert_eq!(s.compact_log(2, u64::MAX).unwrap(), Some(3));
        }
        let s = disk.open().unwrap();
        assert!(s.is_initialized());
        assert_eq!(s.initial_state().unwrap().hard_state.commit, 3);
        assert_eq!(s.initial_state().unwrap().conf_state.voters, vec![1]);
        assert_eq!(s.first_index().unwrap(), 3);
        assert_eq!(s.last_index().unwrap(), 3);
        assert_eq!(s.term(2).unwrap(), 1);
        assert_eq!(s.term(3).unwrap(), 2);
        assert!(s.term(1).is_err());
        let got = s
            .entries(3, 4, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got, vec![entry(3, 2, b"c")]);
        let snap = s.load_snapshot().unwrap().unwrap();
        assert_eq!(&snap.data[..], b"tree@2");
        assert_eq!(snap.get_metadata().index, 2);
    }
}

#[test]
fn append_replaces_conflicting_suffix() {
    for disk in Disk::both() {
        let mut s = disk.open().unwrap();
        s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")])
            .unwrap();
        s.append(&[entry(2, 2, b"B")]).unwrap();
        assert_eq!(s.last_index().unwrap(), 2, "{}", disk.name());
        assert_eq!(s.term(2).unwrap(), 2);
        let got = s
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got, vec![entry(1, 1, b"a"), entry(2, 2, b"B")]);
        drop(s);
        let s = disk.open().unwrap();
        assert_eq!(s.last_index().unwrap(), 2, "{}", disk.name());
    }
}

#[test]
fn entries_respect_max_size_but_return_at_least_one() {
    for disk in Disk::both() {
        let mut s = disk.open().unwrap();
        s.append(&[entry(1, 1, &[0; 100]), entry(2, 1, &[0; 100])])
            .unwrap();
        let got = s
            .entries(1, 3, Some(1), GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got.len(), 1);
        let got = s
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got.len(), 2);
    }
}

#[test]
fn the_log_outlives_its_snapshot_until_followers_have_it_or_it_is_too_big() {
    for disk in Disk::both() {
        let mut s = disk.open().unwrap();
        s.bootstrap(vec![1]).unwrap();
        let entries: Vec<Entry> = (1..=10).map(|i| entry(i, 1, &[0; 100])).collect();
        s.append(&entries).unwrap();
        let per_entry = s.log_bytes() / 10;
        s.store_snapshot(8, b"tree@8".to_vec()).unwrap();
        // A follower at 3: entries after it stay, though the snapshot is at 8.
        assert_eq!(s.compact_log(3, u64::MAX).unwrap(), Some(4));
        assert_eq!(s.term(3).unwrap(), 1);
        assert!(s.term(2).is_err());
        assert_eq!(
            s.entries(4, 11, None, GetEntriesContext::empty(false))
                .unwrap()
                .len(),
            7
        );
        // Never past the snapshot, whatever the floor says.
        assert_eq!(s.compact_log(10, u64::MAX).unwrap(), Some(9));
        assert_eq!(s.compact_log(10, u64::MAX).unwrap(), None);
        // Reopened: the log starts where it was compacted to.
        drop(s);
        let mut s = disk.open().unwrap();
        assert_eq!(s.first_index().unwrap(), 9);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(s.log_bytes(), 2 * per_entry);
        assert_eq!(s.snapshot(0, 0).unwrap().get_metadata().index, 8);
        // Too big: compacted past a far-behind floor, up to the snapshot.
        let more: Vec<Entry> = (11..=20).map(|i| entry(i, 1, &[0; 100])).collect();
        s.append(&more).unwrap();
        s.store_snapshot(18, b"tree@18".to_vec()).unwrap();
        assert_eq!(s.compact_log(0, 5 * per_entry).unwrap(), Some(16));
        assert_eq!(s.log_bytes(), 5 * per_entry);
        assert_eq!(s.compact_log(0, 0).unwrap(), Some(19));
        assert_eq!(s.first_index().unwrap(), 19);
    }
}

/// Every journal file of a storage's data dir, largest first.
fn journals(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = walk(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).unwrap().len()));
    found
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// 200 synced entries of 100 bytes, nothing committed (a follower's
/// acknowledged but not yet committed tail).
fn synced_log(dir: &Path) {
    let mut s = open(dir).unwrap();
    s.bootstrap(vec![1]).unwrap();
    for i in 1..=200u64 {
        s.append(&[entry(i, 1, &[i as u8; 100])]).unwrap();
        s.sync().unwrap();
    }
}

#[test]
fn a_journal_that_lost_synced_entries_refuses_to_open() {
    for percent in [20u64, 40, 60, 80] {
        let dir = tempfile::tempdir().unwrap();
        synced_log(dir.path());
        let journal = journals(dir.path()).into_iter().next().expect("a journal");
        let mut bytes = std::fs::read(&journal).unwrap();
        // fjall preallocates its journal: flip within what was written.
        let written = bytes
            .iter()
            .rposition(|b| *b != 0)
            .expect("a written journal")
            + 1;
        let at = (written as u64 * percent / 100) as usize;
        bytes[at] ^= 0x5a;
        std::fs::write(&journal, &bytes).unwrap();
        // fjall's own refusal, or ours naming the journal.
        if let Ok(s) = open(dir.path()) {
            panic!(
                "byte {at} of {} ({percent}%) flipped: opened with the log ending at {} of 200",
                journal.display(),
                s.last_index().unwrap()
            );
        }
    }
}

#[test]
fn a_log_cut_back_by_a_new_leader_is_not_a_loss() {
    for disk in Disk::both() {
        {
            let mut s = disk.open().unwrap();
            s.bootstrap(vec![1]).unwrap();
            s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")])
                .unwrap();
            s.sync().unwrap();
            // A new leader replaces 2..3 with a shorter suffix of its term.
            s.append(&[entry(2, 2, b"B")]).unwrap();
            s.sync().unwrap();
        }
        let s = disk.open().expect("a cut log opens");
        assert_eq!(s.last_index().unwrap(), 2, "{}", disk.name());
        assert_eq!(s.term(2).unwrap(), 2);
    }
}

#[test]
fn a_log_that_lost_its_synced_tail_is_refused_naming_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    synced_log(dir.path());
    {
        // The disk loses the last 50 entries (a dropped journal tail).
        let db = Database::builder(dir.path().join("raft")).open().unwrap();
        let log = db
            .keyspace("raft_log", KeyspaceCreateOptions::default)
            .unwrap();
        for i in 151..=200u64 {
            log.remove(log_key(i)).unwrap();
        }
        db.persist(PersistMode::SyncAll).unwrap();
    }
    let msg = open(dir.path()).err().expect("refused").to_string();
    assert!(
        msg.contains("entries up to 200") && msg.contains("ends at entry 150"),
        "{msg}"
    );
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
}

/// The journal loses the hard state written after the last entry (its
/// damaged tail): `hs` is put back in its place.
fn journal_loses_the_hard_state(dir: &Path, hs: &HardState) {
    let db = Database::builder(dir.join("raft")).open().unwrap();
    let meta = db
        .keyspace("raft_meta", KeyspaceCreateOptions::default)
        .unwrap();
    meta.insert(KEY_HARD_STATE, hs.write_to_bytes().unwrap())
        .unwrap();
    db.persist(PersistMode::SyncAll).unwrap();
}

#[test]
fn a_journal_that_lost_a_synced_vote_refuses_to_open_naming_the_files() {
    let before = HardState {
        term: 1,
        commit: 2,
        ..Default::default()
    };
    for lost_term in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = open(dir.path()).unwrap();
            s.bootstrap(vec![1, 2, 3]).unwrap();
            s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            s.set_hard_state(before.clone()).unwrap();
            s.sync().unwrap();
            // A vote, synced after the last entry, answered to candidate 3.
            s.set_hard_state(HardState {
                term: if lost_term { 2 } else { 1 },
                vote: 3,
                commit: 2,
                ..Default::default()
            })
            .unwrap();
            s.sync().unwrap();
        }
        journal_loses_the_hard_state(dir.path(), &before);
        let msg = open(dir.path()).err().expect("refused").to_string();
        assert!(
            msg.contains("vote for 3") && msg.contains("vote twice"),
            "{msg}"
        );
        let watermark = dir
            .path()
            .join("raft")
            .join(super::super::watermark::WATERMARK_FILE);
        assert!(msg.contains(&watermark.display().to_string()), "{msg}");
        assert!(
            msg.contains(&dir.path().join("raft").display().to_string()),
            "{msg}"
        );
    }
}

#[test]
fn a_later_term_or_vote_than_the_mark_is_no_loss() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = open(dir.path()).unwrap();
        s.bootstrap(vec![1, 2, 3]).unwrap();
        s.append(&[entry(1, 1, b"a")]).unwrap();
        s.set_hard_state(HardState {
            term: 1,
            ..Default::default()
        })
        .unwrap();
        s.sync().unwrap();
    }
    // Written and synced by fjall, the watermark not raised yet (a stop
    // between the two): newer than the mark, not older.
    journal_loses_the_hard_state(
        dir.path(),
        &HardState {
            term: 1,
            vote: 2,
            ..Default::default()
        },
    );
    open(dir.path()).expect("a vote the mark does not know yet opens");
    journal_loses_the_hard_state(
        dir.path(),
        &HardState {
            term: 4,
            ..Default::default()
        },
    );
    open(dir.path()).expect("a later term opens");
}

#[test]
fn a_store_that_lost_its_watermark_file_refuses_to_open_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    synced_log(dir.path());
    let path = dir
        .path()
        .join("raft")
        .join(super::super::watermark::WATERMARK_FILE);
    std::fs::remove_file(&path).unwrap();
    let msg = open(dir.path()).err().expect("refused").to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("missing"),
        "{msg}"
    );
    std::fs::write(&path, [0u8; 8192]).unwrap();
    let msg = open(dir.path()).err().expect("refused").to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("unreadable"),
        "{msg}"
    );
}

#[test]
fn a_log_missing_committed_entries_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = open(dir.path()).unwrap();
        s.bootstrap(vec![1]).unwrap();
        s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
        s.set_hard_state(HardState {
            term: 1,
            commit: 2,
            ..Default::default()
        })
        .unwrap();
        s.sync().unwrap();
    }
    {
        // The disk loses the last entry (as a dropped journal tail
        // would), the commit index stays.
        let db = Database::builder(dir.path().join("raft")).open().unwrap();
        let log = db
            .keyspace("raft_log", KeyspaceCreateOptions::default)
            .unwrap();
        log.remove(log_key(2)).unwrap();
        db.persist(PersistMode::SyncAll).unwrap();
    }
    let err = open(dir.path()).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("committed") && msg.contains("ends at 1"),
        "{msg}"
    );
}

#[test]
fn a_leader_snapshot_written_before_a_crash_finishes_its_install_on_start() {
    for disk in Disk::both() {
        {
            let mut s = disk.open().unwrap();
            s.bootstrap(vec![1, 2, 3]).unwrap();
            s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")])
                .unwrap();
            s.sync().unwrap();
            // The leader's snapshot at 10 is durable; the process dies
            // before the log it replaces is dropped.
            let mut meta = SnapshotMetadata {
                index: 10,
                term: 2,
                ..Default::default()
            };
            meta.mut_conf_state().voters = vec![1, 2, 3, 4];
            s.snap_dir().write(&meta, b"tree@10").unwrap();
        }
        let s = disk.open().unwrap();
        assert_eq!(s.snapshot_index(), 10);
        assert_eq!(s.first_index().unwrap(), 11);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(s.term(10).unwrap(), 2);
        let state = s.initial_state().unwrap();
        assert_eq!(state.hard_state.commit, 10);
        assert_eq!(state.conf_state.voters, vec![1, 2, 3, 4]);
        assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@10");
    }
}

#[test]
fn a_snapshot_kept_in_fjall_by_an_older_version_becomes_a_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = open(dir.path()).unwrap();
        s.bootstrap(vec![1]).unwrap();
        s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
        s.sync().unwrap();
    }
    {
        let db = Database::builder(dir.path().join("raft")).open().unwrap();
        let meta = db
            .keyspace("raft_meta", KeyspaceCreateOptions::default)
            .unwrap();
        let mut snap = Snapshot {
            data: b"tree@2".to_vec().into(),
            ..Default::default()
        };
        snap.mut_metadata().index = 2;
        snap.mut_metadata().term = 1;
        meta.insert(KEY_LEGACY_SNAPSHOT, snap.write_to_bytes().unwrap())
            .unwrap();
        // The log was never compacted: it starts at the beginning.
        meta.insert(KEY_LOG_BASE, [0u8; 16].to_vec()).unwrap();
        db.persist(PersistMode::SyncAll).unwrap();
    }
    let s = open(dir.path()).unwrap();
    assert_eq!(s.snapshot_index(), 2);
    assert_eq!(s.first_index().unwrap(), 1, "the log stays");
    assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@2");
    assert_eq!(s.snap_dir().list().unwrap(), vec![(2, 1)]);
    assert!(s.store.get_meta(MetaKey::LegacySnapshot).unwrap().is_none());
}

#[test]
fn a_start_loads_the_newest_snapshot_file_and_drops_the_others() {
    for disk in Disk::both() {
        {
            let mut s = disk.open().unwrap();
            s.bootstrap(vec![1]).unwrap();
            let entries: Vec<Entry> = (1..=10).map(|i| entry(i, 1, b"x")).collect();
            s.append(&entries).unwrap();
            s.sync().unwrap();
            s.store_snapshot(4, b"tree@4".to_vec()).unwrap();
            // A build under way when the server stopped: written, never
            // recorded.
            let newer = s.snapshot_meta_at(7).unwrap();
            s.snap_dir().write(&newer, b"tree@7").unwrap();
        }
        let s = disk.open().unwrap();
        assert_eq!(s.snapshot_index(), 7);
        assert_eq!(s.first_index().unwrap(), 1, "the log agrees: it stays");
        assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@7");
        s.remove_older_snapshots().unwrap();
        assert_eq!(s.snap_dir().list().unwrap(), vec![(7, 1)]);
    }
}

#[test]
fn a_snapshot_written_late_never_replaces_a_newer_one() {
    for disk in Disk::both() {
        let mut s = disk.open().unwrap();
        s.bootstrap(vec![1]).unwrap();
        let entries: Vec<Entry> = (1..=10).map(|i| entry(i, 1, b"x")).collect();
        s.append(&entries).unwrap();
        // Taken at 5 on a thread; meanwhile one at 8 is stored.
        let late = s.snapshot_meta_at(5).unwrap();
        s.store_snapshot(8, b"tree@8".to_vec()).unwrap();
        s.snap_dir().write(&late, b"tree@5").unwrap();
        assert!(!s.snapshot_written(late).unwrap());
        assert_eq!(s.snapshot_index(), 8);
        assert_eq!(s.snap_dir().list().unwrap(), vec![(8, 1)]);
        // One at the same index (a follower's own, after installing the
        // leader's there) leaves the current file in place.
        let same = s.snapshot_meta_at(8).unwrap();
        s.snap_dir().write(&same, b"tree@8").unwrap();
        assert!(!s.snapshot_written(same).unwrap());
        assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@8");
        // One newer replaces it, and the older file goes.
        let newer = s.snapshot_meta_at(10).unwrap();
        s.snap_dir().write(&newer, b"tree@10").unwrap();
        assert!(s.snapshot_written(newer).unwrap());
        assert_eq!(s.snap_dir().list().unwrap(), vec![(10, 1)]);
        assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@10");
        // Raft's snapshot for a follower describes the file (it is streamed).
        let file = disk.files().read(&s.snapshot_path()).unwrap();
        let sent = s.snapshot(0, 0).unwrap();
        assert_eq!(sent.get_metadata().index, 10);
        let d = crate::raft::snapstream::Descriptor::parse(&sent.data)
            .expect("a descriptor")
            .unwrap();
        assert_eq!(d.file_bytes, file.len() as u64);
        let trailer = u64::from_le_bytes(file[file.len() - 8..].try_into().unwrap());
        assert_eq!(d.checksum, trailer);
    }
}

#[test]
fn a_received_snapshot_file_replaces_the_whole_log_and_survives_reopen() {
    for disk in Disk::both() {
        let mut meta = SnapshotMetadata {
            index: 10,
            term: 2,
            ..Default::default()
        };
        meta.mut_conf_state().voters = vec![1, 2, 3];
        {
            let mut s = disk.open().unwrap();
            s.bootstrap(vec![1, 2, 3]).unwrap();
            // A log of another term that runs past the snapshot: all of it
            // goes, the entries after 10 too.
            let entries: Vec<Entry> = (1..=20).map(|i| entry(i, 1, b"old")).collect();
            s.append(&entries).unwrap();
            s.sync().unwrap();
            // Received and fsynced under a temporary name, as the receiver
            // leaves it.
            let tmp = s.snap_dir().receive_path(10, 2, 1);
            write_file(&disk, &tmp, &snapfile::encode(&meta, b"tree@10").unwrap());
            s.install_snapshot_file(&meta, &tmp).unwrap();
            assert!(disk.files().read(&tmp).is_err(), "renamed into place");
            assert_eq!(s.snapshot_index(), 10);
            assert_eq!(s.first_index().unwrap(), 11);
            assert_eq!(s.last_index().unwrap(), 10);
            // One no newer is dropped, its file removed.
            let tmp = s.snap_dir().receive_path(10, 2, 2);
            write_file(&disk, &tmp, b"whatever");
            s.install_snapshot_file(&meta, &tmp).unwrap();
            assert!(disk.files().read(&tmp).is_err());
            s.append(&[entry(11, 2, b"new")]).unwrap();
            s.sync().unwrap();
        }
        let s = disk.open().unwrap();
        assert_eq!(s.first_index().unwrap(), 11);
        assert_eq!(s.last_index().unwrap(), 11);
        assert_eq!(s.term(10).unwrap(), 2);
        assert_eq!(s.term(11).unwrap(), 2);
        assert_eq!(
            s.entries(11, 12, None, GetEntriesContext::empty(false))
                .unwrap(),
            vec![entry(11, 2, b"new")]
        );
        assert_eq!(&s.load_snapshot().unwrap().unwrap().data[..], b"tree@10");
        assert_eq!(s.snap_dir().list().unwrap(), vec![(10, 2)]);
    }
}
