//! ZooKeeper's reconfig ([`pb::ReconfigRequest`]) as raft membership
//! changes.
//!
//! Warden's raft changes one member at a time (simple conf changes, no
//! joint consensus), so a reconfig is a list of changes proposed one after
//! the other, each once the one before has applied on this server
//! ([`super::proposals::Proposals::conf_change_applied`]): additions
//! first (the group grows before it shrinks), then promotions and
//! demotions, then removals. The whole list is worked out and checked
//! against the membership before the first change is proposed, so a bad
//! request changes nothing. A reconfig cut short by a leader change or a
//! lost quorum (answered OperationTimeout, like any write whose fate is
//! unknown) may have made some of its changes and not the others.
//!
//! Every change of the list must keep a quorum of voters heard from
//! lately: the rule of [`super::quorum`], the same as the native door's
//! (`force` skips it; the ZooKeeper door never sets it).
//!
//! Who may reconfig is [`crate::authority`]'s decision, made before the
//! request gets here (as ZooKeeper's: in effect the super user, whom
//! `/zookeeper/config`'s ACL alone lets change it). The answer is the
//! membership after the last change (the ZooKeeper door shows it as the
//! new `/zookeeper/config`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use prost::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType};
use tracing::{debug, info};
use warden_protocol::pb::{self, response::Result as Res, ErrorCode};

use super::clients::Slot;
use super::{frames, quorum, Core};
use crate::ops::Failure;
use crate::proto;
use crate::watch::ConnId;

/// One membership change of a reconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ConfChangeType,
    pub id: u64,
    /// The peer address of a server added (empty otherwise).
    pub addr: String,
}

/// The membership a reconfig is planned against.
#[derive(Debug, Clone, Default)]
pub struct Members {
    /// id -> (voter, peer address)
    pub members: BTreeMap<u64, (bool, String)>,
    /// Servers the planning server has heard from within `window`
    /// (itself included; servers not members yet too).
    pub heard: BTreeSet<u64>,
    pub window: Duration,
}

impl Members {
    pub fn of(status: &pb::ClusterStatusResponse, heard: BTreeSet<u64>, window: Duration) -> Self {
        Members {
            members: status
                .members
                .iter()
                .map(|m| (m.id, (m.voter, m.addr.clone())))
                .collect(),
            heard,
            window,
        }
    }
}

fn bad(why: String) -> Failure {
    Failure::new(ErrorCode::BadArguments, format!("reconfig: {why}"))
}

/// The changes that turn `now` into what `r` asks for, in the order they
/// are made; Err names what is wrong. `me` is the server planning it,
/// which cannot remove itself (it would never hear that its removal
/// applied, so could not answer).
pub fn plan(r: &pb::ReconfigRequest, now: &Members, me: u64) -> Result<Vec<Change>, Failure> {
    if r.whole && !r.leaving.is_empty() {
        return Err(bad("a whole new membership has no leaving list".into()));
    }
    let mut joining: BTreeMap<u64, &pb::AddMemberRequest> = BTreeMap::new();
    for j in &r.joining {
        crate::ops::cluster::check_add(j).map_err(|f| bad(f.message))?;
        if joining.insert(j.id, j).is_some() {
            return Err(bad(format!("server {} is named twice", j.id)));
        }
    }
    let leaving: BTreeSet<u64> = if r.whole {
        now.members
            .keys()
            .filter(|id| !joining.contains_key(id))
            .copied()
            .collect()
    } else {
        r.leaving.iter().copied().collect()
    };
    for id in &leaving {
        if !now.members.contains_key(id) {
            return Err(bad(format!("server {id} is not a member")));
        }
        if joining.contains_key(id) {
            return Err(bad(format!("server {id} both joins and leaves")));
        }
        if *id == me {
            return Err(bad(format!(
                "server {id} answers this request and cannot remove itself: \
                 send the reconfig to another member"
            )));
        }
    }
    let (mut added, mut promoted, mut demoted) = (Vec::new(), Vec::new(), Vec::new());
    for (id, j) in &joining {
        let voter = !j.learner;
        let Some((was_voter, addr)) = now.members.get(id) else {
            let kind = if voter {
                ConfChangeType::AddNode
            } else {
                ConfChangeType::AddLearnerNode
            };
            added.push(Change {
                kind,
                id: *id,
                addr: j.addr.clone(),
            });
            continue;
        };
        if !addr.is_empty() && *addr != j.addr {
            return Err(bad(format!(
                "server {id} is a member at {addr}, not {}: remove it first to move it",
                j.addr
            )));
        }
        match (was_voter, voter) {
            (false, true) => promoted.push(Change {
                kind: ConfChangeType::AddNode,
                id: *id,
                addr: String::new(),
            }),
            (true, false) => demoted.push(Change {
                kind: ConfChangeType::AddLearnerNode,
                id: *id,
                addr: String::new(),
            }),
            _ => {}
        }
    }
    let voters_after = now
        .members
        .iter()
        .filter(|(id, (voter, _))| {
            let voter = joining.get(id).map_or(*voter, |j| !j.learner);
            voter && !leaving.contains(id)
        })
        .count()
        + added
            .iter()
            .filter(|c| c.kind == ConfChangeType::AddNode)
            .count();
    if voters_after == 0 {
        return Err(bad("the new membership has no participant".into()));
    }
    let removed = leaving.into_iter().map(|id| Change {
        kind: ConfChangeType::RemoveNode,
        id,
        addr: String::new(),
    });
    let changes: Vec<Change> = added
        .into_iter()
        .chain(promoted)
        .chain(demoted)
        .chain(removed)
        .collect();
    if !r.force {
        let steps: Vec<quorum::Step> = changes
            .iter()
            .map(|c| quorum::Step {
                kind: c.kind,
                id: c.id,
            })
            .collect();
        let voters = quorum::voters_of(&now.members);
        quorum::check(&voters, &steps, &now.heard, now.window)
            .map_err(|refusal| bad(refusal.message()))?;
    }
    Ok(changes)
}

impl Core {
    /// A reconfig request: refused, answered at once (nothing to change),
    /// or its first change proposed.
    pub(super) fn reconfig_slot(&mut self, conn: ConnId, xid: u64, r: pb::ReconfigRequest) -> Slot {
        let zxid = self.m.tree.applied_index();
        let changes = match self.plan_reconfig(&r) {
            Ok(changes) => changes,
            Err(f) => {
                debug!(conn, code = ?f.code, why = %f.message, "reconfig refused");
                return Slot::Done(frames::error(xid, zxid, f));
            }
        };
        if changes.is_empty() {
            let status = self.cluster_status();
            return Slot::Done(frames::response(
                xid,
                zxid,
                Ok(Some(Res::ClusterStatus(status))),
            ));
        }
        let request_id = self.m.proposals.next_id();
        let node_id = self.m.node_id;
        let mut steps = changes
            .into_iter()
            .map(|c| conf_change(node_id, request_id, c));
        let first = steps.next().expect("not empty");
        let then: Vec<ConfChange> = steps.collect();
        match self
            .raft
            .propose_conf_change(first.context.to_vec(), first.clone())
        {
            Ok(()) => {
                info!(
                    first = first.node_id,
                    change = ?first.change_type,
                    more = then.len(),
                    "reconfig: membership change proposed"
                );
                self.m.proposals.register_reconfig(
                    request_id,
                    conn,
                    first,
                    then,
                    self.m.clock.now(),
                );
                Slot::Write { xid, request_id }
            }
            Err(e) => {
                let f = Failure::new(ErrorCode::NotReady, format!("reconfig refused: {e}"));
                Slot::Done(frames::error(xid, zxid, f))
            }
        }
    }

    fn plan_reconfig(&self, r: &pb::ReconfigRequest) -> Result<Vec<Change>, Failure> {
        let status = self.cluster_status();
        if let Some(wanted) = r.config_version {
            let version = crate::zk::reserved::config_version(&status);
            if wanted != version {
                return Err(Failure::new(
                    ErrorCode::BadVersion,
                    format!("reconfig: the config is at version {version:x}, not {wanted:x}"),
                ));
            }
        }
        let now = Members::of(&status, self.heard_recently(), self.live_window());
        plan(r, &now, self.m.node_id)
    }

    /// Answers the reconfigs whose last change applied, with the
    /// membership now.
    pub(super) fn answer_reconfigs(&mut self) {
        if self.m.reconfigs_done.is_empty() {
            return;
        }
        let status = self.cluster_status();
        for (conn, request_id, index) in std::mem::take(&mut self.m.reconfigs_done) {
            let status = status.clone();
            self.m
                .clients
                .complete_write(conn, request_id, &self.m.tree, |xid| {
                    frames::response(xid, index, Ok(Some(Res::ClusterStatus(status))))
                });
        }
    }
}

/// The raft conf change for `c`, carrying who proposed it for which
/// request (the context travels inside the change: the entry's own
/// context is not handed back on apply).
fn conf_change(origin_node: u64, request_id: u64, c: Change) -> ConfChange {
    let context = proto::ConfChangeContext {
        origin_node,
        request_id,
        addr: c.addr,
    }
    .encode_to_vec();
    ConfChange {
        change_type: c.kind,
        node_id: c.id,
        context: context.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(u64, bool)]) -> Members {
        Members {
            members: list
                .iter()
                .map(|(id, voter)| (*id, (*voter, format!("h:710{id}"))))
                .collect(),
            heard: list.iter().map(|(id, _)| *id).collect(),
            window: Duration::from_secs(1),
        }
    }

    fn join(id: u64, learner: bool) -> pb::AddMemberRequest {
        pb::AddMemberRequest {
            id,
            addr: format!("h:710{id}"),
            learner,
            force: false,
        }
    }

    fn kinds(changes: &[Change]) -> Vec<(ConfChangeType, u64)> {
        changes.iter().map(|c| (c.kind, c.id)).collect()
    }

    #[test]
    fn adds_then_role_changes_then_removals() {
        use ConfChangeType::*;
        let now = members(&[(1, true), (2, true), (3, true), (4, false)]);
        let r = pb::ReconfigRequest {
            joining: vec![join(5, false), join(4, false), join(6, true), join(3, true)],
            leaving: vec![2],
            ..Default::default()
        };
        let changes = plan(&r, &now, 1).unwrap();
        assert_eq!(
            kinds(&changes),
            [
                (AddNode, 5),
                (AddLearnerNode, 6),
                (AddNode, 4),
                (AddLearnerNode, 3),
                (RemoveNode, 2)
            ]
        );
        assert_eq!(changes[0].addr, "h:7105");
        // Joining as it is already: nothing to do.
        let same = pb::ReconfigRequest {
            joining: vec![join(1, false), join(4, true)],
            ..Default::default()
        };
        assert!(plan(&same, &now, 1).unwrap().is_empty());
    }

    #[test]
    fn a_whole_membership_removes_who_is_not_in_it() {
        use ConfChangeType::*;
        let now = members(&[(1, true), (2, true), (3, true)]);
        let r = pb::ReconfigRequest {
            joining: vec![join(1, false), join(2, false), join(4, true)],
            whole: true,
            ..Default::default()
        };
        assert_eq!(
            kinds(&plan(&r, &now, 1).unwrap()),
            [(AddLearnerNode, 4), (RemoveNode, 3)]
        );
    }

    #[test]
    fn what_cannot_be_done_is_refused_whole() {
        let now = members(&[(1, true), (2, true), (3, false)]);
        let refused = |r: pb::ReconfigRequest| {
            let f = plan(&r, &now, 1).unwrap_err();
            assert_eq!(f.code, ErrorCode::BadArguments);
            f.message
        };
        let leave = |ids: &[u64]| pb::ReconfigRequest {
            leaving: ids.to_vec(),
            ..Default::default()
        };
        assert!(refused(leave(&[9])).contains("server 9 is not a member"));
        assert!(refused(leave(&[1])).contains("cannot remove itself"));
        // Removing every voter the planner may remove still leaves none
        // when the planner is a learner.
        let f = plan(&leave(&[1, 2]), &now, 3).unwrap_err();
        assert!(f.message.contains("no participant"), "{}", f.message);
        let moved = pb::ReconfigRequest {
            joining: vec![pb::AddMemberRequest {
                id: 2,
                addr: "elsewhere:1".into(),
                learner: false,
                force: false,
            }],
            ..Default::default()
        };
        assert!(refused(moved).contains("is a member at h:7102"));
        let twice = pb::ReconfigRequest {
            joining: vec![join(5, false), join(5, true)],
            ..Default::default()
        };
        assert!(refused(twice).contains("named twice"));
        let both = pb::ReconfigRequest {
            joining: vec![join(2, false)],
            leaving: vec![2],
            ..Default::default()
        };
        assert!(refused(both).contains("both joins and leaves"));
        let bad_addr = pb::ReconfigRequest {
            joining: vec![pb::AddMemberRequest {
                id: 7,
                addr: "nohost".into(),
                learner: false,
                force: false,
            }],
            ..Default::default()
        };
        assert!(refused(bad_addr).contains("not HOST:PORT"));
    }

    /// No change may leave fewer than a majority of participants that
    /// this server has heard from.
    #[test]
    fn a_reconfig_that_could_lose_the_quorum_is_refused() {
        // One server alone: a new participant not heard from is refused.
        let alone = members(&[(1, true)]);
        let mut silent = alone.clone();
        silent.heard.remove(&2);
        let grow = pb::ReconfigRequest {
            joining: vec![join(2, false)],
            ..Default::default()
        };
        let f = plan(&grow, &silent, 1).unwrap_err();
        assert!(
            f.message
                .contains("after adding 2 as a voter the cluster would have 2 voters, 1 of them"),
            "{}",
            f.message
        );
        // Forced, it goes.
        let forced = pb::ReconfigRequest {
            force: true,
            ..grow.clone()
        };
        assert_eq!(plan(&forced, &silent, 1).unwrap().len(), 1);
        // Heard from (started with --join, calling in), it may join.
        let mut calling = alone.clone();
        calling.heard.insert(2);
        assert_eq!(plan(&grow, &calling, 1).unwrap().len(), 1);
        // As an observer first, then promoted once it is heard from.
        let observer = pb::ReconfigRequest {
            joining: vec![join(2, true)],
            ..Default::default()
        };
        assert_eq!(plan(&observer, &silent, 1).unwrap().len(), 1);
        let two = members(&[(1, true), (2, false)]);
        assert_eq!(plan(&grow, &two, 1).unwrap().len(), 1);
        // Three up: one unknown participant more is fine.
        let three = members(&[(1, true), (2, true), (3, true)]);
        let four = pb::ReconfigRequest {
            joining: vec![join(4, false)],
            ..Default::default()
        };
        assert_eq!(plan(&four, &three, 1).unwrap().len(), 1);
        // One down: a fourth that is not running is not.
        let mut one_down = three.clone();
        one_down.heard.remove(&3);
        let f = plan(&four, &one_down, 1).unwrap_err();
        assert!(f.message.contains("2 of them"), "{}", f.message);
        // Removing a live one while another is down is not either.
        let remove = pb::ReconfigRequest {
            leaving: vec![2],
            ..Default::default()
        };
        let f = plan(&remove, &one_down, 1).unwrap_err();
        assert!(f.message.contains("after removing 2"), "{}", f.message);
        // Removing the one that is down is.
        let remove_down = pb::ReconfigRequest {
            leaving: vec![3],
            ..Default::default()
        };
        assert_eq!(plan(&remove_down, &one_down, 1).unwrap().len(), 1);
    }
}
