//! Data dirs offline: their format version (`DATA_DIR/FORMAT`), the lock a
//! running server holds on them (`DATA_DIR/LOCK`), `warden restore` (a new
//! data dir from a backup) and `warden inspect` (the tree as JSON lines).
//!
//! A backup is a snapshot file ([`crate::raft::snapfile`]: header, raft's
//! metadata, the encoded tree, xxh3 checksum), the same format a data dir
//! keeps its snapshots in; `GET /api/v1/snapshot` (`http/snapshot.rs`)
//! sends one and `wardenctl snapshot save` stores it. Restoring checks the
//! file whole, decodes the tree, and installs it into an empty data dir
//! the way a leader's snapshot is installed on a follower
//! ([`DiskStorage::apply_snapshot`]), with the group reduced to the one
//! restored node: it starts as a group of one, and other nodes join it.
//! The backup's member addresses are left behind: the restored server's
//! peers are the ones its operator gives it (`--peers` or the config
//! file), never the old cluster's.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use prost::Message as _;
use raft::eraftpb::{ConfChangeType, ConfState, EntryType};
use raft::Storage as _;

use crate::proto::{self, txn::Kind, Proposal, Txn};
use crate::raft::{snapfile, DiskStorage};
use crate::tree::DataTree;

/// The on-disk format of a data dir this build writes and reads. Raised
/// when a change makes older builds unable to read a data dir; a data dir
/// of a higher number is refused at start.
pub const FORMAT_VERSION: u32 = 1;
const FORMAT_FILE: &str = "FORMAT";
const LOCK_FILE: &str = "LOCK";

/// Checks `dir`'s format version file, writing it (durably) when absent:
/// a new data dir, or one from before the file existed (format 1). A
/// newer or unreadable one is refused, naming the file.
pub fn check_format(dir: &Path) -> Result<(), String> {
    verify_format(dir, true)
}

/// Like [`check_format`]; writes a missing file only if `write_missing`
/// (`inspect` does not stamp a dir it only reads).
fn verify_format(dir: &Path, write_missing: bool) -> Result<(), String> {
    let path = dir.join(FORMAT_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let version: u32 = text.trim().parse().map_err(|_| {
                format!(
                    "{}: not a format version number ({:?})",
                    path.display(),
                    text.trim()
                )
            })?;
            if version > FORMAT_VERSION {
                return Err(format!(
                    "{}: data dir format {version} is newer than this warden ({}) reads \
                     (format {FORMAT_VERSION}); run a warden at least as new as the one that \
                     wrote it (docs/operations.md: Upgrades)",
                    path.display(),
                    warden_log::VERSION
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !write_missing => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_format(dir),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

fn write_format(dir: &Path) -> Result<(), String> {
    let path = dir.join(FORMAT_FILE);
    let tmp = dir.join("FORMAT.tmp");
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        writeln!(f, "{FORMAT_VERSION}")?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))
}

/// An exclusive lock on a data dir (`flock` on `DATA_DIR/LOCK`), held by a
/// running server and by restore and inspect, so none of them reads or
/// writes a dir another process has open. Released when dropped (or when
/// the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Takes `dir`'s lock, or says who holds it.
pub fn lock(dir: &Path) -> Result<DirLock, String> {
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                format!(
                    "{} is in use by another process (a running warden?): stop it first",
                    dir.display()
                )
            } else {
                format!("locking {}: {e}", path.display())
            });
        }
    }
    Ok(DirLock { _file: file })
}

/// What a restore made.
#[derive(Debug)]
pub struct Restored {
    pub index: u64,
    pub term: u64,
    pub nodes: usize,
    /// The backup's member addresses (id, peer address), not kept: the
    /// restored server's members come from its operator.
    pub left_behind: Vec<(u64, String)>,
}

/// `warden restore`: a new data dir `dir` for server `id` holding the
/// state of the snapshot file `snapshot`, as a group of one. Refuses a
/// damaged file (naming it) and a `dir` that exists and is not empty.
pub fn restore(snapshot: &Path, dir: &Path, id: u64) -> Result<Restored, String> {
    if id == 0 {
        return Err("--id must be at least 1".into());
    }
    let bytes = fs::read(snapshot).map_err(|e| format!("reading {}: {e}", snapshot.display()))?;
    let mut snap = snapfile::decode(snapshot, bytes).map_err(|e| e.to_string())?;
    // A whole file can still hold no tree: decoded here, before anything
    // is written.
    let mut decoded = proto::Snapshot::decode(&snap.data[..])
        .map_err(|e| format!("{}: the tree does not decode: {e}", snapshot.display()))?;
    // The old cluster's member addresses stay behind: at start they
    // would override the operator's --peers, and the restored server
    // would dial, and hear, the old cluster's servers. Its members come
    // from its operator (--peers, or the config file's `peers`), and the
    // others join it with `cluster add`.
    let left_behind: Vec<(u64, String)> = std::mem::take(&mut decoded.members)
        .into_iter()
        .map(|m| (m.id, m.addr))
        .collect();
    if !left_behind.is_empty() {
        snap.data = decoded.encode_to_vec().into();
    }
    let tree = DataTree::from_snapshot_owned(decoded)
        .map_err(|e| format!("{}: not a valid tree: {e}", snapshot.display()))?;
    let meta = snap.get_metadata().clone();
    if meta.index == 0 || tree.applied_index() != meta.index {
        return Err(format!(
            "{}: the tree is at index {}, the metadata says {}",
            snapshot.display(),
            tree.applied_index(),
            meta.index
        ));
    }
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(format!(
                    "{} is not empty: restore makes a new data dir (give a new or empty one)",
                    dir.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        Err(e) => return Err(format!("reading {}: {e}", dir.display())),
    }
    let _lock = lock(dir)?;
    check_format(dir)?;
    let mut storage = DiskStorage::open(&dir.join("raft"), &dir.join("snapshots"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // The restored node alone: it elects itself and others join it.
    snap.mut_metadata().set_conf_state(ConfState {
        voters: vec![id],
        ..Default::default()
    });
    storage
        .apply_snapshot(snap)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(Restored {
        index: meta.index,
        term: meta.term,
        nodes: tree.node_count(),
        left_behind,
    })
}

/// What [`inspect`] read.
#[derive(Debug)]
pub struct Inspected {
    /// The snapshot file read, if there was one.
    pub snapshot: Option<PathBuf>,
    /// Index of that snapshot (0 without one).
    pub snapshot_index: u64,
    /// The committed index the log was replayed to.
    pub applied: u64,
    pub nodes: usize,
}

/// `warden inspect`: writes `dir`'s tree to `out`, one JSON object per
/// znode in path order: the newest snapshot with the committed log
/// entries after it applied. Takes the dir's lock, so it refuses a dir a
/// running server has open.
pub fn inspect(dir: &Path, out: &mut impl Write) -> Result<Inspected, String> {
    if !dir.join("raft").is_dir() {
        return Err(format!(
            "{} is not a warden data dir (no raft/)",
            dir.display()
        ));
    }
    let _lock = lock(dir)?;
    verify_format(dir, false)?;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let storage =
        DiskStorage::open(&dir.join("raft"), &dir.join("snapshots")).map_err(|e| at(&e))?;
    let (mut tree, snapshot) = match storage.load_snapshot().map_err(|e| at(&e))? {
        Some(snap) => {
            let file = storage.snapshot_path();
            let decoded = proto::Snapshot::decode(&snap.data[..])
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let tree = DataTree::from_snapshot_owned(decoded)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            (tree, Some(file))
        }
        None => (DataTree::new(), None),
    };
    let snapshot_index = tree.applied_index();
    let commit = storage.hard_state().commit;
    if commit > snapshot_index {
        let entries = storage
            .entries(
                snapshot_index + 1,
                commit + 1,
                None,
                raft::GetEntriesContext::empty(false),
            )
            .map_err(|e| at(&e))?;
        for entry in entries {
            replay(&mut tree, &entry)
                .map_err(|e| at(&format!("log entry {}: {e}", entry.index)))?;
        }
    }
    let snap = tree.to_snapshot();
    let mut nodes = 0;
    for node in &snap.nodes {
        writeln!(out, "{}", node_json(node)).map_err(|e| format!("writing: {e}"))?;
        nodes += 1;
    }
    out.flush().map_err(|e| format!("writing: {e}"))?;
    Ok(Inspected {
        snapshot,
        snapshot_index,
        applied: tree.applied_index(),
        nodes,
    })
}

/// Applies one committed entry to `tree` as the core does (a normal
/// entry's write; a conf change's member record; an empty entry only
/// advances the index).
fn replay(tree: &mut DataTree, entry: &raft::eraftpb::Entry) -> Result<(), String> {
    match entry.get_entry_type() {
        EntryType::EntryNormal => {
            if entry.data.is_empty() {
                tree.skip(entry.index);
                return Ok(());
            }
            let proposal = Proposal::decode(&entry.data[..]).map_err(|e| e.to_string())?;
            let txn = proposal.txn.unwrap_or_default();
            if matches!(txn.kind, Some(Kind::MemberChange(_))) {
                tree.skip(entry.index);
            } else {
                tree.apply(entry.index, proposal.time_ms, &txn);
            }
        }
        EntryType::EntryConfChange => {
            let cc = crate::raft::wire_guard::decode_conf_change(&entry.data)
                .map_err(|e| e.to_string())?;
            if cc.node_id == 0 {
                tree.skip(entry.index);
                return Ok(());
            }
            let ctx = proto::ConfChangeContext::decode(&cc.context[..]).unwrap_or_default();
            let txn = Txn {
                kind: Some(Kind::MemberChange(proto::MemberChangeTxn {
                    id: cc.node_id,
                    addr: ctx.addr,
                    removed: cc.get_change_type() == ConfChangeType::RemoveNode,
                })),
                ..Default::default()
            };
            tree.apply(entry.index, 0, &txn);
        }
        EntryType::EntryConfChangeV2 => tree.skip(entry.index),
    }
    Ok(())
}

/// One znode as JSON: path, stat, data (UTF-8 text when it is, else
/// base64, and null for null data), ACL, ephemeral owner, TTL.
fn node_json(n: &proto::SnapshotNode) -> serde_json::Value {
    let (data, encoding) = if n.data_null {
        (serde_json::Value::Null, "null")
    } else {
        match std::str::from_utf8(&n.data) {
            Ok(s) => (s.into(), "utf-8"),
            Err(_) => (
                base64::engine::general_purpose::STANDARD
                    .encode(&n.data)
                    .into(),
                "base64",
            ),
        }
    };
    let stat = n.stat.unwrap_or_default();
    serde_json::json!({
        "path": n.path,
        "data": data,
        "data_encoding": encoding,
        "stat": {
            "czxid": stat.czxid,
            "mzxid": stat.mzxid,
            "pzxid": stat.pzxid,
            "ctime_ms": stat.ctime_ms,
            "mtime_ms": stat.mtime_ms,
            "version": stat.version,
            "cversion": stat.cversion,
            "aversion": stat.aversion,
            "data_length": stat.data_length,
            "num_children": stat.num_children,
        },
        "acl": n.acl.iter().map(|a| serde_json::json!({
            "perms": a.perms,
            "scheme": a.scheme,
            "id": a.id,
        })).collect::<Vec<_>>(),
        "ephemeral_owner": format!("{:#x}", stat.ephemeral_owner),
        "container": n.container,
        "ttl_ms": n.ttl_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_format_is_refused_and_a_missing_one_written() {
        let dir = tempfile::tempdir().unwrap();
        check_format(dir.path()).unwrap();
        let path = dir.path().join(FORMAT_FILE);
        assert_eq!(fs::read_to_string(&path).unwrap().trim(), "1");
        fs::write(&path, format!("{}\n", FORMAT_VERSION + 1)).unwrap();
        let err = check_format(dir.path()).unwrap_err();
        assert!(err.contains("data dir format 2 is newer"), "{err}");
        fs::write(&path, "banana").unwrap();
        let err = check_format(dir.path()).unwrap_err();
        assert!(err.contains("not a format version"), "{err}");
    }

    #[test]
    fn a_locked_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let err = lock(dir.path()).unwrap_err();
        assert!(err.contains("in use by another process"), "{err}");
        drop(held);
        lock(dir.path()).unwrap();
    }
}
