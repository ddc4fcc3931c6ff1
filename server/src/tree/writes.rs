//! Exactly-once client writes: the identity a write carries and the
//! record of its session that the tree judges it against.
//!
//! A write may reach the log more than once: its server proposes it again
//! after a leader change (before it learns that the old leader committed
//! the first copy), and a native client retries it with the same xid on
//! another connection. Every copy after the first must change nothing.
//! The identity is one of:
//!
//! - **a native xid**: chosen by the client, growing over the whole
//!   session (across connections), and reused by a retry. The session
//!   keeps the highest xid applied: a copy at or below it is a duplicate
//!   (answered from the latest [`RECENT_RESULTS_MAX`] answers) or a write
//!   that lost its place (refused); it is never applied.
//! - **an (epoch, sequence) pair**, made by the server for the ZooKeeper
//!   door, whose clients restart their xids on every connection. The epoch
//!   is the zxid at which the session was bound to its current connection
//!   (its create, or a [`BindSessionTxn`](crate::proto::BindSessionTxn)
//!   that a resume proposes); the sequence counts the connection's writes
//!   in arrival order. A write of an older epoch was left behind on a
//!   connection the session has left: refused. Within the epoch a sequence
//!   at or below the highest applied is never applied again, and its
//!   answer is kept while the server may still wait for it (above the
//!   acknowledged point the write carries), however many writes followed.
//!
//! Neither rule depends on how many answers are kept: a cache bound only
//! decides which duplicates get their original answer back.
//!
//! It must stay deterministic: ordered maps only, no clock.

use std::collections::{BTreeMap, VecDeque};

use super::node::{RECENT_RESULTS_MAX, SERVER_XID_BIT};
use super::outcome::Recorded;
use crate::limits::SESSION_ANSWERS_MAX;
use crate::proto::Txn;

/// A session's record of its writes (part of the replicated session).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionWrites {
    /// Native xids: the highest applied (0: none).
    pub applied_xid: u64,
    /// Native xids: what the latest writes did (xid, record), oldest
    /// first, at most [`RECENT_RESULTS_MAX`], for a client's retries.
    /// Server-made xids (`SERVER_XID_BIT`) are kept here too.
    pub recent: VecDeque<(u64, Recorded)>,
    /// The zxid at which the session was bound to its current connection.
    pub epoch: u64,
    /// The highest sequence applied in `epoch` (0: none).
    pub applied_seq: u64,
    /// What `epoch`'s writes not yet acknowledged by their server did,
    /// by sequence.
    pub answers: BTreeMap<u64, Recorded>,
}

/// What the tree makes of a client write before applying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Not seen before: apply it.
    New,
    /// Applied already: this is what it did.
    Duplicate(Recorded),
    /// Not applied, and never to be: a later write of the session applied
    /// first (`latest`: its xid or sequence). Also a copy of a write
    /// applied so long ago that its answer is no longer kept.
    Stale { latest: u64 },
    /// Not applied: the session was bound to another connection (at
    /// `epoch`) since this write was sent.
    Moved { epoch: u64 },
    /// Not applied: a client write of a session that has ended (or never
    /// was). Its record of what it applied went with it, so this could be
    /// a copy of a write it applied; whatever it is, a session that ended
    /// writes nothing more.
    Gone,
}

impl SessionWrites {
    /// A session bound at `epoch` (its create's zxid).
    pub fn new(epoch: u64) -> Self {
        Self {
            epoch,
            ..Self::default()
        }
    }

    /// Judges `txn`, a write of this session.
    pub(super) fn judge(&self, txn: &Txn) -> Verdict {
        if txn.seq != 0 {
            if txn.epoch != self.epoch {
                return Verdict::Moved { epoch: self.epoch };
            }
            if txn.seq > self.applied_seq {
                return Verdict::New;
            }
            return match self.answers.get(&txn.seq) {
                Some(answer) => Verdict::Duplicate(answer.clone()),
                None => Verdict::Stale {
                    latest: self.applied_seq,
                },
            };
        }
        if txn.xid == 0 {
            return Verdict::New;
        }
        if let Some((_, answer)) = self.recent.iter().find(|(x, _)| *x == txn.xid) {
            return Verdict::Duplicate(answer.clone());
        }
        if txn.xid & SERVER_XID_BIT == 0 && txn.xid <= self.applied_xid {
            return Verdict::Stale {
                latest: self.applied_xid,
            };
        }
        Verdict::New
    }

    /// `txn` (judged [`Verdict::New`]) applied and did `answer`.
    pub(super) fn applied(&mut self, txn: &Txn, answer: Recorded) {
        if txn.seq != 0 {
            // The server no longer waits for what it acknowledged.
            let kept = self.answers.split_off(&(txn.acked_seq.saturating_add(1)));
            self.answers = kept;
            self.applied_seq = txn.seq;
            self.answers.insert(txn.seq, answer);
            // A backstop, never reached by a server that acknowledges: an
            // answer dropped here is only an answer a snapshot-restored
            // server can no longer give (its client is told the outcome is
            // unknown); the write still never applies twice.
            while self.answers.len() > SESSION_ANSWERS_MAX {
                self.answers.pop_first();
            }
            return;
        }
        if txn.xid == 0 {
            return;
        }
        if txn.xid & SERVER_XID_BIT == 0 {
            self.applied_xid = self.applied_xid.max(txn.xid);
        }
        if self.recent.len() >= RECENT_RESULTS_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back((txn.xid, answer));
    }

    /// Bound to a new connection at `zxid`: a new epoch, whose sequence
    /// starts again from 1.
    pub(super) fn bind(&mut self, zxid: u64) {
        self.epoch = zxid;
        self.applied_seq = 0;
        self.answers.clear();
    }

    /// What a write already did, if it is kept.
    pub(super) fn answer_of(&self, txn: &Txn) -> Option<&Recorded> {
        if txn.seq != 0 {
            if txn.epoch != self.epoch {
                return None;
            }
            return self.answers.get(&txn.seq);
        }
        self.recent
            .iter()
            .find(|(x, _)| *x == txn.xid && txn.xid != 0)
            .map(|(_, a)| a)
    }

    /// The record restored from a snapshot (`applied_xid` 0 in one written
    /// before it was kept: the highest native xid among the answers).
    pub(super) fn restored(mut self) -> Self {
        if self.applied_xid == 0 {
            self.applied_xid = self
                .recent
                .iter()
                .map(|(x, _)| *x)
                .filter(|x| x & SERVER_XID_BIT == 0)
                .max()
                .unwrap_or(0);
        }
        let skip = self.recent.len().saturating_sub(RECENT_RESULTS_MAX);
        self.recent.drain(..skip);
        while self.answers.len() > SESSION_ANSWERS_MAX {
            self.answers.pop_first();
        }
        self
    }
}
