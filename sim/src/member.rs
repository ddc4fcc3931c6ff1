//! One simulated server: the real `RaftNode` over the real `DiskStorage`
//! on its simulated disk, its clock, and what its process holds in memory
//! (the applied entries, the proposals it waits on). A crash drops the
//! process and keeps the disk; a restart opens the node again over it.
//!
//! [`Outbox`] is the node's [`ReadyHandler`]: it collects what a Ready
//! hands out (messages, applied entries, role changes) for the world to
//! route, apply and check once the Ready is done.

use std::collections::BTreeMap;

use raft::eraftpb::{ConfChange, ConfState, Entry, Message, Snapshot};
use raft::{ReadState, SoftState, StateRole};
use warden_server::raft::node::RaftTiming;
use warden_server::raft::{RaftNode, ReadyHandler, Undelivered};

use crate::clock::NodeClock;
use crate::disk::SimDisk;
use crate::invariants::Applied;
use crate::time::SimTime;
use crate::world::BadModes;

pub struct Member {
    pub id: u64,
    pub disk: SimDisk,
    /// The running process; `None` while crashed.
    pub raft: Option<RaftNode>,
    /// Bumped by every crash and restart: events meant for an earlier
    /// process (its ticks, its Ready) are ignored.
    pub incarnation: u64,
    pub clock: NodeClock,
    /// The local time of the next tick, and the generation of the tick
    /// event that waits for it (a clock jump schedules a new one).
    pub next_tick_local: i64,
    pub tick_gen: u64,
    /// A Ready is scheduled (steps in between batch into it).
    pub drive_pending: bool,
    /// A stalled process handles nothing before this.
    pub paused_until: SimTime,
    /// In memory: what this process applied, in order.
    pub applied: Vec<Applied>,
    /// In memory: writes proposed here and not yet applied, by value: the
    /// client and its attempt.
    pub pending: BTreeMap<Vec<u8>, (u64, u64)>,
    /// What raft last said of the role and the leader.
    pub role: StateRole,
    pub leader: u64,
    /// Starts refused in a row.
    pub failed_starts: u32,
}

impl Member {
    pub fn new(id: u64, disk: SimDisk, clock: NodeClock) -> Self {
        Self {
            id,
            disk,
            raft: None,
            incarnation: 0,
            clock,
            next_tick_local: 0,
            tick_gen: 0,
            drive_pending: false,
            paused_until: SimTime::default(),
            applied: Vec::new(),
            pending: BTreeMap::new(),
            role: StateRole::Follower,
            leader: 0,
            failed_starts: 0,
        }
    }

    pub fn is_up(&self) -> bool {
        self.raft.is_some()
    }

    /// Starts the process over the disk: the real node, bootstrapped with
    /// `voters` on its first start, its election jitter from `jitter_seed`.
    /// Applied is 0: the state machine is in memory, and raft replays the
    /// committed log into it.
    pub fn start(
        &mut self,
        voters: &[u64],
        timing: &RaftTiming,
        bad: &BadModes,
        jitter_seed: u64,
    ) -> Result<(), String> {
        let storage = self.disk.open(bad).map_err(|e| e.to_string())?;
        let mut node = RaftNode::open(self.id, voters.to_vec(), false, storage, timing, 0)
            .map_err(|e| e.to_string())?;
        node.set_election_jitter_seed(jitter_seed);
        self.raft = Some(node);
        self.incarnation += 1;
        self.drive_pending = false;
        self.role = StateRole::Follower;
        self.leader = 0;
        Ok(())
    }

    /// The process dies: memory is gone; with `power_loss`, the disk loses
    /// what it never made durable (what it kept is returned, to trace).
    pub fn crash(&mut self, power_loss: bool) -> Option<String> {
        self.raft = None;
        self.incarnation += 1;
        self.drive_pending = false;
        self.applied.clear();
        self.pending.clear();
        self.role = StateRole::Follower;
        self.leader = 0;
        self.disk.crash(power_loss)
    }

    pub fn applied_index(&self) -> u64 {
        self.applied.last().map_or(0, |a| a.index)
    }
}

/// What one Ready handed out.
#[derive(Default)]
pub struct Outbox {
    pub messages: Vec<Message>,
    pub applied: Vec<Applied>,
    pub roles: Vec<(StateRole, u64)>,
    pub notes: Vec<String>,
}

impl ReadyHandler for Outbox {
    fn send(&mut self, msgs: Vec<Message>) -> Vec<Undelivered> {
        // Everything enters the network; what it loses, it loses in flight.
        self.messages.extend(msgs);
        Vec::new()
    }

    fn apply(&mut self, entry: &Entry) -> Result<(), String> {
        self.applied.push(Applied {
            index: entry.index,
            term: entry.term,
            data: entry.data.to_vec(),
        });
        Ok(())
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<Option<std::path::PathBuf>, String> {
        // No node compacts its log yet, so no leader sends a snapshot.
        Err(format!(
            "a snapshot at index {} reached a simulated node, which takes none yet",
            snapshot.get_metadata().index
        ))
    }

    fn read_states(&mut self, states: Vec<ReadState>) {
        self.notes
            .push(format!("{} read index answers", states.len()));
    }

    fn role_changed(&mut self, ss: &SoftState) {
        self.roles.push((ss.raft_state, ss.leader_id));
    }

    fn conf_changed(&mut self, index: u64, change: &ConfChange, conf: &ConfState) {
        self.notes.push(format!(
            "conf change at {index}: {:?} n{} -> voters {:?}",
            change.get_change_type(),
            change.node_id,
            conf.voters
        ));
    }
}

/// A message in a trace line.
pub fn describe(m: &Message) -> String {
    let kind = format!("{:?}", m.get_msg_type());
    let kind = kind.strip_prefix("Msg").unwrap_or(&kind);
    let mut s = format!("{kind} t{}", m.term);
    if m.index > 0 || m.log_term > 0 {
        s.push_str(&format!(" i{}/t{}", m.index, m.log_term));
    }
    if !m.entries.is_empty() {
        let first = m.entries[0].index;
        let last = m.entries[m.entries.len() - 1].index;
        s.push_str(&format!(" e{first}..{last}"));
    }
    if m.commit > 0 {
        s.push_str(&format!(" c{}", m.commit));
    }
    if m.reject {
        s.push_str(&format!(" reject(hint {})", m.reject_hint));
    }
    s
}
