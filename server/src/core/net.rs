//! What the core asks of the network: frames queued for a member, put on
//! their way in a batch, the member table, and (streamed snapshots) a
//! transfer started and its outcome heard later.
//!
//! The core decides who gets what; a [`Net`] only carries it. The real
//! server's is [`crate::raft::transport::Transport`] (TCP or TLS links on
//! the core's runtime); a simulator hands each core one that queues
//! frames for its simulated network. Frames *from* peers reach the core
//! the other way, as [`crate::raft::transport::PeerEvent`]s handed to
//! [`super::Core::on_peer`].

use std::path::Path;

use crate::proto::PeerFrame;
use crate::raft::snapstream::Descriptor;
use crate::raft::transport::SnapshotSent;

/// The core's outbound network (see the module's text).
pub trait Net: Send {
    /// Adds (or re-addresses) member `id` at `addr`; this server's own id
    /// is ignored.
    fn add_peer(&mut self, id: u64, addr: &str);

    fn remove_peer(&mut self, id: u64);

    /// The members known, in ascending order (the order frames to them are
    /// queued in: a simulated network replays it).
    fn peer_ids(&self) -> Vec<u64>;

    fn addr_of(&self, id: u64) -> Option<&str>;

    /// Queues `frame` for `to`, handing it back if it was not queued
    /// (unknown peer, or its queue is full). It leaves at the next
    /// [`Net::flush`].
    // The frame comes back by value so the caller can hold it; boxing it
    // would cost an allocation per refused frame for nothing.
    #[allow(clippy::result_large_err)]
    fn try_send(&self, to: u64, frame: PeerFrame) -> Result<(), PeerFrame>;

    /// [`Net::try_send`], dropping a frame that was not queued: whether
    /// it was.
    fn send(&self, to: u64, frame: PeerFrame) -> bool {
        self.try_send(to, frame).is_ok()
    }

    /// Puts every frame queued so far on its way.
    fn flush(&self);

    /// Streams the snapshot file at `path` (described by `descriptor`;
    /// `msg` is the encoded MsgSnapshot) to `to`, replacing a transfer to
    /// `to` in flight. Its outcome comes back by
    /// [`Net::snapshot_results`]; an error here means none started (raft
    /// hears the message was not delivered).
    fn send_snapshot(
        &mut self,
        to: u64,
        index: u64,
        msg: Vec<u8>,
        path: &Path,
        descriptor: Descriptor,
    ) -> Result<(), String>;

    /// Transfers that ended since the last call.
    fn snapshot_results(&mut self) -> Vec<SnapshotSent>;

    /// Closes every link: the core is stopping.
    fn shutdown(&self);
}
