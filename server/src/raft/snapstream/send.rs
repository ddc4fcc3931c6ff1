//! The leader's side of a transfer: the offer, then chunks within the
//! window, until the follower says how it ended.

use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use tokio_util::codec::Framed;
use tracing::warn;

#[cfg(doc)]
use super::STALL_TIMEOUT;
use super::{Descriptor, Outcome, PeerFramed, Window, WINDOW_CHUNKS};
use crate::proto::{peer_frame, PeerFrame, SnapshotChunk, SnapshotOffer, SnapshotOutcome};
use crate::tls::Stream;

/// What the leader's task sends: the MsgSnapshot, encoded, and the file.
pub struct SendJob {
    pub me: u64,
    pub msg: Vec<u8>,
    pub file: std::fs::File,
    pub descriptor: Descriptor,
    pub chunk_bytes: usize,
    /// Test only (`--unsafe-corrupt-snapshot-transfers`): flip a byte of
    /// the middle chunk.
    pub corrupt: bool,
    /// How long the follower may say nothing ([`STALL_TIMEOUT`]).
    pub stall: std::time::Duration,
}

/// The leader's side of one transfer, on a connection already dialled.
pub async fn send(stream: Stream, job: SendJob) -> Result<Outcome, String> {
    let mut framed = Framed::new(stream, crate::raft::transport::codec());
    let SendJob {
        me,
        msg,
        file,
        descriptor,
        chunk_bytes,
        corrupt,
        stall,
    } = job;
    let file = Arc::new(file);
    let offer = PeerFrame {
        from: me,
        kind: Some(peer_frame::Kind::SnapshotOffer(SnapshotOffer { raft: msg })),
    };
    framed
        .send(offer)
        .await
        .map_err(|e| format!("sending the offer: {e}"))?;
    let len = descriptor.file_bytes;
    let chunks = len.div_ceil(chunk_bytes.max(1) as u64);
    let corrupt_at = corrupt.then_some((chunks / 2) * chunk_bytes as u64);
    let mut window = Window::new(len, chunk_bytes, WINDOW_CHUNKS);
    // The offer's answer: accepted (pending, 0 bytes) or not.
    match next_reply(&mut framed, stall).await? {
        (SnapshotOutcome::Pending, _, _) => {}
        (outcome, _, error) => return Ok(outcome_of(outcome, error)),
    }
    loop {
        while let Some((offset, n)) = window.next() {
            let f = file.clone();
            let mut data = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                f.read_exact_at(&mut buf, offset).map(|()| buf)
            })
            .await
            .map_err(|e| format!("reading the snapshot file: {e}"))?
            .map_err(|e| format!("reading the snapshot file at {offset}: {e}"))?;
            if corrupt_at == Some(offset) {
                warn!(
                    offset,
                    "--unsafe-corrupt-snapshot-transfers: flipping a byte of this chunk"
                );
                data[n / 2] ^= 0x5a;
            }
            let chunk = PeerFrame {
                from: me,
                kind: Some(peer_frame::Kind::SnapshotChunk(SnapshotChunk {
                    offset,
                    data,
                })),
            };
            framed
                .feed(chunk)
                .await
                .map_err(|e| format!("sending a chunk: {e}"))?;
            window.sent(n);
        }
        framed
            .flush()
            .await
            .map_err(|e| format!("sending chunks: {e}"))?;
        match next_reply(&mut framed, stall).await? {
            (SnapshotOutcome::Pending, received, _) => window.ack(received)?,
            (outcome, _, error) => return Ok(outcome_of(outcome, error)),
        }
    }
}

fn outcome_of(outcome: SnapshotOutcome, error: String) -> Outcome {
    match outcome {
        SnapshotOutcome::Installed => Outcome::Installed,
        SnapshotOutcome::NotNeeded => Outcome::NotNeeded,
        _ => Outcome::Refused(error),
    }
}

/// The follower's next reply, within `stall`.
async fn next_reply(
    framed: &mut PeerFramed,
    stall: std::time::Duration,
) -> Result<(SnapshotOutcome, u64, String), String> {
    let next = tokio::time::timeout(stall, framed.next())
        .await
        .map_err(|_| format!("the follower said nothing for {stall:?}"))?;
    match next {
        Some(Ok(PeerFrame {
            kind: Some(peer_frame::Kind::SnapshotReply(r)),
            ..
        })) => {
            let outcome = SnapshotOutcome::try_from(r.outcome)
                .map_err(|_| format!("unknown snapshot outcome {}", r.outcome))?;
            Ok((outcome, r.received, r.error))
        }
        Some(Ok(_)) => Err("the follower sent something other than a snapshot reply".into()),
        Some(Err(e)) => Err(format!("reading the follower's reply: {e}")),
        None => Err("the follower closed the connection".into()),
    }
}
