//! Snapshot transfer: a leader's snapshot file streamed to one follower in
//! chunks, with flow control, off both cores.
//!
//! Raft asks the storage for a snapshot ([`super::DiskStorage`]'s
//! `snapshot()`) on the leader's core. The MsgSnapshot it gets carries the
//! raft metadata and, as its data, a [`Descriptor`] of the snapshot file
//! (its length and checksum, a few bytes) instead of the tree. The core
//! does not queue that message on the peer link: it starts a transfer
//! ([`super::transport::Transport::send_snapshot`]), one task per
//! follower, at most one per follower at a time (a newer snapshot for the
//! same follower replaces the transfer in flight).
//!
//! **A connection of its own.** The task dials the follower's peer port
//! afresh (mutual TLS when the cluster has it, like every peer link) and
//! sends [`SnapshotOffer`] as its first frame, so the follower's listener
//! hands the connection to [`receive`] instead of its core. The chunks thus
//! never queue in the peer link that carries heartbeats and appends (whose
//! queue is bounded at a few megabytes and drops what does not fit), and
//! the follower's acknowledgements come back on the same connection,
//! without passing through either core.
//!
//! **Flow control.** The leader sends chunks of `--snapshot-chunk-bytes`
//! (1 MiB) while fewer than [`WINDOW_CHUNKS`] are unacknowledged
//! ([`Window`]); the follower acknowledges a chunk once it has written it
//! to its temporary file. Neither side ever holds more than the window in
//! memory, and the link is never filled with more than that. A follower
//! that says nothing for [`STALL_TIMEOUT`] (it sends a keepalive every
//! [`KEEPALIVE`] while it builds the tree) ends the transfer.
//!
//! **The follower** writes the chunks to a temporary file in its snapshot
//! directory ([`Reassembly`] checks offsets, lengths and the running xxh3
//! against the file's trailer and the descriptor), fsyncs it, then reads
//! it back whole, checks it as any snapshot file is checked
//! ([`super::snapfile::decode`]: header, lengths, checksum), and decodes
//! and builds the tree on a blocking thread. Only then does it hand the
//! MsgSnapshot and the prebuilt tree to its core
//! ([`PeerEvent::SnapshotReceived`]), which steps the message into raft;
//! the core's restore swaps the tree in, and the storage renames the file
//! into place (it is already durable) before the log is replaced. A
//! damaged transfer is refused (logged, naming what is wrong), never
//! installed.
//!
//! **Outcome.** The follower answers [`SnapshotOutcome::Installed`],
//! `NotNeeded` (it already had as much, or raft ignored the snapshot) or
//! `Refused`. The leader's core reports the first two to raft as
//! `SnapshotStatus::Finish` and anything else (refused, a broken link, a
//! stall) as `Failure`, so raft probes the follower again and, if it still
//! needs one, sends a snapshot again.
//!
//! A follower still accepts an old-style MsgSnapshot carrying the whole
//! tree as data on the peer link: its core decodes it as before.

use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use raft::eraftpb::{Message, MessageType};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use xxhash_rust::xxh3::Xxh3;

use super::transport::PeerEvent;
use crate::proto::{
    peer_frame, PeerFrame, SnapshotChunk, SnapshotOffer, SnapshotOutcome, SnapshotReply,
};
use crate::tls::Stream;
use crate::tree::DataTree;

/// Default chunk size (`--snapshot-chunk-bytes`).
pub const CHUNK_BYTES_DEFAULT: usize = 1024 * 1024;
/// Largest chunk: well under the peer frame limit.
pub const CHUNK_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Chunks sent and not yet acknowledged, at most.
pub const WINDOW_CHUNKS: u64 = 4;
/// Longest the leader waits for a word from the follower (an
/// acknowledgement, a keepalive or the outcome) before it gives up.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a follower that is checking or building says it still is.
pub const KEEPALIVE: Duration = Duration::from_secs(1);

const DESCRIPTOR_MAGIC: &[u8; 8] = b"WRDNXFER";
const DESCRIPTOR_VERSION: u32 = 1;
const DESCRIPTOR_LEN: usize = 8 + 4 + 8 + 8;
/// The trailer of a snapshot file: its xxh3-64 (see [`super::snapfile`]).
const TRAILER_LEN: u64 = 8;

/// What a streamed MsgSnapshot carries as its data: the file's length and
/// the checksum in its trailer. Starts with `W` (0x57: protobuf field 10,
/// wire type 7, which does not exist), so it is never mistaken for an
/// old-style encoded tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub file_bytes: u64,
    pub checksum: u64,
}

impl Descriptor {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DESCRIPTOR_LEN);
        out.extend_from_slice(DESCRIPTOR_MAGIC);
        out.extend_from_slice(&DESCRIPTOR_VERSION.to_le_bytes());
        out.extend_from_slice(&self.file_bytes.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        out
    }

    /// `None`: not a descriptor (an old-style snapshot with the tree as
    /// data). `Some(Err)`: a descriptor this server cannot read.
    pub fn parse(data: &[u8]) -> Option<Result<Self, String>> {
        if !data.starts_with(DESCRIPTOR_MAGIC) {
            return None;
        }
        if data.len() != DESCRIPTOR_LEN {
            return Some(Err(format!(
                "snapshot descriptor of {} bytes, expected {DESCRIPTOR_LEN}",
                data.len()
            )));
        }
        let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8"));
        let version = u32::from_le_bytes(data[8..12].try_into().expect("4"));
        if version != DESCRIPTOR_VERSION {
            return Some(Err(format!(
                "snapshot descriptor version {version}, this server reads {DESCRIPTOR_VERSION}"
            )));
        }
        Some(Ok(Self {
            file_bytes: u64_at(12),
            checksum: u64_at(20),
        }))
    }
}

/// The sender's flow control: which chunk goes next, and no more than
/// `max_unacked` chunks sent and not acknowledged.
#[derive(Debug)]
pub struct Window {
    len: u64,
    chunk: u64,
    max_unacked: u64,
    sent: u64,
    acked: u64,
}

impl Window {
    pub fn new(len: u64, chunk: usize, max_unacked: u64) -> Self {
        Self {
            len,
            chunk: chunk.max(1) as u64,
            max_unacked: max_unacked.max(1),
            sent: 0,
            acked: 0,
        }
    }

    /// The next chunk to send (offset, length), if the window allows one.
    pub fn next(&self) -> Option<(u64, usize)> {
        let n = (self.len - self.sent).min(self.chunk);
        if n == 0 || self.unacked() + n > self.max_unacked * self.chunk {
            return None;
        }
        Some((self.sent, n as usize))
    }

    /// The chunk [`Self::next`] named went out.
    pub fn sent(&mut self, len: usize) {
        self.sent += len as u64;
        debug_assert!(self.sent <= self.len);
    }

    /// The follower has written `received` bytes.
    pub fn ack(&mut self, received: u64) -> Result<(), String> {
        if received < self.acked || received > self.sent {
            return Err(format!(
                "the follower acknowledged {received} bytes with {} acknowledged and {} sent",
                self.acked, self.sent
            ));
        }
        self.acked = received;
        Ok(())
    }

    /// Bytes sent and not acknowledged.
    pub fn unacked(&self) -> u64 {
        self.sent - self.acked
    }

    pub fn all_sent(&self) -> bool {
        self.sent == self.len
    }
}

/// The receiver's side: chunks in order, the file's length, and the
/// running checksum of everything before the trailer.
pub struct Reassembly {
    expected: Descriptor,
    received: u64,
    hash: Xxh3,
    trailer: Vec<u8>,
}

impl Reassembly {
    pub fn new(expected: Descriptor) -> Self {
        Self {
            expected,
            received: 0,
            hash: Xxh3::new(),
            trailer: Vec::with_capacity(TRAILER_LEN as usize),
        }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    pub fn complete(&self) -> bool {
        self.received == self.expected.file_bytes
    }

    /// Takes the chunk at `offset`; an error names what is wrong with it.
    pub fn push(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        if offset != self.received {
            return Err(format!(
                "chunk at offset {offset}, expected {}",
                self.received
            ));
        }
        if data.is_empty() {
            return Err(format!("empty chunk at offset {offset}"));
        }
        let end = offset + data.len() as u64;
        if end > self.expected.file_bytes {
            return Err(format!(
                "chunk at {offset} of {} bytes runs past the file's {} bytes",
                data.len(),
                self.expected.file_bytes
            ));
        }
        let body_end = self.expected.file_bytes.saturating_sub(TRAILER_LEN);
        let split = body_end.saturating_sub(offset).min(data.len() as u64) as usize;
        self.hash.update(&data[..split]);
        self.trailer.extend_from_slice(&data[split..]);
        self.received = end;
        Ok(())
    }

    /// Once every byte is in: the checksum computed over the file agrees
    /// with its trailer and with the leader's descriptor.
    pub fn finish(&self) -> Result<(), String> {
        if !self.complete() {
            return Err(format!(
                "{} of {} bytes received",
                self.received, self.expected.file_bytes
            ));
        }
        if self.expected.file_bytes < TRAILER_LEN {
            return Err(format!("a file of {} bytes", self.expected.file_bytes));
        }
        let stored = u64::from_le_bytes(self.trailer[..].try_into().expect("8 bytes"));
        let computed = self.hash.digest();
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#018x}, computed {computed:#018x})"
            ));
        }
        if stored != self.expected.checksum {
            return Err(format!(
                "the file's checksum {stored:#018x} is not the offered {:#018x}",
                self.expected.checksum
            ));
        }
        Ok(())
    }
}

/// What a transfer ended with, as the follower said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    NotNeeded,
    Refused(String),
}

/// The follower's core is asked whether it wants the snapshot offered.
pub struct Offered {
    pub from: u64,
    pub index: u64,
    pub term: u64,
    pub reply: oneshot::Sender<Result<Accepted, Outcome>>,
}

/// Where an accepted snapshot is written, and what cancels its receipt
/// (a newer offer).
pub struct Accepted {
    pub path: PathBuf,
    pub cancel: CancellationToken,
}

/// A snapshot received whole and checked, its tree built: the core steps
/// `msg` into raft, and its restore takes `tree` and `path`.
pub struct Received {
    pub from: u64,
    pub msg: Message,
    pub tree: DataTree,
    /// The received file (durable, under a temporary name).
    pub path: PathBuf,
    /// Time spent receiving, checking and building, off the core.
    pub took: Duration,
    pub reply: oneshot::Sender<Outcome>,
}

impl std::fmt::Debug for Offered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offered")
            .field("from", &self.from)
            .field("index", &self.index)
            .field("term", &self.term)
            .finish()
    }
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("from", &self.from)
            .field("index", &self.msg.get_snapshot().get_metadata().index)
            .field("nodes", &self.tree.node_count())
            .field("path", &self.path)
            .finish()
    }
}

pub type PeerFramed = Framed<Stream, crate::raft::transport::PeerCodec>;

fn reply_frame(from: u64, received: u64, outcome: SnapshotOutcome, error: String) -> PeerFrame {
    PeerFrame {
        from,
        kind: Some(peer_frame::Kind::SnapshotReply(SnapshotReply {
            received,
            outcome: outcome as i32,
            error,
        })),
    }
}

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
    match next_reply(&mut framed).await? {
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
        match next_reply(&mut framed).await? {
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

/// The follower's next reply, within [`STALL_TIMEOUT`].
async fn next_reply(framed: &mut PeerFramed) -> Result<(SnapshotOutcome, u64, String), String> {
    let next = tokio::time::timeout(STALL_TIMEOUT, framed.next())
        .await
        .map_err(|_| format!("the follower said nothing for {STALL_TIMEOUT:?}"))?;
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
    let me_unknown = 0;
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
    let _ = framed.send(reply_frame(me_unknown, 0, kind, error)).await;
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
    let msg = match super::wire_guard::decode_message(&offer.raft) {
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
                super::snapfile::written_back(&f, offset, chunk.data.len() as u64);
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
    let snap = super::snapfile::decode(path, bytes).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(body: &[u8]) -> (Vec<u8>, Descriptor) {
        let mut file = body.to_vec();
        let sum = xxhash_rust::xxh3::xxh3_64(body);
        file.extend_from_slice(&sum.to_le_bytes());
        let d = Descriptor {
            file_bytes: file.len() as u64,
            checksum: sum,
        };
        (file, d)
    }

    #[test]
    fn a_descriptor_round_trips_and_is_never_an_encoded_tree() {
        let d = Descriptor {
            file_bytes: 123_456_789,
            checksum: 0xdead_beef_0bad_cafe,
        };
        assert_eq!(Descriptor::parse(&d.encode()), Some(Ok(d)));
        // An old-style snapshot (an encoded tree) is not a descriptor.
        use prost::Message as _;
        let tree = crate::proto::Snapshot::default().encode_to_vec();
        assert_eq!(Descriptor::parse(&tree), None);
        let mut bad = d.encode();
        bad.pop();
        assert!(Descriptor::parse(&bad).unwrap().is_err());
        let mut newer = d.encode();
        newer[8] = 9;
        let err = Descriptor::parse(&newer).unwrap().unwrap_err();
        assert!(err.contains("version 9"), "{err}");
    }

    #[test]
    fn the_window_never_has_more_than_its_chunks_unacknowledged() {
        let mut w = Window::new(10_500, 1000, 4);
        let mut sent = Vec::new();
        while let Some((off, n)) = w.next() {
            sent.push((off, n));
            w.sent(n);
        }
        assert_eq!(
            sent,
            vec![(0, 1000), (1000, 1000), (2000, 1000), (3000, 1000)]
        );
        assert_eq!(w.unacked(), 4000);
        // Half a chunk acknowledged: still no room for a whole one.
        w.ack(500).unwrap();
        assert_eq!(w.next(), None);
        w.ack(1000).unwrap();
        assert_eq!(w.next(), Some((4000, 1000)), "room for one more");
        w.sent(1000);
        assert_eq!(w.next(), None);
        w.ack(5000).unwrap();
        let mut rest = Vec::new();
        while let Some((off, n)) = w.next() {
            rest.push((off, n));
            w.sent(n);
            assert!(w.unacked() <= 4000);
            if w.next().is_none() && !w.all_sent() {
                // Full: the follower acknowledges the oldest chunk.
                w.ack(off + n as u64 - 3000).unwrap();
            }
        }
        assert_eq!(rest.len(), 6);
        assert_eq!(rest.last(), Some(&(10_000, 500)), "the short last chunk");
        assert!(w.all_sent());
        assert_eq!(w.next(), None);
        // Acknowledgements go forward, and never past what was sent.
        assert!(w.ack(4000).is_err());
        assert!(w.ack(20_000).is_err());
        w.ack(10_500).unwrap();
        assert_eq!(w.unacked(), 0);
    }

    #[test]
    fn chunks_reassemble_into_the_file_and_its_checksum_is_checked() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let (file, d) = file_of(&body);
        // Chunk sizes that split the trailer, and that do not.
        for chunk in [1, 3, 1000, 10_004, 10_008, 20_000] {
            let mut r = Reassembly::new(d);
            for (i, c) in file.chunks(chunk).enumerate() {
                assert!(!r.complete());
                r.push((i * chunk) as u64, c).unwrap();
            }
            assert!(r.complete());
            r.finish().unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
        }
    }

    #[test]
    fn a_damaged_or_disordered_transfer_is_refused_naming_the_problem() {
        let body = vec![7u8; 5000];
        let (file, d) = file_of(&body);
        // A flipped byte.
        let mut damaged = file.clone();
        damaged[2500] ^= 1;
        let mut r = Reassembly::new(d);
        for (i, c) in damaged.chunks(1000).enumerate() {
            r.push(i as u64 * 1000, c).unwrap();
        }
        let err = r.finish().unwrap_err();
        assert!(err.contains("checksum mismatch"), "{err}");
        // A file whole in itself, but not the one offered.
        let (other, _) = file_of(&[8u8; 5000]);
        let mut r = Reassembly::new(d);
        r.push(0, &other).unwrap();
        let err = r.finish().unwrap_err();
        assert!(err.contains("not the offered"), "{err}");
        // Out of order, a repeat, past the end, empty, short.
        let mut r = Reassembly::new(d);
        r.push(0, &file[..1000]).unwrap();
        let err = r.push(2000, &file[2000..3000]).unwrap_err();
        assert!(err.contains("offset 2000, expected 1000"), "{err}");
        let err = r.push(0, &file[..1000]).unwrap_err();
        assert!(err.contains("expected 1000"), "{err}");
        let err = r.push(1000, &[0u8; 5000]).unwrap_err();
        assert!(err.contains("runs past"), "{err}");
        assert!(r.push(1000, &[]).is_err());
        let err = r.finish().unwrap_err();
        assert!(err.contains("1000 of 5008 bytes"), "{err}");
    }
}
