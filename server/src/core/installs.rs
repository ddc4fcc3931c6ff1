//! Snapshots streamed to this server by a leader (the follower's side of
//! [`crate::raft::snapstream`]): which offer is taken, and the tree built
//! off the core that waits for raft to install it.
//!
//! The receiver asks first ([`Installs::offered`]): a snapshot from a
//! member, newer than what this server applied, is taken, and replaces
//! one being received (one receipt at a time). Once the file is checked
//! and its tree built, the receiver hands both over
//! ([`Installs::received`]); the core steps the MsgSnapshot into raft,
//! and if raft installs it the restore takes the tree ([`Installs::take`]).
//! After the Ready loop, [`Installs::settle`] tells the receiver whether it
//! was installed or not needed (raft ignored it: this server caught up
//! meanwhile, or the message's term is over).

use std::path::PathBuf;
use std::time::Duration;

use raft::eraftpb::Message;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::raft::snapfile::SnapDir;
use crate::raft::snapstream::{Accepted, Offered, Outcome, Received};
use crate::tree::DataTree;

/// A received snapshot's tree, built, waiting for raft's Ready.
pub(super) struct Prebuilt {
    pub index: u64,
    pub term: u64,
    pub tree: DataTree,
    /// The received file, durable under a temporary name.
    pub path: PathBuf,
    /// Receiving, checking and building it took this long, off the core.
    pub took: Duration,
}

pub(super) struct Installs {
    dir: SnapDir,
    /// Receipts started by this process (names their temporary files).
    seq: u64,
    /// The receipt under way: sender, index, and what cancels it.
    receiving: Option<(u64, u64, CancellationToken)>,
    prebuilt: Option<Prebuilt>,
    reply: Option<oneshot::Sender<Outcome>>,
}

impl Installs {
    pub fn new(dir: SnapDir) -> Self {
        Self {
            dir,
            seq: 0,
            receiving: None,
            prebuilt: None,
            reply: None,
        }
    }

    /// This server's snapshot directory.
    pub fn dir(&self) -> &SnapDir {
        &self.dir
    }

    /// A leader offers the snapshot at `index`: taken if `member` sent it
    /// and this server has applied less; a newer offer cancels the receipt
    /// under way.
    pub fn offered(&mut self, o: Offered, member: bool, applied: u64) {
        let answer = if !member {
            Err(Outcome::Refused(format!("node {} is not a member", o.from)))
        } else if o.index <= applied {
            Err(Outcome::NotNeeded)
        } else {
            if let Some((_, _, cancel)) = self.receiving.take() {
                cancel.cancel();
            }
            self.seq += 1;
            let cancel = CancellationToken::new();
            self.receiving = Some((o.from, o.index, cancel.clone()));
            Ok(Accepted {
                path: self.dir.receive_path(o.index, o.term, self.seq),
                cancel,
            })
        };
        debug!(
            from = o.from,
            index = o.index,
            applied,
            taken = answer.is_ok(),
            "snapshot offered"
        );
        let _ = o.reply.send(answer);
    }

    /// A snapshot received and built: the MsgSnapshot to step into raft,
    /// its tree kept for the restore; `None` (answered) if it is no longer
    /// wanted.
    pub fn received(
        &mut self,
        r: Received,
        member: bool,
        applied: u64,
        me: u64,
    ) -> Option<Message> {
        let meta = r.msg.get_snapshot().get_metadata();
        let (index, term) = (meta.index, meta.term);
        if matches!(&self.receiving, Some((from, i, _)) if *from == r.from && *i == index) {
            self.receiving = None;
        }
        let unwanted = if !member {
            Some(Outcome::Refused(format!("node {} is not a member", r.from)))
        } else if r.msg.to != me {
            Some(Outcome::Refused(format!(
                "the snapshot is addressed to node {}",
                r.msg.to
            )))
        } else if index <= applied {
            Some(Outcome::NotNeeded)
        } else {
            None
        };
        if let Some(outcome) = unwanted {
            let _ = r.reply.send(outcome);
            drop_off_core(r.tree);
            return None;
        }
        // One not settled yet (two in one batch of peer events): the older
        // one is not needed.
        self.settle();
        self.prebuilt = Some(Prebuilt {
            index,
            term,
            tree: r.tree,
            path: r.path,
            took: r.took,
        });
        self.reply = Some(r.reply);
        Some(r.msg)
    }

    /// The prebuilt tree of the snapshot at `index`/`term`, for the restore.
    pub fn take(&mut self, index: u64, term: u64) -> Option<Prebuilt> {
        match &self.prebuilt {
            Some(p) if p.index == index && p.term == term => self.prebuilt.take(),
            _ => None,
        }
    }

    /// After the Ready loop: the receiver hears whether raft installed the
    /// snapshot (the restore took its tree) or ignored it.
    pub fn settle(&mut self) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        match self.prebuilt.take() {
            None => {
                let _ = reply.send(Outcome::Installed);
            }
            Some(p) => {
                debug!(
                    index = p.index,
                    "received snapshot not needed by raft; dropped"
                );
                drop_off_core(p.tree);
                let _ = reply.send(Outcome::NotNeeded);
            }
        }
    }
}

/// Freeing a million nodes takes a while: not on the core.
pub(super) fn drop_off_core(tree: DataTree) {
    let _ = std::thread::Builder::new()
        .name("old-tree".into())
        .spawn(move || {
            drop(tree);
            super::snapshots::release_freed_memory();
        });
}
