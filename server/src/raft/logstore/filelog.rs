//! [`FileLog`]: the log as checksummed records appended to a file of the
//! file layer, for the simulator (over `MemFiles`) and tests.
//!
//! Layout: `DIR/log-<seq>.wal`, one file in use. A record is
//!
//! ```text
//! payload length u32 | xxh3-64 of the length and the payload u64 | payload
//! ```
//!
//! (integers little-endian), its payload one batch of changes — all of a
//! batch survives a crash or none of it. Opening reads the newest file's
//! records up to the first that is short or fails its checksum, as fjall
//! replays its journal, and takes what follows for a torn tail: cut off
//! before the next write (not at open, so a start that refuses the log
//! leaves the damage to be looked at). Everything is also kept in memory:
//! this store is for simulated clusters, not for a server's log.
//!
//! The head is compacted by a checkpoint: when the file has grown past
//! [`CHECKPOINT_MIN_BYTES`] and twice what is live, the live entries and
//! metadata are written as one record (opening with a reset) to a new
//! file under a temporary name, synced, renamed to the next sequence
//! number and the directory synced; then the old file goes. A crash at
//! any point leaves the old file whole or the new one durable; opening
//! takes the newest and removes the others.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::{LogBatch, LogOp, LogStore, MetaKey, Persist};
use crate::raft::files::{FileHandle, Files};
use crate::raft::storage::StorageError;

/// A file smaller than this is never checkpointed.
pub const CHECKPOINT_MIN_BYTES: u64 = 64 * 1024;
const PREFIX: &str = "log-";
const SUFFIX: &str = ".wal";
const TMP_SUFFIX: &str = ".wal.tmp";
const RECORD_HEADER: usize = 12;

const TAG_PUT_ENTRY: u8 = 1;
const TAG_REMOVE_ENTRIES: u8 = 2;
const TAG_PUT_META: u8 = 3;
const TAG_REMOVE_META: u8 = 4;
const TAG_CLEAR_ENTRIES: u8 = 5;
const TAG_RESET: u8 = 6;

/// A change as a record holds it.
enum Change {
    Op(LogOp),
    RemoveMeta(MetaKey),
    ClearEntries,
    Reset,
}

pub struct FileLog {
    files: Arc<dyn Files>,
    dir: PathBuf,
    /// Sequence number of the file in use.
    seq: u64,
    file: Box<dyn FileHandle>,
    /// Where the last whole record ends.
    end: u64,
    /// Bytes past `end` (a torn or damaged tail) to cut before writing.
    tail: bool,
    entries: BTreeMap<u64, Vec<u8>>,
    meta: BTreeMap<MetaKey, Vec<u8>>,
    /// Bytes of the entries and metadata held.
    live_bytes: u64,
    checkpoint_min_bytes: u64,
    /// A record being built (reused).
    buf: Vec<u8>,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StorageError {
    StorageError::Io(format!("{what} {}: {e}", path.display()))
}

impl FileLog {
    /// Opens (or creates) the log under `dir`.
    pub fn open(files: Arc<dyn Files>, dir: &Path) -> Result<Self, StorageError> {
        Self::open_with(files, dir, CHECKPOINT_MIN_BYTES)
    }

    /// As [`Self::open`], checkpointing from `checkpoint_min_bytes` on
    /// (tests make it small).
    pub fn open_with(
        files: Arc<dyn Files>,
        dir: &Path,
        checkpoint_min_bytes: u64,
    ) -> Result<Self, StorageError> {
        files
            .create_dir_all(dir)
            .map_err(|e| io_error("creating", dir, e))?;
        let mut segments = Vec::new();
        for name in files.list(dir).map_err(|e| io_error("listing", dir, e))? {
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(TMP_SUFFIX) {
                let path = dir.join(name);
                files
                    .remove(&path)
                    .map_err(|e| io_error("removing", &path, e))?;
            } else if let Some(seq) = name
                .strip_prefix(PREFIX)
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            {
                segments.push(seq);
            }
        }
        segments.sort_unstable();
        let Some(&seq) = segments.last() else {
            // A new log: an empty checkpoint starts it.
            let mut buf = vec![0; RECORD_HEADER];
            encode(&mut buf, &Change::Reset);
            seal(&mut buf);
            let file = write_checkpoint(&*files, dir, 1, &buf)?;
            return Ok(FileLog {
                files,
                dir: dir.to_path_buf(),
                seq: 1,
                file,
                end: buf.len() as u64,
                tail: false,
                entries: BTreeMap::new(),
                meta: BTreeMap::new(),
                live_bytes: 0,
                checkpoint_min_bytes,
                buf,
            });
        };
        let path = segment_path(dir, seq);
        let bytes = files
            .read(&path)
            .map_err(|e| io_error("reading", &path, e))?;
        let file = files
            .open(&path)
            .map_err(|e| io_error("opening", &path, e))?;
        let mut log = FileLog {
            files,
            dir: dir.to_path_buf(),
            seq,
            file,
            end: 0,
            tail: false,
            entries: BTreeMap::new(),
            meta: BTreeMap::new(),
            live_bytes: 0,
            checkpoint_min_bytes,
            buf: Vec::new(),
        };
        let mut at = 0usize;
        while let Some((changes, next)) = read_record(&bytes, at) {
            for change in changes {
                log.apply(change);
            }
            at = next;
        }
        log.end = at as u64;
        if at < bytes.len() {
            log.tail = true;
            tracing::warn!(
                path = %path.display(),
                kept_bytes = at,
                dropped_bytes = bytes.len() - at,
                "the log's tail after its last whole record is dropped"
            );
        }
        // Older files a checkpoint replaced (a crash before they went).
        for old in segments.iter().filter(|&&s| s != seq) {
            let path = segment_path(dir, *old);
            log.files
                .remove(&path)
                .map_err(|e| io_error("removing", &path, e))?;
        }
        Ok(log)
    }

    /// The log files under `dir`, oldest first (the last is the one in
    /// use): for a test or a simulator that damages them.
    pub fn segments(files: &dyn Files, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut found: Vec<u64> = files
            .list(dir)?
            .iter()
            .filter_map(|n| n.to_str())
            .filter_map(|n| n.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok())
            .collect();
        found.sort_unstable();
        Ok(found.into_iter().map(|s| segment_path(dir, s)).collect())
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Op(LogOp::PutEntry(index, bytes)) => {
                self.live_bytes += bytes.len() as u64;
                if let Some(old) = self.entries.insert(index, bytes) {
                    self.live_bytes -= old.len() as u64;
                }
            }
            Change::Op(LogOp::RemoveEntries { from, to }) => {
                if from > to {
                    return;
                }
                let gone: Vec<u64> = self.entries.range(from..=to).map(|(i, _)| *i).collect();
                for index in gone {
                    let old = self.entries.remove(&index).expect("listed");
                    self.live_bytes -= old.len() as u64;
                }
            }
            Change::Op(LogOp::PutMeta(key, bytes)) => {
                self.live_bytes += bytes.len() as u64;
                if let Some(old) = self.meta.insert(key, bytes) {
                    self.live_bytes -= old.len() as u64;
                }
            }
            Change::RemoveMeta(key) => {
                if let Some(old) = self.meta.remove(&key) {
                    self.live_bytes -= old.len() as u64;
                }
            }
            Change::ClearEntries => {
                for (_, old) in std::mem::take(&mut self.entries) {
                    self.live_bytes -= old.len() as u64;
                }
            }
            Change::Reset => {
                self.entries.clear();
                self.meta.clear();
                self.live_bytes = 0;
            }
        }
    }

    /// Appends the record in `buf` (its payload after a blank header).
    fn append_record(&mut self) -> Result<(), StorageError> {
        seal(&mut self.buf);
        let path = segment_path(&self.dir, self.seq);
        if self.tail {
            self.file
                .set_len(self.end)
                .map_err(|e| io_error("cutting the torn tail of", &path, e))?;
            self.tail = false;
        }
        if let Err(e) = self.file.append(&self.buf) {
            // Part of it may be there: cut before the next record.
            self.tail = true;
            return Err(io_error("writing", &path, e));
        }
        self.end += self.buf.len() as u64;
        Ok(())
    }

    fn record(&mut self, changes: &[Change]) -> Result<(), StorageError> {
        self.buf.clear();
        self.buf.resize(RECORD_HEADER, 0);
        for change in changes {
            encode(&mut self.buf, change);
        }
        self.append_record()
    }

    /// Writes everything live to a new file that replaces the one in use.
    fn checkpoint(&mut self) -> Result<(), StorageError> {
        let seq = self.seq + 1;
        self.buf.clear();
        self.buf.resize(RECORD_HEADER, 0);
        encode(&mut self.buf, &Change::Reset);
        for (key, bytes) in &self.meta {
            put_meta(&mut self.buf, *key, bytes);
        }
        for (index, bytes) in &self.entries {
            put_entry(&mut self.buf, *index, bytes);
        }
        seal(&mut self.buf);
        let file = write_checkpoint(&*self.files, &self.dir, seq, &self.buf)?;
        let old = segment_path(&self.dir, self.seq);
        self.file = file;
        self.seq = seq;
        self.end = self.buf.len() as u64;
        self.tail = false;
        self.files
            .remove(&old)
            .map_err(|e| io_error("removing", &old, e))
    }
}

/// Writes the sealed checkpoint record `buf` as file `seq` under `dir`:
/// a temporary name, synced, renamed into place, the directory synced.
/// Returns the file, open for the records that follow.
fn write_checkpoint(
    files: &dyn Files,
    dir: &Path,
    seq: u64,
    buf: &[u8],
) -> Result<Box<dyn FileHandle>, StorageError> {
    let path = segment_path(dir, seq);
    let tmp = dir.join(format!("{PREFIX}{seq:020}{TMP_SUFFIX}"));
    let write = || -> std::io::Result<Box<dyn FileHandle>> {
        let mut f = files.create(&tmp)?;
        f.append(buf)?;
        f.sync_data()?;
        files.rename(&tmp, &path)?;
        files.sync_dir(dir)?;
        Ok(f)
    };
    write().map_err(|e| {
        let _ = files.remove(&tmp);
        io_error("checkpointing the log to", &path, e)
    })
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{seq:020}{SUFFIX}"))
}

/// Fills in the header of the record in `buf`.
fn seal(buf: &mut [u8]) {
    let len = (buf.len() - RECORD_HEADER) as u32;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    let sum = checksum(&buf[..4], &buf[RECORD_HEADER..]);
    buf[4..RECORD_HEADER].copy_from_slice(&sum.to_le_bytes());
}

fn checksum(len: &[u8], payload: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(len);
    h.update(payload);
    h.digest()
}

fn put_entry(buf: &mut Vec<u8>, index: u64, bytes: &[u8]) {
    buf.push(TAG_PUT_ENTRY);
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn put_meta(buf: &mut Vec<u8>, key: MetaKey, bytes: &[u8]) {
    buf.push(TAG_PUT_META);
    buf.push(key.code());
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn encode(buf: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Op(LogOp::PutEntry(index, bytes)) => put_entry(buf, *index, bytes),
        Change::Op(LogOp::RemoveEntries { from, to }) => {
            buf.push(TAG_REMOVE_ENTRIES);
            buf.extend_from_slice(&from.to_le_bytes());
            buf.extend_from_slice(&to.to_le_bytes());
        }
        Change::Op(LogOp::PutMeta(key, bytes)) => put_meta(buf, *key, bytes),
        Change::RemoveMeta(key) => {
            buf.push(TAG_REMOVE_META);
            buf.push(key.code());
        }
        Change::ClearEntries => buf.push(TAG_CLEAR_ENTRIES),
        Change::Reset => buf.push(TAG_RESET),
    }
}

/// The changes of the record at `at` and where the next starts, if it is
/// whole and passes its checksum.
fn read_record(bytes: &[u8], at: usize) -> Option<(Vec<Change>, usize)> {
    let header = bytes.get(at..at.checked_add(RECORD_HEADER)?)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let sum = u64::from_le_bytes(header[4..].try_into().expect("8 bytes"));
    let start = at + RECORD_HEADER;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    if checksum(&header[..4], payload) != sum {
        return None;
    }
    Some((decode(payload)?, start + len))
}

fn decode(mut p: &[u8]) -> Option<Vec<Change>> {
    fn take<'a>(p: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = p.split_at_checked(n)?;
        *p = rest;
        Some(head)
    }
    fn u64_of(p: &mut &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(take(p, 8)?.try_into().ok()?))
    }
    fn bytes_of(p: &mut &[u8]) -> Option<Vec<u8>> {
        let len = u32::from_le_bytes(take(p, 4)?.try_into().ok()?) as usize;
        Some(take(p, len)?.to_vec())
    }
    let mut out = Vec::new();
    while let Some(tag) = take(&mut p, 1) {
        out.push(match tag[0] {
            TAG_PUT_ENTRY => {
                let index = u64_of(&mut p)?;
                Change::Op(LogOp::PutEntry(index, bytes_of(&mut p)?))
            }
            TAG_REMOVE_ENTRIES => Change::Op(LogOp::RemoveEntries {
                from: u64_of(&mut p)?,
                to: u64_of(&mut p)?,
            }),
            TAG_PUT_META => {
                let key = MetaKey::from_code(take(&mut p, 1)?[0])?;
                Change::Op(LogOp::PutMeta(key, bytes_of(&mut p)?))
            }
            TAG_REMOVE_META => Change::RemoveMeta(MetaKey::from_code(take(&mut p, 1)?[0])?),
            TAG_CLEAR_ENTRIES => Change::ClearEntries,
            TAG_RESET => Change::Reset,
            _ => return None,
        });
    }
    Some(out)
}

impl LogStore for FileLog {
    fn get_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.meta.get(&key).cloned())
    }

    fn put_meta(&mut self, key: MetaKey, bytes: Vec<u8>) -> Result<(), StorageError> {
        let change = Change::Op(LogOp::PutMeta(key, bytes));
        self.record(std::slice::from_ref(&change))?;
        self.apply(change);
        Ok(())
    }

    fn remove_meta(&mut self, key: MetaKey) -> Result<(), StorageError> {
        self.record(&[Change::RemoveMeta(key)])?;
        self.apply(Change::RemoveMeta(key));
        Ok(())
    }

    fn scan(
        &self,
        low: u64,
        high: Option<u64>,
        f: &mut dyn FnMut(&[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let range = match high {
            Some(high) if high <= low => return Ok(()),
            Some(high) => self.entries.range(low..high),
            None => self.entries.range(low..),
        };
        for (_, bytes) in range {
            if !f(bytes)? {
                break;
            }
        }
        Ok(())
    }

    fn write(&mut self, batch: &mut LogBatch) -> Result<(), StorageError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        self.buf.resize(RECORD_HEADER, 0);
        for op in &batch.ops {
            match op {
                LogOp::PutEntry(index, bytes) => put_entry(&mut self.buf, *index, bytes),
                LogOp::PutMeta(key, bytes) => put_meta(&mut self.buf, *key, bytes),
                LogOp::RemoveEntries { from, to } => {
                    self.buf.push(TAG_REMOVE_ENTRIES);
                    self.buf.extend_from_slice(&from.to_le_bytes());
                    self.buf.extend_from_slice(&to.to_le_bytes());
                }
            }
        }
        if let Err(e) = self.append_record() {
            batch.ops.clear();
            return Err(e);
        }
        for op in batch.ops.drain(..) {
            self.apply(Change::Op(op));
        }
        Ok(())
    }

    fn clear_entries(&mut self) -> Result<(), StorageError> {
        self.record(&[Change::ClearEntries])?;
        self.apply(Change::ClearEntries);
        Ok(())
    }

    fn persist(&mut self, mode: Persist) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, self.seq);
        match mode {
            // Every write went to the file layer as it was made.
            Persist::Buffer => return Ok(()),
            Persist::SyncData => self.file.sync_data(),
            Persist::SyncAll => self.file.sync_all(),
        }
        .map_err(|e| io_error("syncing", &path, e))?;
        if self.end > self.checkpoint_min_bytes && self.end > 2 * self.live_bytes {
            self.checkpoint()?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "filelog_tests.rs"]
mod tests;
