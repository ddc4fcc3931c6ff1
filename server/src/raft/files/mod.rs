//! The file layer under raft's durable state: what the snapshot files
//! ([`super::snapfile`]), the synced watermark ([`super::watermark`]) and
//! the file log ([`super::logstore::FileLog`]) do to files, behind a trait,
//! so that the same storage and recovery code runs over the real file
//! system ([`OsFiles`], the server) and over a simulated disk with real
//! crash semantics and fault injection ([`MemFiles`], the simulator and
//! tests).
//!
//! The trait names exactly the operations that code needs, with the
//! durability each promises: a write reaches the file (the OS's cache)
//! and survives the process, but a power loss only once the file is
//! synced ([`FileHandle::sync_data`]); a name created, renamed or removed
//! survives a power loss only once its directory is synced
//! ([`Files::sync_dir`]). [`MemFiles`] holds code to exactly that, so a
//! missing fsync there is a lost write in the simulator, as on a disk.
//!
//! This module must never decide what is written: it only stores bytes
//! where it is told.

mod mem;
mod os;

use std::ffi::OsString;
use std::fmt::Debug;
use std::io;
use std::path::Path;

pub use mem::{Crash, CrashReport, Faults, Kept, MemFiles};
pub use os::OsFiles;
pub(crate) use os::{written_back, WRITEBACK_CHUNK};

/// A file system: names in directories, and files opened by name.
/// Shared (`Arc<dyn Files>`) by everything that keeps raft's state.
pub trait Files: Send + Sync + Debug {
    /// Creates `dir` and its parents if missing (durable at once: see
    /// [`MemFiles`] for why directories are).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names in `dir`, sorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// The whole contents of the file at `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Creates the file at `path` empty (truncating one there), for
    /// reading and writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn FileHandle>>;
    /// Opens the existing file at `path` for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn FileHandle>>;
    /// Opens the existing file at `path` for reading only.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FileHandle>>;
    /// Renames `from` to `to`, replacing a file there. Durable once the
    /// directories involved are synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file at `path` (`NotFound` if none). Durable once its
    /// directory is synced.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the names in `dir` (created, renamed, removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether this is the real file system (what fjall, which has no
    /// file layer, writes whatever it is given).
    fn is_real(&self) -> bool {
        false
    }
}

/// An open file. Reads see every write made so far; what survives a power
/// loss is what the last sync covered.
#[allow(clippy::len_without_is_empty)] // a file's length, not a container's
pub trait FileHandle: Send + Debug {
    /// Fills `buf` from `offset` (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset` (extending the file if need be).
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at the end of the file.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// The file's length.
    fn len(&self) -> io::Result<u64>;
    /// Cuts (or extends with zeros) the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Makes the data written so far, and the length, durable (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// As [`Self::sync_data`], and the inode's other metadata (fsync).
    fn sync_all(&mut self) -> io::Result<()>;
    /// A hint that the `len` bytes written at `offset` may go to the disk
    /// now (and the chunk before them be waited for), so that a large file
    /// does not sit dirty whole until its sync. No durability promised.
    fn write_back(&self, offset: u64, len: u64);
}

/// The file layer of the real server.
pub fn os() -> std::sync::Arc<dyn Files> {
    std::sync::Arc::new(OsFiles)
}
