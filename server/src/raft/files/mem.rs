//! [`MemFiles`]: a file layer in memory with a disk's crash semantics and
//! fault injection, for the simulator and tests.
//!
//! Each file keeps the bytes a power loss would leave (its durable bytes)
//! and the writes made since its last sync, in order; each directory keeps
//! its durable names and the name changes (create, rename, remove) made
//! since it was last synced. Reads see everything written. A sync makes a
//! file's writes durable, a directory sync its name changes; [`MemFiles::crash`]
//! is a power loss: what was not durable goes, or (seeded) a prefix of it
//! stays, the last write of the prefix torn — as a disk that wrote some
//! of its queue, in order, and was cut off in the middle of a write.
//! Names are kept in order per directory as a journaling file system
//! does; writes to different files are independent.
//!
//! Directories themselves are durable when created: the storage creates
//! its directories once, before anything is written in them, and never
//! syncs their parents (ext4 commits a `mkdir` with its journal; a model
//! that lost them would only ever find that).
//!
//! After a crash the handles opened before it fail: they belong to the
//! process that died. A restart without a power loss is the storage
//! dropped and opened again on the same `MemFiles`: it keeps what was
//! written, synced or not, as the OS's cache does.
//!
//! Faults, at rates the caller sets ([`Faults`]), drawn from the rng the
//! caller hands in: a bit flipped in what a read returns (the disk keeps
//! its bytes), a write or a sync that fails (nothing written; a failed
//! sync makes nothing durable). [`MemFiles::flip_bit`] damages the stored
//! bytes themselves (a bad sector).
//!
//! Deterministic: no clock, no OS randomness, ordered containers only; the
//! same calls and the same rng give the same disk.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::RngCore;

use super::{FileHandle, Files};

/// Fault rates, each in parts per million of the operations it applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Reads (whole-file or at an offset) that return one bit flipped.
    pub read_flip_per_million: u32,
    /// Writes (at an offset, appended, or a length set) that fail.
    pub write_fail_per_million: u32,
    /// Syncs (of a file or a directory) that fail.
    pub sync_fail_per_million: u32,
    /// Whole-file reads that return one bit flipped in the file's last
    /// [`TAIL_BYTES`]: the sector written last, the one a disk most often
    /// reads back damaged (and the one a journal's reader is most tempted
    /// to take for a torn write).
    pub tail_flip_per_million: u32,
}

/// How far from a file's end a tail flip lands (see
/// [`Faults::tail_flip_per_million`]).
pub const TAIL_BYTES: usize = 64;

/// What a power loss does with what was not durable.
#[derive(Debug, Clone)]
pub enum Crash {
    /// All of it is lost.
    LoseUnsynced,
    /// For each file and directory, a prefix of its unsynced changes drawn
    /// from the rng stays, the last write of it possibly torn.
    Seeded,
    /// The files named (by their name before the crash) keep what is
    /// said; everything else unsynced is lost.
    Exact(BTreeMap<PathBuf, Kept>),
}

/// How much of one file's unsynced writes a crash leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kept {
    /// The first `writes` unsynced writes stay...
    pub writes: usize,
    /// ...the last of them cut to this many bytes, if set (a torn write).
    pub torn_bytes: Option<usize>,
}

/// What a crash kept, for a simulator's trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Files that had unsynced writes: name, how many, what stayed.
    pub files: Vec<(PathBuf, usize, Kept)>,
    /// Directories that had unsynced name changes: name, how many, how
    /// many stayed.
    pub dirs: Vec<(PathBuf, usize, usize)>,
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (path, pending, kept) in &self.files {
            write!(
                f,
                "{}: {} of {pending} unsynced writes kept",
                path.display(),
                kept.writes
            )?;
            if let Some(n) = kept.torn_bytes {
                write!(f, ", the last torn at {n} bytes")?;
            }
            writeln!(f)?;
        }
        for (path, pending, kept) in &self.dirs {
            writeln!(
                f,
                "{}/: {kept} of {pending} unsynced name changes kept",
                path.display()
            )?;
        }
        Ok(())
    }
}

/// The in-memory disk. Clones share it: the simulator keeps one to crash
/// and damage while the storage holds another.
#[derive(Clone)]
pub struct MemFiles {
    disk: Arc<Mutex<Disk>>,
}

impl fmt::Debug for MemFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disk = self.lock();
        f.debug_struct("MemFiles")
            .field("dirs", &disk.dirs.len())
            .field("files", &disk.inodes.len())
            .field("crashes", &disk.generation)
            .finish()
    }
}

struct Disk {
    dirs: BTreeMap<PathBuf, Dir>,
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    /// Crashes so far: a handle opened before the latest one is dead.
    generation: u64,
    rng: Box<dyn RngCore + Send>,
    faults: Faults,
}

#[derive(Default)]
struct Dir {
    /// Names as seen now.
    live: BTreeMap<OsString, u64>,
    /// Names a power loss leaves.
    durable: BTreeMap<OsString, u64>,
    /// Changes from `durable` to `live`, in order.
    pending: Vec<DirOp>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(OsString, u64),
    Unlink(OsString),
    Rename(OsString, OsString, u64),
}

#[derive(Default)]
struct Inode {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Writes from `durable` to `current`, in order.
    pending: Vec<FileOp>,
    handles: usize,
}

#[derive(Debug, Clone)]
enum FileOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

fn apply(data: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { offset, bytes } => {
            let at = *offset as usize;
            if data.len() < at + bytes.len() {
                data.resize(at + bytes.len(), 0);
            }
            data[at..at + bytes.len()].copy_from_slice(bytes);
        }
        FileOp::SetLen(len) => data.resize(*len as usize, 0),
    }
}

fn apply_dir(names: &mut BTreeMap<OsString, u64>, op: &DirOp) {
    match op {
        DirOp::Link(name, ino) => {
            names.insert(name.clone(), *ino);
        }
        DirOp::Unlink(name) => {
            names.remove(name);
        }
        DirOp::Rename(from, to, ino) => {
            names.remove(from);
            names.insert(to.clone(), *ino);
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn split(path: &Path) -> io::Result<(&Path, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name.to_os_string())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )),
    }
}

impl Disk {
    fn draw(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.rng.next_u32() % 1_000_000 < per_million
    }

    fn dir(&self, dir: &Path) -> io::Result<&Dir> {
        self.dirs.get(dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            )
        })
    }

    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            )
        })
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (dir, name) = split(path)?;
        self.dir(dir)?
            .live
            .get(&name)
            .copied()
            .ok_or_else(|| not_found(path))
    }

    fn flip_on_read(&mut self, buf: &mut [u8]) {
        if !buf.is_empty() && self.draw(self.faults.read_flip_per_million) {
            let bit = self.rng.next_u64() % (buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
    }

    fn flip_tail_on_read(&mut self, buf: &mut [u8]) {
        if !buf.is_empty() && self.draw(self.faults.tail_flip_per_million) {
            let tail = buf.len().min(TAIL_BYTES);
            let bit = self.rng.next_u64() % (tail as u64 * 8);
            let at = buf.len() - tail + (bit / 8) as usize;
            buf[at] ^= 1 << (bit % 8);
        }
    }

    fn write_fails(&mut self, what: &str) -> io::Result<()> {
        if self.draw(self.faults.write_fail_per_million) {
            return Err(io::Error::other(format!("injected fault: {what} failed")));
        }
        Ok(())
    }

    fn sync_fails(&mut self, what: &str) -> io::Result<()> {
        if self.draw(self.faults.sync_fail_per_million) {
            return Err(io::Error::other(format!("injected fault: {what} failed")));
        }
        Ok(())
    }

    /// Drops an inode no name (live or durable) and no handle refers to.
    fn collect(&mut self, ino: u64) {
        let Some(inode) = self.inodes.get(&ino) else {
            return;
        };
        if inode.handles > 0 {
            return;
        }
        let named = self
            .dirs
            .values()
            .any(|d| d.live.values().any(|&i| i == ino) || d.durable.values().any(|&i| i == ino));
        if !named {
            self.inodes.remove(&ino);
        }
    }

    fn file_op(&mut self, ino: u64, op: FileOp) {
        let inode = self.inodes.get_mut(&ino).expect("a handle's inode");
        apply(&mut inode.current, &op);
        inode.pending.push(op);
    }

    fn new_handle(&mut self, ino: u64) -> (u64, u64) {
        self.inodes.get_mut(&ino).expect("a named inode").handles += 1;
        (ino, self.generation)
    }
}

impl MemFiles {
    /// An empty disk; faults (none until [`Self::set_faults`]) and seeded
    /// crashes are drawn from `rng`.
    pub fn new(rng: impl RngCore + Send + 'static) -> Self {
        MemFiles {
            disk: Arc::new(Mutex::new(Disk {
                dirs: BTreeMap::new(),
                inodes: BTreeMap::new(),
                next_ino: 1,
                generation: 0,
                rng: Box::new(rng),
                faults: Faults::default(),
            })),
        }
    }

    /// An empty disk drawing from a `StdRng` seeded with `seed`.
    pub fn seeded(seed: u64) -> Self {
        use rand::SeedableRng as _;
        Self::new(rand::rngs::StdRng::seed_from_u64(seed))
    }

    /// The same disk, as the file layer the storage is opened on.
    pub fn as_files(&self) -> Arc<dyn Files> {
        Arc::new(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().expect("MemFiles lock poisoned")
    }

    pub fn set_faults(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    /// A power loss: see [`Crash`]. Handles opened before it fail from
    /// now on.
    pub fn crash(&self, how: Crash) -> CrashReport {
        let mut disk = self.lock();
        let disk = &mut *disk;
        let mut report = CrashReport::default();
        // Files by their name now (the first, if several).
        let mut names: BTreeMap<u64, PathBuf> = BTreeMap::new();
        for (dir, d) in &disk.dirs {
            for (name, ino) in &d.live {
                names.entry(*ino).or_insert_with(|| dir.join(name));
            }
        }
        let inos: Vec<u64> = disk.inodes.keys().copied().collect();
        for ino in inos {
            let pending = disk.inodes[&ino].pending.len();
            let kept = if pending == 0 {
                Kept::default()
            } else {
                match &how {
                    Crash::LoseUnsynced => Kept::default(),
                    Crash::Exact(map) => names
                        .get(&ino)
                        .and_then(|p| map.get(p))
                        .copied()
                        .unwrap_or_default(),
                    Crash::Seeded => {
                        let writes = (disk.rng.next_u64() % (pending as u64 + 1)) as usize;
                        let last = writes.checked_sub(1).map(|i| &disk.inodes[&ino].pending[i]);
                        let torn_bytes = match last {
                            Some(FileOp::Write { bytes, .. })
                                if !bytes.is_empty() && disk.rng.next_u32() & 1 == 0 =>
                            {
                                Some((disk.rng.next_u64() % bytes.len() as u64) as usize)
                            }
                            _ => None,
                        };
                        Kept { writes, torn_bytes }
                    }
                }
            };
            let inode = disk.inodes.get_mut(&ino).expect("listed");
            let writes = kept.writes.min(pending);
            for (i, op) in inode.pending[..writes].iter().enumerate() {
                match (op, kept.torn_bytes) {
                    (FileOp::Write { offset, bytes }, Some(n)) if i + 1 == writes => {
                        let torn = FileOp::Write {
                            offset: *offset,
                            bytes: bytes[..n.min(bytes.len())].to_vec(),
                        };
                        apply(&mut inode.durable, &torn);
                    }
                    _ => apply(&mut inode.durable, op),
                }
            }
            inode.pending.clear();
            inode.current = inode.durable.clone();
            inode.handles = 0;
            if pending > 0 {
                let path = names
                    .get(&ino)
                    .cloned()
                    .unwrap_or_else(|| PathBuf::from(format!("<unnamed file {ino}>")));
                report.files.push((path, pending, Kept { writes, ..kept }));
            }
        }
        for (path, dir) in disk.dirs.iter_mut() {
            let pending = dir.pending.len();
            if pending == 0 {
                continue;
            }
            let kept = match how {
                Crash::Seeded => (disk.rng.next_u64() % (pending as u64 + 1)) as usize,
                _ => 0,
            };
            for op in &dir.pending[..kept] {
                apply_dir(&mut dir.durable, op);
            }
            dir.pending.clear();
            dir.live = dir.durable.clone();
            report.dirs.push((path.clone(), pending, kept));
        }
        disk.generation += 1;
        let inos: Vec<u64> = disk.inodes.keys().copied().collect();
        for ino in inos {
            disk.collect(ino);
        }
        report
    }

    /// Damages the stored bytes of the file at `path` (a bad sector): bit
    /// `bit` of byte `offset`, in what is durable and in what reads see.
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> io::Result<()> {
        let mut disk = self.lock();
        let ino = disk.lookup(path)?;
        let inode = disk.inodes.get_mut(&ino).expect("a named inode");
        let at = offset as usize;
        if at >= inode.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: byte {offset} is past its end ({})",
                    path.display(),
                    inode.current.len()
                ),
            ));
        }
        inode.current[at] ^= 1 << (bit % 8);
        if at < inode.durable.len() {
            inode.durable[at] ^= 1 << (bit % 8);
        }
        for op in &mut inode.pending {
            if let FileOp::Write { offset, bytes } = op {
                if let Some(b) = at
                    .checked_sub(*offset as usize)
                    .and_then(|i| bytes.get_mut(i))
                {
                    *b ^= 1 << (bit % 8);
                }
            }
        }
        Ok(())
    }

    /// The writes to the file at `path` not yet synced.
    pub fn unsynced_writes(&self, path: &Path) -> io::Result<usize> {
        let disk = self.lock();
        let ino = disk.lookup(path)?;
        Ok(disk.inodes[&ino].pending.len())
    }

    /// What a power loss now would leave of the file at `path` (its
    /// durable bytes), if its name is durable.
    pub fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.lock();
        let (dir, name) = split(path).ok()?;
        let ino = *disk.dirs.get(dir)?.durable.get(&name)?;
        Some(disk.inodes[&ino].durable.clone())
    }
}

impl MemFiles {
    /// A new handle on inode `ino`, named `path` in errors.
    fn handle(
        &self,
        disk: &mut Disk,
        ino: u64,
        path: &Path,
        writable: bool,
    ) -> Box<dyn FileHandle> {
        let (ino, generation) = disk.new_handle(ino);
        Box::new(MemFile {
            disk: self.disk.clone(),
            ino,
            generation,
            writable,
            path: path.to_path_buf(),
        })
    }
}

impl Files for MemFiles {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        for d in dir.ancestors() {
            if d.as_os_str().is_empty() {
                break;
            }
            disk.dirs.entry(d.to_path_buf()).or_default();
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let disk = self.lock();
        let mut names: BTreeSet<OsString> = disk.dir(dir)?.live.keys().cloned().collect();
        for sub in disk.dirs.keys() {
            if sub.parent() == Some(dir) {
                if let Some(name) = sub.file_name() {
                    names.insert(name.to_os_string());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut disk = self.lock();
        let ino = disk.lookup(path)?;
        let mut bytes = disk.inodes[&ino].current.clone();
        disk.flip_on_read(&mut bytes);
        disk.flip_tail_on_read(&mut bytes);
        Ok(bytes)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        let mut disk = self.lock();
        let (dir, name) = split(path)?;
        let existing = disk.dir(dir)?.live.get(&name).copied();
        let ino = match existing {
            Some(ino) => {
                disk.write_fails("truncating")?;
                disk.file_op(ino, FileOp::SetLen(0));
                ino
            }
            None => {
                let ino = disk.next_ino;
                disk.next_ino += 1;
                disk.inodes.insert(ino, Inode::default());
                let d = disk.dir_mut(dir)?;
                d.live.insert(name.clone(), ino);
                d.pending.push(DirOp::Link(name, ino));
                ino
            }
        };
        Ok(self.handle(&mut disk, ino, path, true))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        let mut disk = self.lock();
        let ino = disk.lookup(path)?;
        Ok(self.handle(&mut disk, ino, path, true))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        let mut disk = self.lock();
        let ino = disk.lookup(path)?;
        Ok(self.handle(&mut disk, ino, path, false))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        let ino = disk.lookup(from)?;
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        disk.dir(to_dir)?;
        let replaced = disk.dir(to_dir)?.live.get(&to_name).copied();
        if from_dir == to_dir {
            let d = disk.dir_mut(from_dir)?;
            d.live.remove(&from_name);
            d.live.insert(to_name.clone(), ino);
            d.pending.push(DirOp::Rename(from_name, to_name, ino));
        } else {
            let d = disk.dir_mut(from_dir)?;
            d.live.remove(&from_name);
            d.pending.push(DirOp::Unlink(from_name));
            let d = disk.dir_mut(to_dir)?;
            d.live.insert(to_name.clone(), ino);
            d.pending.push(DirOp::Link(to_name, ino));
        }
        if let Some(old) = replaced.filter(|&old| old != ino) {
            disk.collect(old);
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        let ino = disk.lookup(path)?;
        let (dir, name) = split(path)?;
        let d = disk.dir_mut(dir)?;
        d.live.remove(&name);
        d.pending.push(DirOp::Unlink(name));
        disk.collect(ino);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.dir(dir)?;
        disk.sync_fails(&format!("syncing {}", dir.display()))?;
        let d = disk.dir_mut(dir)?;
        d.durable = d.live.clone();
        d.pending.clear();
        // Names gone from the durable set may free their files.
        let all: Vec<u64> = disk.inodes.keys().copied().collect();
        for ino in all {
            disk.collect(ino);
        }
        Ok(())
    }
}

/// An open file of a [`MemFiles`].
struct MemFile {
    disk: Arc<Mutex<Disk>>,
    ino: u64,
    /// The crash count when opened: after a crash the handle is dead.
    generation: u64,
    writable: bool,
    path: PathBuf,
}

impl fmt::Debug for MemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemFile({})", self.path.display())
    }
}

impl MemFile {
    fn lock(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = self.disk.lock().expect("MemFiles lock poisoned");
        if disk.generation != self.generation {
            return Err(io::Error::other(format!(
                "{}: opened before a crash (the process that had it is gone)",
                self.path.display()
            )));
        }
        Ok(disk)
    }

    fn writing(&self) -> io::Result<MutexGuard<'_, Disk>> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: opened for reading", self.path.display()),
            ));
        }
        self.lock()
    }
}

impl FileHandle for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut disk = self.lock()?;
        let data = &disk.inodes[&self.ino].current;
        let end = (offset as usize).checked_add(buf.len());
        match end.filter(|&end| end <= data.len()) {
            Some(end) => buf.copy_from_slice(&data[offset as usize..end]),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: {} bytes at {offset} are past its end ({})",
                        self.path.display(),
                        buf.len(),
                        data.len()
                    ),
                ))
            }
        }
        disk.flip_on_read(buf);
        Ok(())
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut disk = self.writing()?;
        disk.write_fails(&format!("writing {}", self.path.display()))?;
        disk.file_op(
            self.ino,
            FileOp::Write {
                offset,
                bytes: buf.to_vec(),
            },
        );
        Ok(())
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut disk = self.writing()?;
        disk.write_fails(&format!("writing {}", self.path.display()))?;
        let offset = disk.inodes[&self.ino].current.len() as u64;
        disk.file_op(
            self.ino,
            FileOp::Write {
                offset,
                bytes: buf.to_vec(),
            },
        );
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let disk = self.lock()?;
        Ok(disk.inodes[&self.ino].current.len() as u64)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut disk = self.writing()?;
        disk.write_fails(&format!("truncating {}", self.path.display()))?;
        disk.file_op(self.ino, FileOp::SetLen(len));
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut disk = self.lock()?;
        disk.sync_fails(&format!("syncing {}", self.path.display()))?;
        let inode = disk.inodes.get_mut(&self.ino).expect("a handle's inode");
        inode.durable = inode.current.clone();
        inode.pending.clear();
        Ok(())
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn write_back(&self, _offset: u64, _len: u64) {}
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let Ok(mut disk) = self.disk.lock() else {
            return;
        };
        if disk.generation != self.generation {
            return;
        }
        if let Some(inode) = disk.inodes.get_mut(&self.ino) {
            inode.handles -= 1;
        }
        disk.collect(self.ino);
    }
}

#[cfg(test)]
#[path = "mem_tests.rs"]
mod tests;
