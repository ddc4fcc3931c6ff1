//! Each node's disk, which outlives the node's process: the storage
//! helper's in-memory file layer (`MemFiles`) with a disk's crash
//! semantics, the real `DiskStorage` over it with its log in files
//! (`FileLog`), as the server's storage code runs.
//!
//! A killed process loses nothing written (the OS's cache keeps it); a
//! machine that loses power keeps what was synced and, of the rest, a
//! prefix drawn from the disk's own seeded generator, its last write
//! possibly torn. The node's next incarnation opens the storage again
//! over what is left, and its checks decide whether it may start.
//!
//! A run with disk faults may also read back the last bytes of a whole
//! file damaged (`Faults::tail_flip_per_million`): the journal's last
//! record, synced, looking like a torn write. The storage catches that by
//! its synced watermark, which a killed process leaves current (the OS's
//! cache keeps its last raise). After a power loss the watermark on disk
//! may be older than what was synced (raising it is not synced, by
//! design: `server/src/raft/watermark.rs`), so a damaged tail is a loss
//! the storage does not claim to see: tail flips are armed by a kill and
//! disarmed by a power loss, until the next kill.

use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use warden_server::raft::files::{Crash, Faults, MemFiles};
use warden_server::raft::logstore::LogKind;
use warden_server::raft::{DiskStorage, StorageError};

use crate::world::BadModes;

const RAFT_DIR: &str = "/data/raft";
const SNAP_DIR: &str = "/data/snapshots";

pub struct SimDisk {
    files: MemFiles,
    /// The faults the run drew for this disk.
    faults: Faults,
    /// Whether tail flips are armed (see the module docs).
    tail_armed: bool,
}

impl SimDisk {
    /// An empty disk; what a power loss keeps is drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            files: MemFiles::new(ChaCha8Rng::seed_from_u64(seed)),
            faults: Faults::default(),
            tail_armed: true,
        }
    }

    /// Read flips, failed writes and failed syncs, at these rates.
    /// The file layer itself (a whole core opens its storage on it).
    pub fn files(&self) -> std::sync::Arc<dyn warden_server::raft::files::Files> {
        self.files.as_files()
    }

    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
        self.apply_faults();
    }

    fn apply_faults(&self) {
        let mut faults = self.faults;
        if !self.tail_armed {
            faults.tail_flip_per_million = 0;
        }
        self.files.set_faults(faults);
    }

    /// Opens the storage over what the disk holds now.
    pub fn open(&self, bad: &BadModes) -> Result<DiskStorage, StorageError> {
        let open = if bad.unchecked_open {
            DiskStorage::open_on_unsafe_unchecked
        } else {
            DiskStorage::open_on
        };
        let mut storage = open(
            self.files.as_files(),
            LogKind::Files,
            Path::new(RAFT_DIR),
            Path::new(SNAP_DIR),
        )?;
        if bad.skip_fsync {
            storage.set_unsafe_skip_fsync();
        }
        if bad.vote_not_persisted {
            storage.set_unsafe_forget_votes();
        }
        Ok(storage)
    }

    /// The process died (`power_loss` false: the OS's cache keeps what was
    /// written) or the machine lost power (what was not durable is gone,
    /// but for a drawn prefix). What the power loss kept, for the trace.
    pub fn crash(&mut self, power_loss: bool) -> Option<String> {
        if self.tail_armed == power_loss {
            self.tail_armed = !power_loss;
            self.apply_faults();
        }
        if !power_loss {
            return None;
        }
        let report = self.files.crash(Crash::Seeded).to_string();
        let report = report.trim_end().replace('\n', "; ");
        Some(if report.is_empty() {
            "nothing was unsynced".into()
        } else {
            report
        })
    }
}
