//! What the core subject checks of a run: every replica's state equal at
//! an equal applied index (during the run), and at its end the registers'
//! histories through the jepsen suite's linearizability checker and every
//! expired TTL node removed. (The pipelined writer's exactly-once check
//! lives with its model, in `queue.rs`.)

use std::collections::BTreeMap;

use warden_jepsen::linearizable::{self, Verdict};

use super::{clients, World, LINEARIZABLE, REPLICAS_EQUAL, TTL_REMOVED};
use crate::invariants::Violation;
use crate::time::SimTime;

/// A digest that is the same in every run (std's SipHash with its fixed
/// keys: no per-process seed).
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// Replica states are compared at applied indices that are multiples of
/// this (encoding a state costs as much as a snapshot: not at every
/// turn), and at the end of the run.
pub(super) const STATE_CHECK_EVERY: u64 = 8;

impl World {
    /// Every replica's state at `applied` must be the same.
    pub(super) fn replica_state(&mut self, node: u64, applied: u64) -> Result<(), Violation> {
        let Some(core) = self.host(node).core.as_ref() else {
            return Ok(());
        };
        let d = digest(&core.encoded_state());
        match self.states.get(&applied) {
            Some(&(seen, by)) if seen != d => {
                self.note(node, format!("state at {applied} differs from n{by}'s"));
                Err(Violation {
                    invariant: REPLICAS_EQUAL,
                    detail: format!(
                        "n{node} and n{by} applied up to {applied} and hold different states"
                    ),
                })
            }
            Some(_) => Ok(()),
            None => {
                self.states.insert(applied, (d, node));
                Ok(())
            }
        }
    }

    /// At the end: no TTL node is left in the most advanced replica's
    /// tree (every one was created before the calm began, with a TTL far
    /// shorter than the calm, and nobody wrote it again).
    pub(super) fn check_ttl(&mut self) -> Result<(), Violation> {
        let best = self
            .hosts
            .iter()
            .filter_map(|h| h.core.as_ref().map(|c| (c.applied_index(), h.id)))
            .max();
        let Some((applied, node)) = best else {
            return Ok(());
        };
        let state = self.host(node).core.as_ref().expect("up").encoded_state();
        let snapshot = <warden_server::proto::Snapshot as prost::Message>::decode(&state[..])
            .map_err(|e| Violation {
                invariant: TTL_REMOVED,
                detail: format!("n{node}'s state does not decode: {e}"),
            })?;
        let left: Vec<&str> = snapshot
            .nodes
            .iter()
            .map(|n| n.path.as_str())
            .filter(|p| p.starts_with(clients::TTL_PREFIX))
            .collect();
        if left.is_empty() {
            self.note(0, format!("TTL nodes: none left on n{node} at {applied}"));
            return Ok(());
        }
        self.note(node, format!("TTL nodes left at {applied}: {left:?}"));
        Err(Violation {
            invariant: TTL_REMOVED,
            detail: format!(
                "{} TTL node(s) expired before the calm end and still in n{node}'s tree at {applied}: {}",
                left.len(),
                left.iter().take(5).copied().collect::<Vec<_>>().join(", ")
            ),
        })
    }

    /// The linearizability checker over every register's history.
    pub(super) fn check_histories(&mut self) -> Result<(), Violation> {
        // What is still unanswered at the end may yet take effect.
        for c in 0..self.clients.len() {
            if let Some(text) = self.clients[c].given_up() {
                let client = self.clients[c].id;
                self.note(0, format!("c{client} {text} at the end"));
            }
        }
        let mut by_key: BTreeMap<usize, Vec<linearizable::Operation>> = BTreeMap::new();
        for c in &self.clients {
            for (key, ops) in &c.history {
                by_key.entry(*key).or_default().extend(ops.iter().cloned());
            }
        }
        for (key, mut ops) in by_key {
            ops.sort_by_key(|o| (o.invoke, o.process));
            let path = clients::key_path(key);
            match linearizable::check(&ops, None) {
                Verdict::Linearizable => {
                    self.note(0, format!("{path}: {} operations, linearizable", ops.len()))
                }
                Verdict::Unknown { explored } => self.note(
                    0,
                    format!("{path}: {} operations, the checker gave up after {explored} configurations", ops.len()),
                ),
                Verdict::NotLinearizable { stuck } => {
                    let shown: Vec<String> = stuck
                        .iter()
                        .take(5)
                        .map(|o| {
                            format!(
                                "c{} {:?} {}..{}",
                                o.process,
                                o.op,
                                SimTime(o.invoke).ms(),
                                o.complete.map_or("?".into(), |t| SimTime(t).ms())
                            )
                        })
                        .collect();
                    self.note(0, format!("{path}: NOT linearizable; stuck at {shown:?}"));
                    return Err(Violation {
                        invariant: LINEARIZABLE,
                        detail: format!(
                            "{path}: {} operations have no linearization; the first it could not place: {}",
                            ops.len(),
                            shown.join("; ")
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
