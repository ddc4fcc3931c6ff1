//! Grants of a lock: the native lock's (recipes' `Mutex`) and the HTTP lease
//! lock's, checked for unique and rising tokens, overlapping holds and a
//! fenced resource that went back.

use std::collections::BTreeMap;
use std::time::Duration;

/// How much earlier than a session timeout after the holder's last
/// contact a successor may be granted before the overlap counts against
/// the service: the server measures the timeout from when it last heard
/// from the session, a little before the client saw the answer, and
/// checks expiry on its ticks.
pub const EXPIRY_SLACK: Duration = Duration::from_secs(1);

/// Whether an overlap of two holds is excused by the earlier holder's
/// session having expired: only if the later hold began at least the
/// session timeout (less [`EXPIRY_SLACK`]) after the earlier holder's last
/// contact with the cluster. A server cannot expire a session sooner, so
/// an earlier successor means two holders the service itself allowed.
/// The lock and election checkers share this rule.
pub fn expiry_excuses(
    later_start_ns: u64,
    last_contact_ns: u64,
    session_timeout: Duration,
) -> bool {
    let since = i128::from(later_start_ns) - i128::from(last_contact_ns);
    since >= session_timeout.saturating_sub(EXPIRY_SLACK).as_nanos() as i128
}

/// One term's token and when it can have been granted, for
/// [`token_order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenSpan {
    pub token: u64,
    /// The earliest the grant can have been decided (the invocation of
    /// the first request that can have made it).
    pub earliest_ns: u64,
    /// When the holder knew it was granted (the latest it can have been
    /// decided).
    pub known_ns: u64,
}

/// Tokens rising in grant order over *every* pair: whenever grant `a` was
/// known before grant `b` can have been decided (`a.known_ns <
/// b.earliest_ns`), `a.token < b.token`. Returns `(earlier, later)` index
/// pairs, one per offending later grant (the earlier one with the highest
/// token), by prefix maxima in O(n log n). Equal tokens are not reported
/// (see [`duplicate_tokens`]).
pub fn token_order(spans: &[TokenSpan]) -> Vec<(usize, usize)> {
    let mut by_known: Vec<usize> = (0..spans.len()).collect();
    by_known.sort_by_key(|&i| (spans[i].known_ns, spans[i].token));
    let mut prefix_max: Vec<usize> = Vec::with_capacity(by_known.len());
    for &i in &by_known {
        let best = match prefix_max.last() {
            Some(&m) if spans[m].token >= spans[i].token => m,
            _ => i,
        };
        prefix_max.push(best);
    }
    let mut out = Vec::new();
    for (later, g) in spans.iter().enumerate() {
        let n = by_known.partition_point(|&i| spans[i].known_ns < g.earliest_ns);
        if n == 0 {
            continue;
        }
        let earlier = prefix_max[n - 1];
        if spans[earlier].token > g.token {
            out.push((earlier, later));
        }
    }
    out
}

/// Tokens given more than once: `(token, first, again)` index pairs.
pub fn duplicate_tokens(tokens: impl IntoIterator<Item = u64>) -> Vec<(u64, usize, usize)> {
    let mut first: BTreeMap<u64, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, t) in tokens.into_iter().enumerate() {
        match first.get(&t) {
            Some(&f) => out.push((t, f, i)),
            None => {
                first.insert(t, i);
            }
        }
    }
    out
}

/// Where a fenced resource went back: `(position, highest before, accepted
/// now)` for every accepted token lower than one accepted before it (in
/// the resource's own order).
pub fn fence_went_back(accepted: &[u64]) -> Vec<(usize, u64, u64)> {
    let mut highest = 0;
    let mut out = Vec::new();
    for (position, &t) in accepted.iter().enumerate() {
        if t < highest {
            out.push((position, highest, t));
        }
        highest = highest.max(t);
    }
    out
}

/// One grant of a lock, as the harness recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub process: u64,
    pub session_id: u64,
    pub token: u64,
    /// When the acquire that made the grant was invoked: the lock node
    /// (whose czxid is the token) cannot be older.
    pub asked_ns: u64,
    /// When the client learned it held the lock, and when it released
    /// (or learned it lost) it: monotonic nanoseconds.
    pub acquired_ns: u64,
    pub released_ns: u64,
    /// The session may have ended while this grant was held (Jepsen's etcd
    /// finding: such overlaps are reported apart, not as a safety bug of the
    /// lock service, since the holder was told it lost the lock) — if the
    /// timing allows it, see [`expiry_excuses`].
    pub session_expired: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAnomaly {
    DuplicateToken {
        token: u64,
    },
    /// `earlier` was known to its holder before `later` was asked for, yet
    /// `later`'s token is lower (checked over every pair).
    TokenNotIncreasing {
        earlier: Grant,
        later: Grant,
    },
    /// Two holds overlapping in real time, and no session can have expired
    /// in time to explain it.
    Overlap {
        a: Grant,
        b: Grant,
    },
    /// Overlap where the earlier holder's session may have ended, and the
    /// later grant came at least the session timeout (less
    /// [`EXPIRY_SLACK`]) after the earlier holder's acquire (reported
    /// apart).
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
/// accepted (in its own order): tokens unique and rising over every pair
/// of grants ([`token_order`]); no two holds overlapping unless the earlier
/// holder's session may have ended and [`expiry_excuses`] the timing
/// (the holder's last known contact being its acquire's answer); the fence
/// never going back.
pub fn check_lock(
    grants: &[Grant],
    fence_accepted: &[u64],
    session_timeout: Duration,
) -> Vec<LockAnomaly> {
    let mut out: Vec<LockAnomaly> = duplicate_tokens(grants.iter().map(|g| g.token))
        .into_iter()
        .map(|(token, _, _)| LockAnomaly::DuplicateToken { token })
        .collect();
    let spans: Vec<TokenSpan> = grants
        .iter()
        .map(|g| TokenSpan {
            token: g.token,
            earliest_ns: g.asked_ns,
            known_ns: g.acquired_ns,
        })
        .collect();
    for (earlier, later) in token_order(&spans) {
        out.push(LockAnomaly::TokenNotIncreasing {
            earlier: grants[earlier].clone(),
            later: grants[later].clone(),
        });
    }
    let mut by_time: Vec<&Grant> = grants.iter().collect();
    by_time.sort_by_key(|g| (g.acquired_ns, g.token));
    for (i, a) in by_time.iter().enumerate() {
        for b in &by_time[i + 1..] {
            if b.acquired_ns >= a.released_ns {
                break;
            }
            let (a, b) = ((*a).clone(), (*b).clone());
            if a.session_expired && expiry_excuses(b.acquired_ns, a.acquired_ns, session_timeout) {
                out.push(LockAnomaly::OverlapAfterExpiry { a, b });
            } else {
                out.push(LockAnomaly::Overlap { a, b });
            }
        }
    }
    out.extend(
        fence_went_back(fence_accepted)
            .into_iter()
            .map(|(_, before, now)| LockAnomaly::FenceWentBack {
                accepted_before: before,
                accepted_now: now,
            }),
    );
    out
}

/// One grant of a lease lock (the HTTP lease API), as the lease workload
/// recorded it. A grant is one client id's hold of one fencing token; the
/// acquires that answered it (a retry after a lost answer answers the same
/// grant again) and its renewals confirm it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub client_id: String,
    pub token: u64,
    /// The earliest the server can have made the grant: the invocation of
    /// the client id's first acquire (a lost attempt may be the one
    /// granted, and a retry only hands that grant over).
    pub earliest_ns: u64,
    /// When the client learned it held the lease (the first `ok` acquire's
    /// completion): the latest the grant can have been made.
    pub granted_ns: u64,
    /// When the client stopped using it (its release's invocation, or the
    /// end of the history).
    pub released_ns: u64,
    /// Invocations of the acquires and renewals that succeeded with this
    /// grant. Each one's write stamped the lease at or after its
    /// invocation, so the lease cannot lapse before the latest of them
    /// plus the TTL.
    pub confirmed_ns: Vec<u64>,
    /// The lease's TTL.
    pub ttl_ns: u64,
}

impl LeaseGrant {
    /// The latest invocation of a successful acquire or renewal.
    pub fn last_confirmed_ns(&self) -> u64 {
        self.confirmed_ns
            .iter()
            .copied()
            .max()
            .unwrap_or(self.earliest_ns)
    }
}

/// What [`check_lease`] finds; grants are indices into its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnomaly {
    /// Two grants (two client ids, or one client id twice) got one token.
    DuplicateToken { token: u64, a: usize, b: usize },
    /// `earlier` was granted (its client knew it) before `later` can have
    /// been, yet `later`'s token is lower.
    TokenOrder { earlier: usize, later: usize },
    /// Two holds overlap in real time, and the later grant came less than
    /// the TTL after the earlier holder's last successful acquire or
    /// renewal: its lease cannot have lapsed.
    Overlap {
        earlier: usize,
        later: usize,
        /// From the earlier holder's last confirmation to the later grant's
        /// latest possible time (negative: the earlier holder renewed after
        /// the later grant).
        since_confirmed_ns: i128,
    },
    /// Two holds overlap, but the later grant came at least the TTL after
    /// the earlier holder's last confirmation: its lease may have lapsed
    /// (reported apart, as a note: the fence is what protects then).
    OverlapAfterExpiry {
        earlier: usize,
        later: usize,
        since_confirmed_ns: i128,
    },
    /// The fenced resource accepted a token lower than one it had
    /// accepted (positions in its own order).
    FenceWentBack {
        accepted_before: u64,
        accepted_now: u64,
        position: usize,
    },
}

/// Checks lease grants and the tokens the fenced resource accepted (in its
/// own order):
/// - tokens unique;
/// - tokens increasing in grant order over *every* pair: whenever grant
///   `a` was known to its client before grant `b` can have been made
///   (`a.granted_ns < b.earliest_ns`), `a.token < b.token`;
/// - no two holds overlap in real time, unless the later grant came at
///   least the earlier lease's TTL after its holder's last successful
///   acquire or renewal (then a note);
/// - the fence never accepted a lower token after a higher one.
pub fn check_lease(grants: &[LeaseGrant], fence_accepted: &[u64]) -> Vec<LeaseAnomaly> {
    let mut out: Vec<LeaseAnomaly> = duplicate_tokens(grants.iter().map(|g| g.token))
        .into_iter()
        .map(|(token, a, b)| LeaseAnomaly::DuplicateToken { token, a, b })
        .collect();
    let spans: Vec<TokenSpan> = grants
        .iter()
        .map(|g| TokenSpan {
            token: g.token,
            earliest_ns: g.earliest_ns,
            known_ns: g.granted_ns,
        })
        .collect();
    out.extend(
        token_order(&spans)
            .into_iter()
            .map(|(earlier, later)| LeaseAnomaly::TokenOrder { earlier, later }),
    );

    // Overlapping holds, each pair once, the earlier hold first.
    let mut by_start: Vec<usize> = (0..grants.len()).collect();
    by_start.sort_by_key(|&i| (grants[i].granted_ns, grants[i].token));
    for (k, &a) in by_start.iter().enumerate() {
        for &b in &by_start[k + 1..] {
            if grants[b].granted_ns >= grants[a].released_ns {
                break;
            }
            if grants[b].released_ns <= grants[b].granted_ns {
                // An empty hold (released at once) overlaps nothing.
                continue;
            }
            let since =
                i128::from(grants[b].granted_ns) - i128::from(grants[a].last_confirmed_ns());
            if since >= i128::from(grants[a].ttl_ns) {
                out.push(LeaseAnomaly::OverlapAfterExpiry {
                    earlier: a,
                    later: b,
                    since_confirmed_ns: since,
                });
            } else {
                out.push(LeaseAnomaly::Overlap {
                    earlier: a,
                    later: b,
                    since_confirmed_ns: since,
                });
            }
        }
    }

    out.extend(
        fence_went_back(fence_accepted)
            .into_iter()
            .map(|(position, before, now)| LeaseAnomaly::FenceWentBack {
                accepted_before: before,
                accepted_now: now,
                position,
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    const TIMEOUT: Duration = Duration::from_secs(3);

    /// A grant of `token` to `process`, asked for and known at `from`,
    /// released at `to` (milliseconds).
    fn grant(process: u64, token: u64, from: u64, to: u64) -> Grant {
        Grant {
            process,
            session_id: process,
            token,
            asked_ns: from * MS,
            acquired_ns: from * MS,
            released_ns: to * MS,
            session_expired: false,
        }
    }

    #[test]
    fn clean_lock_history_is_valid() {
        let g = vec![grant(1, 10, 0, 5), grant(2, 12, 6, 9), grant(1, 15, 10, 12)];
        assert!(check_lock(&g, &[10, 12, 15], TIMEOUT).is_empty());
    }

    #[test]
    fn planted_lock_anomalies_are_caught() {
        let overlap = vec![grant(1, 10, 0, 5), grant(2, 12, 3, 9)];
        assert!(matches!(
            check_lock(&overlap, &[], TIMEOUT)[0],
            LockAnomaly::Overlap { .. }
        ));
        let backwards = vec![grant(1, 12, 0, 5), grant(2, 10, 6, 9)];
        assert!(check_lock(&backwards, &[], TIMEOUT)
            .iter()
            .any(|a| matches!(a, LockAnomaly::TokenNotIncreasing { .. })));
        let dup = vec![grant(1, 10, 0, 5), grant(2, 10, 6, 9)];
        assert!(check_lock(&dup, &[], TIMEOUT).contains(&LockAnomaly::DuplicateToken { token: 10 }));
        assert_eq!(
            check_lock(&[], &[5, 9, 7], TIMEOUT),
            vec![LockAnomaly::FenceWentBack {
                accepted_before: 9,
                accepted_now: 7
            }]
        );
    }

    #[test]
    fn an_expired_session_excuses_an_overlap_only_a_timeout_after_the_acquire() {
        // The holder's session ended; the next grant 2.5 s after its
        // acquire is within the slack of a 3 s timeout: excused.
        let mut late = vec![grant(1, 10, 0, 4000), grant(2, 12, 2500, 2600)];
        late[0].session_expired = true;
        assert!(matches!(
            check_lock(&late, &[], TIMEOUT)[..],
            [LockAnomaly::OverlapAfterExpiry { .. }]
        ));
        // 1.5 s after it, no server can have expired the session yet.
        let mut early = vec![grant(1, 10, 0, 4000), grant(2, 12, 1500, 1600)];
        early[0].session_expired = true;
        assert!(matches!(
            check_lock(&early, &[], TIMEOUT)[..],
            [LockAnomaly::Overlap { .. }]
        ));
        // However late, a session that did not end excuses nothing.
        let alive = vec![grant(1, 10, 0, 9000), grant(2, 12, 8000, 8100)];
        assert!(matches!(
            check_lock(&alive, &[], TIMEOUT)[..],
            [LockAnomaly::Overlap { .. }]
        ));
    }

    #[test]
    fn lock_tokens_are_checked_over_every_pair() {
        // 20, then 30 held long (its session ended), then 15 asked for and
        // granted while 30 is held, after its expiry: the adjacent pairs
        // say nothing (30/15 overlap, excused), the pair 20/15 does.
        let mut g = vec![
            grant(1, 20, 0, 10),
            grant(2, 30, 20, 20_000),
            grant(3, 15, 15_000, 15_010),
        ];
        g[1].session_expired = true;
        let found = check_lock(&g, &[], TIMEOUT);
        assert!(
            found.iter().any(|a| matches!(a,
                LockAnomaly::TokenNotIncreasing { earlier, later }
                    if earlier.token == 30 && later.token == 15)),
            "{found:?}"
        );
        // A lower token asked for before the higher one was known is fine
        // (it may have been decided first).
        let mut racing = vec![grant(1, 20, 100, 110), grant(2, 15, 200, 210)];
        racing[1].asked_ns = 50 * MS;
        assert!(check_lock(&racing, &[], TIMEOUT).is_empty());
    }

    #[test]
    fn token_order_reports_each_later_grant_once_against_the_highest() {
        let span = |token, earliest_ns, known_ns| TokenSpan {
            token,
            earliest_ns,
            known_ns,
        };
        let spans = [span(5, 0, 1), span(9, 2, 3), span(7, 4, 5), span(3, 6, 7)];
        assert_eq!(token_order(&spans), vec![(1, 2), (1, 3)]);
        assert!(token_order(&[span(9, 0, 10), span(5, 5, 11)]).is_empty());
    }

    /// A grant of `token` to `client`, asked for at `from`, known at
    /// `from + 1`, released at `to` (seconds), confirmed when asked, TTL 3 s.
    fn lease(client: &str, token: u64, from: u64, to: u64) -> LeaseGrant {
        LeaseGrant {
            client_id: client.into(),
            token,
            earliest_ns: from * SEC,
            granted_ns: from * SEC + 1,
            released_ns: to * SEC,
            confirmed_ns: vec![from * SEC],
            ttl_ns: 3 * SEC,
        }
    }

    #[test]
    fn clean_lease_history_is_valid() {
        let g = vec![
            lease("a", 10, 0, 1),
            lease("b", 12, 1, 2),
            lease("c", 15, 2, 3),
        ];
        assert_eq!(check_lease(&g, &[10, 12, 12, 15]), vec![]);
        // Unordered grants (the later asked before the earlier was known)
        // may have any token order.
        let mut slow = lease("d", 11, 0, 0);
        slow.granted_ns = 5 * SEC;
        slow.released_ns = 6 * SEC;
        assert_eq!(check_lease(&[lease("a", 12, 1, 2), slow], &[]), vec![]);
    }

    #[test]
    fn lease_tokens_are_checked_over_every_pair() {
        // a (known at 1 s) before c (asked at 2 s), but b asked before
        // either was known: a-b and b-c are unordered, a-c is not, and
        // only a-c is out of order. Adjacent pairs alone would miss it.
        let a = lease("a", 50, 1, 1);
        let mut b = lease("b", 60, 0, 3);
        b.granted_ns = 3 * SEC;
        let mut c = lease("c", 40, 2, 5);
        c.granted_ns = 4 * SEC;
        assert_eq!(
            check_lease(&[a, b, c], &[]),
            vec![LeaseAnomaly::TokenOrder {
                earlier: 0,
                later: 2
            }]
        );
        let dup = [lease("a", 10, 0, 1), lease("b", 10, 1, 2)];
        assert_eq!(
            check_lease(&dup, &[]),
            vec![LeaseAnomaly::DuplicateToken {
                token: 10,
                a: 0,
                b: 1
            }]
        );
    }

    #[test]
    fn lease_overlap_is_excused_only_a_full_ttl_after_the_last_confirmation() {
        // a holds from 0 s to 10 s; b is granted at 3 s + 1 ns: exactly the
        // TTL after a's acquire was invoked (granted_ns is from + 1 ns).
        let a = lease("a", 10, 0, 10);
        let mut b = lease("b", 12, 3, 11);
        b.granted_ns = 3 * SEC;
        assert!(matches!(
            check_lease(&[a.clone(), b.clone()], &[])[..],
            [LeaseAnomaly::OverlapAfterExpiry {
                earlier: 0,
                later: 1,
                ..
            }]
        ));
        // One nanosecond sooner, the lease cannot have lapsed.
        let mut early = b.clone();
        early.granted_ns -= 1;
        assert!(matches!(
            check_lease(&[a.clone(), early], &[])[..],
            [LeaseAnomaly::Overlap {
                since_confirmed_ns: 2_999_999_999,
                ..
            }]
        ));
        // A renewal at 1 s moves the lapse to 4 s.
        let mut renewed = a.clone();
        renewed.confirmed_ns.push(SEC);
        assert!(matches!(
            check_lease(&[renewed.clone(), b.clone()], &[])[..],
            [LeaseAnomaly::Overlap { .. }]
        ));
        // A renewal that succeeded after the other grant: never excused.
        renewed.confirmed_ns.push(5 * SEC);
        assert!(matches!(
            check_lease(&[renewed, b], &[])[..],
            [LeaseAnomaly::Overlap {
                since_confirmed_ns: -2_000_000_000,
                ..
            }]
        ));
        assert_eq!(
            check_lease(&[], &[5, 9, 9, 7]),
            vec![LeaseAnomaly::FenceWentBack {
                accepted_before: 9,
                accepted_now: 7,
                position: 3
            }]
        );
    }
}
