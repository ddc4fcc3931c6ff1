//! The Raft node: one `raft::RawNode` over [`DiskStorage`], driven by the
//! core task that owns it.
//!
//! [`RaftNode::on_ready`] is the Ready loop, written out in the order
//! raft-rs documents, with the reason for each step. Everything that is not
//! raft's business (applying entries to the tree, sending messages to peers,
//! answering reads) is handed to a [`ReadyHandler`].

use std::time::Duration;

use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, MessageType, Snapshot,
};
use raft::{RawNode, ReadState, SnapshotStatus, SoftState, StateRole};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::logger::raft_logger;
use super::storage::{DiskStorage, StorageError};

/// Largest append message: the entries raft reads from the log, decodes
/// and re-encodes in one go for one peer. Small enough that probing a
/// lagging follower (raft resends a probe on every heartbeat answer) or
/// filling its window costs the core little, even in a debug build; large
/// enough to batch a busy leader's entries. A single entry larger than
/// this still goes, alone.
pub const APPEND_BYTES_MAX: u64 = 64 * 1024;
/// Append messages in flight to one peer. With [`APPEND_BYTES_MAX`] this
/// bounds what one step of the core may read for one peer (raft fills the
/// whole window at once when a follower is caught up to replication) and
/// what a leader holds in flight per peer: 1 MiB.
pub const APPENDS_INFLIGHT_MAX: usize = 16;

/// What the node hands back to its owner while handling a Ready.
pub trait ReadyHandler {
    /// Messages for peers. Must not block. Returns the appends and
    /// snapshots that could not even be queued (peer unknown, its queue
    /// full), so that raft stops pipelining to that peer and probes again.
    fn send(&mut self, msgs: Vec<Message>) -> Vec<Undelivered>;
    /// A committed normal entry, in log order. Entries with empty data
    /// (a new leader's first entry) are passed too, so the handler can
    /// advance its applied index. An error (the entry cannot be read)
    /// stops the node: applying past it would diverge silently.
    fn apply(&mut self, entry: &Entry) -> Result<(), String>;
    /// A snapshot from the leader is to replace the state machine. An error
    /// (it cannot be read) stops the node before anything is stored.
    /// Returns the snapshot's file when it was streamed (received, checked
    /// and durable under a temporary name: the storage renames it into
    /// place); `None` for an old-style snapshot carrying the tree as data,
    /// which the storage writes.
    fn restore(&mut self, snapshot: &Snapshot) -> Result<Option<std::path::PathBuf>, String>;
    /// ReadIndex answers: serve each read once `applied >= index`.
    fn read_states(&mut self, states: Vec<ReadState>);
    /// This node's role or the known leader changed.
    fn role_changed(&mut self, soft_state: &SoftState);
    /// A committed conf change was applied at `index` (the group is now
    /// `conf`). `context` is what the proposer attached.
    fn conf_changed(&mut self, index: u64, change: &ConfChange, conf: &ConfState);
}

/// An append or snapshot the handler dropped before it left this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undelivered {
    pub to: u64,
    pub snapshot: bool,
}

impl Undelivered {
    /// `Some` for the messages raft must hear were dropped.
    pub fn of(msg: &Message) -> Option<Self> {
        match msg.get_msg_type() {
            MessageType::MsgAppend => Some(Self {
                to: msg.to,
                snapshot: false,
            }),
            MessageType::MsgSnapshot => Some(Self {
                to: msg.to,
                snapshot: true,
            }),
            _ => None,
        }
    }
}

pub struct RaftTiming {
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
}

pub struct RaftNode {
    raw: RawNode<DiskStorage>,
    /// Where the randomized election timeout comes from when it must follow
    /// from a seed (the simulator); `None`: raft-rs's own `thread_rng`.
    jitter: Option<StdRng>,
    /// The range raft-rs draws the randomized election timeout from, in
    /// ticks: `[min, max)`, from the config it was opened with.
    election_ticks: (usize, usize),
    io: IoCounters,
    /// Histograms for `/metrics`, when someone exports them.
    io_histograms: Option<(
        prometheus_client::metrics::histogram::Histogram,
        prometheus_client::metrics::histogram::Histogram,
    )>,
}

/// Running totals of the Ready loop's disk work, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct IoCounters {
    /// fsyncs issued (one per Ready that wrote anything).
    pub fsyncs: u64,
    /// Time spent in them.
    pub fsync_time: Duration,
    /// Ready batches that appended entries, and the entries they appended
    /// (their ratio is the group-commit batch size).
    pub append_batches: u64,
    pub appended_entries: u64,
}

impl RaftNode {
    /// Starts the node. A brand-new storage is bootstrapped with `voters`,
    /// unless `join`: a node joining an existing group starts empty and
    /// learns the group from the leader's snapshot. `applied` is the index
    /// the state machine already holds (its snapshot).
    pub fn open(
        id: u64,
        voters: Vec<u64>,
        join: bool,
        mut storage: DiskStorage,
        timing: &RaftTiming,
        applied: u64,
    ) -> Result<Self, NodeError> {
        if !storage.is_initialized() && !join {
            storage.bootstrap(voters.clone())?;
        }
        let config = raft::Config {
            id,
            election_tick: timing.election_ticks,
            heartbeat_tick: timing.heartbeat_ticks,
            applied,
            max_size_per_msg: APPEND_BYTES_MAX,
            max_inflight_msgs: APPENDS_INFLIGHT_MAX,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        config.validate()?;
        let mut raw = RawNode::new(&config, storage, &raft_logger())?;
        let election_ticks = (config.min_election_tick(), config.max_election_tick());
        // A group of one need not wait an election timeout to lead itself.
        if voters == [id] && raw.raft.prs().conf().voters().ids().len() == 1 {
            raw.campaign()?;
        }
        Ok(Self {
            raw,
            election_ticks,
            jitter: None,
            io: IoCounters::default(),
            io_histograms: None,
        })
    }

    pub fn id(&self) -> u64 {
        self.raw.raft.id
    }

    /// From now on, draws the randomized election timeout from a generator
    /// seeded with `seed` instead of raft-rs's `thread_rng`, so that a
    /// node's whole history follows from its inputs (the simulator). The
    /// real server leaves it unset: its jitter stays OS-seeded.
    ///
    /// raft-rs 0.7 has no hook for its generator: it draws in `reset` (on
    /// becoming follower, candidate or leader; not pre-candidate), which
    /// almost every call into raft may reach. So after each such call, when a
    /// reset may have happened, the timeout is drawn again here, from the
    /// same range, and raft's own draw is overwritten. Every reset leaves
    /// `election_elapsed` at 0 (a tick increments it before it can reset),
    /// so "0 after the call" covers them all; it also catches the calls
    /// that only zero the counter (a leader's message to a follower, a
    /// leader's quorum check), where raft would keep its old timeout:
    /// drawing again there leaves the timeout just as uniform over the
    /// same range, and what it is depends only on the seed and the calls.
    pub fn set_election_jitter_seed(&mut self, seed: u64) {
        self.jitter = Some(StdRng::seed_from_u64(seed));
        self.draw_election_timeout();
    }

    /// The election timeout raft currently waits for, in ticks.
    pub fn election_timeout_ticks(&self) -> usize {
        self.raw.raft.randomized_election_timeout()
    }

    /// After any call into raft: see [`Self::set_election_jitter_seed`].
    fn after_raft_call(&mut self) {
        if self.jitter.is_some() && self.raw.raft.election_elapsed == 0 {
            self.draw_election_timeout();
        }
    }

    fn draw_election_timeout(&mut self) {
        if let Some(rng) = &mut self.jitter {
            let (min, max) = self.election_ticks;
            let ticks = rng.random_range(min..max);
            self.raw.raft.set_randomized_election_timeout(ticks);
        }
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn leader_id(&self) -> u64 {
        self.raw.raft.leader_id
    }

    /// The leader's link to us broke (its process likely died): stop
    /// counting on its lease, so this follower grants votes at once, and
    /// with `campaign`, ask for them now rather than after an election
    /// timeout. With pre-vote this cannot depose a live leader that the
    /// rest of the group still hears.
    pub fn leader_lost(&mut self, campaign: bool) {
        if self.is_leader() {
            return;
        }
        let term = self.raw.raft.term;
        self.raw.raft.become_follower(term, raft::INVALID_ID);
        if campaign {
            let _ = self.raw.campaign();
        }
        self.after_raft_call();
    }

    pub fn tick(&mut self) -> bool {
        let ready = self.raw.tick();
        self.after_raft_call();
        ready
    }

    pub fn propose(&mut self, data: Vec<u8>) -> Result<(), raft::Error> {
        let result = self.raw.propose(vec![], data);
        self.after_raft_call();
        result
    }

    pub fn propose_conf_change(
        &mut self,
        context: Vec<u8>,
        change: ConfChange,
    ) -> Result<(), raft::Error> {
        let result = self.raw.propose_conf_change(context, change);
        self.after_raft_call();
        result
    }

    /// Voters and learners of the group, as last applied.
    pub fn conf_state(&self) -> ConfState {
        self.raw.raft.prs().conf().to_conf_state()
    }

    /// The commit index this node knows.
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    pub fn read_index(&mut self, ctx: Vec<u8>) {
        self.raw.read_index(ctx);
        self.after_raft_call();
    }

    pub fn step(&mut self, msg: Message) -> Result<(), raft::Error> {
        let result = self.raw.step(msg);
        self.after_raft_call();
        result
    }

    /// How a snapshot transfer to `to` ended: raft resumes replicating to
    /// it (`Finish`), or probes it again and sends another (`Failure`).
    pub fn report_snapshot(&mut self, to: u64, status: SnapshotStatus) {
        self.raw.report_snapshot(to, status);
        self.after_raft_call();
    }

    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
    }

    pub fn storage(&self) -> &DiskStorage {
        self.raw.store()
    }

    /// Makes everything written so far durable (at shutdown).
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.raw.mut_store().sync()
    }

    /// A snapshot of the state machine was written (see
    /// [`DiskStorage::snapshot_written`]); whether it became the latest.
    /// The log behind it stays until [`Self::compact_log`] drops it.
    pub fn snapshot_written(
        &mut self,
        meta: raft::eraftpb::SnapshotMetadata,
    ) -> Result<bool, StorageError> {
        self.raw.mut_store().snapshot_written(meta)
    }

    /// Drops the log up to `floor` (what every member has), never past the
    /// latest snapshot, and further while it is over `max_bytes`; the new
    /// first index if anything went.
    pub fn compact_log(&mut self, floor: u64, max_bytes: u64) -> Result<Option<u64>, StorageError> {
        self.raw.mut_store().compact_log(floor, max_bytes)
    }

    /// On the leader: the highest index every other member (voter or
    /// learner) that has any entry has in its log, so the log up to it
    /// may go. `None` on a
    /// follower, which does not know.
    pub fn matched_by_all(&self) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        let me = self.id();
        Some(
            self.raw
                .raft
                .prs()
                .iter()
                // A member with nothing (just added) is initialized from a
                // snapshot whatever the log holds: the log does not go
                // back to the group's bootstrap.
                .filter(|(id, pr)| **id != me && pr.matched > 0)
                .map(|(_, pr)| pr.matched)
                .min()
                .unwrap_or_else(|| self.raw.raft.raft_log.last_index()),
        )
    }

    /// Disk work done so far.
    /// Observes each fsync's duration and each appending batch's size.
    pub fn set_io_histograms(
        &mut self,
        fsync_seconds: prometheus_client::metrics::histogram::Histogram,
        append_batch_entries: prometheus_client::metrics::histogram::Histogram,
    ) {
        self.io_histograms = Some((fsync_seconds, append_batch_entries));
    }

    pub fn io_counters(&self) -> IoCounters {
        self.io
    }

    /// Handles one Ready, in raft-rs's documented order.
    pub fn on_ready(&mut self, handler: &mut impl ReadyHandler) -> Result<(), NodeError> {
        let handled = self.handle_ready(handler);
        // Applying a conf change and reporting unreachable peers call into
        // raft too.
        self.after_raft_call();
        handled
    }

    fn handle_ready(&mut self, handler: &mut impl ReadyHandler) -> Result<(), NodeError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        let mut undelivered = Vec::new();

        if let Some(ss) = ready.ss() {
            handler.role_changed(ss);
        }

        // 1. Messages that do not depend on our own persistence (a leader's
        //    appends to followers) go out first, so followers write in
        //    parallel with us.
        if !ready.messages().is_empty() {
            undelivered.extend(handler.send(ready.take_messages()));
        }

        // 2. A snapshot from the leader replaces the state machine before
        //    any entry after it is applied; read first, so that one that
        //    cannot be read stops us with the old state still on disk.
        if !ready.snapshot().is_empty() {
            let started = std::time::Instant::now();
            let snap = ready.snapshot().clone();
            let index = snap.get_metadata().index;
            let file = handler.restore(&snap).map_err(|e| {
                NodeError::Corrupt(format!("the leader's snapshot at index {index}: {e}"))
            })?;
            let restored = started.elapsed();
            match file {
                Some(tmp) => self
                    .raw
                    .mut_store()
                    .install_snapshot_file(snap.get_metadata(), &tmp)?,
                None => self.raw.mut_store().apply_snapshot(snap)?,
            }
            // The whole time the install held the core: the tree swapped
            // in (or decoded here, for an old-style snapshot), the file in
            // place, the log replaced and synced.
            tracing::info!(
                index,
                core_ms = started.elapsed().as_millis() as u64,
                storage_ms = (started.elapsed() - restored).as_millis() as u64,
                "leader snapshot installed"
            );
        }

        // 3. Committed entries were persisted in an earlier Ready: apply them.
        let committed = ready.take_committed_entries();
        self.apply_committed(committed, handler)?;

        // 4. New entries and the hard state go to disk, and one fsync covers
        //    them all (group commit) before anything that promises they are
        //    durable (votes, append acks) is sent. A Ready that only moved
        //    the commit index needs no fsync (raft-rs's `must_sync`): the
        //    commit index may be lost in a crash (raft learns it again), and
        //    it is written to the same journal after the entries it covers,
        //    so it never outlives them on disk.
        let store = self.raw.mut_store();
        if !ready.entries().is_empty() {
            store.append(ready.entries())?;
            self.io.append_batches += 1;
            self.io.appended_entries += ready.entries().len() as u64;
            if let Some((_, batch)) = &self.io_histograms {
                batch.observe(ready.entries().len() as f64);
            }
        }
        if let Some(hs) = ready.hs() {
            store.set_hard_state(hs.clone())?;
        }
        if ready.must_sync() {
            let started = std::time::Instant::now();
            store.sync()?;
            let took = started.elapsed();
            self.io.fsyncs += 1;
            self.io.fsync_time += took;
            if let Some((fsync, _)) = &self.io_histograms {
                fsync.observe(took.as_secs_f64());
            }
        }

        // 5. Messages that must wait for persistence.
        if !ready.persisted_messages().is_empty() {
            undelivered.extend(handler.send(ready.take_persisted_messages()));
        }

        // ReadIndex answers; the handler serves each when applied catches up.
        if !ready.read_states().is_empty() {
            handler.read_states(ready.take_read_states());
        }

        // 6. Advance: raft may now hand us newly committed entries (ours,
        //    just persisted) and messages.
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit)?;
        }
        if !light.messages().is_empty() {
            undelivered.extend(handler.send(light.take_messages()));
        }
        let committed = light.take_committed_entries();
        self.apply_committed(committed, handler)?;
        self.raw.advance_apply();

        // 7. Appends that never left: without this, raft would keep
        //    pipelining after a hole the follower must reject, and a
        //    dropped snapshot would leave the peer waiting for it for ever.
        //    Back to probing: one message per heartbeat answer.
        for u in undelivered {
            if u.snapshot {
                self.raw.report_snapshot(u.to, SnapshotStatus::Failure);
            } else {
                self.raw.report_unreachable(u.to);
            }
        }
        Ok(())
    }

    fn apply_committed(
        &mut self,
        entries: Vec<Entry>,
        handler: &mut impl ReadyHandler,
    ) -> Result<(), NodeError> {
        for entry in entries {
            match entry.get_entry_type() {
                EntryType::EntryNormal => handler
                    .apply(&entry)
                    .map_err(|e| NodeError::Corrupt(format!("log entry {}: {e}", entry.index)))?,
                EntryType::EntryConfChange => {
                    let cc = super::wire_guard::decode_conf_change(&entry.data)
                        .map_err(|e| NodeError::Corrupt(e.to_string()))?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_conf_state(cs.clone())?;
                    handler.conf_changed(entry.index, &cc, &cs);
                }
                EntryType::EntryConfChangeV2 => {
                    // We only propose simple (v1) changes; a v2 entry is
                    // applied to raft and otherwise only advances the index.
                    let cc = super::wire_guard::decode_conf_change_v2(&entry.data)
                        .map_err(|e| NodeError::Corrupt(e.to_string()))?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_conf_state(cs.clone())?;
                    let noop = ConfChange {
                        change_type: ConfChangeType::AddNode,
                        node_id: 0,
                        ..Default::default()
                    };
                    handler.conf_changed(entry.index, &noop, &cs);
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("corrupt log entry: {0}")]
    Corrupt(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lone_member_of_three(dir: &std::path::Path) -> RaftNode {
        let storage = DiskStorage::open(&dir.join("raft"), &dir.join("snap")).expect("storage");
        let timing = RaftTiming {
            election_ticks: 5,
            heartbeat_ticks: 1,
        };
        RaftNode::open(1, vec![1, 2, 3], false, storage, &timing, 0).expect("node")
    }

    /// The timeouts a node waits for over `ticks` ticks alone (it
    /// campaigns again at every timeout, each a fresh draw).
    fn timeouts(node: &mut RaftNode, ticks: usize) -> Vec<usize> {
        (0..ticks)
            .map(|_| {
                node.tick();
                node.election_timeout_ticks()
            })
            .collect()
    }

    #[test]
    fn a_seeded_election_timeout_follows_from_the_seed_in_rafts_range() {
        let (a, b, c) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let (mut x, mut y, mut z) = (
            lone_member_of_three(a.path()),
            lone_member_of_three(b.path()),
            lone_member_of_three(c.path()),
        );
        x.set_election_jitter_seed(7);
        y.set_election_jitter_seed(7);
        z.set_election_jitter_seed(8);
        let (tx, ty, tz) = (
            timeouts(&mut x, 300),
            timeouts(&mut y, 300),
            timeouts(&mut z, 300),
        );
        assert_eq!(tx, ty, "one seed, one sequence of timeouts");
        assert_ne!(tx, tz, "another seed, another sequence");
        assert!(tx.iter().all(|t| (5..10).contains(t)), "{tx:?}");
        let distinct: std::collections::BTreeSet<_> = tx.iter().collect();
        assert!(distinct.len() > 1, "drawn again: {distinct:?}");
    }
}
