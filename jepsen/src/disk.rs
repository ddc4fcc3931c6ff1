//! Disk faults for the `corrupt` nemesis: damage a killed node's files
//! before it starts again, the way a bad disk, a torn write or a careless
//! operator would.
//!
//! - `snapshot-flip`: one byte of the newest snapshot file flipped (every
//!   snapshot carries a checksum: the node must refuse to start);
//! - `journal-flip`: one byte of the newest Raft journal file flipped;
//! - `journal-truncate`: the newest journal file cut short by up to 4 KiB.
//!
//! A journal fault may hit only what was never acknowledged (an unsynced
//! tail the node may drop) or synced entries (the node must refuse, since
//! it no longer holds what it promised); which one, the run's checkers and
//! the replica comparison after the heal judge.

use std::fs::OpenOptions;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::Rng;
use serde::Serialize;

/// What was done to which file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    pub kind: &'static str,
    pub file: String,
    /// The byte flipped, or the new length.
    pub offset: u64,
    /// The file's written length before (to its last non-zero byte).
    pub len: u64,
}

/// The newest file under `dir` with extension `ext` (names sort by index
/// for snapshots; by modification time for journals).
fn newest(dir: &Path, ext: &str) -> Option<PathBuf> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .filter(|(_, p)| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .collect();
    files.sort();
    files.pop().map(|(_, p)| p)
}

/// Damages one file of the data dir `data_dir` (the node must be down).
/// Picks a kind at random among those the node has files for.
pub fn damage(data_dir: &Path, rng: &mut StdRng) -> Result<Damage, String> {
    let snapshot = newest(&data_dir.join("snapshots"), "snap");
    let journal = newest(&data_dir.join("raft"), "jnl");
    let mut kinds = Vec::new();
    if snapshot.is_some() {
        kinds.push("snapshot-flip");
    }
    if journal.is_some() {
        kinds.push("journal-flip");
        kinds.push("journal-truncate");
    }
    if kinds.is_empty() {
        return Err(format!(
            "no snapshot or journal file in {}",
            data_dir.display()
        ));
    }
    let kind = kinds[rng.random_range(0..kinds.len())];
    let file = if kind == "snapshot-flip" {
        snapshot
    } else {
        journal
    }
    .expect("picked among the files found");
    // Journals are preallocated: damage only what was written (up to the
    // last non-zero byte), where it means something.
    let len = written_len(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if len == 0 {
        return Err(format!("{} holds nothing written", file.display()));
    }
    let offset = match kind {
        "journal-truncate" => {
            let cut = rng.random_range(1..=len.min(4096));
            let f = OpenOptions::new()
                .write(true)
                .open(&file)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            f.set_len(len - cut)
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("truncating {}: {e}", file.display()))?;
            len - cut
        }
        _ => {
            let at = rng.random_range(0..len);
            flip(&file, at).map_err(|e| format!("flipping a byte of {}: {e}", file.display()))?;
            at
        }
    };
    Ok(Damage {
        kind,
        file: file.display().to_string(),
        offset,
        len,
    })
}

/// The length up to and including the last non-zero byte.
fn written_len(file: &Path) -> std::io::Result<u64> {
    let bytes = std::fs::read(file)?;
    Ok(bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1))
}

/// Inverts every bit of the byte at `at`.
fn flip(file: &Path, at: u64) -> std::io::Result<()> {
    let mut f = OpenOptions::new().read(true).write(true).open(file)?;
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(&mut b)?;
    b[0] = !b[0];
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&b)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn damages_what_it_says() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("snapshots")).unwrap();
        std::fs::create_dir_all(dir.path().join("raft")).unwrap();
        let snap = dir
            .path()
            .join("snapshots/00000000000000000010-00000000000000000001.snap");
        let jnl = dir.path().join("raft/0.jnl");
        std::fs::write(&snap, vec![7u8; 100]).unwrap();
        std::fs::write(&jnl, vec![9u8; 10_000]).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40 {
            std::fs::write(&snap, vec![7u8; 100]).unwrap();
            // 6,000 bytes written, then preallocated zeros.
            let mut journal = vec![9u8; 6_000];
            journal.resize(10_000, 0);
            std::fs::write(&jnl, journal).unwrap();
            let mut rng = StdRng::seed_from_u64(seed);
            let d = damage(dir.path(), &mut rng).unwrap();
            seen.insert(d.kind);
            match d.kind {
                "snapshot-flip" => {
                    let b = std::fs::read(&snap).unwrap();
                    assert_eq!(b[d.offset as usize], !7u8);
                    assert_eq!(b.iter().filter(|&&x| x != 7).count(), 1);
                }
                "journal-flip" => {
                    let b = std::fs::read(&jnl).unwrap();
                    assert!(d.offset < 6_000, "{d:?}");
                    assert_eq!(b[d.offset as usize], !9u8);
                }
                "journal-truncate" => {
                    let n = std::fs::metadata(&jnl).unwrap().len();
                    assert_eq!(n, d.offset);
                    assert!((6_000 - 4096..6_000).contains(&n));
                }
                other => panic!("{other}"),
            }
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(damage(
            tempfile::tempdir().unwrap().path(),
            &mut StdRng::seed_from_u64(1)
        )
        .is_err());
    }
}
