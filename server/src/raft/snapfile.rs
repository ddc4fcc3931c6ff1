//! Snapshot files: `DATA_DIR/snapshots/<index>-<term>.snap`, one per
//! snapshot, outside fjall (a snapshot of a million znodes is tens of
//! megabytes, written whole and read whole, which a key-value store only
//! copies around).
//!
//! Layout (integers little-endian):
//!
//! ```text
//! magic "WRDNSNAP" (8) | format version u32 | metadata length u32 | data length u64
//! metadata: raft's SnapshotMetadata (index, term, conf state), protobuf
//! data: the state machine (the encoded tree)
//! xxh3-64 of everything before it, u64
//! ```
//!
//! A file is written under a temporary name, fsynced, renamed into place
//! and the directory fsynced, so a crash leaves either no file or a whole
//! one. Reading checks the header, the lengths against the file's size,
//! the checksum and that the metadata matches the name; anything else is
//! an error naming the file, never a snapshot with wrong contents.
//!
//! This module owns the files; which snapshot is current, and when older
//! ones may go, is [`super::storage`]'s to say. It reaches them through
//! the file layer ([`super::files`]): the real file system for the
//! server, a simulated disk for the simulator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{Snapshot, SnapshotMetadata};
use xxhash_rust::xxh3::Xxh3;

use super::files::{self, Files};
use super::storage::StorageError;

pub(crate) use super::files::written_back;

const MAGIC: &[u8; 8] = b"WRDNSNAP";
const VERSION: u32 = 1;
pub(crate) const HEADER_LEN: usize = 24;
pub(crate) const CHECKSUM_LEN: usize = 8;
const SUFFIX: &str = ".snap";
const TMP_SUFFIX: &str = ".snap.tmp";

/// The snapshot directory. Cheap to clone: a thread that writes a snapshot
/// holds its own.
#[derive(Debug, Clone)]
pub struct SnapDir {
    dir: PathBuf,
    files: Arc<dyn Files>,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StorageError {
    StorageError::Io(format!("{what} {}: {e}", path.display()))
}

fn damaged(path: &Path, detail: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        what: "snapshot file",
        detail: format!(
            "{}: {detail}; this server cannot trust its state: wipe its data dir \
             and add it to the group again (docs/operations.md: Storage faults)",
            path.display()
        ),
    }
}

impl SnapDir {
    /// Opens (creating) the directory on the real file system and removes
    /// temporary files a crash left behind.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_on(files::os(), dir)
    }

    /// As [`Self::open`], on the file layer `files`.
    pub fn open_on(files: Arc<dyn Files>, dir: &Path) -> Result<Self, StorageError> {
        files
            .create_dir_all(dir)
            .map_err(|e| io_error("creating", dir, e))?;
        let snaps = SnapDir {
            dir: dir.to_path_buf(),
            files,
        };
        for name in snaps
            .files
            .list(dir)
            .map_err(|e| io_error("listing", dir, e))?
        {
            if name.to_str().is_some_and(|n| n.ends_with(TMP_SUFFIX)) {
                let path = dir.join(name);
                snaps
                    .files
                    .remove(&path)
                    .map_err(|e| io_error("removing", &path, e))?;
            }
        }
        Ok(snaps)
    }

    /// The file layer the snapshots are on.
    pub fn files(&self) -> &Arc<dyn Files> {
        &self.files
    }

    /// The file of the snapshot at `index`/`term`.
    pub fn path_of(&self, index: u64, term: u64) -> PathBuf {
        self.dir.join(format!("{index:020}-{term:020}{SUFFIX}"))
    }

    /// The snapshots present, by (index, term), oldest first.
    pub fn list(&self) -> Result<Vec<(u64, u64)>, StorageError> {
        let mut found = Vec::new();
        let names = self
            .files
            .list(&self.dir)
            .map_err(|e| io_error("listing", &self.dir, e))?;
        for name in names {
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            let parsed = stem
                .split_once('-')
                .and_then(|(i, t)| Some((i.parse().ok()?, t.parse().ok()?)));
            match parsed {
                Some(it) => found.push(it),
                None => return Err(damaged(&self.dir.join(&name), "not a snapshot file name")),
            }
        }
        found.sort_unstable();
        Ok(found)
    }

    /// Writes the snapshot at `meta` durably: temporary file, fsync,
    /// rename, directory fsync. Returns its path.
    pub fn write(&self, meta: &SnapshotMetadata, data: &[u8]) -> Result<PathBuf, StorageError> {
        let path = self.path_of(meta.index, meta.term);
        let tmp = path.with_extension(&TMP_SUFFIX[1..]);
        let (header, meta_bytes, sum) = head(meta, data)?;
        let write = || -> std::io::Result<()> {
            let mut f = self.files.create(&tmp)?;
            f.append(&header)?;
            f.append(&meta_bytes)?;
            let mut written = (HEADER_LEN + meta_bytes.len()) as u64;
            for chunk in data.chunks(files::WRITEBACK_CHUNK) {
                f.append(chunk)?;
                f.write_back(written, chunk.len() as u64);
                written += chunk.len() as u64;
            }
            f.append(&sum.to_le_bytes())?;
            f.sync_all()?;
            drop(f);
            self.files.rename(&tmp, &path)?;
            self.files.sync_dir(&self.dir)
        };
        write().map_err(|e| {
            let _ = self.files.remove(&tmp);
            io_error("writing", &path, e)
        })?;
        Ok(path)
    }

    /// Where a snapshot received from the leader is written (the `seq`th
    /// receipt of this process): a temporary name, removed at the next
    /// start if a stop interrupts the receipt.
    pub fn receive_path(&self, index: u64, term: u64, seq: u64) -> PathBuf {
        self.dir
            .join(format!("{index:020}-{term:020}.recv{seq}{TMP_SUFFIX}"))
    }

    /// A received snapshot file, already checked and durable under its
    /// temporary name `tmp`, becomes the snapshot at `meta`: renamed into
    /// place, the directory fsynced. Returns its path.
    pub fn adopt(&self, tmp: &Path, meta: &SnapshotMetadata) -> Result<PathBuf, StorageError> {
        let path = self.path_of(meta.index, meta.term);
        let adopt = || -> std::io::Result<()> {
            self.files.rename(tmp, &path)?;
            self.files.sync_dir(&self.dir)
        };
        adopt().map_err(|e| io_error("installing", &path, e))?;
        Ok(path)
    }

    /// The length of the snapshot file at `index`/`term` and the checksum
    /// in its trailer (what a transfer of it is described by), read
    /// without reading the file.
    pub fn describe(&self, index: u64, term: u64) -> Result<(u64, u64), StorageError> {
        let path = self.path_of(index, term);
        let f = self
            .files
            .open_read(&path)
            .map_err(|e| io_error("opening", &path, e))?;
        let size = f.len().map_err(|e| io_error("reading", &path, e))?;
        if size < (HEADER_LEN + CHECKSUM_LEN) as u64 {
            return Err(damaged(
                &path,
                format!("{size} bytes, shorter than a header"),
            ));
        }
        let mut sum = [0u8; CHECKSUM_LEN];
        f.read_exact_at(&mut sum, size - CHECKSUM_LEN as u64)
            .map_err(|e| io_error("reading", &path, e))?;
        Ok((size, u64::from_le_bytes(sum)))
    }

    /// The metadata of the snapshot at `index`/`term`, from its header
    /// alone (the checksum is checked when the whole file is read).
    pub fn read_meta(&self, index: u64, term: u64) -> Result<SnapshotMetadata, StorageError> {
        let path = self.path_of(index, term);
        let f = self
            .files
            .open_read(&path)
            .map_err(|e| io_error("opening", &path, e))?;
        let size = f.len().map_err(|e| io_error("reading", &path, e))?;
        let mut header = [0u8; HEADER_LEN];
        f.read_exact_at(&mut header, 0)
            .map_err(|_| damaged(&path, format!("{size} bytes, shorter than a header")))?;
        let (meta_len, _) = check_header(&header, size).map_err(|d| damaged(&path, d))?;
        let mut meta = vec![0u8; meta_len];
        f.read_exact_at(&mut meta, HEADER_LEN as u64)
            .map_err(|e| io_error("reading", &path, e))?;
        parse_meta(&path, &meta, index, term)
    }

    /// Reads and checks the whole snapshot at `index`/`term`.
    pub fn read(&self, index: u64, term: u64) -> Result<Snapshot, StorageError> {
        let path = self.path_of(index, term);
        let bytes = self
            .files
            .read(&path)
            .map_err(|e| io_error("reading", &path, e))?;
        let snap = decode_with(&path, bytes, damaged)?;
        let meta = snap.get_metadata();
        if meta.index != index || meta.term != term {
            return Err(damaged(
                &path,
                format!(
                    "holds the snapshot at index {} term {}, not what its name says",
                    meta.index, meta.term
                ),
            ));
        }
        Ok(snap)
    }

    /// Removes every snapshot file but the one at `keep` (index, term).
    /// Called once `keep` is durable and current.
    pub fn remove_all_but(&self, keep: (u64, u64)) -> Result<(), StorageError> {
        for it in self.list()? {
            if it != keep {
                let path = self.path_of(it.0, it.1);
                self.files
                    .remove(&path)
                    .map_err(|e| io_error("removing", &path, e))?;
            }
        }
        Ok(())
    }

    /// Removes the snapshot file at `index`/`term`, if there.
    pub fn remove(&self, index: u64, term: u64) -> Result<(), StorageError> {
        let path = self.path_of(index, term);
        match self.files.remove(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_error("removing", &path, e))
            }
            _ => Ok(()),
        }
    }
}

/// The header, the encoded metadata and the checksum of a snapshot file
/// holding `meta` and `data`.
fn head(
    meta: &SnapshotMetadata,
    data: &[u8],
) -> Result<([u8; HEADER_LEN], Vec<u8>, u64), StorageError> {
    let (header, meta_bytes) = header_for(meta, data.len() as u64)?;
    let mut sum = Xxh3::new();
    sum.update(&header);
    sum.update(&meta_bytes);
    sum.update(data);
    Ok((header, meta_bytes, sum.digest()))
}

/// The header and the encoded metadata that open the file of a snapshot
/// whose tree is `data_len` bytes (a backup streamed in pieces starts with
/// these, then the tree, then the checksum of it all).
pub(crate) fn header_for(
    meta: &SnapshotMetadata,
    data_len: u64,
) -> Result<([u8; HEADER_LEN], Vec<u8>), StorageError> {
    let meta_bytes = meta
        .write_to_bytes()
        .map_err(|e| StorageError::Io(format!("encoding snapshot metadata: {e}")))?;
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    header[16..24].copy_from_slice(&data_len.to_le_bytes());
    Ok((header, meta_bytes))
}

/// A whole snapshot file's bytes, as [`SnapDir::write`] writes them: what
/// a backup (`GET /api/v1/snapshot`) sends, so a backup is a snapshot file
/// and is read back by the same code.
pub fn encode(meta: &SnapshotMetadata, data: &[u8]) -> Result<Vec<u8>, StorageError> {
    let (header, meta_bytes, sum) = head(meta, data)?;
    let mut out = Vec::with_capacity(HEADER_LEN + meta_bytes.len() + data.len() + CHECKSUM_LEN);
    out.extend_from_slice(&header);
    out.extend_from_slice(&meta_bytes);
    out.extend_from_slice(data);
    out.extend_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// Checks and decodes the bytes of a snapshot file that is not one of a
/// data dir's (a backup): the header, the lengths, the checksum and the
/// metadata; errors name `path` and what is wrong with it.
pub fn decode(path: &Path, bytes: Vec<u8>) -> Result<Snapshot, StorageError> {
    decode_with(path, bytes, |path, detail| StorageError::Corrupt {
        what: "snapshot file",
        detail: format!("{}: {detail}", path.display()),
    })
}

fn decode_with(
    path: &Path,
    bytes: Vec<u8>,
    damaged: fn(&Path, String) -> StorageError,
) -> Result<Snapshot, StorageError> {
    let size = bytes.len() as u64;
    if bytes.len() < HEADER_LEN + CHECKSUM_LEN {
        return Err(damaged(
            path,
            format!("{size} bytes, shorter than a header"),
        ));
    }
    let header: &[u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().expect("header length");
    let (meta_len, data_len) = check_header(header, size).map_err(|d| damaged(path, d))?;
    let body_end = bytes.len() - CHECKSUM_LEN;
    let stored = u64::from_le_bytes(bytes[body_end..].try_into().expect("8 bytes"));
    let actual = xxhash_rust::xxh3::xxh3_64(&bytes[..body_end]);
    if stored != actual {
        return Err(damaged(
            path,
            format!("checksum mismatch (stored {stored:#018x}, computed {actual:#018x})"),
        ));
    }
    let meta_end = HEADER_LEN + meta_len;
    let meta = SnapshotMetadata::parse_from_bytes(&bytes[HEADER_LEN..meta_end])
        .map_err(|e| damaged(path, format!("metadata: {e}")))?;
    let data = bytes::Bytes::from(bytes).slice(meta_end..meta_end + data_len);
    let mut snap = Snapshot {
        data,
        ..Default::default()
    };
    snap.set_metadata(meta);
    Ok(snap)
}

/// The metadata and data lengths a header announces, checked against the
/// file's size; else what is wrong.
/// Checks a file's header against its size: magic bytes, a format version
/// this build reads, lengths adding up; the metadata and tree lengths.
pub(crate) fn check_header(header: &[u8; HEADER_LEN], size: u64) -> Result<(usize, usize), String> {
    if &header[..8] != MAGIC {
        return Err("no snapshot header (wrong magic bytes)".into());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!(
            "format version {version}, this build reads {VERSION}"
        ));
    }
    let meta_len = u64::from(u32::from_le_bytes(
        header[12..16].try_into().expect("4 bytes"),
    ));
    let data_len = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    let expected = (HEADER_LEN as u64 + CHECKSUM_LEN as u64)
        .checked_add(meta_len)
        .and_then(|n| n.checked_add(data_len));
    if expected != Some(size) {
        return Err(format!(
            "the header announces {meta_len} + {data_len} bytes, the file holds {size} \
             (truncated or overwritten)"
        ));
    }
    Ok((meta_len as usize, data_len as usize))
}

fn parse_meta(
    path: &Path,
    bytes: &[u8],
    index: u64,
    term: u64,
) -> Result<SnapshotMetadata, StorageError> {
    let meta = SnapshotMetadata::parse_from_bytes(bytes)
        .map_err(|e| damaged(path, format!("metadata: {e}")))?;
    if meta.index != index || meta.term != term {
        return Err(damaged(
            path,
            format!(
                "holds the snapshot at index {} term {}, not what its name says",
                meta.index, meta.term
            ),
        ));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn meta(index: u64, term: u64) -> SnapshotMetadata {
        let mut m = SnapshotMetadata {
            index,
            term,
            ..Default::default()
        };
        m.mut_conf_state().voters = vec![1, 2, 3];
        m
    }

    #[test]
    fn a_written_snapshot_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let snaps = SnapDir::open(dir.path()).unwrap();
        snaps.write(&meta(7, 2), b"tree@7").unwrap();
        assert_eq!(snaps.list().unwrap(), vec![(7, 2)]);
        let snap = snaps.read(7, 2).unwrap();
        assert_eq!(&snap.data[..], b"tree@7");
        assert_eq!(snap.get_metadata(), &meta(7, 2));
        assert_eq!(snaps.read_meta(7, 2).unwrap(), meta(7, 2));
        snaps.write(&meta(9, 3), b"tree@9").unwrap();
        snaps.remove_all_but((9, 3)).unwrap();
        assert_eq!(snaps.list().unwrap(), vec![(9, 3)]);
    }

    #[test]
    fn every_damage_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let snaps = SnapDir::open(dir.path()).unwrap();
        let path = snaps.write(&meta(7, 2), &[0x5a; 1000]).unwrap();
        let good = fs::read(&path).unwrap();
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Damage)> = vec![
            ("checksum mismatch", Box::new(|b| b[500] ^= 1)),
            (
                "checksum mismatch",
                Box::new(|b| *b.last_mut().unwrap() ^= 1),
            ),
            ("truncated", Box::new(|b| b.truncate(b.len() - 100))),
            ("truncated", Box::new(|b| b.extend_from_slice(b"more"))),
            ("wrong magic", Box::new(|b| b[0] = b'X')),
            ("format version 2", Box::new(|b| b[8] = 2)),
            ("shorter than a header", Box::new(|b| b.truncate(10))),
        ];
        for (want, damage) in cases {
            let mut bytes = good.clone();
            damage(&mut bytes);
            fs::write(&path, &bytes).unwrap();
            let err = snaps.read(7, 2).expect_err(want).to_string();
            assert!(
                err.contains(want) && err.contains(&path.display().to_string()),
                "{want}: {err}"
            );
        }
        // A whole file under another snapshot's name.
        fs::write(&path, &good).unwrap();
        fs::rename(&path, snaps.path_of(8, 2)).unwrap();
        let err = snaps.read(8, 2).unwrap_err().to_string();
        assert!(err.contains("not what its name says"), "{err}");
    }

    #[test]
    fn an_encoded_snapshot_is_the_file_write_writes_and_decodes_back() {
        let dir = tempfile::tempdir().unwrap();
        let snaps = SnapDir::open(dir.path()).unwrap();
        let path = snaps.write(&meta(7, 2), b"tree@7").unwrap();
        let encoded = encode(&meta(7, 2), b"tree@7").unwrap();
        assert_eq!(fs::read(&path).unwrap(), encoded);
        let backup = dir.path().join("backup.snap");
        let snap = decode(&backup, encoded.clone()).unwrap();
        assert_eq!(&snap.data[..], b"tree@7");
        assert_eq!(snap.get_metadata(), &meta(7, 2));
        let mut damaged = encoded;
        damaged[30] ^= 1;
        let err = decode(&backup, damaged).unwrap_err().to_string();
        assert!(
            err.contains("checksum mismatch") && err.contains("backup.snap"),
            "{err}"
        );
    }

    #[test]
    fn leftover_temporary_files_are_removed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let snaps = SnapDir::open(dir.path()).unwrap();
        let tmp = snaps.path_of(5, 1).with_extension("snap.tmp");
        fs::write(&tmp, b"half a snapshot").unwrap();
        SnapDir::open(dir.path()).unwrap();
        assert!(!tmp.exists());
        assert!(snaps.list().unwrap().is_empty());
    }
}
