//! ZooKeeper 3.8's quotas, in the replicated tree.
//!
//! A quota on path P is two ordinary znodes that clients write (zkCli's
//! `setquota`, `listquota`, `delquota`): `/zookeeper/quota{P}/zookeeper_limits`,
//! whose data is ZooKeeper's StatsTrack text (`count=N,bytes=M`, and the
//! hard limits `countHardLimit`/`byteHardLimit` after them), and
//! `/zookeeper/quota{P}/zookeeper_stats`, which the tree keeps: the number
//! of nodes in P's subtree (P included) and the bytes of their data.
//!
//! Everything is decided in [`DataTree::apply`], from the tree alone, so
//! every replica decides alike:
//!
//! - a create or set_data below P that would take the subtree past a hard
//!   limit fails with LimitExceeded (ZooKeeper's QuotaExceeded, -125) and
//!   changes nothing; Warden always enforces hard limits, as ZooKeeper
//!   does with `zookeeper.enforceQuota=true` (a per-server switch would
//!   let replicas decide differently);
//! - past a soft limit (`count`, `bytes`) the write goes through and the
//!   crossing is logged, once, when the figure first goes over it;
//! - the stats node's data is updated with each create, delete and
//!   set_data below P (without a version change, as in ZooKeeper), and
//!   computed afresh when the stats or limits node is created.
//!
//! Only the deepest quota above a node counts (zkCli refuses nested
//! quotas), nothing below `/zookeeper` is counted, and a quota on `/` is
//! ignored, as in ZooKeeper. The first quota node created below
//! `/zookeeper/quota` creates `/zookeeper` and `/zookeeper/quota` in the
//! tree (open ACL), which ZooKeeper has from the start; until then the
//! ZooKeeper door shows them (`crate::zk::reserved`).

use std::collections::BTreeMap;
use std::sync::Arc;

use warden_protocol::pb::{ErrorCode, EventType};
use warden_protocol::{path, perms};

use super::node::Node;
use super::txn::{Ctx, TreeError, Undo};
use super::DataTree;

/// Where the quota nodes live.
pub const QUOTA_ROOT: &str = "/zookeeper/quota";
const PROC_ROOT: &str = "/zookeeper";
/// The node holding a quota's limits.
pub const LIMITS: &str = "zookeeper_limits";
/// The node holding a quota's figures, kept by the tree.
pub const STATS: &str = "zookeeper_stats";

const COUNT: &str = "count";
const BYTES: &str = "bytes";
const COUNT_HARD: &str = "countHardLimit";
const BYTES_HARD: &str = "byteHardLimit";

/// ZooKeeper's StatsTrack: `key=value` pairs separated by `,` or `;`; an
/// absent key reads as -1 (no limit). Pairs that do not parse are left
/// out, so a hand-written limits node never stops the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsTrack {
    fields: BTreeMap<String, i64>,
}

impl StatsTrack {
    pub fn parse(data: &[u8]) -> Self {
        let text = String::from_utf8_lossy(data);
        let fields = text
            .split([',', ';'])
            .filter_map(|pair| {
                let mut kv = pair.split('=');
                let key = kv.next()?.trim();
                let value = kv.next().map(str::trim).unwrap_or_default();
                let value = if value.is_empty() {
                    -1
                } else {
                    value.parse().ok()?
                };
                (!key.is_empty()).then(|| (key.to_string(), value))
            })
            .collect();
        StatsTrack { fields }
    }

    pub fn get(&self, key: &str) -> i64 {
        self.fields.get(key).copied().unwrap_or(-1)
    }

    pub fn set(&mut self, key: &str, value: i64) {
        self.fields.insert(key.to_string(), value);
    }

    /// ZooKeeper's text: `count=N,bytes=M`, then, if there are other
    /// keys, a `=` and `;key=value` for each, sorted (the form older
    /// parsers skip).
    pub fn encode(&self) -> String {
        let mut out = format!("{COUNT}={},{BYTES}={}", self.get(COUNT), self.get(BYTES));
        let mut others = self
            .fields
            .iter()
            .filter(|(k, _)| *k != COUNT && *k != BYTES)
            .peekable();
        if others.peek().is_some() {
            out.push('=');
            for (k, v) in others {
                out.push_str(&format!(";{k}={v}"));
            }
        }
        out
    }
}

/// The quota'd path a limits node at `node_path` stands for, if it is one.
pub(super) fn limits_target(node_path: &str) -> Option<&str> {
    let target = node_path
        .strip_prefix(QUOTA_ROOT)?
        .strip_suffix(LIMITS)?
        .strip_suffix('/')?;
    target.starts_with('/').then_some(target)
}

fn stats_path(target: &str) -> String {
    format!("{QUOTA_ROOT}{target}/{STATS}")
}

fn limits_path(target: &str) -> String {
    format!("{QUOTA_ROOT}{target}/{LIMITS}")
}

impl DataTree {
    /// The deepest quota'd path at or above `p`, if any (none for nodes
    /// below `/zookeeper`, nor for a quota on `/`).
    pub(super) fn quota_of(&self, p: &str) -> Option<String> {
        if self.quotas.is_empty() || p == PROC_ROOT || p.starts_with("/zookeeper/") {
            return None;
        }
        let mut candidate = p;
        while candidate != super::ROOT {
            if self.quotas.contains(candidate) {
                return Some(candidate.to_string());
            }
            candidate = path::parent(candidate);
        }
        None
    }

    /// Refuses (LimitExceeded at `p`) a write at `p` that adds `count`
    /// nodes and `bytes` bytes to its quota'd subtree past a hard limit;
    /// logs one that first crosses a soft limit. Changes nothing.
    pub(super) fn quota_check(&self, p: &str, count: i64, bytes: i64) -> Result<(), TreeError> {
        let Some(target) = self.quota_of(p) else {
            return Ok(());
        };
        let (Some(limits), Some(stats)) = (
            self.nodes.get(limits_path(&target).as_str()),
            self.nodes.get(stats_path(&target).as_str()),
        ) else {
            return Ok(());
        };
        let (limits, stats) = (
            StatsTrack::parse(&limits.data),
            StatsTrack::parse(&stats.data),
        );
        for (diff, figure, soft, hard) in [
            (count, COUNT, COUNT, COUNT_HARD),
            (bytes, BYTES, BYTES, BYTES_HARD),
        ] {
            if diff == 0 {
                continue;
            }
            let now = stats.get(figure);
            let after = now.saturating_add(diff);
            let hard = limits.get(hard);
            if hard > -1 && after > hard {
                return Err(TreeError::new(ErrorCode::LimitExceeded, p));
            }
            let soft = limits.get(soft);
            if soft > -1 && after > soft && now <= soft {
                tracing::warn!(
                    quota = %target,
                    path = %p.escape_debug(),
                    figure,
                    after,
                    soft_limit = soft,
                    "quota exceeded (soft limit: the write goes through)"
                );
            }
        }
        Ok(())
    }

    /// After a create (`count` 1), delete (-1) or set_data (0) at `p`
    /// changed its quota'd subtree by `bytes`: the stats node follows. A
    /// stats or limits node just created computes its quota afresh.
    pub(super) fn quota_account(&mut self, ctx: &mut Ctx, p: &str, count: i64, bytes: i64) {
        if count > 0 {
            if let Some(target) = p
                .strip_suffix(STATS)
                .and_then(|rest| rest.strip_suffix('/'))
                .and_then(|quota_node| quota_node.strip_prefix(QUOTA_ROOT))
                .or_else(|| limits_target(p))
                .filter(|t| t.starts_with('/'))
            {
                let target = target.to_string();
                let (nodes, data_bytes) = self.subtree_figures(&target);
                self.update_stats(ctx, &target, |s| {
                    s.set(COUNT, nodes);
                    s.set(BYTES, data_bytes);
                });
                return;
            }
        }
        if let Some(target) = self.quota_of(p) {
            self.update_stats(ctx, &target, |s| {
                s.set(COUNT, s.get(COUNT).saturating_add(count));
                s.set(BYTES, s.get(BYTES).saturating_add(bytes));
            });
        }
    }

    /// Nodes in `target`'s subtree (itself included) and their data bytes.
    fn subtree_figures(&self, target: &str) -> (i64, i64) {
        let (mut count, mut bytes) = (0i64, 0i64);
        let mut stack = vec![target.to_string()];
        while let Some(p) = stack.pop() {
            let Some(node) = self.nodes.get(p.as_str()) else {
                continue;
            };
            count += 1;
            bytes += node.data.len() as i64;
            stack.extend(node.children.iter().map(|c| path::join(&p, c)));
        }
        (count, bytes)
    }

    /// Rewrites the stats node of `target` (if it exists) with `change`,
    /// undoably, without touching its version or mzxid.
    fn update_stats(&mut self, ctx: &mut Ctx, target: &str, change: impl FnOnce(&mut StatsTrack)) {
        let p = stats_path(target);
        let Some(node) = self.node_mut(&p) else {
            return;
        };
        let mut stats = StatsTrack::parse(&node.data);
        change(&mut stats);
        let data = stats.encode().into_bytes();
        let (old_len, new_len) = (node.data.len() as u64, data.len() as u64);
        ctx.undo.push(Undo::Data {
            path: p.clone(),
            data: std::mem::replace(&mut node.data, data),
            data_null: std::mem::replace(&mut node.data_null, false),
            version: node.version,
            mzxid: node.mzxid,
            mtime_ms: node.mtime_ms,
            ttl_ms: node.ttl_ms,
        });
        self.data_bytes = self.data_bytes + new_len - old_len;
    }

    /// Before a create at `requested`: the first node below
    /// `/zookeeper/quota` brings `/zookeeper` and `/zookeeper/quota` into
    /// the tree (open ACL), undoably. Not under a `/zookeeper` made
    /// otherwise (natively) that is ephemeral or refuses the requester
    /// CREATE: the create then fails as it would (NoNode), having
    /// changed nothing.
    pub(super) fn quota_root_for(&mut self, ctx: &mut Ctx, requested: &str) {
        if path::parent(requested) != QUOTA_ROOT || self.nodes.contains_key(QUOTA_ROOT) {
            return;
        }
        if let Some(proc_node) = self.nodes.get(PROC_ROOT) {
            let refused = ctx
                .authorize(&proc_node.acl, perms::CREATE, QUOTA_ROOT)
                .is_err();
            if proc_node.ephemeral_owner != 0 || refused {
                return;
            }
        }
        for p in [PROC_ROOT, QUOTA_ROOT] {
            if self.nodes.contains_key(p) {
                continue;
            }
            let parent = path::parent(p);
            self.bump_child_counters(ctx, parent);
            let node = Node {
                data: Vec::new(),
                acl: self.acls.intern(&warden_protocol::open_acl()),
                czxid: ctx.zxid,
                mzxid: ctx.zxid,
                pzxid: ctx.zxid,
                ctime_ms: ctx.time_ms,
                mtime_ms: ctx.time_ms,
                version: 0,
                cversion: 0,
                aversion: 0,
                ephemeral_owner: 0,
                container: false,
                ttl_ms: 0,
                children: Default::default(),
                data_null: false,
            };
            self.insert_node(p.into(), Arc::new(node));
            ctx.undo.push(Undo::Inserted {
                path: p.to_string(),
            });
            ctx.trigger(p, EventType::NodeCreated);
            ctx.trigger(parent, EventType::NodeChildrenChanged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_track_reads_and_writes_zookeepers_text() {
        let s = StatsTrack::parse(b"count=4,bytes=5=;countHardLimit=10;byteHardLimit=-1");
        assert_eq!(
            (
                s.get(COUNT),
                s.get(BYTES),
                s.get(COUNT_HARD),
                s.get(BYTES_HARD)
            ),
            (4, 5, 10, -1)
        );
        assert_eq!(
            s.encode(),
            "count=4,bytes=5=;byteHardLimit=-1;countHardLimit=10"
        );
        let plain = StatsTrack::parse(b"count=-1,bytes=100");
        assert_eq!(plain.encode(), "count=-1,bytes=100");
        assert_eq!(plain.get(COUNT_HARD), -1);
        // Garbage is left out, never a failure.
        let odd = StatsTrack::parse(b"count=x,,bytes=,=3,junk");
        assert_eq!((odd.get(COUNT), odd.get(BYTES)), (-1, -1));
        assert_eq!(StatsTrack::parse(b"").encode(), "count=-1,bytes=-1");
    }

    #[test]
    fn limits_nodes_name_their_target() {
        assert_eq!(
            limits_target("/zookeeper/quota/a/b/zookeeper_limits"),
            Some("/a/b")
        );
        assert_eq!(limits_target("/zookeeper/quota/zookeeper_limits"), None);
        assert_eq!(limits_target("/zookeeper/quota/a/zookeeper_stats"), None);
        assert_eq!(limits_target("/a/zookeeper_limits"), None);
    }
}
