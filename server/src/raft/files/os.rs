//! [`OsFiles`]: the file layer over `std::fs`, the calls the storage made
//! before it had a file layer (fsyncs included).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use super::{FileHandle, Files};

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsFiles;

#[derive(Debug)]
struct OsFile(File);

impl Files for OsFiles {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            names.push(entry?.file_name());
        }
        names.sort_unstable();
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(OsFile(f)))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(OsFile(f)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FileHandle>> {
        Ok(Box::new(OsFile(File::open(path)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn is_real(&self) -> bool {
        true
    }
}

impl FileHandle for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        // Not O_APPEND: Linux would then ignore the offset of
        // `write_all_at` on the same file.
        self.0.seek(SeekFrom::End(0))?;
        self.0.write_all(buf)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn write_back(&self, offset: u64, len: u64) {
        written_back(&self.0, offset, len);
    }
}

/// Bytes written between two writebacks of a large file.
pub(crate) const WRITEBACK_CHUNK: usize = 4 << 20;

/// Sends the chunk just written at `offset` to the disk and waits for the
/// one before it: a snapshot of a hundred megabytes then never sits dirty
/// in the page cache whole, to be flushed by one fsync that the log's
/// fsyncs (on the core) would queue behind for a second or more.
pub(crate) fn written_back(f: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        let fd = f.as_raw_fd();
        let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: plain syscalls on a file descriptor this function
        // borrows; errors only mean the final fsync does more work.
        unsafe {
            libc::sync_file_range(fd, off, n, libc::SYNC_FILE_RANGE_WRITE);
            if let Some(prev) = off.checked_sub(WRITEBACK_CHUNK as i64).filter(|p| *p >= 0) {
                libc::sync_file_range(
                    fd,
                    prev,
                    WRITEBACK_CHUNK as i64,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, offset, len);
}
