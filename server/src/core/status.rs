//! What a server tells about itself and its group: its own status
//! (broadcast to peers every few ticks), the member view (`wardenctl
//! cluster status`, HTTP `/status`) and operator figures.

use std::time::Duration;

use raft::StateRole;
use warden_protocol::pb;

use super::{Core, ServerStats};
use crate::proto::{self, peer_frame, PeerFrame};

/// A peer whose status is older than this is reported unreachable.
const PEER_STATUS_FRESH: Duration = Duration::from_secs(3);

pub(super) fn role_name(role: StateRole) -> &'static str {
    match role {
        StateRole::Leader => "leader",
        StateRole::Follower => "follower",
        StateRole::Candidate | StateRole::PreCandidate => "candidate",
    }
}

impl Core {
    pub(super) fn own_status(&self) -> proto::NodeStatus {
        proto::NodeStatus {
            id: self.m.node_id,
            role: role_name(self.m.role.role()).to_string(),
            term: self.raft.term(),
            commit_index: self.raft.storage().hard_state().commit,
            applied_index: self.m.tree.applied_index(),
            client_addr: self.m.client_addr.clone(),
            peer_addr: self.m.cfg.peer_listen.to_string(),
            leader_id: self.m.role.leader(),
            log_floor: self.raft.matched_by_all().unwrap_or(0),
            zk_addr: self
                .m
                .cfg
                .zk_listen
                .map(|a| a.to_string())
                .unwrap_or_default(),
        }
    }

    pub(super) fn broadcast_status(&mut self) {
        let status = self.own_status();
        let peers = self.m.net.peer_ids();
        for id in peers {
            let frame = PeerFrame {
                from: self.m.node_id,
                kind: Some(peer_frame::Kind::Status(status.clone())),
            };
            self.m.net.send(id, frame);
        }
    }

    pub(super) fn stats(&self) -> ServerStats {
        let conf = self.raft.conf_state();
        ServerStats {
            status: self.own_status(),
            members: conf.voters.len() + conf.learners.len(),
            nodes: self.m.tree.node_count(),
            connections: self.m.clients.len(),
            watches: self.m.clients.watch_count(),
            ephemerals: self
                .m
                .tree
                .sessions()
                .map(|(id, _)| self.m.tree.ephemerals(id).len())
                .sum(),
            sessions: self.m.tree.sessions().count(),
            read_only: self.m.read_only.active(),
            read_only_sessions: self.m.read_only.sessions(),
            leader_changes: self.m.role.leader_changes(),
            proposals: self.m.proposals.proposed(),
            io: self.raft.io_counters(),
            last_snapshot_bytes: self.m.schedule.last_bytes(),
            zk_port: self.m.cfg.zk_listen.map(|a| a.port()).unwrap_or(0),
            zk_tls: self.m.cfg.tls.is_some(),
            data_dir: self.m.cfg.data_dir.clone(),
            max_client_cnxns: self.m.cfg.limits.connections_per_ip,
            tick_ms: self.m.cfg.tick.as_millis() as u64,
            min_session_timeout_ms: self.m.cfg.min_session_timeout_ms,
            max_session_timeout_ms: self.m.cfg.max_session_timeout_ms,
        }
    }

    /// Every member of the group as this server sees it.
    pub(super) fn cluster_status(&self) -> pb::ClusterStatusResponse {
        let conf = self.raft.conf_state();
        let me = self.own_status();
        let commit = self.raft.commit_index();
        let mut ids: Vec<(u64, bool)> = conf.voters.iter().map(|id| (*id, true)).collect();
        ids.extend(conf.learners.iter().map(|id| (*id, false)));
        ids.sort_unstable();
        let now = self.m.clock.now();
        let members = ids
            .into_iter()
            .map(|(id, voter)| {
                let learner_role = |role: &str| {
                    if voter {
                        role.to_string()
                    } else {
                        "learner".to_string()
                    }
                };
                if id == self.m.node_id {
                    return pb::MemberStatus {
                        id,
                        addr: me.peer_addr.clone(),
                        client_addr: me.client_addr.clone(),
                        role: learner_role(&me.role),
                        term: me.term,
                        commit_index: me.commit_index,
                        applied_index: me.applied_index,
                        lag: commit.saturating_sub(me.applied_index),
                        voter,
                        reachable: true,
                        zk_addr: me.zk_addr.clone(),
                    };
                }
                let addr = self.m.net.addr_of(id).unwrap_or_default().to_string();
                match self.m.peers.status(id) {
                    Some((st, at)) => pb::MemberStatus {
                        id,
                        addr,
                        client_addr: st.client_addr.clone(),
                        role: learner_role(&st.role),
                        term: st.term,
                        commit_index: st.commit_index,
                        applied_index: st.applied_index,
                        lag: commit.saturating_sub(st.applied_index),
                        voter,
                        reachable: now.duration_since(*at) < PEER_STATUS_FRESH,
                        zk_addr: st.zk_addr.clone(),
                    },
                    None => pb::MemberStatus {
                        id,
                        addr,
                        role: "unknown".to_string(),
                        voter,
                        reachable: false,
                        ..Default::default()
                    },
                }
            })
            .collect();
        pb::ClusterStatusResponse {
            server_id: self.m.node_id,
            leader_id: self.m.role.leader(),
            members,
        }
    }
}
