//! The unsynced writes of one file: pages written since the file's last
//! fsync, over the bytes of its backing file. Pure logic on a backing
//! [`File`], so it is tested without mounting anything.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The cache's unit: a write touches whole pages (read from the backing
/// file first), as a kernel page cache would.
pub const PAGE: u64 = 4096;

/// One file's unsynced pages and its size as its writers see it.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Page index -> the page's bytes as written (zeros past the size).
    pages: BTreeMap<u64, Box<[u8]>>,
    /// The file's size with the unsynced writes (never below the backing
    /// file's: truncation goes to the backing file at once).
    size: u64,
}

impl Dirty {
    /// An empty cache for a file whose backing length is `len`.
    pub fn new(len: u64) -> Self {
        Dirty {
            pages: BTreeMap::new(),
            size: len,
        }
    }

    /// The size readers see.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes held unsynced (whole pages).
    pub fn bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Writes `data` at `offset` into the cache; `backing` is read for
    /// the part of each page not written.
    pub fn write(&mut self, backing: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let start = index * PAGE;
            if !self.pages.contains_key(&index) {
                let page = self.load(backing, index)?;
                self.pages.insert(index, page);
            }
            let page = self.pages.get_mut(&index).expect("page just loaded");
            let from = (at - start) as usize;
            let to = ((end - start).min(PAGE)) as usize;
            let src = (at - offset) as usize;
            page[from..to].copy_from_slice(&data[src..src + (to - from)]);
            at = start + to as u64;
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// A page as the backing file holds it (zeros past its end or past
    /// this file's size).
    fn load(&self, backing: &File, index: u64) -> io::Result<Box<[u8]>> {
        let mut page = vec![0u8; PAGE as usize].into_boxed_slice();
        let start = index * PAGE;
        if start < self.size {
            let want = (self.size - start).min(PAGE) as usize;
            read_full(backing, &mut page[..want], start)?;
        }
        Ok(page)
    }

    /// Reads up to `len` bytes at `offset`: cached pages over the backing
    /// file, cut at the size.
    pub fn read(&self, backing: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        if offset >= self.size {
            return Ok(Vec::new());
        }
        let end = (offset + len).min(self.size);
        let mut out = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let start = index * PAGE;
            let to = (end - start).min(PAGE);
            let dst = (at - offset) as usize..(start + to - offset) as usize;
            match self.pages.get(&index) {
                Some(page) => out[dst].copy_from_slice(&page[(at - start) as usize..to as usize]),
                None => read_full(backing, &mut out[dst], at)?,
            }
            at = start + to;
        }
        Ok(out)
    }

    /// The backing file was cut or extended to `len` (applied at once):
    /// pages past it go, the page holding it is zeroed past it.
    pub fn truncate(&mut self, len: u64) {
        self.pages.retain(|&index, _| index * PAGE < len);
        if let Some(page) = self.pages.get_mut(&(len / PAGE)) {
            page[(len % PAGE) as usize..].fill(0);
        }
        self.size = len;
    }

    /// The backing file grew by other means (fallocate).
    pub fn grew(&mut self, len: u64) {
        self.size = self.size.max(len);
    }

    /// fsync: writes every cached page to `backing`, sets its length and
    /// syncs it; the cache is empty after.
    pub fn sync(&mut self, backing: &File) -> io::Result<()> {
        for (&index, page) in &self.pages {
            let start = index * PAGE;
            if start >= self.size {
                continue;
            }
            let n = (self.size - start).min(PAGE) as usize;
            backing.write_all_at(&page[..n], start)?;
        }
        if backing.metadata()?.len() < self.size {
            backing.set_len(self.size)?;
        }
        backing.sync_all()?;
        self.pages.clear();
        Ok(())
    }
}

/// Fills `buf` from `offset`, zeros past the end of the file.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn file(dir: &tempfile::TempDir, bytes: &[u8]) -> File {
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    fn on_disk(dir: &tempfile::TempDir) -> Vec<u8> {
        std::fs::read(dir.path().join("f")).unwrap()
    }

    #[test]
    fn writes_stay_in_the_cache_until_sync() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(&dir, &[1u8; 5000]);
        let mut d = Dirty::new(5000);
        // Across a page boundary, and past the end.
        d.write(&f, 4090, &[2u8; 20]).unwrap();
        d.write(&f, 9000, b"tail").unwrap();
        assert_eq!(d.size(), 9004);
        assert_eq!(on_disk(&dir), vec![1u8; 5000], "nothing reached the disk");
        let all = d.read(&f, 0, 100_000).unwrap();
        assert_eq!(all.len(), 9004);
        assert_eq!(&all[4080..4090], &[1u8; 10]);
        assert_eq!(&all[4090..4110], &[2u8; 20]);
        assert_eq!(&all[4110..5000], &[1u8; 890][..]);
        assert!(all[5000..9000].iter().all(|&b| b == 0));
        assert_eq!(&all[9000..], b"tail");
        // A read inside one page, and one starting past the size.
        assert_eq!(d.read(&f, 4095, 2).unwrap(), vec![2, 2]);
        assert!(d.read(&f, 9004, 10).unwrap().is_empty());

        d.sync(&f).unwrap();
        assert!(d.is_empty());
        assert_eq!(on_disk(&dir), all, "sync wrote what readers saw");
    }

    #[test]
    fn dropping_the_cache_leaves_the_synced_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(&dir, b"synced");
        let mut d = Dirty::new(6);
        d.write(&f, 0, b"SY").unwrap();
        d.sync(&f).unwrap();
        d.write(&f, 2, b"NCED and more").unwrap();
        assert_eq!(d.bytes(), PAGE);
        // What a crash does: forget the cache, start again from the disk.
        drop(d);
        assert_eq!(on_disk(&dir), b"SYnced");
        let d = Dirty::new(f.metadata().unwrap().len());
        assert_eq!(d.read(&f, 0, 100).unwrap(), b"SYnced");
    }

    #[test]
    fn truncation_cuts_the_cache_too() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(&dir, &[]);
        let mut d = Dirty::new(0);
        d.write(&f, 0, &[7u8; 10_000]).unwrap();
        f.set_len(5000).unwrap();
        d.truncate(5000);
        f.set_len(6000).unwrap();
        d.truncate(6000);
        let all = d.read(&f, 0, 100_000).unwrap();
        assert_eq!(all.len(), 6000);
        assert!(all[..5000].iter().all(|&b| b == 7));
        assert!(
            all[5000..].iter().all(|&b| b == 0),
            "no stale bytes past a cut"
        );
        d.sync(&f).unwrap();
        assert_eq!(on_disk(&dir), all);
    }
}
