//! Checkers for the lock, sequential, ephemeral and watch workloads. Each
//! takes what the workload recorded and returns the anomalies it found
//! (empty = valid). They are pure functions over recorded data, so the
//! selftest can feed them histories with planted anomalies.

use std::collections::{BTreeMap, BTreeSet};

/// One grant of a lock, as the harness recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub process: u64,
    pub session_id: u64,
    pub token: u64,
    /// When the client learned it held the lock, and when it released
    /// (or learned it lost) it: monotonic nanoseconds.
    pub acquired_ns: u64,
    pub released_ns: u64,
    /// The session expired while this grant was held (Jepsen's etcd
    /// finding: such overlaps are reported apart, not as a safety bug of the
    /// lock service, since the holder was told it lost the lock).
    pub session_expired: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAnomaly {
    DuplicateToken {
        token: u64,
    },
    /// Grants ordered by acquisition time whose tokens go backwards.
    TokenNotIncreasing {
        earlier: Grant,
        later: Grant,
    },
    /// Two holds overlapping in real time, neither holder's session expired.
    Overlap {
        a: Grant,
        b: Grant,
    },
    /// Overlap where one holder's session had expired (reported apart).
    OverlapAfterExpiry {
        a: Grant,
        b: Grant,
    },
    /// The fenced resource accepted a token lower than one it had accepted.
    FenceWentBack {
        accepted_before: u64,
        accepted_now: u64,
    },
}

/// Checks lock grants and the sequence of tokens the fenced resource
/// accepted (in its own order).
pub fn check_lock(grants: &[Grant], fence_accepted: &[u64]) -> Vec<LockAnomaly> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for g in grants {
        if !seen.insert(g.token) {
            out.push(LockAnomaly::DuplicateToken { token: g.token });
        }
    }
    let mut by_time: Vec<&Grant> = grants.iter().collect();
    by_time.sort_by_key(|g| (g.acquired_ns, g.token));
    for w in by_time.windows(2) {
        if w[1].token < w[0].token && w[0].released_ns <= w[1].acquired_ns {
            out.push(LockAnomaly::TokenNotIncreasing {
                earlier: w[0].clone(),
                later: w[1].clone(),
            });
        }
    }
    for (i, a) in by_time.iter().enumerate() {
        for b in &by_time[i + 1..] {
            if b.acquired_ns >= a.released_ns {
                break;
            }
            let pair = ((*a).clone(), (*b).clone());
            if a.session_expired || b.session_expired {
                out.push(LockAnomaly::OverlapAfterExpiry {
                    a: pair.0,
                    b: pair.1,
                });
            } else {
                out.push(LockAnomaly::Overlap {
                    a: pair.0,
                    b: pair.1,
                });
            }
        }
    }
    let mut highest = 0;
    for &t in fence_accepted {
        if t < highest {
            out.push(LockAnomaly::FenceWentBack {
                accepted_before: highest,
                accepted_now: t,
            });
        }
        highest = highest.max(t);
    }
    out
}

/// A stretch of healthy time (no fault in force) at least as long as the
/// liveness bound in which the lock was never granted: `[start, end)`, run
/// nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantlessWindow {
    pub start: u64,
    pub end: u64,
}

/// Liveness of a lock: within `[from, to]`, every stretch of at least
/// `bound_ns` during which no fault was in force must contain a grant.
///
/// `grants_at`: when each grant was learned (any order); `faults`: the
/// periods `[start, end)` in force (`None`: until the end). A healthy
/// stretch is cut at every grant, so a window is measured from a fault's
/// end (or `from`) or from the last grant, to the next grant, the next
/// fault's start or `to`.
pub fn check_liveness(
    grants_at: &[u64],
    faults: &[(u64, Option<u64>)],
    from: u64,
    to: u64,
    bound_ns: u64,
) -> Vec<GrantlessWindow> {
    let mut out = Vec::new();
    if to <= from {
        return out;
    }
    // The healthy stretches: [from, to] minus the union of the faults.
    let mut faults: Vec<(u64, u64)> = faults
        .iter()
        .map(|&(start, end)| (start, end.unwrap_or(u64::MAX)))
        .filter(|&(start, end)| end > start)
        .collect();
    faults.sort_unstable();
    let mut healthy = Vec::new();
    let mut at = from;
    for (start, end) in faults {
        if start > at {
            healthy.push((at, start.min(to)));
        }
        at = at.max(end);
        if at >= to {
            break;
        }
    }
    if at < to {
        healthy.push((at, to));
    }
    let mut grants: Vec<u64> = grants_at.to_vec();
    grants.sort_unstable();
    for (start, end) in healthy {
        let mut last = start;
        let inside = grants.iter().copied().filter(|&g| g >= start && g <= end);
        for g in inside.chain(std::iter::once(end)) {
            if g.saturating_sub(last) >= bound_ns {
                out.push(GrantlessWindow {
                    start: last,
                    end: g,
                });
            }
            last = g;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequentialAnomaly {
    /// An acknowledged create is missing at the end.
    Lost { name: String },
    /// Two acknowledged creates got the same name.
    Duplicate { name: String },
    /// Sequence order and commit (czxid) order disagree.
    OutOfOrder { a: (String, u64), b: (String, u64) },
}

/// `acked`: (created name, its czxid) for every acknowledged create;
/// `final_children`: the parent's children at the end.
pub fn check_sequential(
    acked: &[(String, u64)],
    final_children: &[String],
) -> Vec<SequentialAnomaly> {
    let mut out = Vec::new();
    let present: BTreeSet<&str> = final_children.iter().map(String::as_str).collect();
    let mut names = BTreeSet::new();
    for (name, _) in acked {
        if !names.insert(name.as_str()) {
            out.push(SequentialAnomaly::Duplicate { name: name.clone() });
        }
        if !present.contains(name.as_str()) {
            out.push(SequentialAnomaly::Lost { name: name.clone() });
        }
    }
    let mut by_name: Vec<&(String, u64)> = acked.iter().collect();
    by_name.sort_by_key(|a| seq_suffix(&a.0));
    for w in by_name.windows(2) {
        if w[1].1 < w[0].1 {
            out.push(SequentialAnomaly::OutOfOrder {
                a: w[0].clone(),
                b: w[1].clone(),
            });
        }
    }
    out
}

fn seq_suffix(name: &str) -> i64 {
    let digits: String = name
        .chars()
        .rev()
        .take(10)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().unwrap_or(i64::MIN)
}

/// An ephemeral node's life as the harness saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralObservation {
    pub path: String,
    /// When its session was last known alive, and when it ended
    /// (expired or closed; `None` if it never did), monotonic ns.
    pub session_alive_until_ns: u64,
    pub session_ended_ns: Option<u64>,
    /// When observers saw the node gone (`None`: still there at the end).
    pub seen_gone_ns: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EphemeralAnomaly {
    /// Gone while its session was known alive.
    VanishedWhileAlive { path: String },
    /// Still there too long after its session ended.
    Lingered { path: String, after_ns: u64 },
}

/// `bound_ns`: how long after a session ends its ephemerals may linger.
pub fn check_ephemeral(obs: &[EphemeralObservation], bound_ns: u64) -> Vec<EphemeralAnomaly> {
    let mut out = Vec::new();
    for o in obs {
        if let Some(gone) = o.seen_gone_ns {
            if gone < o.session_alive_until_ns {
                out.push(EphemeralAnomaly::VanishedWhileAlive {
                    path: o.path.clone(),
                });
            }
        }
        if let Some(ended) = o.session_ended_ns {
            let lingered = match o.seen_gone_ns {
                Some(gone) => gone.saturating_sub(ended),
                None => u64::MAX,
            };
            if lingered > bound_ns {
                out.push(EphemeralAnomaly::Lingered {
                    path: o.path.clone(),
                    after_ns: lingered,
                });
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchAnomaly {
    /// Events delivered to one watcher out of zxid order.
    OutOfOrder {
        watcher: u64,
        before: u64,
        after: u64,
    },
    /// A change a persistent watch should have reported, never delivered.
    Missed { watcher: u64, zxid: u64 },
    /// A one-shot watch fired more than once.
    FiredTwice { watcher: u64 },
}

/// `delivered`: per watcher, the zxids of its events in delivery order;
/// `persistent_expected`: per persistent watcher, the zxids of every
/// change it covers; `oneshot`: watchers that were one-shot.
pub fn check_watch(
    delivered: &BTreeMap<u64, Vec<u64>>,
    persistent_expected: &BTreeMap<u64, Vec<u64>>,
    oneshot: &BTreeSet<u64>,
) -> Vec<WatchAnomaly> {
    let mut out = Vec::new();
    for (&w, zxids) in delivered {
        for pair in zxids.windows(2) {
            if pair[1] <= pair[0] {
                out.push(WatchAnomaly::OutOfOrder {
                    watcher: w,
                    before: pair[0],
                    after: pair[1],
                });
            }
        }
        if oneshot.contains(&w) && zxids.len() > 1 {
            out.push(WatchAnomaly::FiredTwice { watcher: w });
        }
    }
    for (&w, expected) in persistent_expected {
        let got: BTreeSet<u64> = delivered.get(&w).into_iter().flatten().copied().collect();
        for z in expected {
            if !got.contains(z) {
                out.push(WatchAnomaly::Missed {
                    watcher: w,
                    zxid: *z,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(process: u64, token: u64, from: u64, to: u64) -> Grant {
        Grant {
            process,
            session_id: process,
            token,
            acquired_ns: from,
            released_ns: to,
            session_expired: false,
        }
    }

    #[test]
    fn clean_lock_history_is_valid() {
        let g = vec![grant(1, 10, 0, 5), grant(2, 12, 6, 9), grant(1, 15, 10, 12)];
        assert!(check_lock(&g, &[10, 12, 15]).is_empty());
    }

    #[test]
    fn planted_lock_anomalies_are_caught() {
        let overlap = vec![grant(1, 10, 0, 5), grant(2, 12, 3, 9)];
        assert!(matches!(
            check_lock(&overlap, &[])[0],
            LockAnomaly::Overlap { .. }
        ));
        let mut expired = overlap.clone();
        expired[0].session_expired = true;
        assert!(matches!(
            check_lock(&expired, &[])[0],
            LockAnomaly::OverlapAfterExpiry { .. }
        ));
        let backwards = vec![grant(1, 12, 0, 5), grant(2, 10, 6, 9)];
        assert!(check_lock(&backwards, &[])
            .iter()
            .any(|a| matches!(a, LockAnomaly::TokenNotIncreasing { .. })));
        let dup = vec![grant(1, 10, 0, 5), grant(2, 10, 6, 9)];
        assert!(check_lock(&dup, &[]).contains(&LockAnomaly::DuplicateToken { token: 10 }));
        assert_eq!(
            check_lock(&[], &[5, 9, 7]),
            vec![LockAnomaly::FenceWentBack {
                accepted_before: 9,
                accepted_now: 7
            }]
        );
    }

    #[test]
    fn liveness_wants_a_grant_in_every_long_healthy_stretch() {
        let s = 1_000_000_000;
        // Grants every 2 s over a 20 s run: fine with a 5 s bound.
        let steady: Vec<u64> = (0..10).map(|i| i * 2 * s).collect();
        assert!(check_liveness(&steady, &[], 0, 20 * s, 5 * s).is_empty());
        // No grant from 4 s to 20 s: one window, from the last grant.
        let stalled = [0, 2 * s, 4 * s];
        assert_eq!(
            check_liveness(&stalled, &[], 0, 20 * s, 5 * s),
            vec![GrantlessWindow {
                start: 4 * s,
                end: 20 * s
            }]
        );
        // The same stall is excused while a fault is in force, but not for
        // a long healthy stretch after it ended.
        assert!(check_liveness(&stalled, &[(5 * s, None)], 0, 20 * s, 5 * s).is_empty());
        assert!(check_liveness(&stalled, &[(5 * s, Some(18 * s))], 0, 20 * s, 5 * s).is_empty());
        assert_eq!(
            check_liveness(&stalled, &[(5 * s, Some(10 * s))], 0, 20 * s, 5 * s),
            vec![GrantlessWindow {
                start: 10 * s,
                end: 20 * s
            }]
        );
        // Overlapping faults merge.
        let faults = [(3 * s, Some(9 * s)), (8 * s, Some(19 * s))];
        assert!(check_liveness(&stalled, &faults, 0, 20 * s, 5 * s).is_empty());
    }

    #[test]
    fn sequential_anomalies() {
        let acked = vec![
            ("n-0000000000".to_string(), 5),
            ("n-0000000001".to_string(), 7),
        ];
        let all = vec!["n-0000000000".to_string(), "n-0000000001".to_string()];
        assert!(check_sequential(&acked, &all).is_empty());
        assert_eq!(
            check_sequential(&acked, &all[..1]),
            vec![SequentialAnomaly::Lost {
                name: "n-0000000001".into()
            }]
        );
        let swapped = vec![
            ("n-0000000000".to_string(), 9),
            ("n-0000000001".to_string(), 7),
        ];
        assert!(matches!(
            check_sequential(&swapped, &all)[0],
            SequentialAnomaly::OutOfOrder { .. }
        ));
        let dup = vec![
            ("n-0000000000".to_string(), 5),
            ("n-0000000000".to_string(), 6),
        ];
        assert!(
            check_sequential(&dup, &all).contains(&SequentialAnomaly::Duplicate {
                name: "n-0000000000".into()
            })
        );
    }

    #[test]
    fn ephemeral_anomalies() {
        let ok = EphemeralObservation {
            path: "/e".into(),
            session_alive_until_ns: 100,
            session_ended_ns: Some(150),
            seen_gone_ns: Some(160),
        };
        assert!(check_ephemeral(std::slice::from_ref(&ok), 50).is_empty());
        let early = EphemeralObservation {
            seen_gone_ns: Some(90),
            ..ok.clone()
        };
        assert!(check_ephemeral(&[early], 50)
            .contains(&EphemeralAnomaly::VanishedWhileAlive { path: "/e".into() }));
        let lingering = EphemeralObservation {
            seen_gone_ns: None,
            ..ok
        };
        assert!(matches!(
            check_ephemeral(&[lingering], 50)[0],
            EphemeralAnomaly::Lingered { .. }
        ));
    }

    #[test]
    fn watch_anomalies() {
        let mut delivered = BTreeMap::new();
        delivered.insert(1, vec![5, 7, 9]);
        delivered.insert(2, vec![8]);
        let mut expected = BTreeMap::new();
        expected.insert(1, vec![5, 7, 9]);
        let oneshot: BTreeSet<u64> = [2].into();
        assert!(check_watch(&delivered, &expected, &oneshot).is_empty());
        delivered.insert(1, vec![5, 9, 7]);
        delivered.insert(2, vec![8, 10]);
        expected.insert(1, vec![5, 7, 9, 11]);
        let found = check_watch(&delivered, &expected, &oneshot);
        assert!(found.contains(&WatchAnomaly::OutOfOrder {
            watcher: 1,
            before: 9,
            after: 7
        }));
        assert!(found.contains(&WatchAnomaly::FiredTwice { watcher: 2 }));
        assert!(found.contains(&WatchAnomaly::Missed {
            watcher: 1,
            zxid: 11
        }));
    }
}
