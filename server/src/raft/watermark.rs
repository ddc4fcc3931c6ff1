//! The synced watermark: the last log entry (index and term) known to be on
//! disk, kept in a small file of its own, `DATA_DIR/raft-synced`, outside
//! fjall.
//!
//! fjall replays its journal up to the first record it cannot read and
//! takes the rest for a torn tail, synced or not: a flipped byte in the
//! middle of a journal silently drops every entry after it, including
//! entries this server acknowledged to a leader (its vote in a commit).
//! Going on would let the server vote and lead without them. So after every
//! fsync the storage records here the last entry it made durable, and
//! [`super::DiskStorage::open`] refuses a log that ends before the mark or
//! holds another term at it.
//!
//! The mark only ever names synced entries: it is raised (unsynced: one
//! small write in place) after an fsync, and lowered — synced, before the
//! change is written — when a new leader cuts the log back or a snapshot
//! replaces it. After a power loss the file may hold an older mark, which
//! checks less but never refuses a good log. A file that cannot be read
//! (torn, zeroed) is ignored with a warning: it guards the log, it is not
//! part of it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tracing::warn;

/// The file's name inside the data dir.
pub const WATERMARK_FILE: &str = "raft-synced";
/// index (u64 LE), term (u64 LE), FNV-1a of those 16 bytes (u64 LE).
const RECORD_BYTES: usize = 24;

/// An entry's position in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    pub index: u64,
    pub term: u64,
}

pub struct Watermark {
    file: File,
    path: PathBuf,
    mark: Mark,
}

impl Watermark {
    /// Opens (or creates) the file under `dir`; the mark it holds, if it
    /// can be read.
    pub fn open(dir: &Path) -> io::Result<(Self, Option<Mark>)> {
        let path = dir.join(WATERMARK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut buf = [0u8; RECORD_BYTES];
        let found = match file.read_exact_at(&mut buf, 0) {
            Ok(()) => {
                let found = decode(&buf);
                if found.is_none() {
                    warn!(path = %path.display(), "synced watermark unreadable; not checked this start");
                }
                found
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => None,
            Err(e) => return Err(e),
        };
        let mark = found.unwrap_or_default();
        Ok((Self { file, path, mark }, found))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Raises the mark to `to` after an fsync made it durable (not synced).
    pub fn raise(&mut self, to: Mark) -> io::Result<()> {
        if to == self.mark {
            return Ok(());
        }
        self.write(to)
    }

    /// Lowers the mark to `to` before the log is cut back there (nothing
    /// to do when the cut is past the mark); synced, so that no later start
    /// holds the log to entries it dropped.
    pub fn lower(&mut self, to: Mark) -> io::Result<()> {
        if to.index >= self.mark.index {
            return Ok(());
        }
        self.write(to)?;
        self.file.sync_data()
    }

    pub fn mark(&self) -> Mark {
        self.mark
    }

    fn write(&mut self, to: Mark) -> io::Result<()> {
        self.file.write_all_at(&encode(to), 0)?;
        self.mark = to;
        Ok(())
    }
}

fn encode(m: Mark) -> [u8; RECORD_BYTES] {
    let mut buf = [0u8; RECORD_BYTES];
    buf[..8].copy_from_slice(&m.index.to_le_bytes());
    buf[8..16].copy_from_slice(&m.term.to_le_bytes());
    let sum = fnv1a(&buf[..16]);
    buf[16..].copy_from_slice(&sum.to_le_bytes());
    buf
}

fn decode(buf: &[u8; RECORD_BYTES]) -> Option<Mark> {
    let sum = u64::from_le_bytes(buf[16..].try_into().expect("8 bytes"));
    if sum != fnv1a(&buf[..16]) {
        return None;
    }
    Some(Mark {
        index: u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")),
        term: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
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

    #[test]
    fn a_mark_survives_reopen_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, found) = Watermark::open(dir.path()).unwrap();
        assert_eq!(found, None);
        w.raise(Mark { index: 7, term: 2 }).unwrap();
        drop(w);
        let (w, found) = Watermark::open(dir.path()).unwrap();
        assert_eq!(found, Some(Mark { index: 7, term: 2 }));
        assert_eq!(w.mark(), Mark { index: 7, term: 2 });
        drop(w);

        let path = dir.path().join(WATERMARK_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        let (_, found) = Watermark::open(dir.path()).unwrap();
        assert_eq!(found, None, "a damaged mark is not trusted");
    }

    #[test]
    fn lowering_writes_and_raising_to_the_same_mark_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = Watermark::open(dir.path()).unwrap();
        w.raise(Mark { index: 10, term: 3 }).unwrap();
        w.lower(Mark { index: 6, term: 3 }).unwrap();
        assert_eq!(w.mark(), Mark { index: 6, term: 3 });
        let (_, found) = Watermark::open(dir.path()).unwrap();
        assert_eq!(found, Some(Mark { index: 6, term: 3 }));
    }
}
