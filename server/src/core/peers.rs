//! Frames from peers: who is heard (members only), a link that closed
//! (the leader's: the lowest other voter campaigns at once), snapshot
//! offers, and each frame kind handed on (raft messages, session touches,
//! status).

use super::*;

impl Core {
    /// A frame from a peer.
    ///
    /// Only members (configured peers, or added by a conf change) are
    /// heard: a frame naming another sender is dropped, so an unknown
    /// process can neither grow the peer table nor touch sessions. With
    /// TLS the sender is the member the link's certificate proves (the
    /// transport drops any other, see `crate::raft::peer_auth`), so this
    /// holds each proven id to the member list, frame by frame. Without
    /// TLS it is hygiene, not authentication: anyone who reaches the peer
    /// port can claim a member's id.
    pub fn on_peer(&mut self, event: PeerEvent) {
        match event {
            PeerEvent::Frame(frame) => self.on_peer_frame(frame),
            PeerEvent::Closed { from } => self.on_link_closed(from),
            PeerEvent::SnapshotOffered(offer) => {
                let member = self.is_member(offer.from);
                let applied = self.m.tree.applied_index();
                self.m.installs.offered(offer, member, applied);
            }
            PeerEvent::SnapshotReceived(received) => {
                let member = self.is_member(received.from);
                let applied = self.m.tree.applied_index();
                let me = self.m.node_id;
                if let Some(msg) = self.m.installs.received(*received, member, applied, me) {
                    if let Err(e) = self.raft.step(msg) {
                        debug!(error = %e, "received snapshot refused by raft");
                    }
                }
            }
        }
    }

    /// Whether `from` is another member (configured, or added by a conf
    /// change).
    fn is_member(&self, from: u64) -> bool {
        from != self.m.node_id
            && (self.m.net.addr_of(from).is_some() || self.m.tree.members().contains_key(&from))
    }

    /// A peer's connection to us ended. The leader's: it most likely died
    /// (a killed process's sockets close at once), so this follower drops
    /// its lease at once, and the lowest-numbered other voter campaigns at
    /// once (one candidate, no split vote); the others wait for it, or for
    /// their own election timeout if it cannot win.
    fn on_link_closed(&mut self, from: u64) {
        if from == 0 || from != self.m.role.leader() || self.m.role.is_leader() {
            return;
        }
        let conf = self.raft.conf_state();
        let first = conf.voters.iter().copied().filter(|&v| v != from).min();
        let campaign = first == Some(self.m.node_id);
        info!(leader = from, campaign, "the leader's link closed");
        self.raft.leader_lost(campaign);
    }

    fn on_peer_frame(&mut self, frame: PeerFrame) {
        let from = frame.from;
        // Before the membership check: a server started with --join calls
        // in before it is a member, and the quorum rule counts it then.
        if from != self.m.node_id {
            self.m.contacts.heard(from, self.m.clock.now());
        }
        if !self.is_member(from) {
            crate::raft::peer_auth::refused(
                &self.m.op_metrics,
                crate::raft::peer_auth::Refusal::NonMember,
                None,
                &format!("a frame from {from}, which is not a member; dropped"),
            );
            return;
        }
        match frame.kind {
            Some(peer_frame::Kind::Raft(bytes)) => {
                match crate::raft::wire_guard::decode_message(&bytes) {
                    Ok(msg) if msg.from != from || msg.to != self.m.node_id => {
                        debug!(
                            from,
                            msg_from = msg.from,
                            msg_to = msg.to,
                            "raft message with another sender or recipient; dropped"
                        );
                    }
                    Ok(msg)
                        if msg.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot
                            && Descriptor::parse(msg.get_snapshot().get_data()).is_some() =>
                    {
                        // Its file never came: raft must not install it
                        // (the leader streams the file with the message).
                        warn!(
                            from,
                            "a streamed snapshot's message on the peer link, without its file; dropped"
                        );
                    }
                    Ok(mut msg) => {
                        if msg.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeatResponse {
                            let now = self.m.clock.now();
                            if let Some(rtt) = self.m.peers.heartbeat_answered(from, now) {
                                self.m.op_metrics.peer_rtt(from, rtt);
                            }
                        }
                        if self.m.role.is_leader()
                            && msg.get_msg_type() == raft::eraftpb::MessageType::MsgPropose
                        {
                            proposals::restamp(msg.mut_entries(), self.m.clock.wall_ms());
                        }
                        if let Err(e) = self.raft.step(msg) {
                            debug!(from = frame.from, error = %e, "raft message refused");
                        }
                    }
                    Err(e) => warn!(from = frame.from, error = %e, "undecodable raft message"),
                }
            }
            // Ignored unless we lead (a follower that thinks we lead; its
            // next report finds the leader).
            Some(peer_frame::Kind::Touch(t)) => {
                self.m
                    .sessions
                    .touched_elsewhere(t.session_ids, self.m.clock.now());
            }
            Some(peer_frame::Kind::Status(st)) => {
                if from == self.m.role.leader() {
                    self.m.schedule.set_leader_floor(st.log_floor);
                }
                // `/zookeeper/config` lists each member's ZooKeeper port,
                // learned from here: a new one changes that node, and its
                // watchers (Curator's EnsembleTracker) must hear of it.
                let now = self.m.clock.now();
                if self.m.peers.status_came(frame.from, st, now) {
                    let zxid = self.m.tree.applied_index();
                    self.m.clients.config_changed(zxid);
                }
            }
            // Snapshot transfers have connections of their own (the
            // listener hands them to the receiver): not here.
            Some(peer_frame::Kind::SnapshotOffer(_))
            | Some(peer_frame::Kind::SnapshotChunk(_))
            | Some(peer_frame::Kind::SnapshotReply(_)) => {
                debug!(from, "a snapshot transfer frame on the peer link; dropped");
            }
            None => {}
        }
    }
}
