//! The synced watermark: the last log entry (index and term) and the hard
//! state's term and vote known to be on disk, kept in a small file of its
//! own, `DATA_DIR/raft/raft-synced`, outside fjall.
//!
//! fjall replays its journal up to the first record it cannot read and
//! takes the rest for a torn tail, synced or not: a flipped byte in the
//! middle of a journal silently drops every record after it — entries this
//! server acknowledged to a leader (its part in a commit), and the term and
//! vote it promised a candidate. Going on would let the server vote and
//! lead without them, or vote twice in one term. So after every fsync the
//! storage records here the last entry and the term and vote it made
//! durable, and [`super::DiskStorage::open`] refuses a log that ends
//! before the mark, holds another term at it, or whose hard state is older
//! than the mark's.
//!
//! The mark only ever names synced state: it is raised (unsynced) after an
//! fsync, and lowered — synced, before the change is written — when a new
//! leader cuts the log back or a snapshot replaces it. After a power loss
//! the file may hold an older mark, which checks less but never refuses a
//! good log.
//!
//! The file is never left unreadable by a crash. It holds two slots, 4 KiB
//! apart (each in a disk sector of its own), each a sequence number, the
//! mark and a checksum; a write goes to the slot that does not hold the
//! latest mark, so a write a crash tears leaves the other slot, and the
//! reader takes the valid slot with the highest sequence number. Raising
//! the mark so costs one small write in place, no fsync: the fsync path of
//! every write is as short as before. The file itself is only ever made
//! whole (written under a temporary name, synced, renamed into place, the
//! directory synced): when a new store is created, and when a start finds
//! the previous version's file. So a missing file (where the store is not
//! new) or one with no valid slot is damage, not a crash result: refused,
//! naming the file.
//!
//! Upgrade: the previous version's file holds one 24-byte record (index,
//! term, checksum) without the hard state, or nothing (a store that never
//! synced an entry). It is read as such — the entries are checked, the
//! term and vote not this start — and replaced at once by a file of the
//! current form holding the same mark; from the next fsync on, term and
//! vote are covered too.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::info;

use super::files::{FileHandle, Files};

/// The file's name inside the raft dir.
pub const WATERMARK_FILE: &str = "raft-synced";
/// Where a whole new file is written before it is renamed into place.
const WATERMARK_TMP: &str = "raft-synced.tmp";
/// Where each slot starts: sectors (and pages) of their own.
const SLOT_OFFSETS: [u64; 2] = [0, 4096];
/// The slot a file written whole holds its mark in.
const WHOLE_SLOT: usize = 1;
/// The file's size: two slots.
const FILE_BYTES: usize = 8192;
/// sequence, index, term, hard-state term, vote (u64 LE each), then FNV-1a
/// of those 40 bytes (u64 LE).
const SLOT_BYTES: usize = 48;
/// The previous version's record: index, term (u64 LE), FNV-1a of those.
const LEGACY_BYTES: usize = 24;

/// An entry's position in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    pub index: u64,
    pub term: u64,
}

/// The hard state's term and vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vote {
    pub term: u64,
    pub vote: u64,
}

/// What the file says was synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Synced {
    pub entry: Mark,
    /// `None`: not recorded (the previous version's file).
    pub vote: Option<Vote>,
}

/// The watermark file can neither be read nor written as it must: the
/// message names the file.
#[derive(Debug, thiserror::Error)]
pub enum WatermarkError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is unreadable ({why}); it is written so that no crash leaves it so: the data dir is damaged")]
    Unreadable { path: PathBuf, why: String },
    #[error("{path} is missing, but the Raft store in {dir} is not new: the data dir is damaged")]
    Missing { path: PathBuf, dir: PathBuf },
}

pub struct Watermark {
    file: Box<dyn FileHandle>,
    path: PathBuf,
    synced: Synced,
    /// Sequence number of the slot holding `synced`.
    seq: u64,
    /// The slot holding the latest mark: the next write goes to the other
    /// (by slot, not by the sequence's parity, so a file written whole by
    /// an older version, its sequence 1 in slot 0, is safe too).
    slot: usize,
}

impl Watermark {
    /// Opens the file under `dir` and what it says was synced. A missing
    /// file is created (holding nothing) only for a new store (`new`); a
    /// file of the previous version is replaced by one of this form, with
    /// the same mark. On the file layer `files`.
    pub fn open(
        files: &Arc<dyn Files>,
        dir: &Path,
        new: bool,
    ) -> Result<(Self, Synced), WatermarkError> {
        let path = dir.join(WATERMARK_FILE);
        let io_err = |source| WatermarkError::Io {
            path: path.clone(),
            source,
        };
        let _ = files.remove(&dir.join(WATERMARK_TMP));
        let bytes = match files.read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(e)),
        };
        let unreadable = |why: String| WatermarkError::Unreadable {
            path: path.clone(),
            why,
        };
        // (mark, its sequence, the slot holding it)
        let (synced, seq, slot) = match bytes {
            None if new => {
                replace_whole(&**files, dir, Synced::default())?;
                (Synced::default(), 1, WHOLE_SLOT)
            }
            None => {
                return Err(WatermarkError::Missing {
                    path,
                    dir: dir.to_path_buf(),
                })
            }
            Some(b) if b.len() == FILE_BYTES => {
                let found = SLOT_OFFSETS
                    .iter()
                    .enumerate()
                    .filter_map(|(slot, &at)| {
                        decode_slot(&b[at as usize..at as usize + SLOT_BYTES])
                            .map(|(m, seq)| (m, seq, slot))
                    })
                    .max_by_key(|(_, seq, _)| *seq);
                found.ok_or_else(|| unreadable("no slot passes its checksum".into()))?
            }
            Some(b) if b.len() == LEGACY_BYTES || b.is_empty() => {
                let entry = if b.is_empty() {
                    Mark::default()
                } else {
                    decode_legacy(&b).ok_or_else(|| unreadable("checksum mismatch".into()))?
                };
                let synced = Synced { entry, vote: None };
                info!(path = %path.display(), index = entry.index, term = entry.term, "synced watermark of the previous version: entries checked, term and vote recorded from the next fsync on");
                replace_whole(&**files, dir, synced)?;
                (synced, 1, WHOLE_SLOT)
            }
            Some(b) => {
                return Err(unreadable(format!(
                    "{} bytes, neither {FILE_BYTES} nor the previous version's {LEGACY_BYTES}",
                    b.len()
                )))
            }
        };
        let file = files.open(&path).map_err(io_err)?;
        Ok((
            Self {
                file,
                path,
                synced,
                seq,
                slot,
            },
            synced,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Raises the mark to `to` after an fsync made it durable (not synced).
    pub fn raise(&mut self, to: Synced) -> Result<(), WatermarkError> {
        if to == self.synced {
            return Ok(());
        }
        self.write(to)
    }

    /// Lowers the entry mark to `to` before the log is cut back there
    /// (nothing to do when the cut is past the mark); synced, so that no
    /// later start holds the log to entries it dropped. The term and vote
    /// stay as synced.
    pub fn lower(&mut self, to: Mark) -> Result<(), WatermarkError> {
        if to.index >= self.synced.entry.index {
            return Ok(());
        }
        let lowered = Synced {
            entry: to,
            vote: self.synced.vote,
        };
        self.write(lowered)?;
        self.file.sync_data().map_err(|source| WatermarkError::Io {
            path: self.path.clone(),
            source,
        })
    }

    pub fn synced(&self) -> Synced {
        self.synced
    }

    /// Writes `to` into the slot that does not hold the latest mark.
    fn write(&mut self, to: Synced) -> Result<(), WatermarkError> {
        let seq = self.seq + 1;
        let slot = 1 - self.slot;
        let at = SLOT_OFFSETS[slot];
        self.file
            .write_all_at(&encode_slot(to, seq), at)
            .map_err(|source| WatermarkError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.seq = seq;
        self.slot = slot;
        self.synced = to;
        Ok(())
    }
}

/// Replaces the file under `dir` by a whole one holding `synced` as
/// sequence 1 in slot [`WHOLE_SLOT`]: written under a temporary name,
/// synced, renamed into place, the directory synced. The first raise goes
/// to the other slot, so a crash that tears it leaves this one. (The first
/// raise used to overwrite this very slot: a torn first raise left no
/// valid slot and the server could never start again; found by the
/// simulator, `sim/tests/regression.rs`.)
fn replace_whole(files: &dyn Files, dir: &Path, synced: Synced) -> Result<(), WatermarkError> {
    let tmp = dir.join(WATERMARK_TMP);
    let path = dir.join(WATERMARK_FILE);
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| WatermarkError::Io { path: p, source }
    };
    let mut bytes = vec![0u8; FILE_BYTES];
    let at = SLOT_OFFSETS[WHOLE_SLOT] as usize;
    bytes[at..at + SLOT_BYTES].copy_from_slice(&encode_slot(synced, 1));
    let mut f = files.create(&tmp).map_err(io_err(&tmp))?;
    f.append(&bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    files.rename(&tmp, &path).map_err(io_err(&path))?;
    files.sync_dir(dir).map_err(io_err(dir))
}

fn encode_slot(s: Synced, seq: u64) -> [u8; SLOT_BYTES] {
    let vote = s.vote.unwrap_or_default();
    let mut buf = [0u8; SLOT_BYTES];
    for (i, v) in [seq, s.entry.index, s.entry.term, vote.term, vote.vote]
        .into_iter()
        .enumerate()
    {
        buf[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let sum = fnv1a(&buf[..40]);
    buf[40..].copy_from_slice(&sum.to_le_bytes());
    buf
}

/// A slot's mark and sequence number, if it passes its checksum (a slot
/// never written is zeros, which do not).
fn decode_slot(buf: &[u8]) -> Option<(Synced, u64)> {
    let word = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    if word(5) != fnv1a(&buf[..40]) {
        return None;
    }
    let synced = Synced {
        entry: Mark {
            index: word(1),
            term: word(2),
        },
        vote: Some(Vote {
            term: word(3),
            vote: word(4),
        }),
    };
    Some((synced, word(0)))
}

fn decode_legacy(buf: &[u8]) -> Option<Mark> {
    let word = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (word(2) == fnv1a(&buf[..16])).then(|| Mark {
        index: word(0),
        term: word(1),
    })
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::files::os;

    fn synced(index: u64, term: u64, vote_term: u64, vote: u64) -> Synced {
        Synced {
            entry: Mark { index, term },
            vote: Some(Vote {
                term: vote_term,
                vote,
            }),
        }
    }

    #[test]
    fn a_mark_survives_reopen_and_a_torn_write_leaves_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, found) = Watermark::open(&os(), dir.path(), true).unwrap();
        assert_eq!(found, Synced::default());
        w.raise(synced(7, 2, 2, 1)).unwrap();
        w.raise(synced(9, 2, 3, 3)).unwrap();
        drop(w);
        let (w, found) = Watermark::open(&os(), dir.path(), false).unwrap();
        assert_eq!(found, synced(9, 2, 3, 3));
        assert_eq!(w.synced(), synced(9, 2, 3, 3));
        drop(w);

        // A crash tears the slot of the latest write: the one before holds.
        let path = dir.path().join(WATERMARK_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let latest = SLOT_OFFSETS
            .iter()
            .map(|&at| at as usize)
            .max_by_key(|&at| decode_slot(&bytes[at..at + SLOT_BYTES]).map(|(_, s)| s))
            .unwrap();
        bytes[latest + 3] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let (_, found) = Watermark::open(&os(), dir.path(), false).unwrap();
        assert_eq!(found, synced(7, 2, 2, 1), "the slot before the torn one");

        // Both slots damaged is no crash result: refused, naming the file.
        let other = if latest == 0 { 4096 } else { 0 };
        bytes[other + 3] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let e = Watermark::open(&os(), dir.path(), false)
            .err()
            .expect("refused");
        assert!(matches!(e, WatermarkError::Unreadable { .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn a_missing_file_is_created_for_a_new_store_only() {
        let dir = tempfile::tempdir().unwrap();
        let e = Watermark::open(&os(), dir.path(), false)
            .err()
            .expect("refused");
        assert!(matches!(e, WatermarkError::Missing { .. }), "{e}");
        assert!(e.to_string().contains(WATERMARK_FILE), "{e}");
        let (_, found) = Watermark::open(&os(), dir.path(), true).unwrap();
        assert_eq!(found, Synced::default());
        assert_eq!(
            std::fs::metadata(dir.path().join(WATERMARK_FILE))
                .unwrap()
                .len(),
            FILE_BYTES as u64
        );
        assert!(Watermark::open(&os(), dir.path(), false).is_ok());
    }

    #[test]
    fn lowering_writes_synced_and_keeps_the_vote() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = Watermark::open(&os(), dir.path(), true).unwrap();
        w.raise(synced(10, 3, 3, 2)).unwrap();
        w.lower(Mark { index: 6, term: 3 }).unwrap();
        assert_eq!(w.synced(), synced(6, 3, 3, 2));
        w.lower(Mark { index: 8, term: 3 }).unwrap();
        assert_eq!(w.synced(), synced(6, 3, 3, 2), "past the mark: nothing");
        let (_, found) = Watermark::open(&os(), dir.path(), false).unwrap();
        assert_eq!(found, synced(6, 3, 3, 2));
    }

    /// A data dir of the previous version: its one record (no hard state)
    /// is read, the file replaced by one of this form.
    #[test]
    fn the_previous_versions_file_is_read_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WATERMARK_FILE);
        let mut legacy = [0u8; LEGACY_BYTES];
        legacy[..8].copy_from_slice(&7u64.to_le_bytes());
        legacy[8..16].copy_from_slice(&2u64.to_le_bytes());
        let sum = fnv1a(&legacy[..16]);
        legacy[16..].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(&path, legacy).unwrap();
        let (mut w, found) = Watermark::open(&os(), dir.path(), false).unwrap();
        let old = Synced {
            entry: Mark { index: 7, term: 2 },
            vote: None,
        };
        assert_eq!(found, old);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            FILE_BYTES as u64,
            "replaced"
        );
        w.raise(synced(8, 2, 2, 1)).unwrap();
        drop(w);
        assert_eq!(
            Watermark::open(&os(), dir.path(), false).unwrap().1,
            synced(8, 2, 2, 1)
        );

        // Empty: the previous version before its first synced entry.
        std::fs::write(&path, b"").unwrap();
        assert_eq!(
            Watermark::open(&os(), dir.path(), false).unwrap().1,
            Synced::default()
        );
        // A damaged previous-version record is refused as well.
        legacy[3] ^= 1;
        std::fs::write(&path, legacy).unwrap();
        assert!(Watermark::open(&os(), dir.path(), false).is_err());
    }
}
