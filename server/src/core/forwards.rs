//! Forwards: the proposals a follower hands its leader.
//!
//! A follower's raft turns each local proposal into a `MsgPropose` to the
//! leader and never sends it again. The peer link is bounded and drops a
//! frame when it is full (under load, for a moment); a dropped forward
//! would then sit in [`super::proposals`] until its timeout and end as
//! OperationTimeout although nothing failed. So a forward the link does
//! not take is held here, in order, and every later forward queues behind
//! it; the core tries again on every tick. Held forwards are dropped when
//! the leader changes (the proposals table proposes every waiting write
//! again to the new leader) or past [`FORWARDS_HELD_BYTES_MAX`] (those
//! writes then time out, as before).

use std::collections::VecDeque;

use prost::Message as _;
use tracing::{debug, warn};

use super::Net;
use crate::proto::PeerFrame;

/// Bytes of forwards held for a full link before new ones are dropped.
pub const FORWARDS_HELD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Forwards the link to the leader did not take yet, oldest first.
#[derive(Default)]
pub struct Forwards {
    held: VecDeque<PeerFrame>,
    held_bytes: usize,
    /// The leader the held forwards are for.
    leader: u64,
}

impl Forwards {
    /// Sends `frame` to `leader` behind anything held for it; holds it if
    /// the link is full.
    pub fn send(&mut self, net: &dyn Net, leader: u64, frame: PeerFrame) {
        if leader != self.leader {
            self.clear();
            self.leader = leader;
        }
        if !self.held.is_empty() {
            self.hold(frame);
        } else if let Err(frame) = net.try_send(leader, frame) {
            self.hold(frame);
        }
    }

    fn hold(&mut self, frame: PeerFrame) {
        let bytes = frame.encoded_len();
        if self.held_bytes + bytes > FORWARDS_HELD_BYTES_MAX {
            warn!(
                leader = self.leader,
                held_bytes = self.held_bytes,
                "link to the leader full and {FORWARDS_HELD_BYTES_MAX} bytes of forwards held; \
                 a proposal is dropped (it times out)"
            );
            return;
        }
        self.held_bytes += bytes;
        self.held.push_back(frame);
    }

    /// Sends what the link takes now, in order (on every tick).
    pub fn flush(&mut self, net: &dyn Net) {
        while let Some(frame) = self.held.pop_front() {
            let bytes = frame.encoded_len();
            if let Err(frame) = net.try_send(self.leader, frame) {
                self.held.push_front(frame);
                break;
            }
            self.held_bytes -= bytes;
        }
    }

    /// Drops what is held (the leader changed: every waiting proposal is
    /// proposed again).
    pub fn clear(&mut self) {
        if !self.held.is_empty() {
            debug!(
                leader = self.leader,
                held = self.held.len(),
                "held forwards dropped (leader changed)"
            );
        }
        self.held.clear();
        self.held_bytes = 0;
    }
}
