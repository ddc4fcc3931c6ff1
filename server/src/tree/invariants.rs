//! The tree's consistency rules, written as checks.
//!
//! [`DataTree::check_invariants`] is the full O(n) check that tests run
//! after every step and that `from_snapshot` asserts (in debug builds) on
//! what it loaded, having checked each node as it came;
//! `check_node` is the local part `apply` asserts (in debug builds) on the
//! nodes it touched. This file must never change the tree.

use warden_protocol::{path, DATA_BYTES_MAX};

use super::{DataTree, ROOT};

impl DataTree {
    /// Checks every rule the tree must hold; the error names the first
    /// broken one. O(n): meant for tests, not for the apply path.
    pub fn check_invariants(&self) -> Result<(), String> {
        let root = self.nodes.get(ROOT).ok_or("the root is missing")?;
        if root.ephemeral_owner != 0 || root.container || root.ttl_ms > 0 {
            return Err("the root is ephemeral, a container or has a TTL".into());
        }

        let mut child_links = 0usize;
        let mut ephemeral_count = 0usize;
        let mut container_count = 0usize;
        let mut ttl_count = 0usize;
        let mut data_bytes = 0u64;
        for (p, node) in &self.nodes {
            data_bytes += (p.len() + node.data.len()) as u64;
            self.check_node(p)?;
            let newest = node.czxid.max(node.mzxid).max(node.pzxid);
            if newest > self.applied_index {
                return Err(format!(
                    "{p}: zxid {newest} is after the applied index {}",
                    self.applied_index
                ));
            }
            for name in &node.children {
                if !self.nodes.contains_key(path::join(p, name).as_str()) {
                    return Err(format!("{p}: child {name:?} does not exist"));
                }
            }
            child_links += node.children.len();
            ephemeral_count += usize::from(node.ephemeral_owner != 0);
            container_count += usize::from(node.container);
            ttl_count += usize::from(node.ttl_ms > 0);
        }
        // With "every non-root node is listed by its parent" (check_node),
        // this makes parent/child links a bijection: no node is listed
        // twice and no listing is stale.
        if child_links + 1 != self.nodes.len() {
            return Err(format!(
                "{} child links for {} non-root nodes",
                child_links,
                self.nodes.len() - 1
            ));
        }

        let mut indexed_ephemerals = 0usize;
        for (owner, paths) in &self.ephemerals {
            if paths.is_empty() {
                return Err(format!("session {owner:#x} has an empty ephemeral entry"));
            }
            for p in paths {
                match self.nodes.get(p.as_str()) {
                    Some(n) if n.ephemeral_owner == *owner => {}
                    _ => return Err(format!("{p}: indexed as an ephemeral of {owner:#x}")),
                }
            }
            indexed_ephemerals += paths.len();
        }
        if indexed_ephemerals != ephemeral_count {
            return Err(format!(
                "{indexed_ephemerals} indexed ephemerals, {ephemeral_count} ephemeral nodes"
            ));
        }
        for p in &self.containers {
            if !matches!(self.nodes.get(p.as_str()), Some(n) if n.container) {
                return Err(format!("{p}: indexed as a container"));
            }
        }
        if self.containers.len() != container_count {
            return Err("the container index does not match the nodes".into());
        }
        for p in &self.ttls {
            if !matches!(self.nodes.get(p.as_str()), Some(n) if n.ttl_ms > 0) {
                return Err(format!("{p}: indexed as a TTL node"));
            }
        }
        if self.ttls.len() != ttl_count {
            return Err("the TTL index does not match the nodes".into());
        }
        if data_bytes != self.data_bytes {
            return Err(format!(
                "{data_bytes} bytes of paths and data, {} counted",
                self.data_bytes
            ));
        }
        if self.sessions.contains_key(&0) {
            return Err("session id 0 is in the session table".into());
        }
        let mut quota_nodes = 0;
        for p in self.nodes.keys() {
            if let Some(target) = super::quota::limits_target(p) {
                quota_nodes += 1;
                if !self.quotas.contains(target) {
                    return Err(format!("{p}: a quota not in the quota index"));
                }
            }
        }
        if quota_nodes != self.quotas.len() {
            return Err("the quota index does not match the limits nodes".into());
        }
        Ok(())
    }

    /// The rules that concern one node and its link to its parent. Cheap
    /// (no walk over children), so `apply` can assert it on every node it
    /// touches in debug builds.
    pub(super) fn check_node(&self, p: &str) -> Result<(), String> {
        let node = self
            .nodes
            .get(p)
            .ok_or_else(|| format!("{p}: does not exist"))?;
        if path::validate(p).is_err() {
            return Err(format!("{p:?}: invalid path"));
        }
        if node.mzxid < node.czxid || node.pzxid < node.czxid {
            return Err(format!(
                "{p}: czxid {} after mzxid {} or pzxid {}",
                node.czxid, node.mzxid, node.pzxid
            ));
        }
        if node.data.len() > DATA_BYTES_MAX {
            return Err(format!("{p}: {} bytes of data", node.data.len()));
        }
        if node.data_null && !node.data.is_empty() {
            return Err(format!(
                "{p}: null data that holds {} bytes",
                node.data.len()
            ));
        }
        if node.acl.is_empty() {
            return Err(format!("{p}: empty ACL"));
        }
        if node.container && (node.ephemeral_owner != 0 || node.ttl_ms > 0) {
            return Err(format!("{p}: a container that is ephemeral or has a TTL"));
        }
        if self.containers.contains(p) != node.container {
            return Err(format!("{p}: container index disagrees"));
        }
        if self.ttls.contains(p) != (node.ttl_ms > 0) {
            return Err(format!("{p}: TTL index disagrees"));
        }
        if node.ephemeral_owner != 0 {
            if !node.children.is_empty() {
                return Err(format!("{p}: ephemeral with children"));
            }
            if !self.sessions.contains_key(&node.ephemeral_owner) {
                return Err(format!(
                    "{p}: owner session {:#x} does not exist",
                    node.ephemeral_owner
                ));
            }
            if !self
                .ephemerals
                .get(&node.ephemeral_owner)
                .is_some_and(|paths| paths.contains(p))
            {
                return Err(format!("{p}: missing from the ephemeral index"));
            }
        }
        if p != ROOT {
            let parent_path = path::parent(p);
            let parent = self
                .nodes
                .get(parent_path)
                .ok_or_else(|| format!("{p}: parent does not exist"))?;
            if !parent.children.contains(path::name(p)) {
                return Err(format!("{p}: not listed by its parent"));
            }
            if parent.ephemeral_owner != 0 {
                return Err(format!("{p}: child of an ephemeral node"));
            }
            // The parent's pzxid is the zxid of its latest child create or
            // delete, which is at least this child's create.
            if parent.pzxid < node.czxid {
                return Err(format!(
                    "{p}: created at {} after its parent's pzxid {}",
                    node.czxid, parent.pzxid
                ));
            }
        }
        Ok(())
    }

    /// Every node's stat by path, for tests that compare states over time.
    #[cfg(test)]
    pub(super) fn stats(&self) -> std::collections::BTreeMap<String, warden_protocol::pb::Stat> {
        self.nodes
            .iter()
            .map(|(p, n)| (p.to_string(), n.stat()))
            .collect()
    }
}
