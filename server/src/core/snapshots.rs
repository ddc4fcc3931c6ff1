//! Snapshots off the core thread.
//!
//! The core freezes the tree ([`DataTree::freeze`]: a pointer per node,
//! milliseconds at a million znodes) and hands the view to a thread of its
//! own, which sorts and encodes it and writes the snapshot file
//! ([`SnapDir::write`]: temporary name, fsync, rename). The core goes on
//! applying meanwhile; when the file is durable, [`Snapshots::poll`] hands
//! the result back and the core records it with raft's storage, which
//! removes the older file. One build at a time.
//!
//! A snapshot for a newly added member is still built on the core
//! ([`Snapshots::build_now`]): the member is initialized from it, so it
//! must include the conf change just applied, at once.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use raft::eraftpb::SnapshotMetadata;
use tracing::info;

use crate::raft::snapfile::SnapDir;
use crate::raft::StorageError;
use crate::tree::{DataTree, FrozenTree};

/// A snapshot whose file is written and synced, to be recorded.
#[derive(Debug)]
pub(super) struct Built {
    pub meta: SnapshotMetadata,
    /// Size of the encoded tree.
    pub bytes: u64,
    pub nodes: usize,
    /// How long the core paused to freeze the tree.
    pub core_pause: Duration,
    /// From the freeze to the file being durable.
    pub took: Duration,
}

struct Building {
    index: u64,
    done: mpsc::Receiver<Result<Built, StorageError>>,
}

/// The snapshot being built, if any.
#[derive(Default)]
pub(super) struct Snapshots {
    building: Option<Building>,
}

impl Snapshots {
    /// Whether a build is in flight.
    pub fn busy(&self) -> bool {
        self.building.is_some()
    }

    /// Starts building the snapshot of `tree` (applied up to `meta.index`)
    /// on a thread of its own. Returns how long the core paused.
    pub fn start(
        &mut self,
        tree: &DataTree,
        meta: SnapshotMetadata,
        dir: SnapDir,
    ) -> Result<Duration, StorageError> {
        debug_assert!(!self.busy(), "one snapshot build at a time");
        debug_assert_eq!(tree.applied_index(), meta.index);
        // os-clock: the core's pause and the build's time, figures only.
        let started = Instant::now();
        let view = tree.freeze();
        // os-clock: as above.
        let core_pause = started.elapsed();
        let (tx, done) = mpsc::channel();
        let index = meta.index;
        std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let result = build(view, meta, &dir, started, core_pause);
                release_freed_memory();
                let _ = tx.send(result);
            })
            .map_err(|e| StorageError::Io(format!("starting the snapshot thread: {e}")))?;
        self.building = Some(Building { index, done });
        Ok(core_pause)
    }

    /// The build in flight, if it has finished (its file is durable, or
    /// it failed).
    pub fn poll(&mut self) -> Option<Result<Built, StorageError>> {
        let building = self.building.as_ref()?;
        let result = match building.done.try_recv() {
            Ok(result) => result,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Err(StorageError::Io(format!(
                "the thread building the snapshot at {} died",
                building.index
            ))),
        };
        self.building = None;
        Some(result)
    }

    /// Builds and writes the snapshot of `tree` on this thread.
    pub fn build_now(
        tree: &DataTree,
        meta: SnapshotMetadata,
        dir: &SnapDir,
    ) -> Result<Built, StorageError> {
        // os-clock: the build's time, a figure only.
        let started = Instant::now();
        let view = tree.freeze();
        let built = build(view, meta, dir, started, Duration::ZERO)?;
        Ok(Built {
            core_pause: built.took,
            ..built
        })
    }
}

fn build(
    view: FrozenTree,
    meta: SnapshotMetadata,
    dir: &SnapDir,
    started: Instant,
    core_pause: Duration,
) -> Result<Built, StorageError> {
    let nodes = view.node_count();
    // Sorts, encodes and lets the view go (the nodes the tree has copied
    // since are freed here, not on the core).
    let data = view.encode();
    dir.write(&meta, &data)?;
    Ok(Built {
        meta,
        bytes: data.len() as u64,
        nodes,
        core_pause,
        // os-clock: a figure only.
        took: started.elapsed(),
    })
}

/// Hands the heap's free memory back to the system. A snapshot build or a
/// restore frees hundreds of megabytes in small blocks that glibc's
/// allocator keeps otherwise, and that shows as resident memory for good.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // has no preconditions and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Logs a recorded snapshot.
pub(super) fn log_taken(built: &Built) {
    info!(
        index = built.meta.index,
        bytes = built.bytes,
        nodes = built.nodes,
        core_us = built.core_pause.as_micros() as u64,
        took_ms = built.took.as_millis() as u64,
        "snapshot taken"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{txn::Kind, CreateTxn, Txn};
    use prost::Message as _;

    fn create(path: &str) -> Txn {
        Txn {
            kind: Some(Kind::Create(CreateTxn {
                path: path.into(),
                data: b"v".to_vec(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_snapshot_built_on_its_thread_holds_the_tree_as_frozen() {
        let dir = tempfile::tempdir().unwrap();
        let snaps = SnapDir::open(dir.path()).unwrap();
        let mut tree = DataTree::new();
        for i in 1..=100 {
            tree.apply(i, 0, &create(&format!("/n{i}")));
        }
        let expected = tree.to_snapshot();
        let meta = SnapshotMetadata {
            index: 100,
            term: 1,
            ..Default::default()
        };
        let mut s = Snapshots::default();
        s.start(&tree, meta, snaps.clone()).unwrap();
        assert!(s.busy());
        // The tree goes on while the snapshot is built.
        for i in 101..=150 {
            tree.apply(i, 0, &create(&format!("/n{i}")));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let built = loop {
            if let Some(done) = s.poll() {
                break done.unwrap();
            }
            assert!(Instant::now() < deadline, "the snapshot was never built");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(!s.busy());
        assert_eq!(built.meta.index, 100);
        assert_eq!(built.nodes, 101);
        let read = snaps.read(100, 1).unwrap();
        let decoded = crate::proto::Snapshot::decode(&read.data[..]).unwrap();
        assert_eq!(decoded, expected);
        assert_eq!(tree.node_count(), 151);
    }
}
