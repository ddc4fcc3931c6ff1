//! Raft's durable state: the log, the hard state and the conf state in a
//! log store ([`super::logstore`]: fjall for the server), the latest
//! snapshot in a file of its own ([`super::snapfile`]), the synced
//! watermark in another ([`super::watermark`]); the files through the file
//! layer ([`super::files`]), so that the simulator runs this code, its
//! bookkeeping, recovery and checks, over a simulated disk
//! ([`DiskStorage::open_on`]).
//!
//! Entries live in the store (fjall keeps the hot tail in its block cache;
//! the file log keeps everything in memory); what we keep here is the
//! index/term bookkeeping raft asks for on every step. Writes go into the
//! store's journal without a sync; the
//! raft task calls [`DiskStorage::sync`] once per Ready, so one fsync covers
//! every entry and hard-state change of that batch (group commit).
//!
//! The log and the snapshot are apart: a snapshot at index A does not drop
//! the log behind it. The log is compacted separately
//! ([`DiskStorage::compact_log`]) up to what the core says every follower
//! has, never past the latest snapshot, so that a follower that is merely
//! slow catches up from the log instead of needing a snapshot. The log's
//! start (the index and term just before its first entry) is stored with
//! the metadata.
//!
//! Snapshots: the core builds one on a thread of its own and writes its
//! file there ([`SnapDir::write`]), then tells this storage it exists
//! ([`DiskStorage::snapshot_written`]); the previous file goes once the new
//! one is durable and current. A leader's snapshot is written before the
//! log it replaces is dropped, and a start that finds a snapshot newer
//! than its log finishes that replacement, so a crash between the two
//! loses nothing.
//!
//! This module must never decide anything about the log's contents: it
//! stores what raft hands it, in raft's order.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError as RaftStorageError};

use super::files::{self, Files};
use super::logstore::{FileLog, FjallLog, LogBatch, LogKind, LogStore, MetaKey, Persist};
use super::snapfile::SnapDir;
use super::snapstream::Descriptor;
use super::watermark::{Mark, Synced, Vote, Watermark, WatermarkError};

/// The log base as stored ([`MetaKey::LogBase`]): index and term, u64
/// big-endian each. Absent in a data dir from before the log outlived its
/// snapshot: then it is the snapshot's. (Where snapshots were kept before
/// they had files, [`MetaKey::LegacySnapshot`], is moved to a file on the
/// first start that finds one.)
fn encode_base(index: u64, term: u64) -> Vec<u8> {
    let mut base = [0u8; 16];
    base[..8].copy_from_slice(&index.to_be_bytes());
    base[8..].copy_from_slice(&term.to_be_bytes());
    base.to_vec()
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("fjall: {0}")]
    Fjall(#[from] fjall::Error),
    #[error("corrupt {what} on disk: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("synced watermark: {0}")]
    Watermark(#[from] WatermarkError),
    #[error("{0}")]
    Io(String),
}

fn corrupt(what: &'static str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        what,
        detail: e.to_string(),
    }
}

fn other(e: StorageError) -> raft::Error {
    raft::Error::Store(RaftStorageError::Other(Box::new(e)))
}

/// Raft storage backed by a log store and files. Owned by the raft task
/// (through `RawNode`).
pub struct DiskStorage {
    store: Box<dyn LogStore>,
    /// The changes of one write (reused).
    batch: LogBatch,
    files: Arc<dyn Files>,
    snaps: SnapDir,
    hard_state: HardState,
    /// The hard state as last written to the store (the one in memory but
    /// for the known-bad [`Self::set_unsafe_forget_votes`]).
    written_hs: HardState,
    conf_state: ConfState,
    /// Metadata of the latest snapshot (at or after the log's base).
    snapshot_meta: SnapshotMetadata,
    /// The entry just before the log's first: (index, term).
    base: (u64, u64),
    /// The last entry, term and vote known synced, kept outside fjall (see
    /// [`super::watermark`]).
    synced: Watermark,
    /// Terms and encoded sizes of the entries in the log; `terms[0]` is
    /// entry `base.0 + 1`.
    terms: VecDeque<u64>,
    sizes: VecDeque<u32>,
    /// Sum of `sizes`.
    log_bytes: u64,
    /// Snapshots for followers carry the whole tree, as before they were
    /// streamed (`--inline-snapshots`).
    inline_snapshots: bool,
    /// Known-bad (`--unsafe-skip-fsync`): [`Self::sync`] stops at the OS.
    skip_fsync: bool,
    /// Known-bad: a change of term or vote is kept in memory, not written.
    forget_votes: bool,
}

impl DiskStorage {
    /// Opens (or creates) the storage under `dir`, with snapshot files in
    /// `snap_dir`, loading the hard state, conf state, the latest
    /// snapshot's metadata and the terms of the log: the server's, on the
    /// real file system with the log in fjall.
    pub fn open(dir: &Path, snap_dir: &Path) -> Result<Self, StorageError> {
        Self::open_on(files::os(), LogKind::Fjall, dir, snap_dir)
    }

    /// As [`Self::open`], on the file layer `files` with the log in the
    /// store `log` (the simulator: `MemFiles` and [`LogKind::Files`]).
    pub fn open_on(
        files: Arc<dyn Files>,
        log: LogKind,
        dir: &Path,
        snap_dir: &Path,
    ) -> Result<Self, StorageError> {
        Self::open_checking(files, log, dir, snap_dir, true)
    }

    /// KNOWN-BAD, for the simulator to prove it finds the loss: as
    /// [`Self::open_on`] without the synced watermark's checks, so a log
    /// that lost synced entries, or a term or vote, to a damaged journal
    /// opens as if nothing were missing. Never reachable from the server.
    pub fn open_on_unsafe_unchecked(
        files: Arc<dyn Files>,
        log: LogKind,
        dir: &Path,
        snap_dir: &Path,
    ) -> Result<Self, StorageError> {
        Self::open_checking(files, log, dir, snap_dir, false)
    }

    fn open_checking(
        files: Arc<dyn Files>,
        log: LogKind,
        dir: &Path,
        snap_dir: &Path,
        check_watermark: bool,
    ) -> Result<Self, StorageError> {
        let mut store: Box<dyn LogStore> = match log {
            // fjall would write the real disk at these paths, beside a
            // simulated one holding the rest.
            LogKind::Fjall if !files.is_real() => {
                return Err(StorageError::Io(format!(
                    "the log in {} cannot be in fjall over {files:?}: fjall writes the real \
                     file system; open it as LogKind::Files",
                    dir.display()
                )))
            }
            LogKind::Fjall => Box::new(FjallLog::open(dir)?),
            LogKind::Files => Box::new(FileLog::open(files.clone(), dir)?),
        };
        let hard_state = match store.get_meta(MetaKey::HardState)? {
            Some(v) => HardState::parse_from_bytes(&v).map_err(|e| corrupt("hard state", e))?,
            None => HardState::default(),
        };
        let conf_state = match store.get_meta(MetaKey::ConfState)? {
            Some(v) => ConfState::parse_from_bytes(&v).map_err(|e| corrupt("conf state", e))?,
            None => ConfState::default(),
        };
        let snaps = SnapDir::open_on(files.clone(), snap_dir)?;
        let legacy = migrate_legacy_snapshot(&mut *store, &snaps)?;
        let snapshot_meta = match snaps.list()?.last() {
            Some(&(index, term)) => snaps.read_meta(index, term)?,
            None => SnapshotMetadata::default(),
        };
        let base = match store.get_meta(MetaKey::LogBase)? {
            Some(v) if v.len() == 16 => (
                u64::from_be_bytes(v[..8].try_into().expect("8 bytes")),
                u64::from_be_bytes(v[8..].try_into().expect("8 bytes")),
            ),
            Some(v) => return Err(corrupt("log base", format!("{} bytes", v.len()))),
            // Absent in a new data dir, and in one from before the log
            // outlived its snapshot: then the log starts at that snapshot.
            None => legacy.unwrap_or((0, 0)),
        };
        if base.0 > snapshot_meta.index {
            return Err(corrupt(
                "log base",
                format!(
                    "the log starts after {} but the snapshot is at {}",
                    base.0, snapshot_meta.index
                ),
            ));
        }
        let mut terms = VecDeque::new();
        let mut sizes = VecDeque::new();
        let mut log_bytes = 0;
        let first = base.0 + 1;
        let mut expected = first;
        store.scan(first, None, &mut |value| {
            let entry = Entry::parse_from_bytes(value).map_err(|e| corrupt("log entry", e))?;
            if entry.index != expected {
                return Err(corrupt(
                    "log",
                    format!("expected entry {expected}, found {}", entry.index),
                ));
            }
            expected += 1;
            terms.push_back(entry.term);
            sizes.push_back(value.len() as u32);
            log_bytes += value.len() as u64;
            Ok(true)
        })?;
        // Entries are synced before the commit index that covers them is
        // stored: fewer of them after a restart means the disk lost
        // acknowledged writes. Going on would let this server vote and
        // lead without them.
        let last = base.0 + terms.len() as u64;
        if hard_state.commit > last.max(snapshot_meta.index) {
            return Err(corrupt(
                "log",
                format!(
                    "entries up to {} were committed, but the log ends at {last}: \
                     acknowledged writes are missing from {}",
                    hard_state.commit,
                    dir.display()
                ),
            ));
        }
        // Nothing stored yet: the watermark file may be created (elsewhere
        // its absence is damage).
        let new = hard_state == HardState::default()
            && conf_state == ConfState::default()
            && terms.is_empty()
            && base == (0, 0)
            && snapshot_meta.index == 0;
        let (synced, mark) = Watermark::open(&files, dir, new)?;
        let mut storage = Self {
            store,
            batch: LogBatch::default(),
            files,
            snaps,
            written_hs: hard_state.clone(),
            hard_state,
            conf_state,
            snapshot_meta,
            base,
            terms,
            sizes,
            log_bytes,
            synced,
            inline_snapshots: false,
            skip_fsync: false,
            forget_votes: false,
        };
        // The term and vote first, before anything here syncs (and so
        // raises the mark to the hard state as loaded).
        if let Some(vote) = mark.vote.filter(|_| check_watermark) {
            storage.check_vote(vote, dir)?;
        }
        // Finish an install a stop interrupted, then the entries: the log
        // it leaves is the one the watermark was lowered for.
        storage.finish_snapshot_install()?;
        if check_watermark {
            storage.check_synced(mark.entry, dir)?;
            // What this start found is made durable and the mark raised to
            // it. After a power loss the mark on disk may be older than
            // the log synced (a raise is not synced), and would stay so
            // until this server's next write (one cut off from its leader
            // writes nothing): a later start would check less than it can.
            // Found by the simulator (issue 28).
            storage.sync()?;
        }
        Ok(storage)
    }

    /// A log that ends before the last entry this server synced, or holds
    /// another term there, lost entries it acknowledged: refused.
    fn check_synced(&self, mark: Mark, dir: &Path) -> Result<(), StorageError> {
        let last = self.last().max(self.snapshot_meta.index);
        let lost = if mark.index > last {
            Some(format!("the log ends at entry {last}"))
        } else {
            match self.term_of(mark.index) {
                Some(term) if term != mark.term => Some(format!(
                    "entry {} has term {term}, not {}",
                    mark.index, mark.term
                )),
                _ => None,
            }
        };
        match lost {
            Some(found) => Err(corrupt(
                "journal",
                format!(
                    "entries up to {} (term {}) were synced, but {found}: the journal in {} \
                     lost synced entries (damaged on disk); wipe this server's data dir and \
                     add it again (docs/operations.md: Storage faults)",
                    mark.index,
                    mark.term,
                    dir.display()
                ),
            )),
            None => Ok(()),
        }
    }

    /// A hard state older than the term and vote this server synced lost
    /// them (a damaged journal tail): it could vote again in that term, for
    /// another candidate. Refused.
    fn check_vote(&self, synced: Vote, dir: &Path) -> Result<(), StorageError> {
        let hs = &self.hard_state;
        let lost = if hs.term < synced.term {
            Some(format!("the hard state is at term {}", hs.term))
        } else if hs.term == synced.term && synced.vote != 0 && hs.vote != synced.vote {
            Some(format!("the hard state's vote in that term is {}", hs.vote))
        } else {
            None
        };
        match lost {
            Some(found) => Err(corrupt(
                "journal",
                format!(
                    "term {} with a vote for {} was synced (says {}), but {found}: the journal \
                     in {} lost a synced term or vote (damaged on disk), and this server could \
                     vote twice in one term; wipe this server's data dir and add it again \
                     (docs/operations.md: Storage faults)",
                    synced.term,
                    synced.vote,
                    self.synced.path().display(),
                    dir.display()
                ),
            )),
            None => Ok(()),
        }
    }

    /// What [`Self::sync`] made durable: the last entry, the term and vote
    /// (as written, which is what a sync covers).
    fn synced_now(&self) -> Synced {
        Synced {
            entry: self.last_mark(),
            vote: Some(Vote {
                term: self.written_hs.term,
                vote: self.written_hs.vote,
            }),
        }
    }

    /// The last entry in the log (or the snapshot's, if the log is empty).
    fn last_mark(&self) -> Mark {
        let index = self.last().max(self.snapshot_meta.index);
        Mark {
            index,
            term: self.term_of(index).unwrap_or(0),
        }
    }

    /// A leader's snapshot is written before the log it replaces is
    /// dropped: a start that finds a snapshot the log does not agree with
    /// (past its end, or another term at its index) was stopped between
    /// the two, and finishes the replacement.
    fn finish_snapshot_install(&mut self) -> Result<(), StorageError> {
        let m = self.snapshot_meta.clone();
        if m.index == 0 || m.index == self.base.0 {
            return Ok(());
        }
        let agrees = m.index > self.base.0
            && m.index <= self.last()
            && self.terms.get((m.index - self.first()) as usize) == Some(&m.term);
        if agrees {
            return Ok(());
        }
        tracing::warn!(
            index = m.index,
            log_base = self.base.0,
            log_last = self.last(),
            "the latest snapshot is newer than the log: finishing its install"
        );
        self.replace_log_with(&m)
    }

    /// Snapshots for followers carry the whole tree in the message (read
    /// here, on the core) instead of a descriptor of the file to stream.
    pub fn set_inline_snapshots(&mut self, on: bool) {
        self.inline_snapshots = on;
    }

    /// True once a conf state has been stored (the node was bootstrapped).
    pub fn is_initialized(&self) -> bool {
        !self.conf_state.voters.is_empty() || self.snapshot_meta.index > 0
    }

    /// First start of a brand-new node: record the initial voters.
    pub fn bootstrap(&mut self, voters: Vec<u64>) -> Result<(), StorageError> {
        self.set_conf_state(ConfState {
            voters,
            ..Default::default()
        })?;
        self.sync()
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot_meta.index
    }

    /// Bytes of the entries in the log (encoded).
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes
    }

    /// Index of the log's first entry.
    pub fn first_log_index(&self) -> u64 {
        self.first()
    }

    /// Appends entries (which may replace a conflicting suffix). Not synced.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let first_index = first.index;
        debug_assert!(first_index > self.base.0, "append below the log's start");
        self.batch.clear();
        // Drop the conflicting suffix, if any.
        let last = self.last();
        if first_index <= last {
            let kept = first_index - 1;
            self.synced.lower(Mark {
                index: kept,
                term: self.term_of(kept).unwrap_or(0),
            })?;
            self.batch.remove_entries(first_index, last);
            let keep = (first_index - self.base.0 - 1) as usize;
            self.terms.truncate(keep);
            for size in self.sizes.drain(keep..) {
                self.log_bytes -= u64::from(size);
            }
        }
        for entry in entries {
            let bytes = entry.write_to_bytes().map_err(|e| corrupt("entry", e))?;
            self.sizes.push_back(bytes.len() as u32);
            self.log_bytes += bytes.len() as u64;
            self.batch.put_entry(entry.index, bytes);
            self.terms.push_back(entry.term);
        }
        self.store.write(&mut self.batch)?;
        Ok(())
    }

    pub fn set_hard_state(&mut self, hs: HardState) -> Result<(), StorageError> {
        let mut written = hs.clone();
        if self.forget_votes {
            // Known-bad: the term and vote stay as last written; a change
            // of nothing else writes nothing.
            written.term = self.written_hs.term;
            written.vote = self.written_hs.vote;
            if written == self.written_hs {
                self.hard_state = hs;
                return Ok(());
            }
        }
        let bytes = written
            .write_to_bytes()
            .map_err(|e| corrupt("hard state", e))?;
        self.store.put_meta(MetaKey::HardState, bytes)?;
        self.written_hs = written;
        self.hard_state = hs;
        Ok(())
    }

    pub fn set_commit(&mut self, commit: u64) -> Result<(), StorageError> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.set_hard_state(hs)
    }

    pub fn set_conf_state(&mut self, cs: ConfState) -> Result<(), StorageError> {
        let bytes = cs.write_to_bytes().map_err(|e| corrupt("conf state", e))?;
        self.store.put_meta(MetaKey::ConfState, bytes)?;
        self.conf_state = cs;
        Ok(())
    }

    /// KNOWN-BAD, for the Jepsen selftest and the simulator only:
    /// [`Self::sync`] no longer fsyncs (entries reach the OS, not the disk:
    /// over `MemFiles` they stay unsynced, lost to a crash) and the
    /// watermark is raised all the same, as a server that skips fsync would.
    pub fn set_unsafe_skip_fsync(&mut self) {
        self.skip_fsync = true;
    }

    /// KNOWN-BAD, for the simulator only ("a vote not persisted"): a change
    /// of the hard state's term or vote is kept in memory and told to raft,
    /// but never written (the commit index still is), so a restart forgets
    /// the vote and the node can vote again in that term. The watermark
    /// records what was written, so its check does not catch it: the
    /// simulator must, as a double vote. Never reachable from the server.
    pub fn set_unsafe_forget_votes(&mut self) {
        self.forget_votes = true;
    }

    /// One fdatasync for everything written since the last one; the synced
    /// watermark then names the log's last entry, the term and the vote.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        let mode = if self.skip_fsync {
            // Written to the OS, not to the disk: survives a kill -9, not
            // a power failure.
            Persist::Buffer
        } else {
            // fdatasync: the journal's data and the metadata needed to
            // read it back (its blocks and length), without the inode's
            // times, which ext4 would otherwise commit on every call. Measured: writes 1-client p50 0.59-0.71
            // -> 0.48-0.62 ms (docs/benchmarks.md).
            Persist::SyncData
        };
        self.store.persist(mode)?;
        let synced = self.synced_now();
        self.synced.raise(synced)?;
        Ok(())
    }

    /// The metadata a snapshot of the state machine at `index` (applied
    /// now) gets: the term of that entry and the group as it is now.
    pub fn snapshot_meta_at(&self, index: u64) -> Result<SnapshotMetadata, StorageError> {
        let term = self
            .term_of(index)
            .ok_or_else(|| corrupt("snapshot", format!("index {index} is not in the log")))?;
        let mut meta = SnapshotMetadata {
            index,
            term,
            ..Default::default()
        };
        meta.set_conf_state(self.conf_state.clone());
        Ok(meta)
    }

    /// Removes every snapshot file but the latest (one a build under way
    /// at a stop may have left), once the latest has been read whole.
    pub fn remove_older_snapshots(&self) -> Result<(), StorageError> {
        if self.snapshot_meta.index == 0 {
            return Ok(());
        }
        self.snaps
            .remove_all_but((self.snapshot_meta.index, self.snapshot_meta.term))
    }

    /// The latest snapshot's file (for messages).
    pub fn snapshot_path(&self) -> std::path::PathBuf {
        self.snaps
            .path_of(self.snapshot_meta.index, self.snapshot_meta.term)
    }

    /// Where this node's snapshot files go (for a thread that writes one).
    pub fn snap_dir(&self) -> &SnapDir {
        &self.snaps
    }

    /// A snapshot this node took was written durably (by
    /// [`SnapDir::write`]): it becomes the latest, and older files go. One
    /// no newer than the latest (a leader's arrived meanwhile) is removed
    /// instead. Returns whether it became the latest.
    pub fn snapshot_written(&mut self, meta: SnapshotMetadata) -> Result<bool, StorageError> {
        if meta.index <= self.snapshot_meta.index {
            // The same name is the current file (rewritten whole by the
            // rename): it stays.
            if (meta.index, meta.term) != (self.snapshot_meta.index, self.snapshot_meta.term) {
                self.snaps.remove(meta.index, meta.term)?;
            }
            return Ok(false);
        }
        let keep = (meta.index, meta.term);
        self.snapshot_meta = meta;
        self.snaps.remove_all_but(keep)?;
        Ok(true)
    }

    /// Stores a snapshot of the state machine at `index` taken by this node
    /// (written and synced here, on the caller's thread). The log stays:
    /// [`Self::compact_log`] drops it.
    pub fn store_snapshot(&mut self, index: u64, data: Vec<u8>) -> Result<(), StorageError> {
        if index <= self.snapshot_meta.index {
            return Ok(());
        }
        let meta = self.snapshot_meta_at(index)?;
        self.snaps.write(&meta, &data)?;
        self.snapshot_written(meta)?;
        Ok(())
    }

    /// Drops the log up to `floor` (what every follower has), never past
    /// the latest snapshot; and further, up to that snapshot, while the
    /// log holds more than `max_bytes` (a follower that far behind gets the
    /// snapshot). Returns the new first index if anything was dropped.
    /// Not synced: after a crash, either log start is whole.
    pub fn compact_log(&mut self, floor: u64, max_bytes: u64) -> Result<Option<u64>, StorageError> {
        let limit = self.snapshot_meta.index.min(self.last());
        let mut to = self.base.0;
        let mut dropped_bytes = 0u64;
        let mut i = 0usize;
        while to < limit && (to < floor || self.log_bytes - dropped_bytes > max_bytes) {
            dropped_bytes += u64::from(self.sizes[i]);
            to += 1;
            i += 1;
        }
        if to == self.base.0 {
            return Ok(None);
        }
        let term = self.term_of(to).expect("within the log");
        self.batch.clear();
        self.batch.remove_entries(self.base.0 + 1, to);
        self.batch.put_meta(MetaKey::LogBase, encode_base(to, term));
        self.store.write(&mut self.batch)?;
        self.terms.drain(..i);
        self.sizes.drain(..i);
        self.log_bytes -= dropped_bytes;
        self.base = (to, term);
        Ok(Some(to + 1))
    }

    /// Installs a snapshot received from the leader: it replaces the log.
    /// The file is durable before the log goes (see
    /// [`Self::finish_snapshot_install`]).
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> Result<(), StorageError> {
        let meta = snap.get_metadata().clone();
        if meta.index <= self.snapshot_meta.index {
            return Ok(());
        }
        // The log is cut back to the snapshot: the watermark first.
        self.synced.lower(Mark {
            index: meta.index,
            term: meta.term,
        })?;
        self.snaps.write(&meta, &snap.data)?;
        self.replace_log_with(&meta)?;
        self.snapshot_meta = meta;
        self.snaps
            .remove_all_but((self.snapshot_meta.index, self.snapshot_meta.term))
    }

    /// Installs a snapshot received from the leader as a file, checked and
    /// durable under the temporary name `tmp` (see `super::snapstream`):
    /// renamed into place, then it replaces the log, as
    /// [`Self::apply_snapshot`] does. One no newer than the latest is
    /// removed instead.
    pub fn install_snapshot_file(
        &mut self,
        meta: &SnapshotMetadata,
        tmp: &Path,
    ) -> Result<(), StorageError> {
        if meta.index <= self.snapshot_meta.index {
            let _ = self.files.remove(tmp);
            return Ok(());
        }
        self.synced.lower(Mark {
            index: meta.index,
            term: meta.term,
        })?;
        self.snaps.adopt(tmp, meta)?;
        self.replace_log_with(meta)?;
        self.snapshot_meta = meta.clone();
        self.snaps
            .remove_all_but((self.snapshot_meta.index, self.snapshot_meta.term))
    }

    /// Drops the whole log: it starts after `meta`'s index, with `meta`'s
    /// group; the hard state covers it. Synced.
    fn replace_log_with(&mut self, meta: &SnapshotMetadata) -> Result<(), StorageError> {
        // One journaled clear of the whole log, not a tombstone per entry
        // (tens of thousands of them held a follower's core for a quarter
        // of a second). Cleared first: a stop before the new base is
        // stored leaves an empty log behind the snapshot, which the next
        // start finishes installing; never entries of the old log read as
        // following the new base.
        self.store.clear_entries()?;
        self.batch.clear();
        self.batch
            .put_meta(MetaKey::LogBase, encode_base(meta.index, meta.term));
        self.store.write(&mut self.batch)?;
        self.terms.clear();
        self.sizes.clear();
        self.log_bytes = 0;
        self.base = (meta.index, meta.term);
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(meta.term);
        hs.commit = hs.commit.max(meta.index);
        self.set_hard_state(hs)?;
        self.set_conf_state(meta.get_conf_state().clone())?;
        self.sync()
    }

    /// The latest snapshot (metadata + state machine data), if any, read
    /// whole and checked.
    pub fn load_snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        if self.snapshot_meta.index == 0 {
            return Ok(None);
        }
        self.snaps
            .read(self.snapshot_meta.index, self.snapshot_meta.term)
            .map(Some)
    }

    fn first(&self) -> u64 {
        self.base.0 + 1
    }

    fn last(&self) -> u64 {
        self.base.0 + self.terms.len() as u64
    }

    fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.base.0 {
            return Some(self.base.1);
        }
        if index == self.snapshot_meta.index {
            return Some(self.snapshot_meta.term);
        }
        if index < self.first() || index > self.last() {
            return None;
        }
        self.terms.get((index - self.first()) as usize).copied()
    }
}

/// A snapshot stored in fjall by an older version becomes a file (if no
/// newer file is there) and leaves fjall. Returns its index and term.
fn migrate_legacy_snapshot(
    store: &mut dyn LogStore,
    snaps: &SnapDir,
) -> Result<Option<(u64, u64)>, StorageError> {
    let Some(v) = store.get_meta(MetaKey::LegacySnapshot)? else {
        return Ok(None);
    };
    let snap = Snapshot::parse_from_bytes(&v).map_err(|e| corrupt("snapshot", e))?;
    let m = snap.get_metadata();
    if snaps
        .list()?
        .last()
        .is_none_or(|&(index, _)| index < m.index)
    {
        snaps.write(m, &snap.data)?;
    }
    let it = (m.index, m.term);
    store.remove_meta(MetaKey::LegacySnapshot)?;
    store.persist(Persist::SyncAll)?;
    Ok(Some(it))
}

impl raft::Storage for DiskStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(RaftStorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(RaftStorageError::Unavailable));
        }
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity((high - low) as usize);
        let mut size = 0u64;
        self.store
            .scan(low, Some(high), &mut |value| {
                size += value.len() as u64;
                // Always return at least one entry, as raft requires.
                if !out.is_empty() && size > max_size {
                    return Ok(false);
                }
                let entry = Entry::parse_from_bytes(value).map_err(|e| corrupt("log entry", e))?;
                out.push(entry);
                Ok(true)
            })
            .map_err(other)?;
        if out.is_empty() && high > low {
            return Err(raft::Error::Store(RaftStorageError::Unavailable));
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.base.0 {
            return Err(raft::Error::Store(RaftStorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(RaftStorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // Snapshots are taken by the core as it applies; a follower far
        // enough behind gets the latest one, and raft catches it up with the
        // log after it. The message carries a descriptor of the file, not
        // the tree: the file is streamed to the follower off the core
        // (`super::snapstream`).
        if self.snapshot_meta.index == 0 {
            return Err(raft::Error::Store(
                RaftStorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        if self.inline_snapshots {
            return match self.load_snapshot() {
                Ok(Some(snap)) => Ok(snap),
                Ok(None) => Err(raft::Error::Store(
                    RaftStorageError::SnapshotTemporarilyUnavailable,
                )),
                Err(e) => Err(other(e)),
            };
        }
        let m = &self.snapshot_meta;
        let (file_bytes, checksum) = self.snaps.describe(m.index, m.term).map_err(other)?;
        let mut snap = Snapshot {
            data: Descriptor {
                file_bytes,
                checksum,
            }
            .encode()
            .into(),
            ..Default::default()
        };
        snap.set_metadata(m.clone());
        Ok(snap)
    }
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "storage_crash_tests.rs"]
mod crash_tests;
