//! `faultfs`: a FUSE pass-through filesystem that loses unsynced writes,
//! for the `lose-unsynced` nemesis (the idea of Jepsen's lazyfs).
//!
//! A node of a run with that nemesis keeps its data dir on a mount of this
//! layer over a backing directory (`node-<id>.disk/`). Every `write` stays
//! in the layer's memory, per file and by 4 KiB page ([`cache::Dirty`]),
//! until an `fsync` or `fdatasync` of that file writes its pages to the
//! backing file and syncs it; reads see the cache over the backing file.
//! [`Layer::crash`], called after the node was killed with SIGKILL, drops
//! every unsynced page of every file: the node then starts on what a power
//! failure would have left on its disk.
//!
//! What it models and what not:
//! - data written and not fsynced is lost, whole pages at a time, for
//!   every file of the node (journals, the watermark, snapshot files);
//! - metadata operations (create, mkdir, rename, unlink, rmdir, truncate,
//!   fallocate, chmod) go to the backing directory at once and survive a
//!   crash, fsynced or not; a file created and never fsynced comes back
//!   empty, not missing. A real disk may also lose or reorder those;
//! - no torn pages or reordering inside one fsync, no lost fsync (a disk
//!   that lies), no loss while the process runs: the drop happens only
//!   between a kill and the next start.
//!
//! Why FUSE and not an `LD_PRELOAD` shim keeping an undo log: the server's
//! storage writes through Rust's std (`pwrite`, `write`, `fsync`), which a
//! shim could catch, but a shim must follow every file descriptor to a
//! path, survive SIGKILL with its log, and misses whatever a library does
//! by syscall; the layer sees every operation in the kernel's terms
//! whatever the process does. Mounting needs `/dev/fuse` and root (the
//! layer mounts with mount(2) itself; `fusermount3` is not needed), as on
//! the machines the suite and CI run on; [`Layer::mount`] says so clearly
//! where it cannot mount.
//!
//! The layer runs in the harness process (one FUSE thread per node), and is
//! unmounted when its [`Layer`] drops; a harness killed with SIGKILL leaves
//! stale mounts, which the next run in the same store detaches
//! ([`stale`]; by hand: `umount -l DIR`).

pub mod cache;
pub mod stale;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use cache::Dirty;

/// Attributes and names are never cached by the kernel: sizes change under
/// it when a crash drops writes.
const TTL: Duration = Duration::ZERO;

/// What a crash dropped (or what is unsynced now).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lost {
    /// Files with unsynced pages.
    pub files: u64,
    /// Unsynced bytes (whole pages).
    pub bytes: u64,
    /// Each file's path under the mount (or `#<inode>` for one no longer
    /// named) and its unsynced bytes, by path.
    pub by_file: Vec<(String, u64)>,
}

/// The layer's state, shared by the FUSE thread and [`Layer`].
#[derive(Default)]
struct State {
    root: PathBuf,
    /// Inode -> path under `root` ("" is the root, inode 1).
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    /// Open files: handle -> backing file and its inode.
    handles: HashMap<u64, (Arc<File>, u64)>,
    next_fh: u64,
    /// Unsynced writes by inode.
    dirty: HashMap<u64, Dirty>,
}

impl State {
    fn new(root: PathBuf) -> Self {
        let mut s = State {
            root,
            next_ino: 2,
            next_fh: 1,
            ..State::default()
        };
        s.paths.insert(1, PathBuf::new());
        s.inodes.insert(PathBuf::new(), 1);
        s
    }

    fn rel(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn full(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        Ok(self.root.join(self.rel(ino)?))
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.rel(parent)?.join(name))
    }

    fn ino_of(&mut self, rel: &Path) -> u64 {
        if let Some(&ino) = self.inodes.get(rel) {
            return ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(rel.to_path_buf(), ino);
        self.paths.insert(ino, rel.to_path_buf());
        ino
    }

    /// A name went away: its inode's cache goes with it.
    fn forget_path(&mut self, rel: &Path) {
        if let Some(ino) = self.inodes.remove(rel) {
            self.paths.remove(&ino);
            self.dirty.remove(&ino);
        }
    }

    /// `rel`'s attributes (the cached size over the backing one).
    fn attr(&mut self, rel: &Path) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(self.root.join(rel)).map_err(Errno::from)?;
        let ino = self.ino_of(rel);
        Ok(self.attr_of(ino, &meta))
    }

    fn attr_of(&self, ino: u64, meta: &std::fs::Metadata) -> FileAttr {
        let size = self
            .dirty
            .get(&ino)
            .map_or(meta.len(), |d| d.size().max(meta.len()));
        let time = |s: i64, ns: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns as u32)
            } else {
                UNIX_EPOCH
            }
        };
        let ft = meta.file_type();
        let kind = FileType::from_std(ft).unwrap_or(FileType::RegularFile);
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: meta.blocks(),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    fn open_handle(&mut self, file: File, ino: u64) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, (Arc::new(file), ino));
        fh
    }

    /// The backing file of handle `fh`, or of `ino` opened now.
    fn file(&self, fh: Option<FileHandle>, ino: INodeNo) -> Result<Arc<File>, Errno> {
        if let Some((f, _)) = fh.and_then(|fh| self.handles.get(&fh.0)) {
            return Ok(f.clone());
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.full(ino)?)
            .map_err(Errno::from)?;
        Ok(Arc::new(f))
    }

    fn dirty(&mut self, ino: u64, file: &File) -> Result<&mut Dirty, Errno> {
        match self.dirty.entry(ino) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let len = file.metadata().map_err(Errno::from)?.len();
                Ok(e.insert(Dirty::new(len)))
            }
        }
    }

    fn unsynced(&self) -> Lost {
        let mut by_file: Vec<(String, u64)> = self
            .dirty
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(ino, d)| {
                let name = self
                    .paths
                    .get(ino)
                    .map_or_else(|| format!("#{ino}"), |p| p.display().to_string());
                (name, d.bytes())
            })
            .collect();
        by_file.sort();
        Lost {
            files: by_file.len() as u64,
            bytes: by_file.iter().map(|(_, b)| b).sum(),
            by_file,
        }
    }

    fn sync(&mut self, ino: u64, file: &File) -> Result<(), Errno> {
        match self.dirty.get_mut(&ino) {
            Some(d) => d.sync(file).map_err(Errno::from)?,
            None => file.sync_all().map_err(Errno::from)?,
        }
        self.dirty.remove(&ino);
        Ok(())
    }
}

/// The FUSE side of the layer.
struct FaultFs {
    state: Arc<Mutex<State>>,
}

impl FaultFs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn io_err(e: io::Error) -> Errno {
    Errno::from(e)
}

impl fuser::Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.lock();
        match s.child(parent, name).and_then(|rel| s.attr(&rel)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut s = self.lock();
        let handle = fh.and_then(|fh| s.handles.get(&fh.0)).cloned();
        let attr = match handle {
            // An open file may have lost its name (unlinked).
            Some((f, ino)) => f
                .metadata()
                .map_err(io_err)
                .map(|meta| s.attr_of(ino, &meta)),
            None => s.rel(ino).and_then(|rel| s.attr(&rel)),
        };
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.lock();
        let result = (|| {
            if let Some(mode) = mode {
                std::fs::set_permissions(
                    s.full(ino)?,
                    std::fs::Permissions::from_mode(mode & 0o7777),
                )
                .map_err(io_err)?;
            }
            if let Some(len) = size {
                // Truncation is metadata: applied to the backing file now.
                let f = s.file(fh, ino)?;
                f.set_len(len).map_err(io_err)?;
                if let Some(d) = s.dirty.get_mut(&ino.0) {
                    d.truncate(len);
                }
            }
            let handle = fh.and_then(|fh| s.handles.get(&fh.0)).cloned();
            match handle {
                Some((f, i)) => Ok(s.attr_of(i, &f.metadata().map_err(io_err)?)),
                None => {
                    let rel = s.rel(ino)?;
                    s.attr(&rel)
                }
            }
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.lock();
        let result = s.child(parent, name).and_then(|rel| {
            std::fs::DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(s.root.join(&rel))
                .map_err(io_err)?;
            s.attr(&rel)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.lock();
        let result = s.child(parent, name).and_then(|rel| {
            std::fs::remove_file(s.root.join(&rel)).map_err(io_err)?;
            s.forget_path(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.lock();
        let result = s.child(parent, name).and_then(|rel| {
            std::fs::remove_dir(s.root.join(&rel)).map_err(io_err)?;
            s.forget_path(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut s = self.lock();
        let result = (|| {
            let from = s.child(parent, name)?;
            let to = s.child(newparent, newname)?;
            if flags.contains(RenameFlags::RENAME_EXCHANGE)
                || flags.contains(RenameFlags::RENAME_WHITEOUT)
            {
                return Err(Errno::from_i32(libc::EINVAL));
            }
            let full_to = s.root.join(&to);
            if flags.contains(RenameFlags::RENAME_NOREPLACE) && full_to.symlink_metadata().is_ok() {
                return Err(Errno::from_i32(libc::EEXIST));
            }
            std::fs::rename(s.root.join(&from), &full_to).map_err(io_err)?;
            // The replaced file's inode goes; the moved one (and, for a
            // directory, everything below it) takes the new name.
            s.forget_path(&to);
            let moved: Vec<(PathBuf, u64)> = s
                .inodes
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, &i)| (p.clone(), i))
                .collect();
            for (p, ino) in moved {
                let below = p.strip_prefix(&from).expect("filtered on prefix");
                // (Joining "" would add a trailing slash.)
                let renamed = if below.as_os_str().is_empty() {
                    to.clone()
                } else {
                    to.join(below)
                };
                s.inodes.remove(&p);
                s.inodes.insert(renamed.clone(), ino);
                s.paths.insert(ino, renamed);
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut s = self.lock();
        let result = s.full(ino).and_then(|path| {
            // Always read-write underneath (the harness runs as root):
            // the cache fills pages by reading, whatever the caller asked.
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .or_else(|_| OpenOptions::new().read(true).open(&path))
                .map_err(io_err)?;
            let _ = flags;
            Ok(s.open_handle(f, ino.0))
        });
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.lock();
        let result = s.child(parent, name).and_then(|rel| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .create_new(flags & libc::O_EXCL != 0)
                .truncate(flags & libc::O_TRUNC != 0)
                .mode(mode & !umask & 0o7777)
                .open(s.root.join(&rel))
                .map_err(io_err)?;
            let ino = s.ino_of(&rel);
            if flags & libc::O_TRUNC != 0 {
                s.dirty.remove(&ino);
            }
            let attr = s.attr_of(ino, &f.metadata().map_err(io_err)?);
            let fh = s.open_handle(f, ino);
            Ok((attr, fh))
        });
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.lock();
        let result = s
            .file(Some(fh), ino)
            .and_then(|f| match s.dirty.get(&ino.0) {
                Some(d) => d.read(&f, offset, size as u64).map_err(io_err),
                // Nothing unsynced: the backing file as it is.
                None => {
                    let len = f.metadata().map_err(io_err)?.len();
                    Dirty::new(len)
                        .read(&f, offset, size as u64)
                        .map_err(io_err)
                }
            });
        match result {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut s = self.lock();
        let result = s.file(Some(fh), ino).and_then(|f| {
            let d = s.dirty(ino.0, &f)?;
            d.write(&f, offset, data).map_err(io_err)
        });
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) does not sync: the cache stays.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.lock();
        let result = s.file(Some(fh), ino).and_then(|f| s.sync(ino.0, &f));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.lock();
        let result = (|| {
            let rel = s.rel(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, OsStr::new(".").to_os_string()),
                (1, FileType::Directory, OsStr::new("..").to_os_string()),
            ];
            for e in std::fs::read_dir(s.root.join(&rel)).map_err(io_err)? {
                let e = e.map_err(io_err)?;
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                let child = s.ino_of(&rel.join(e.file_name()));
                entries.push((child, kind, e.file_name()));
            }
            Ok(entries)
        })();
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let s = self.lock();
        let result = s
            .full(ino)
            .and_then(|p| File::open(p).and_then(|d| d.sync_all()).map_err(io_err));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = self.lock().root.clone();
        let path = std::ffi::CString::new(root.as_os_str().as_bytes()).expect("no NUL in path");
        // SAFETY: statvfs fills the zeroed struct we own from a valid path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            reply.error(io_err(io::Error::last_os_error()));
            return;
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }

    // No extended attributes (the kernel asks for security.capability on
    // every write).
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::from_i32(libc::ENODATA));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut s = self.lock();
        let result = s.file(Some(fh), ino).and_then(|f| {
            // Modes that change bytes (punch hole, zero range) act on the
            // cached pages too: sync them first, then apply.
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                s.sync(ino.0, &f)?;
            }
            use std::os::fd::AsRawFd;
            // SAFETY: fallocate on a file descriptor we hold open.
            let rc = unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    mode,
                    offset as libc::off_t,
                    length as libc::off_t,
                )
            };
            if rc != 0 {
                return Err(io_err(io::Error::last_os_error()));
            }
            let len = f.metadata().map_err(io_err)?.len();
            if let Some(d) = s.dirty.get_mut(&ino.0) {
                d.grew(len);
            }
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// A mounted layer: `mountpoint` shows `backing` with unsynced writes held
/// in memory. Unmounted on drop.
pub struct Layer {
    state: Arc<Mutex<State>>,
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl Layer {
    /// Mounts the layer over `backing` (created if missing) at `mountpoint`
    /// (created if missing, must be empty).
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<Layer, String> {
        std::fs::create_dir_all(backing)
            .and_then(|()| std::fs::create_dir_all(mountpoint))
            .map_err(|e| format!("faultfs: cannot create {}: {e}", mountpoint.display()))?;
        let root = backing
            .canonicalize()
            .map_err(|e| format!("faultfs: {}: {e}", backing.display()))?;
        let state = Arc::new(Mutex::new(State::new(root)));
        let fs = FaultFs {
            state: state.clone(),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("warden-faultfs".into()),
            fuser::MountOption::Subtype("faultfs".into()),
        ];
        let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| {
            format!(
                "faultfs: cannot mount a FUSE filesystem at {} ({e}): the \
                 lose-unsynced nemesis needs /dev/fuse and root (or CAP_SYS_ADMIN)",
                mountpoint.display()
            )
        })?;
        Ok(Layer {
            state,
            mountpoint: mountpoint.to_path_buf(),
            session: Some(session),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Drops every unsynced write (call it while no process uses the
    /// files: after a kill, before the next start).
    pub fn crash(&self) -> Lost {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let lost = s.unsynced();
        s.dirty.clear();
        lost
    }

    /// Unsynced bytes held now.
    pub fn unsynced(&self) -> Lost {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced()
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            if session.umount_and_join().is_err() {
                // Still busy: detach it lazily.
                if let Ok(p) = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes()) {
                    // SAFETY: umount2 with a valid NUL-terminated path.
                    unsafe {
                        libc::umount2(p.as_ptr(), libc::MNT_DETACH);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// Through a real mount: unsynced writes vanish on a crash, synced
    /// ones stay; names and sizes follow. Skipped (saying why) where FUSE
    /// cannot be mounted.
    #[test]
    fn a_crash_drops_what_was_not_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("disk");
        let mnt = dir.path().join("mnt");
        let layer = match Layer::mount(&backing, &mnt) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("SKIPPED: {e}");
                return;
            }
        };
        std::fs::create_dir(mnt.join("raft")).unwrap();
        let path = mnt.join("raft/0.jnl");
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all(b"synced;").unwrap();
        f.sync_data().unwrap();
        f.write_all(b"lost").unwrap();
        // A second file never synced, and a rename of it.
        std::fs::write(mnt.join("tmp"), b"never synced").unwrap();
        std::fs::rename(mnt.join("tmp"), mnt.join("renamed")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"synced;lost");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 11);
        assert_eq!(std::fs::read(mnt.join("renamed")).unwrap(), b"never synced");
        assert_eq!(
            std::fs::read(backing.join("raft/0.jnl")).unwrap(),
            b"synced;",
            "the backing file holds only what was synced"
        );
        let unsynced = layer.unsynced();
        assert_eq!(unsynced.files, 2);
        assert_eq!(
            unsynced.by_file,
            [
                ("raft/0.jnl".to_string(), 4096),
                ("renamed".to_string(), 4096)
            ]
        );
        drop(f);

        let lost = layer.crash();
        assert_eq!(lost.files, 2);
        assert_eq!(std::fs::read(&path).unwrap(), b"synced;");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 7);
        assert_eq!(
            std::fs::read(mnt.join("renamed")).unwrap(),
            b"",
            "metadata survives, data does not"
        );
        let mut names: Vec<_> = std::fs::read_dir(&mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["raft", "renamed"]);
        // Truncation and removal go through.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(3)
            .unwrap();
        assert_eq!(std::fs::read(backing.join("raft/0.jnl")).unwrap(), b"syn");
        std::fs::remove_dir_all(mnt.join("raft")).unwrap();
        assert!(!backing.join("raft").exists());
        assert_eq!(layer.crash(), Lost::default());
        drop(layer);
        assert!(
            std::fs::read_dir(&mnt).unwrap().next().is_none(),
            "unmounted: the mount point is an empty dir again"
        );
    }
}
