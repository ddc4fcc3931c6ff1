//! Liveness of a lock (a grant in every long enough stretch without
//! faults) and of an election (a leader in every such stretch).

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
    let mut grants: Vec<u64> = grants_at.to_vec();
    grants.sort_unstable();
    for (start, end) in healthy_stretches(faults, from, to) {
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

/// Liveness of an election: within `[from, to]`, every stretch of at
/// least `bound_ns` during which no fault was in force must meet some
/// term of office. `terms`: `[start, end]` of each (any order); a window
/// is measured from a fault's end (or `from`) or the end of the terms so
/// far, to the next term's start, the next fault's start or `to`.
pub fn check_coverage(
    terms: &[(u64, u64)],
    faults: &[(u64, Option<u64>)],
    from: u64,
    to: u64,
    bound_ns: u64,
) -> Vec<GrantlessWindow> {
    let mut terms: Vec<(u64, u64)> = terms.to_vec();
    terms.sort_unstable();
    let mut out = Vec::new();
    for (start, end) in healthy_stretches(faults, from, to) {
        let mut covered_to = start;
        let inside = terms
            .iter()
            .copied()
            .filter(|&(s, e)| e >= start && s <= end);
        for (s, e) in inside.chain(std::iter::once((end, end))) {
            let s = s.min(end);
            if s > covered_to && s - covered_to >= bound_ns {
                out.push(GrantlessWindow {
                    start: covered_to,
                    end: s,
                });
            }
            covered_to = covered_to.max(e);
        }
    }
    out
}

/// `[from, to]` less the union of the `faults` (`[start, end)`, `None`:
/// until the end): the stretches in which none was in force, in order.
pub fn healthy_stretches(faults: &[(u64, Option<u64>)], from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut healthy = Vec::new();
    if to <= from {
        return healthy;
    }
    let mut faults: Vec<(u64, u64)> = faults
        .iter()
        .map(|&(start, end)| (start, end.unwrap_or(u64::MAX)))
        .filter(|&(start, end)| end > start)
        .collect();
    faults.sort_unstable();
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
    healthy
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn coverage_wants_a_term_near_every_point_of_healthy_time() {
        let s = 1_000_000_000;
        // Terms of 1 s with 1 s gaps over 20 s: fine with a 5 s bound.
        let steady: Vec<(u64, u64)> = (0..10).map(|i| (i * 2 * s, (i * 2 + 1) * s)).collect();
        assert!(check_coverage(&steady, &[], 0, 20 * s, 5 * s).is_empty());
        // A long term counts as covered however long it lasts.
        assert!(check_coverage(&[(0, 20 * s)], &[], 0, 20 * s, 5 * s).is_empty());
        // Nobody leads from 3 s to 12 s.
        let gap = [(0, 3 * s), (12 * s, 20 * s)];
        assert_eq!(
            check_coverage(&gap, &[], 0, 20 * s, 5 * s),
            vec![GrantlessWindow {
                start: 3 * s,
                end: 12 * s
            }]
        );
        // A fault over the gap excuses it; one over part of it leaves a
        // stretch shorter than the bound.
        assert!(check_coverage(&gap, &[(2 * s, Some(11 * s))], 0, 20 * s, 5 * s).is_empty());
        assert!(check_coverage(&gap, &[(6 * s, Some(9 * s))], 0, 20 * s, 5 * s).is_empty());
        // Nobody at all after 3 s, to the end.
        assert_eq!(
            check_coverage(&[(0, 3 * s)], &[], 0, 20 * s, 5 * s).len(),
            1
        );
    }
}
