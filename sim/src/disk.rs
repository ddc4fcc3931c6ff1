//! Each node's disk, which outlives the node's process: a crash loses what
//! the disk never made durable, and the node's next incarnation opens the
//! real `DiskStorage` over what is left.
//!
//! For now the disk is a temporary directory with the real fjall storage
//! (a crash keeps everything: the OS's cache survives a killed process);
//! the in-memory file layer with real crash semantics replaces it.

use std::path::PathBuf;

use warden_server::raft::{DiskStorage, StorageError};

use crate::world::BadModes;

pub struct SimDisk {
    dir: tempfile::TempDir,
}

impl SimDisk {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            dir: tempfile::Builder::new().prefix("warden-sim").tempdir()?,
        })
    }

    fn raft_dir(&self) -> PathBuf {
        self.dir.path().join("raft")
    }

    /// Opens the storage over what the disk holds now.
    pub fn open(&self, bad: &BadModes) -> Result<DiskStorage, StorageError> {
        let mut storage = DiskStorage::open(&self.raft_dir(), &self.dir.path().join("snap"))?;
        if bad.skip_fsync {
            storage.set_unsafe_skip_fsync();
        }
        Ok(storage)
    }

    /// The process died (`power_loss` false: the OS's cache keeps what was
    /// written) or the machine lost power (what was not durable is gone).
    /// What the power loss kept, for the trace.
    pub fn crash(&mut self, power_loss: bool) -> Option<String> {
        power_loss.then(|| "a temporary directory keeps everything".to_string())
    }
}
