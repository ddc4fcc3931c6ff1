//! Liveness of a lock (a grant in every long enough stretch without
//! faults), of an election (a leader in every such stretch), and of a
//! lease's expiry (a lease whose holder is gone lapses within its TTL and
//! one election, however often the leadership changes).

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

/// When a lease whose holder last confirmed it at `confirmed_ns` (the
/// completion of its last successful acquire or renewal: the server stamped
/// it no later) and then went silent must be gone: its TTL plus `bound_ns`
/// (one election, the expiry check and the removal's commit) after it, and
/// after every fault boundary (`boundaries`: each fault's start and end,
/// any order) that falls before that point. A server measures TTLs on the
/// leader's monotonic clock, so a new leader re-arms every lease with its
/// full TTL: a leader change may extend a lease by a TTL and an election,
/// and any fault boundary may bring one.
pub fn lease_free_by(confirmed_ns: u64, ttl_ns: u64, bound_ns: u64, boundaries: &[u64]) -> u64 {
    let mut boundaries: Vec<u64> = boundaries.to_vec();
    boundaries.sort_unstable();
    let mut free_by = confirmed_ns.saturating_add(ttl_ns).saturating_add(bound_ns);
    for b in boundaries {
        if b < confirmed_ns {
            continue;
        }
        if b >= free_by {
            break;
        }
        free_by = free_by.max(b.saturating_add(ttl_ns).saturating_add(bound_ns));
    }
    free_by
}

/// Where a lease outlived its holder: stretches of at least `grace_ns`
/// inside a refused wait (`waits`: `[invoked, refused]` of acquires the
/// server answered "not granted within your wait") that begin where the
/// claim of a holder gone silent ran out and that no other claim or fault
/// covers. `claims`: `(from, to, silent)` during which someone may hold the
/// lease by right: a grant from its answer to its release (`silent`
/// false), or to [`lease_free_by`] of its last confirmation when it never
/// released (`silent` true; an acquire whose answer was lost likewise);
/// `faults`: periods in force (`None`: to the end), which excuse anything.
/// A stretch after a release is a matter for the liveness check, not this
/// one. Overlapping findings merge.
pub fn lease_outlived(
    claims: &[(u64, u64, bool)],
    faults: &[(u64, Option<u64>)],
    waits: &[(u64, u64)],
    grace_ns: u64,
) -> Vec<GrantlessWindow> {
    // Covered time, merged; each stretch's end remembers whether a silent
    // holder's claim is what ran out there.
    let mut covered: Vec<(u64, u64, bool)> = claims
        .iter()
        .copied()
        .chain(
            faults
                .iter()
                .map(|&(start, end)| (start, end.unwrap_or(u64::MAX), false)),
        )
        .filter(|&(from, to, _)| to > from)
        .collect();
    covered.sort_unstable_by_key(|&(from, to, silent)| (from, to, !silent));
    let mut merged: Vec<(u64, u64, bool)> = Vec::new();
    for (from, to, silent) in covered {
        match merged.last_mut() {
            Some(m) if from <= m.1 => {
                if to > m.1 {
                    *m = (m.0, to, silent);
                } else if to == m.1 {
                    m.2 &= silent;
                }
            }
            _ => merged.push((from, to, silent)),
        }
    }
    let gaps: Vec<(u64, u64)> = merged
        .iter()
        .enumerate()
        .filter(|(_, m)| m.2)
        .map(|(k, m)| (m.1, merged.get(k + 1).map_or(u64::MAX, |n| n.0)))
        .collect();
    let mut found: Vec<(u64, u64)> = Vec::new();
    for &(s, e) in waits {
        for &(a, b) in &gaps {
            let (from, to) = (s.max(a), e.min(b));
            if to > from && to - from >= grace_ns {
                found.push((from, to));
            }
        }
    }
    found.sort_unstable();
    let mut out: Vec<GrantlessWindow> = Vec::new();
    for (start, end) in found {
        match out.last_mut() {
            Some(w) if start <= w.end => w.end = w.end.max(end),
            _ => out.push(GrantlessWindow { start, end }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_holders_lease_must_lapse_within_its_ttl_and_an_election() {
        let s = 1_000_000_000;
        // Confirmed at 1 s, TTL 3 s, bound 5 s: gone by 9 s.
        assert_eq!(lease_free_by(s, 3 * s, 5 * s, &[]), 9 * s);
        // A fault boundary before then (a leader killed at 6 s) restarts
        // the count: 6 + 3 + 5; one after it, or before the confirmation,
        // changes nothing.
        assert_eq!(lease_free_by(s, 3 * s, 5 * s, &[6 * s, 20 * s, 0]), 14 * s);
        // A chain of boundaries, each before the last bound.
        assert_eq!(lease_free_by(s, 3 * s, 5 * s, &[12 * s, 6 * s]), 20 * s);

        // A waiter refused from 2 s to 15 s: the claim ends at 9 s, so
        // 9-15 s outlived it.
        let claims = [(0, 9 * s, true), (15 * s, 16 * s, false)];
        let waits = [(2 * s, 15 * s), (10 * s, 13 * s)];
        assert_eq!(
            lease_outlived(&claims, &[], &waits, s),
            vec![GrantlessWindow {
                start: 9 * s,
                end: 15 * s
            }]
        );
        // A fault in force over it excuses it; a short stretch is within
        // the grace.
        assert!(lease_outlived(&claims, &[(8 * s, Some(16 * s))], &waits, s).is_empty());
        assert!(lease_outlived(&[(0, 14_500_000_000, true)], &[], &waits, s).is_empty());
        // After a release, a refusal is the liveness check's business.
        let released = [(0, 9 * s, false), (15 * s, 16 * s, false)];
        assert!(lease_outlived(&released, &[], &waits, s).is_empty());
        // A silent claim that another claim outlasts is no finding.
        let outlasted = [(0, 9 * s, true), (5 * s, 15 * s, false)];
        assert!(lease_outlived(&outlasted, &[], &waits, s).is_empty());
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
