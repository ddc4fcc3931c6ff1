//! What this server has heard from each peer: the status it last sent
//! (and when, so a stale one reads as unreachable), and, while this
//! server leads, when the oldest unanswered heartbeat went to it (its
//! response gives the round trip, `warden_peer_rtt_seconds`).
//!
//! Heartbeat times are leader-only memory (`super::leading`): dropped when
//! this server stops leading. A member removed from the group is
//! forgotten whole.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::proto::NodeStatus;

#[derive(Debug, Default)]
pub(super) struct PeerView {
    /// Latest status each peer sent, and when it came.
    status: HashMap<u64, (NodeStatus, Instant)>,
    heartbeats_sent: HashMap<u64, Instant>,
}

impl PeerView {
    /// The status `id` last sent, and when it came.
    pub fn status(&self, id: u64) -> Option<&(NodeStatus, Instant)> {
        self.status.get(&id)
    }

    /// `id` sent `status` at `now`. Whether it names a ZooKeeper address
    /// other than the one known (watchers of `/zookeeper/config` must hear
    /// of it).
    pub fn status_came(&mut self, id: u64, status: NodeStatus, now: Instant) -> bool {
        let zk_addr_learned = !status.zk_addr.is_empty()
            && self
                .status
                .get(&id)
                .is_none_or(|(known, _)| known.zk_addr != status.zk_addr);
        self.status.insert(id, (status, now));
        zk_addr_learned
    }

    /// A heartbeat went to `to` at `now` (the oldest unanswered counts).
    pub fn heartbeat_sent(&mut self, to: u64, now: Instant) {
        self.heartbeats_sent.entry(to).or_insert(now);
    }

    /// `from` answered a heartbeat at `now`: the round trip, if one was
    /// waiting.
    pub fn heartbeat_answered(&mut self, from: u64, now: Instant) -> Option<Duration> {
        let sent = self.heartbeats_sent.remove(&from)?;
        Some(now.saturating_duration_since(sent))
    }

    /// This server stopped leading.
    pub fn stopped_leading(&mut self) {
        self.heartbeats_sent.clear();
    }

    /// `id` left the group.
    pub fn forget(&mut self, id: u64) {
        self.status.remove(&id);
        self.heartbeats_sent.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_counts_from_the_oldest_unanswered_heartbeat() {
        let mut v = PeerView::default();
        let t0 = Instant::now();
        v.heartbeat_sent(2, t0);
        v.heartbeat_sent(2, t0 + Duration::from_millis(5));
        let rtt = v.heartbeat_answered(2, t0 + Duration::from_millis(7));
        assert_eq!(rtt, Some(Duration::from_millis(7)));
        assert_eq!(v.heartbeat_answered(2, t0), None, "answered once");
        v.heartbeat_sent(3, t0);
        v.stopped_leading();
        assert_eq!(v.heartbeat_answered(3, t0), None);
    }

    #[test]
    fn a_new_zookeeper_address_is_told_once() {
        let mut v = PeerView::default();
        let t0 = Instant::now();
        let st = |zk: &str| NodeStatus {
            zk_addr: zk.into(),
            ..Default::default()
        };
        assert!(!v.status_came(2, st(""), t0));
        assert!(v.status_came(2, st("a:2181"), t0));
        assert!(!v.status_came(2, st("a:2181"), t0));
        assert!(v.status_came(2, st("b:2181"), t0));
        v.forget(2);
        assert!(v.status(2).is_none());
    }
}
