//! Snapshot transfer: a leader's snapshot file streamed to one follower in
//! chunks, with flow control, off both cores.
//!
//! Raft asks the storage for a snapshot ([`crate::raft::DiskStorage`]'s
//! `snapshot()`) on the leader's core. The MsgSnapshot it gets carries the
//! raft metadata and, as its data, a [`Descriptor`] of the snapshot file
//! (its length and checksum, a few bytes) instead of the tree. The core
//! does not queue that message on the peer link: it starts a transfer
//! ([`crate::raft::transport::Transport::send_snapshot`]), one task per
//! follower, at most one per follower at a time (a newer snapshot for the
//! same follower replaces the transfer in flight).
//!
//! **A connection of its own.** The task dials the follower's peer port
//! afresh (mutual TLS when the cluster has it, like every peer link) and
//! sends [`crate::proto::SnapshotOffer`] as its first frame, so the follower's listener
//! hands the connection to [`receive()`] instead of its core. The chunks thus
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
//! ([`crate::raft::snapfile::decode`]: header, lengths, checksum), and decodes
//! and builds the tree on a blocking thread. Only then does it hand the
//! MsgSnapshot and the prebuilt tree to its core
//! ([`crate::raft::transport::PeerEvent::SnapshotReceived`]), which steps the message into raft;
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

mod flow;
mod receive;
mod send;

use std::path::PathBuf;
use std::time::Duration;

use raft::eraftpb::Message;
use tokio::sync::oneshot;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::proto::{peer_frame, PeerFrame, SnapshotOutcome, SnapshotReply};
use crate::tls::Stream;
use crate::tree::DataTree;

pub use flow::{Reassembly, Window};
pub use receive::receive;
pub use send::{send, SendJob};

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
/// The trailer of a snapshot file: its xxh3-64 (see [`crate::raft::snapfile`]).
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod loopback_tests;
