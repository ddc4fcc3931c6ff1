//! Tests of [`super::MemFiles`]: what a crash keeps, and the faults.

use super::*;

fn disk() -> (MemFiles, PathBuf) {
    let files = MemFiles::seeded(7);
    let dir = PathBuf::from("/data/raft");
    files.create_dir_all(&dir).unwrap();
    (files, dir)
}

/// A file created, written, synced, its directory synced: durable.
fn durable_file(files: &MemFiles, path: &Path, bytes: &[u8]) {
    let mut f = files.create(path).unwrap();
    f.append(bytes).unwrap();
    f.sync_data().unwrap();
    files.sync_dir(path.parent().unwrap()).unwrap();
}

#[test]
fn a_crash_loses_what_was_not_synced_and_keeps_what_was() {
    let (files, dir) = disk();
    let path = dir.join("log");
    durable_file(&files, &path, b"synced;");
    let mut f = files.open(&path).unwrap();
    f.append(b"unsynced").unwrap();
    f.write_all_at(b"S", 0).unwrap();
    assert_eq!(
        files.read(&path).unwrap(),
        b"Synced;unsynced",
        "reads see all"
    );
    assert_eq!(files.unsynced_writes(&path).unwrap(), 2);
    let report = files.crash(Crash::LoseUnsynced);
    assert_eq!(report.files, vec![(path.clone(), 2, Kept::default())]);
    assert_eq!(files.read(&path).unwrap(), b"synced;");
    // The handle belonged to the process that died.
    let err = f.append(b"late").unwrap_err();
    assert!(err.to_string().contains("before a crash"), "{err}");
    assert_eq!(files.read(&path).unwrap(), b"synced;");
}

#[test]
fn names_are_durable_only_once_their_directory_is_synced() {
    let (files, dir) = disk();
    // Created and synced, the directory not: the file is gone.
    let mut f = files.create(&dir.join("new")).unwrap();
    f.append(b"data").unwrap();
    f.sync_data().unwrap();
    drop(f);
    files.crash(Crash::LoseUnsynced);
    assert_eq!(files.list(&dir).unwrap(), Vec::<OsString>::new());

    // A rename and a removal, not synced: undone by a crash.
    durable_file(&files, &dir.join("a"), b"A");
    durable_file(&files, &dir.join("b"), b"B");
    files.rename(&dir.join("a"), &dir.join("c")).unwrap();
    files.remove(&dir.join("b")).unwrap();
    assert_eq!(files.list(&dir).unwrap(), vec![OsString::from("c")]);
    let report = files.crash(Crash::LoseUnsynced);
    assert_eq!(report.dirs, vec![(dir.clone(), 2, 0)]);
    assert_eq!(
        files.list(&dir).unwrap(),
        vec![OsString::from("a"), OsString::from("b")]
    );
    assert_eq!(files.read(&dir.join("a")).unwrap(), b"A");

    // Synced: they stay.
    files.rename(&dir.join("a"), &dir.join("b")).unwrap();
    files.sync_dir(&dir).unwrap();
    files.crash(Crash::LoseUnsynced);
    assert_eq!(files.list(&dir).unwrap(), vec![OsString::from("b")]);
    assert_eq!(
        files.read(&dir.join("b")).unwrap(),
        b"A",
        "replaced by the rename"
    );
}

#[test]
fn a_crash_can_keep_a_prefix_of_the_writes_with_the_last_torn() {
    let (files, dir) = disk();
    let path = dir.join("log");
    durable_file(&files, &path, b"0123");
    let mut f = files.open(&path).unwrap();
    for chunk in [&b"aaaa"[..], b"bbbb", b"cccc"] {
        f.append(chunk).unwrap();
    }
    let kept = Kept {
        writes: 2,
        torn_bytes: Some(1),
    };
    let report = files.crash(Crash::Exact(BTreeMap::from([(path.clone(), kept)])));
    assert_eq!(report.files, vec![(path.clone(), 3, kept)]);
    assert_eq!(files.read(&path).unwrap(), b"0123aaaab");
}

#[test]
fn a_seeded_crash_keeps_a_prefix_and_the_same_seed_keeps_the_same() {
    let run = |seed: u64| {
        let files = MemFiles::seeded(seed);
        let dir = PathBuf::from("/d");
        files.create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        durable_file(&files, &path, b"");
        let mut f = files.open(&path).unwrap();
        for i in 0..20u8 {
            f.append(&[i; 10]).unwrap();
        }
        let report = files.crash(Crash::Seeded);
        (files.read(&path).unwrap(), report)
    };
    let mut outcomes = BTreeSet::new();
    for seed in 0..40 {
        let (bytes, report) = run(seed);
        assert_eq!((bytes.clone(), report.clone()), run(seed), "seed {seed}");
        // Whole writes in order, then at most one torn.
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(*b, (i / 10) as u8, "seed {seed}: {bytes:?}");
        }
        let kept = report.files[0].2;
        let whole = kept.writes * 10 - (10 - kept.torn_bytes.unwrap_or(10));
        assert_eq!(bytes.len(), if kept.writes == 0 { 0 } else { whole });
        outcomes.insert((kept.writes, kept.torn_bytes.is_some()));
    }
    assert!(
        outcomes.len() > 10,
        "seeds draw different prefixes: {outcomes:?}"
    );
    assert!(outcomes.iter().any(|(_, torn)| *torn), "some tear");
}

#[test]
fn injected_faults_fail_writes_and_syncs_and_flip_bits_on_read() {
    let (files, dir) = disk();
    let path = dir.join("f");
    durable_file(&files, &path, &[0u8; 64]);
    let mut f = files.open(&path).unwrap();
    files.set_faults(Faults {
        write_fail_per_million: 1_000_000,
        ..Faults::default()
    });
    assert!(f.append(b"x").is_err());
    assert_eq!(files.read(&path).unwrap(), [0u8; 64], "nothing written");
    files.set_faults(Faults {
        sync_fail_per_million: 1_000_000,
        ..Faults::default()
    });
    f.write_all_at(b"y", 0).unwrap();
    assert!(f.sync_data().is_err());
    assert!(files.sync_dir(&dir).is_err());
    assert_eq!(files.durable_contents(&path).unwrap(), [0u8; 64]);
    files.set_faults(Faults {
        read_flip_per_million: 1_000_000,
        ..Faults::default()
    });
    let read = files.read(&path).unwrap();
    let mut expected = [0u8; 64];
    expected[0] = b'y';
    let flipped: u32 = read
        .iter()
        .zip(expected)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(flipped, 1, "one bit flipped in what was read");
    files.set_faults(Faults::default());
    assert_eq!(
        files.read(&path).unwrap(),
        expected,
        "the disk kept its bytes"
    );
}

#[test]
fn a_tail_flip_lands_in_the_last_bytes_of_a_whole_file_read_only() {
    let (files, dir) = disk();
    let path = dir.join("f");
    durable_file(&files, &path, &[0u8; 1000]);
    files.set_faults(Faults {
        tail_flip_per_million: 1_000_000,
        ..Faults::default()
    });
    for _ in 0..50 {
        let read = files.read(&path).unwrap();
        let at: Vec<usize> = (0..read.len()).filter(|&i| read[i] != 0).collect();
        assert_eq!(at.len(), 1, "one byte damaged: {at:?}");
        assert!(at[0] >= 1000 - TAIL_BYTES, "in the tail: {at:?}");
        assert_eq!(read[at[0]].count_ones(), 1, "one bit");
    }
    let mut buf = [0u8; 1000];
    files
        .open_read(&path)
        .unwrap()
        .read_exact_at(&mut buf, 0)
        .unwrap();
    assert_eq!(buf, [0u8; 1000], "reads at an offset are not tail reads");
    files.set_faults(Faults::default());
    assert_eq!(
        files.read(&path).unwrap(),
        [0u8; 1000],
        "the disk kept its bytes"
    );
}

#[test]
fn a_flipped_bit_on_the_disk_stays_through_a_crash() {
    let (files, dir) = disk();
    let path = dir.join("f");
    durable_file(&files, &path, b"abcd");
    files.flip_bit(&path, 1, 0).unwrap();
    assert_eq!(files.read(&path).unwrap(), b"accd");
    files.crash(Crash::LoseUnsynced);
    assert_eq!(files.read(&path).unwrap(), b"accd");
    assert!(files.flip_bit(&path, 4, 0).is_err(), "past the end");
}

#[test]
fn a_truncation_is_a_write_like_any_other() {
    let (files, dir) = disk();
    let path = dir.join("f");
    durable_file(&files, &path, b"abcdef");
    let mut f = files.open(&path).unwrap();
    f.set_len(2).unwrap();
    assert_eq!(f.len().unwrap(), 2);
    files.crash(Crash::LoseUnsynced);
    assert_eq!(files.read(&path).unwrap(), b"abcdef");
    // `create` over a file truncates it, unsynced as well.
    let mut f = files.create(&path).unwrap();
    assert_eq!(f.len().unwrap(), 0);
    f.sync_data().unwrap();
    files.crash(Crash::LoseUnsynced);
    assert_eq!(files.read(&path).unwrap(), b"");
}

#[test]
fn a_removed_file_open_elsewhere_stays_readable_and_then_goes() {
    let (files, dir) = disk();
    let path = dir.join("f");
    durable_file(&files, &path, b"abc");
    let f = files.open_read(&path).unwrap();
    files.remove(&path).unwrap();
    files.sync_dir(&dir).unwrap();
    let mut buf = [0u8; 3];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"abc");
    assert!(files.read(&path).is_err());
    drop(f);
    assert_eq!(
        format!("{files:?}"),
        "MemFiles { dirs: 3, files: 0, crashes: 0 }"
    );
}
