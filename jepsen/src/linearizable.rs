//! A linearizability checker for registers (read, write, compare-and-set),
//! in the style of Wing & Gong with Lowe's memoization: search for an order
//! of the operations that respects real time (an operation that returned
//! before another was invoked comes first) and that a single-copy register
//! would produce, remembering every (set of linearized operations, register
//! value) configuration already explored so that none is searched twice.
//!
//! Operations whose outcome is unknown (`info`: the client timed out or lost
//! its connection) may take effect at any point after their invocation, or
//! never. Operations that definitely failed must be left out of the history
//! by the caller. Histories over several keys are checked key by key
//! (linearizability is compositional), see [`check_keys`].

use std::collections::{BTreeMap, HashSet};

/// What an operation did to the register.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RegOp {
    /// Observed this value (`None`: the register did not exist / was empty).
    Read(Option<i64>),
    Write(i64),
    /// Compare-and-set that succeeded: the value was `from`, became `to`.
    Cas {
        from: i64,
        to: i64,
    },
}

/// One operation of a history on one register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub process: u64,
    /// Invocation time (any monotonic clock; only the order matters).
    pub invoke: u64,
    /// Completion time; `None` when the outcome is unknown.
    pub complete: Option<u64>,
    pub op: RegOp,
}

/// The checker's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No order works. `stuck` lists the completed operations the deepest
    /// search could not place (a starting point for reading the history).
    NotLinearizable {
        stuck: Vec<Operation>,
    },
    /// The search gave up after exploring this many configurations.
    Unknown {
        explored: usize,
    },
}

/// Bound on explored configurations before answering `Unknown`.
pub const SEARCH_CONFIGS_MAX: usize = 2_000_000;

fn step(state: Option<i64>, op: &RegOp) -> Option<Option<i64>> {
    match op {
        RegOp::Read(v) => (*v == state).then_some(state),
        RegOp::Write(v) => Some(Some(*v)),
        RegOp::Cas { from, to } => (state == Some(*from)).then_some(Some(*to)),
    }
}

/// Checks one register's history, starting from `initial`.
pub fn check(history: &[Operation], initial: Option<i64>) -> Verdict {
    let n = history.len();
    let words = n.div_ceil(64).max(1);
    let completed: Vec<usize> = (0..n).filter(|&i| history[i].complete.is_some()).collect();
    let mut seen: HashSet<(Vec<u64>, Option<i64>)> = HashSet::new();
    let mut best: Vec<u64> = vec![0; words];
    let mut best_count = 0usize;
    // Depth-first search over configurations.
    let mut stack: Vec<(Vec<u64>, Option<i64>)> = vec![(vec![0; words], initial)];
    let is_set = |bits: &[u64], i: usize| bits[i / 64] & (1 << (i % 64)) != 0;
    while let Some((bits, state)) = stack.pop() {
        if !seen.insert((bits.clone(), state)) {
            continue;
        }
        if seen.len() > SEARCH_CONFIGS_MAX {
            return Verdict::Unknown {
                explored: seen.len(),
            };
        }
        let done = completed.iter().filter(|&&i| is_set(&bits, i)).count();
        if done == completed.len() {
            return Verdict::Linearizable;
        }
        if done > best_count {
            best_count = done;
            best = bits.clone();
        }
        // The earliest completion among completed, unlinearized ops: any op
        // invoked before it may go next; none invoked after it may.
        let horizon = completed
            .iter()
            .filter(|&&i| !is_set(&bits, i))
            .filter_map(|&i| history[i].complete)
            .min()
            .unwrap_or(u64::MAX);
        for (i, o) in history.iter().enumerate() {
            if is_set(&bits, i) || o.invoke > horizon {
                continue;
            }
            if let Some(next) = step(state, &o.op) {
                let mut b = bits.clone();
                b[i / 64] |= 1 << (i % 64);
                stack.push((b, next));
            }
        }
    }
    let stuck = completed
        .iter()
        .filter(|&&i| !is_set(&best, i))
        .map(|&i| history[i].clone())
        .collect();
    Verdict::NotLinearizable { stuck }
}

/// Checks a history over several keys, each independently from `None`.
pub fn check_keys(history: &BTreeMap<String, Vec<Operation>>) -> BTreeMap<String, Verdict> {
    history
        .iter()
        .map(|(k, ops)| (k.clone(), check(ops, None)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(process: u64, invoke: u64, complete: Option<u64>, op: RegOp) -> Operation {
        Operation {
            process,
            invoke,
            complete,
            op,
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = vec![
            op(1, 0, Some(1), RegOp::Write(1)),
            op(2, 2, Some(3), RegOp::Read(Some(1))),
            op(1, 4, Some(5), RegOp::Cas { from: 1, to: 2 }),
            op(2, 6, Some(7), RegOp::Read(Some(2))),
        ];
        assert_eq!(check(&h, None), Verdict::Linearizable);
    }

    #[test]
    fn concurrent_read_may_see_either_value() {
        for seen in [None, Some(1)] {
            let h = vec![
                op(1, 0, Some(10), RegOp::Write(1)),
                op(2, 1, Some(2), RegOp::Read(seen)),
            ];
            assert_eq!(check(&h, None), Verdict::Linearizable, "{seen:?}");
        }
    }

    #[test]
    fn stale_read_after_a_completed_write_is_caught() {
        let h = vec![
            op(1, 0, Some(1), RegOp::Write(1)),
            op(1, 2, Some(3), RegOp::Write(2)),
            op(2, 4, Some(5), RegOp::Read(Some(1))),
        ];
        match check(&h, None) {
            Verdict::NotLinearizable { stuck } => assert!(stuck.contains(&h[2])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_cannot_go_back_in_time() {
        // Two sequential reads by different clients during one write: the
        // second may not see the old value after the first saw the new one.
        let h = vec![
            op(1, 0, Some(100), RegOp::Write(7)),
            op(2, 10, Some(20), RegOp::Read(Some(7))),
            op(3, 30, Some(40), RegOp::Read(None)),
        ];
        assert!(matches!(check(&h, None), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn cas_needs_the_expected_value() {
        let h = vec![
            op(1, 0, Some(1), RegOp::Write(1)),
            op(2, 2, Some(3), RegOp::Cas { from: 5, to: 6 }),
        ];
        assert!(matches!(check(&h, None), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn unknown_outcomes_may_apply_or_not() {
        let applied = vec![
            op(1, 0, None, RegOp::Write(3)),
            op(2, 5, Some(6), RegOp::Read(Some(3))),
        ];
        assert_eq!(check(&applied, None), Verdict::Linearizable);
        let not_applied = vec![
            op(1, 0, None, RegOp::Write(3)),
            op(2, 5, Some(6), RegOp::Read(None)),
        ];
        assert_eq!(check(&not_applied, None), Verdict::Linearizable);
        // But an unknown write cannot explain a value nobody wrote.
        let impossible = vec![
            op(1, 0, None, RegOp::Write(3)),
            op(2, 5, Some(6), RegOp::Read(Some(4))),
        ];
        assert!(matches!(
            check(&impossible, None),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn keys_are_checked_independently() {
        let mut h = BTreeMap::new();
        h.insert("a".to_string(), vec![op(1, 0, Some(1), RegOp::Write(1))]);
        h.insert(
            "b".to_string(),
            vec![op(1, 0, Some(1), RegOp::Read(Some(9)))],
        );
        let v = check_keys(&h);
        assert_eq!(v["a"], Verdict::Linearizable);
        assert!(matches!(v["b"], Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn many_concurrent_ops_finish_quickly_thanks_to_memoization() {
        // 12 processes each write then read their own value, all
        // overlapping: linearizable, with a large search space.
        let mut h = Vec::new();
        for p in 0..12u64 {
            h.push(op(p, p, Some(100 + p), RegOp::Write(p as i64)));
        }
        h.push(op(99, 200, Some(201), RegOp::Read(Some(11))));
        assert_eq!(check(&h, None), Verdict::Linearizable);
    }
}
