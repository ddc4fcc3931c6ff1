//! [`FjallLog`]: the log in fjall — a keyspace of entries keyed by index
//! (big-endian, so in order) and one of metadata — as the server has kept
//! it since it had a disk. The calls are the ones `DiskStorage` made
//! itself before the log had a trait.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{LogBatch, LogOp, LogStore, MetaKey, Persist};
use crate::raft::storage::StorageError;

/// fjall's block cache (the log's hot tail for followers that lag a
/// little). Entries are read back only to send them to a follower or to
/// apply them right after they were written, so a small cache serves.
pub const BLOCK_CACHE_BYTES: u64 = 32 * 1024 * 1024;
/// The log's memtable: written entries stay in memory until this much has
/// gathered, then go to a table on disk (fjall's default is 64 MiB).
pub const LOG_MEMTABLE_BYTES: u64 = 16 * 1024 * 1024;
/// The metadata's memtable (hard state, conf state, log start: tiny).
pub const META_MEMTABLE_BYTES: u64 = 4 * 1024 * 1024;

pub(crate) fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The log in a fjall database under one directory.
pub struct FjallLog {
    pub(crate) db: Database,
    pub(crate) log: Keyspace,
    pub(crate) meta: Keyspace,
}

impl FjallLog {
    /// Opens (or creates) the database under `dir`. A journal fjall cannot
    /// recover is refused naming `dir` and what to do.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        let damaged = |why: String| StorageError::Corrupt {
            what: "journal",
            detail: format!(
                "the journal in {} cannot be recovered ({why}); wipe this server's data dir \
                 and add it again (docs/operations.md: Storage faults)",
                dir.display()
            ),
        };
        // fjall asserts on some damaged journal records instead of
        // returning an error: a panic while opening is a damaged journal
        // too, and must be said as clearly.
        let opened = std::panic::catch_unwind(|| {
            Database::builder(dir).cache_size(BLOCK_CACHE_BYTES).open()
        })
        .map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "fjall panicked".into());
            damaged(format!("fjall panicked: {}", why.replace('\n', " ")))
        })?;
        let db = opened.map_err(|e| match e {
            // A journal that fails its checksums: name it and say what
            // to do, as for every other damaged file.
            fjall::Error::JournalRecovery(why) => damaged(format!("{why:?}")),
            e => e.into(),
        })?;
        let log = db.keyspace("raft_log", || {
            KeyspaceCreateOptions::default().max_memtable_size(LOG_MEMTABLE_BYTES)
        })?;
        let meta = db.keyspace("raft_meta", || {
            KeyspaceCreateOptions::default().max_memtable_size(META_MEMTABLE_BYTES)
        })?;
        Ok(FjallLog { db, log, meta })
    }
}

impl LogStore for FjallLog {
    fn get_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.meta.get(key.name())?.map(|v| v.to_vec()))
    }

    fn put_meta(&mut self, key: MetaKey, bytes: Vec<u8>) -> Result<(), StorageError> {
        self.meta.insert(key.name(), bytes)?;
        Ok(())
    }

    fn remove_meta(&mut self, key: MetaKey) -> Result<(), StorageError> {
        self.meta.remove(key.name())?;
        Ok(())
    }

    fn scan(
        &self,
        low: u64,
        high: Option<u64>,
        f: &mut dyn FnMut(&[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let mut visit = |kv: fjall::Guard| -> Result<bool, StorageError> {
            let (_, value) = kv.into_inner()?;
            f(&value)
        };
        match high {
            Some(high) => {
                for kv in self.log.range(log_key(low)..log_key(high)) {
                    if !visit(kv)? {
                        break;
                    }
                }
            }
            None => {
                for kv in self.log.range(log_key(low)..) {
                    if !visit(kv)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, batch: &mut LogBatch) -> Result<(), StorageError> {
        let mut b = self.db.batch();
        for op in batch.ops.drain(..) {
            match op {
                LogOp::PutEntry(index, bytes) => b.insert(&self.log, log_key(index), bytes),
                LogOp::RemoveEntries { from, to } => {
                    for index in from..=to {
                        b.remove(&self.log, log_key(index));
                    }
                }
                LogOp::PutMeta(key, bytes) => b.insert(&self.meta, key.name(), bytes),
            }
        }
        b.commit()?;
        Ok(())
    }

    fn clear_entries(&mut self) -> Result<(), StorageError> {
        // One journaled clear of the whole log, not a tombstone per entry
        // (tens of thousands of them held a follower's core for a quarter
        // of a second).
        self.log.clear()?;
        Ok(())
    }

    fn persist(&mut self, mode: Persist) -> Result<(), StorageError> {
        let mode = match mode {
            Persist::Buffer => PersistMode::Buffer,
            Persist::SyncData => PersistMode::SyncData,
            Persist::SyncAll => PersistMode::SyncAll,
        };
        self.db.persist(mode)?;
        Ok(())
    }
}
