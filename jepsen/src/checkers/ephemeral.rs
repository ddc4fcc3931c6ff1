//! Ephemeral nodes: present while their session lives, gone once it ends.

use std::collections::BTreeSet;

/// A linearizable read of the ephemerals' parent (an `ok` one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildrenRead {
    pub op: u64,
    pub invoked: u64,
    pub completed: u64,
    /// Full paths of the children.
    pub present: BTreeSet<String>,
}

/// A holder's successful check that its session lives (a linearizable
/// exists of its own node on its own session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub op: u64,
    pub invoked: u64,
    pub completed: u64,
    /// Whether the node was there.
    pub present: bool,
}

/// One ephemeral node's life as the run recorded it (times: run ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralLife {
    pub path: String,
    /// The create's invocation index, and when it completed `ok` (`None`:
    /// outcome unknown).
    pub create_op: u64,
    pub created_at: Option<u64>,
    pub confirms: Vec<Confirm>,
    /// The session was closed cleanly: the close's index and completion.
    /// Every read invoked after it must find the node gone.
    pub closed: Option<(u64, u64)>,
    /// The session ended some other way (holder killed, close unknown,
    /// expiry seen): the op that says so and the time by which the node
    /// must be gone (`None`: no bound is checked, e.g. a fault still in
    /// force at the end).
    pub must_be_gone_by: Option<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EphemeralAnomaly {
    /// Seen gone (by `gone_op`, completed first) before a confirmation
    /// (`confirm_op`, invoked later) that its session still lived.
    VanishedWhileAlive {
        path: String,
        gone_op: u64,
        confirm_op: u64,
    },
    /// Seen present by a read invoked after another saw it gone.
    Reappeared {
        path: String,
        gone_op: u64,
        present_op: u64,
    },
    /// Still present in a read invoked after its session was closed.
    LingeredAfterClose {
        path: String,
        close_op: u64,
        read_op: u64,
    },
    /// Still present in a read invoked after its deadline.
    Lingered {
        path: String,
        end_op: u64,
        read_op: u64,
        late_ns: u64,
    },
}

/// Judges ephemeral lives against the observer's reads. Nodes never come
/// back once gone (paths are never reused), and sessions never come back
/// once over, so one observation each way in the wrong real-time order is
/// proof enough.
pub fn check_ephemeral(lives: &[EphemeralLife], reads: &[ChildrenRead]) -> Vec<EphemeralAnomaly> {
    let mut out = Vec::new();
    for life in lives {
        let path = life.path.as_str();
        // Absence only means "gone" once the create is known to have
        // happened, and only in reads invoked after that.
        let gone = life.created_at.and_then(|created| {
            let from_reads = reads
                .iter()
                .filter(|r| r.invoked > created && !r.present.contains(path))
                .map(|r| (r.completed, r.op));
            let from_holder = life
                .confirms
                .iter()
                .filter(|c| !c.present)
                .map(|c| (c.completed, c.op));
            from_reads.chain(from_holder).min()
        });
        if let Some((gone_at, gone_op)) = gone {
            if let Some(c) = life.confirms.iter().find(|c| c.invoked > gone_at) {
                out.push(EphemeralAnomaly::VanishedWhileAlive {
                    path: life.path.clone(),
                    gone_op,
                    confirm_op: c.op,
                });
            }
            if let Some(r) = reads
                .iter()
                .find(|r| r.invoked > gone_at && r.present.contains(path))
            {
                out.push(EphemeralAnomaly::Reappeared {
                    path: life.path.clone(),
                    gone_op,
                    present_op: r.op,
                });
            }
        }
        if let Some((close_op, closed_at)) = life.closed {
            if let Some(r) = reads
                .iter()
                .find(|r| r.invoked > closed_at && r.present.contains(path))
            {
                out.push(EphemeralAnomaly::LingeredAfterClose {
                    path: life.path.clone(),
                    close_op,
                    read_op: r.op,
                });
            }
        }
        if let Some((end_op, deadline)) = life.must_be_gone_by {
            if let Some(r) = reads
                .iter()
                .find(|r| r.invoked > deadline && r.present.contains(path))
            {
                out.push(EphemeralAnomaly::Lingered {
                    path: life.path.clone(),
                    end_op,
                    read_op: r.op,
                    late_ns: r.invoked - deadline,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(op: u64, invoked: u64, completed: u64, present: &[&str]) -> ChildrenRead {
        ChildrenRead {
            op,
            invoked,
            completed,
            present: present.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn life() -> EphemeralLife {
        EphemeralLife {
            path: "/e".into(),
            create_op: 0,
            created_at: Some(10),
            confirms: vec![Confirm {
                op: 1,
                invoked: 20,
                completed: 25,
                present: true,
            }],
            closed: None,
            must_be_gone_by: Some((2, 100)),
        }
    }

    #[test]
    fn ephemeral_clean_and_planted() {
        let reads = vec![read(3, 15, 18, &["/e"]), read(4, 60, 70, &[])];
        assert_eq!(check_ephemeral(&[life()], &reads), vec![]);
        // Gone (read completed at 18) before a confirmation invoked at 20.
        let early = vec![read(3, 15, 18, &[])];
        assert_eq!(
            check_ephemeral(&[life()], &early),
            vec![EphemeralAnomaly::VanishedWhileAlive {
                path: "/e".into(),
                gone_op: 3,
                confirm_op: 1
            }]
        );
        let back = vec![read(3, 30, 40, &[]), read(4, 50, 60, &["/e"])];
        assert!(matches!(
            check_ephemeral(&[life()], &back)[..],
            [EphemeralAnomaly::Reappeared { .. }]
        ));
        let lingering = vec![read(3, 30, 40, &["/e"]), read(4, 120, 130, &["/e"])];
        assert_eq!(
            check_ephemeral(&[life()], &lingering),
            vec![EphemeralAnomaly::Lingered {
                path: "/e".into(),
                end_op: 2,
                read_op: 4,
                late_ns: 20
            }]
        );
        let closed = EphemeralLife {
            closed: Some((5, 50)),
            must_be_gone_by: None,
            ..life()
        };
        assert!(matches!(
            check_ephemeral(&[closed], &lingering)[..],
            [EphemeralAnomaly::LingeredAfterClose { read_op: 4, .. }]
        ));
    }
}
