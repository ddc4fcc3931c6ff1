//! The follower's side of a transfer: asks its core, writes the chunks,
//! checks the file, builds the tree off the core, hands both over.

use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::time::Instant;

use futures::{SinkExt, StreamExt};
use raft::eraftpb::MessageType;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    reply_frame, Descriptor, Offered, Outcome, PeerFramed, Reassembly, Received, KEEPALIVE,
    STALL_TIMEOUT,
};
use crate::proto::{peer_frame, PeerFrame, SnapshotOffer, SnapshotOutcome};
use crate::raft::transport::PeerEvent;
use crate::tree::DataTree;

/// The follower's side: `framed` has just delivered `offer` from `from`.
/// Runs until the transfer is installed, refused or broken; the core is
/// asked twice (may it come; here it is, built), never blocked.
pub async fn receive(
    mut framed: PeerFramed,
    from: u64,
    offer: SnapshotOffer,
    deliver: mpsc::Sender<PeerEvent>,
    stop: CancellationToken,
) {
    let mut path = None;
    let outcome = tokio::select! {
        _ = stop.cancelled() => Outcome::Refused("this server is stopping".into()),
        o = receive_inner(&mut framed, from, offer, &deliver, &mut path) => o,
    };
    let (kind, error) = match &outcome {
        Outcome::Installed => (SnapshotOutcome::Installed, String::new()),
        Outcome::NotNeeded => (SnapshotOutcome::NotNeeded, String::new()),
        Outcome::Refused(e) => (SnapshotOutcome::Refused, e.clone()),
    };
    if outcome != Outcome::Installed {
        if let Some(p) = &path {
            let _ = std::fs::remove_file(p);
        }
    }
    // The listener does not know this server's id: replies say 0 (the
    // leader knows whom it dialled).
    let _ = framed.send(reply_frame(0, 0, kind, error)).await;
}

async fn receive_inner(
    framed: &mut PeerFramed,
    from: u64,
    offer: SnapshotOffer,
    deliver: &mpsc::Sender<PeerEvent>,
    path_out: &mut Option<PathBuf>,
) -> Outcome {
    let started = Instant::now();
    let refused = |what: String| {
        warn!(from, problem = %what, "snapshot transfer refused; the leader will retry");
        Outcome::Refused(what)
    };
    let msg = match crate::raft::wire_guard::decode_message(&offer.raft) {
        Ok(m) if m.get_msg_type() == MessageType::MsgSnapshot && m.from == from => m,
        Ok(_) => return refused("the offer holds no MsgSnapshot from its sender".into()),
        Err(e) => return refused(format!("undecodable offer: {e}")),
    };
    let meta = msg.get_snapshot().get_metadata().clone();
    let (index, term) = (meta.index, meta.term);
    let descriptor = match Descriptor::parse(msg.get_snapshot().get_data()) {
        Some(Ok(d)) => d,
        Some(Err(e)) => return refused(e),
        None => return refused("the offer carries no snapshot descriptor".into()),
    };
    // May it come?
    let (tx, rx) = oneshot::channel();
    let asked = PeerEvent::SnapshotOffered(Offered {
        from,
        index,
        term,
        reply: tx,
    });
    if deliver.send(asked).await.is_err() {
        return Outcome::Refused("this server is stopping".into());
    }
    let accepted = match rx.await {
        Ok(Ok(a)) => a,
        Ok(Err(outcome)) => return outcome,
        Err(_) => return Outcome::Refused("this server is stopping".into()),
    };
    *path_out = Some(accepted.path.clone());
    let path = accepted.path.clone();
    let cancel = accepted.cancel.clone();
    let result = tokio::select! {
        _ = cancel.cancelled() => return Outcome::Refused("a newer snapshot transfer replaced this one".into()),
        r = receive_file(framed, from, descriptor, path.clone()) => r,
    };
    if let Err(e) = result {
        return refused(format!("index {index} term {term}: {e}"));
    }
    // Check and build the tree off every core, telling the leader we are
    // still at it.
    let build_path = path.clone();
    let build = tokio::task::spawn_blocking(move || build_tree(&build_path, index, term));
    let built = match keepalive(framed, descriptor.file_bytes, &cancel, build).await {
        Some(Ok(Ok(tree))) => tree,
        Some(Ok(Err(e))) => return refused(e),
        Some(Err(e)) => return refused(format!("the thread building the tree failed: {e}")),
        None => return Outcome::Refused("a newer snapshot transfer replaced this one".into()),
    };
    let took = started.elapsed();
    info!(
        from,
        index,
        term,
        bytes = descriptor.file_bytes,
        nodes = built.node_count(),
        took_ms = took.as_millis() as u64,
        "leader snapshot received and built"
    );
    let (tx, rx) = oneshot::channel();
    let received = PeerEvent::SnapshotReceived(Box::new(Received {
        from,
        msg,
        tree: built,
        path,
        took,
        reply: tx,
    }));
    if deliver.send(received).await.is_err() {
        return Outcome::Refused("this server is stopping".into());
    }
    match keepalive(framed, descriptor.file_bytes, &cancel, rx).await {
        Some(Ok(outcome)) => outcome,
        Some(Err(_)) => Outcome::Refused("this server is stopping".into()),
        None => Outcome::NotNeeded,
    }
}

/// Waits for `work`, sending the leader a keepalive every [`KEEPALIVE`];
/// `None` if `cancel` fires first.
async fn keepalive<T>(
    framed: &mut PeerFramed,
    received: u64,
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    let mut every = tokio::time::interval(KEEPALIVE);
    every.tick().await;
    loop {
        tokio::select! {
            done = &mut work => return Some(done),
            _ = cancel.cancelled() => return None,
            _ = every.tick() => {
                // A leader that went away does not stop the install.
                let _ = framed
                    .send(reply_frame(0, received, SnapshotOutcome::Pending, String::new()))
                    .await;
            }
        }
    }
}

/// Receives the file's chunks into `path`, acknowledging each once
/// written, then makes it durable.
async fn receive_file(
    framed: &mut PeerFramed,
    from: u64,
    descriptor: Descriptor,
    path: PathBuf,
) -> Result<(), String> {
    let mut file = Some(
        std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?,
    );
    let mut parts = Reassembly::new(descriptor);
    framed
        .send(reply_frame(0, 0, SnapshotOutcome::Pending, String::new()))
        .await
        .map_err(|e| format!("answering the offer: {e}"))?;
    while !parts.complete() {
        let next = tokio::time::timeout(STALL_TIMEOUT, framed.next())
            .await
            .map_err(|_| format!("the leader sent nothing for {STALL_TIMEOUT:?}"))?;
        let chunk = match next {
            Some(Ok(PeerFrame {
                from: f,
                kind: Some(peer_frame::Kind::SnapshotChunk(c)),
            })) if f == from => c,
            Some(Ok(_)) => return Err("a frame other than a chunk of the snapshot".into()),
            Some(Err(e)) => return Err(format!("reading a chunk: {e}")),
            None => return Err("the leader closed the connection".into()),
        };
        parts.push(chunk.offset, &chunk.data)?;
        let f = file.take().expect("the file is back after each write");
        let offset = chunk.offset;
        let written = tokio::task::spawn_blocking(move || {
            f.write_all_at(&chunk.data, offset).map(|()| {
                crate::raft::snapfile::written_back(&f, offset, chunk.data.len() as u64);
                f
            })
        })
        .await
        .map_err(|e| format!("writing {}: {e}", path.display()))?
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
        file = Some(written);
        framed
            .send(reply_frame(
                0,
                parts.received(),
                SnapshotOutcome::Pending,
                String::new(),
            ))
            .await
            .map_err(|e| format!("acknowledging a chunk: {e}"))?;
    }
    parts.finish()?;
    let f = file.take().expect("the file is back");
    tokio::task::spawn_blocking(move || f.sync_all())
        .await
        .map_err(|e| format!("syncing {}: {e}", path.display()))?
        .map_err(|e| format!("syncing {}: {e}", path.display()))?;
    Ok(())
}

/// Reads the received file back, checks it as a snapshot file, and builds
/// the tree (seconds at a million znodes: on a blocking thread).
fn build_tree(path: &std::path::Path, index: u64, term: u64) -> Result<DataTree, String> {
    use prost::Message as _;
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let snap = crate::raft::snapfile::decode(path, bytes).map_err(|e| e.to_string())?;
    let meta = snap.get_metadata();
    if (meta.index, meta.term) != (index, term) {
        return Err(format!(
            "{} holds the snapshot at index {} term {}, the offer was for {index} term {term}",
            path.display(),
            meta.index,
            meta.term
        ));
    }
    let decoded = crate::proto::Snapshot::decode(&snap.data[..])
        .map_err(|e| format!("{}: undecodable tree: {e}", path.display()))?;
    drop(snap);
    let tree =
        DataTree::from_snapshot_owned(decoded).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::core::release_freed_memory();
    Ok(tree)
}
