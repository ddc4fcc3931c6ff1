//! Where [`super::DiskStorage`] keeps the log's entries and its metadata
//! (hard state, conf state, the log's start): a key-value shape with
//! batched writes and one sync, behind a trait, with two stores.
//!
//! - [`FjallLog`], the server's: fjall, as before this trait existed.
//!   fjall has no pluggable file system — it opens, writes and fsyncs its
//!   journal and tables through `std::fs` itself — so it cannot run over
//!   [`super::files::MemFiles`], and the simulator never runs fjall's own
//!   recovery.
//! - [`FileLog`], the simulator's (and any test's): an append-only file of
//!   checksummed records over the file layer ([`super::files`]), recovered
//!   up to the first record that fails its checksum, as fjall's journal is.
//!   Over `MemFiles` it is what makes a crash lose an unsynced tail and a
//!   damaged record drop everything after it, so the simulator runs
//!   `DiskStorage`'s own bookkeeping and checks (the synced watermark)
//!   against the damage they exist for.
//!
//! A store only keeps what it is handed; what the log means is
//! `DiskStorage`'s to say.

mod filelog;
mod fjall;

#[cfg(test)]
pub(crate) use self::fjall::log_key;
pub use self::fjall::FjallLog;
pub use filelog::{FileLog, CHECKPOINT_MIN_BYTES};

use super::storage::StorageError;

/// Which store the log goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// fjall, on the real file system whatever file layer the rest of the
    /// storage is given (fjall has none to take): the server's.
    Fjall,
    /// [`FileLog`] over the storage's file layer: the simulator's.
    Files,
}

/// The metadata a store keeps beside the entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MetaKey {
    HardState,
    ConfState,
    /// Index and term (u64 big-endian each) of the entry just before the
    /// log's first.
    LogBase,
    /// Where snapshots were kept before they had files (read once, to
    /// move it to a file).
    LegacySnapshot,
}

impl MetaKey {
    /// The key's name in the store (fjall's keys, as they always were).
    pub fn name(self) -> &'static [u8] {
        match self {
            MetaKey::HardState => b"hard_state",
            MetaKey::ConfState => b"conf_state",
            MetaKey::LogBase => b"log_base",
            MetaKey::LegacySnapshot => b"snapshot",
        }
    }

    fn code(self) -> u8 {
        match self {
            MetaKey::HardState => 1,
            MetaKey::ConfState => 2,
            MetaKey::LogBase => 3,
            MetaKey::LegacySnapshot => 4,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => MetaKey::HardState,
            2 => MetaKey::ConfState,
            3 => MetaKey::LogBase,
            4 => MetaKey::LegacySnapshot,
            _ => return None,
        })
    }
}

/// One change in a [`LogBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogOp {
    /// The encoded entry at an index.
    PutEntry(u64, Vec<u8>),
    /// The entries `from..=to` go.
    RemoveEntries {
        from: u64,
        to: u64,
    },
    PutMeta(MetaKey, Vec<u8>),
}

/// Changes written together: all of them or none survive a crash.
/// Drained by [`LogStore::write`], so one batch is reused.
#[derive(Debug, Default)]
pub struct LogBatch {
    pub(crate) ops: Vec<LogOp>,
}

impl LogBatch {
    pub fn put_entry(&mut self, index: u64, bytes: Vec<u8>) {
        self.ops.push(LogOp::PutEntry(index, bytes));
    }

    pub fn remove_entries(&mut self, from: u64, to: u64) {
        self.ops.push(LogOp::RemoveEntries { from, to });
    }

    pub fn put_meta(&mut self, key: MetaKey, bytes: Vec<u8>) {
        self.ops.push(LogOp::PutMeta(key, bytes));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Drops what a write that failed half-built left.
    pub fn clear(&mut self) {
        self.ops.clear();
    }
}

/// How far [`LogStore::persist`] takes what was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// To the OS: survives the process, not a power loss (known-bad as a
    /// sync; see `DiskStorage::set_unsafe_skip_fsync`).
    Buffer,
    /// fdatasync: the data and what is needed to read it back.
    SyncData,
    /// fsync.
    SyncAll,
}

/// The log's entries by index and its metadata. Writes are not durable
/// until [`Self::persist`]; a crash keeps a prefix of them, whole batches
/// only.
pub trait LogStore: Send {
    fn get_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>, StorageError>;
    /// Written at once (not batched), not synced.
    fn put_meta(&mut self, key: MetaKey, bytes: Vec<u8>) -> Result<(), StorageError>;
    fn remove_meta(&mut self, key: MetaKey) -> Result<(), StorageError>;
    /// Calls `f` with the bytes of each stored entry from index `low` up
    /// to (not including) `high` (`None`: to the end), in index order,
    /// until it returns `false`.
    fn scan(
        &self,
        low: u64,
        high: Option<u64>,
        f: &mut dyn FnMut(&[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError>;
    /// Writes `batch` as one (and empties it). Not synced.
    fn write(&mut self, batch: &mut LogBatch) -> Result<(), StorageError>;
    /// Drops every entry, as one change (the metadata stays). Not synced.
    fn clear_entries(&mut self) -> Result<(), StorageError>;
    /// Makes everything written so far as durable as `mode` says.
    fn persist(&mut self, mode: Persist) -> Result<(), StorageError>;
}
