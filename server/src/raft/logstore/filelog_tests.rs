//! Tests of [`super::FileLog`] over `MemFiles`: what a crash, a torn
//! record and a damaged one leave, and the checkpoint.

use std::collections::BTreeMap;

use super::*;
use crate::raft::files::{Crash, Kept, MemFiles};

fn dir() -> PathBuf {
    PathBuf::from("/node/raft")
}

/// Everything the log holds: entries by index, then the metadata.
fn contents(log: &FileLog) -> (BTreeMap<u64, Vec<u8>>, BTreeMap<MetaKey, Vec<u8>>) {
    let mut entries = BTreeMap::new();
    let mut index = 0;
    log.scan(0, None, &mut |b| {
        index += 1;
        entries.insert(u64::from(b[0]), b.to_vec());
        Ok(true)
    })
    .unwrap();
    assert_eq!(index, entries.len());
    (entries, log.meta.clone())
}

fn batch_of(indexes: std::ops::RangeInclusive<u64>) -> LogBatch {
    let mut b = LogBatch::default();
    for i in indexes {
        b.put_entry(i, vec![i as u8; 10]);
    }
    b
}

fn the_file(files: &MemFiles) -> PathBuf {
    FileLog::segments(files, &dir()).unwrap().pop().unwrap()
}

#[test]
fn synced_writes_survive_a_crash_and_unsynced_ones_do_not() {
    let files = MemFiles::seeded(1);
    let mut log = FileLog::open(files.as_files(), &dir()).unwrap();
    log.write(&mut batch_of(1..=3)).unwrap();
    log.put_meta(MetaKey::HardState, b"hs1".to_vec()).unwrap();
    log.persist(Persist::SyncData).unwrap();
    log.write(&mut batch_of(4..=5)).unwrap();
    log.put_meta(MetaKey::HardState, b"hs2".to_vec()).unwrap();
    // A restart without a power loss keeps it all.
    drop(log);
    let log = FileLog::open(files.as_files(), &dir()).unwrap();
    assert_eq!(contents(&log).0.len(), 5);
    assert_eq!(log.get_meta(MetaKey::HardState).unwrap().unwrap(), b"hs2");
    drop(log);
    files.crash(Crash::LoseUnsynced);
    let log = FileLog::open(files.as_files(), &dir()).unwrap();
    let (entries, meta) = contents(&log);
    assert_eq!(entries.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(meta[&MetaKey::HardState], b"hs1");
}

#[test]
fn a_torn_last_record_is_cut_and_the_next_write_follows_the_whole_ones() {
    let files = MemFiles::seeded(1);
    let mut log = FileLog::open(files.as_files(), &dir()).unwrap();
    log.write(&mut batch_of(1..=2)).unwrap();
    log.persist(Persist::SyncData).unwrap();
    log.write(&mut batch_of(3..=4)).unwrap();
    drop(log);
    let torn = Kept {
        writes: 1,
        torn_bytes: Some(20),
    };
    files.crash(Crash::Exact(BTreeMap::from([(the_file(&files), torn)])));
    let mut log = FileLog::open(files.as_files(), &dir()).unwrap();
    assert_eq!(contents(&log).0.len(), 2, "the torn batch is gone whole");
    log.write(&mut batch_of(3..=3)).unwrap();
    log.persist(Persist::SyncData).unwrap();
    drop(log);
    let log = FileLog::open(files.as_files(), &dir()).unwrap();
    assert_eq!(
        contents(&log).0.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

#[test]
fn a_damaged_record_drops_it_and_everything_after() {
    let files = MemFiles::seeded(1);
    let mut log = FileLog::open(files.as_files(), &dir()).unwrap();
    for i in 1..=10 {
        log.write(&mut batch_of(i..=i)).unwrap();
    }
    log.persist(Persist::SyncData).unwrap();
    let path = the_file(&files);
    let len = files.read(&path).unwrap().len() as u64;
    drop(log);
    // A bit in the middle of the file (inside the 5th or 6th record).
    files.flip_bit(&path, len / 2, 3).unwrap();
    let log = FileLog::open(files.as_files(), &dir()).unwrap();
    let kept = contents(&log).0.len();
    assert!((4..=5).contains(&kept), "{kept} of 10 entries kept");
    assert_eq!(
        files.read(&path).unwrap().len() as u64,
        len,
        "the damage is left in place until a write"
    );
}

#[test]
fn a_checkpoint_compacts_the_head_and_a_crash_anywhere_keeps_a_prefix() {
    for seed in 0..30u64 {
        let files = MemFiles::seeded(seed);
        let mut log = FileLog::open_with(files.as_files(), &dir(), 2_000).unwrap();
        // States after each batch; the synced ones must all survive.
        let mut states = vec![contents(&log)];
        let mut synced = 0;
        for i in 1..=120u64 {
            log.write(&mut batch_of(i..=i)).unwrap();
            states.push(contents(&log));
            if i > 20 {
                let mut b = LogBatch::default();
                b.remove_entries(i - 20, i - 20);
                b.put_meta(MetaKey::LogBase, (i - 20).to_be_bytes().to_vec());
                log.write(&mut b).unwrap();
            }
            states.push(contents(&log));
            if (i + seed) % 7 == 0 {
                log.persist(Persist::SyncData).unwrap();
                synced = states.len() - 1;
            }
        }
        assert!(log.seq > 3, "checkpointed ({} files so far)", log.seq);
        assert_eq!(FileLog::segments(&files, &dir()).unwrap().len(), 1);
        drop(log);
        let report = files.crash(Crash::Seeded);
        let log = FileLog::open_with(files.as_files(), &dir(), 2_000).unwrap();
        let found = contents(&log);
        let at = states.iter().rposition(|s| *s == found).unwrap_or_else(|| {
            panic!(
                "seed {seed}: not a state the log was in: {:?} {:?}\n{report}",
                found.0.keys().collect::<Vec<_>>(),
                found.1
            )
        });
        assert!(at >= synced, "seed {seed}: state {at}, synced {synced}");
    }
}
