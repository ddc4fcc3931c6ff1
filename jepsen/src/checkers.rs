//! Checkers for the lock, lease, sequential, ephemeral and watch workloads. Each
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

// ---------------------------------------------------------------- lease

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
    let mut out = Vec::new();
    let mut by_token: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, g) in grants.iter().enumerate() {
        if let Some(&first) = by_token.get(&g.token) {
            out.push(LeaseAnomaly::DuplicateToken {
                token: g.token,
                a: first,
                b: i,
            });
        } else {
            by_token.insert(g.token, i);
        }
    }

    // Every pair, by prefix maxima: for each grant, the highest token of
    // the grants known before it can have been made.
    let mut by_known: Vec<usize> = (0..grants.len()).collect();
    by_known.sort_by_key(|&i| (grants[i].granted_ns, grants[i].token));
    let mut prefix_max: Vec<usize> = Vec::with_capacity(by_known.len());
    for &i in &by_known {
        let best = match prefix_max.last() {
            Some(&m) if grants[m].token >= grants[i].token => m,
            _ => i,
        };
        prefix_max.push(best);
    }
    for (later, g) in grants.iter().enumerate() {
        let n = by_known.partition_point(|&i| grants[i].granted_ns < g.earliest_ns);
        if n == 0 {
            continue;
        }
        let earlier = prefix_max[n - 1];
        // Equal tokens are reported as duplicates.
        if grants[earlier].token > g.token {
            out.push(LeaseAnomaly::TokenOrder { earlier, later });
        }
    }

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

    let mut highest = 0;
    for (position, &t) in fence_accepted.iter().enumerate() {
        if t < highest {
            out.push(LeaseAnomaly::FenceWentBack {
                accepted_before: highest,
                accepted_now: t,
                position,
            });
        }
        highest = highest.max(t);
    }
    out
}

// ---------------------------------------------------------------- sequential

/// An acknowledged sequential create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqCreate {
    /// History index of the invocation.
    pub op: u64,
    /// Run time (ns) of the invocation and of the `ok`.
    pub invoked: u64,
    pub completed: u64,
    /// The created node's name (not path) and the czxid its stat carried.
    pub name: String,
    pub czxid: u64,
}

/// A create whose outcome is unknown (`info`, or never completed): it may
/// have made a child at any time after `invoked`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqUnknown {
    pub op: u64,
    pub invoked: u64,
}

/// A child of the parent in the final read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqChild {
    pub name: String,
    pub czxid: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequentialAnomaly {
    /// An acknowledged create is missing at the end.
    Lost { op: u64, name: String },
    /// Two acknowledged creates got the same name.
    Duplicate { ops: [u64; 2], name: String },
    /// The final read's czxid of a node is not the one its create returned.
    CzxidChanged {
        op: u64,
        name: String,
        acked: u64,
        found: u64,
    },
    /// Sequence order and commit (czxid) order disagree: `a` has the lower
    /// sequence number but not the lower czxid.
    OutOfOrder { a: (String, u64), b: (String, u64) },
    /// Create `earlier` completed before create `later` was invoked, yet
    /// `later` got the lower (or same) sequence number.
    RealTime {
        earlier: u64,
        later: u64,
        earlier_name: String,
        later_name: String,
    },
    /// Children no create could have made: neither acknowledged, nor
    /// explained by an unknown create invoked late enough.
    Unexplained { names: Vec<String> },
    /// A name without a sequence suffix.
    BadName { name: String },
}

/// The sequence number of a sequential node's name (its last 10 digits).
pub fn seq_number(name: &str) -> Option<u64> {
    let tail = name.get(name.len().checked_sub(10)?..)?;
    if tail.bytes().all(|b| b.is_ascii_digit()) {
        tail.parse().ok()
    } else {
        None
    }
}

/// Judges sequential creates against the parent's children at the end.
pub fn check_sequential(
    acked: &[SeqCreate],
    unknown: &[SeqUnknown],
    final_children: &[SeqChild],
) -> Vec<SequentialAnomaly> {
    let mut out = Vec::new();
    let present: BTreeMap<&str, u64> = final_children
        .iter()
        .map(|c| (c.name.as_str(), c.czxid))
        .collect();

    // No lost writes, unique names, stable czxids.
    let mut by_name: BTreeMap<&str, &SeqCreate> = BTreeMap::new();
    for a in acked {
        if let Some(first) = by_name.insert(a.name.as_str(), a) {
            out.push(SequentialAnomaly::Duplicate {
                ops: [first.op, a.op],
                name: a.name.clone(),
            });
        }
        match present.get(a.name.as_str()) {
            None => out.push(SequentialAnomaly::Lost {
                op: a.op,
                name: a.name.clone(),
            }),
            Some(&found) if found != a.czxid => out.push(SequentialAnomaly::CzxidChanged {
                op: a.op,
                name: a.name.clone(),
                acked: a.czxid,
                found,
            }),
            Some(_) => {}
        }
    }

    // Sequence order is commit order, over every node known to exist(ed).
    let mut known: BTreeMap<u64, (String, u64)> = BTreeMap::new();
    for (name, czxid) in final_children
        .iter()
        .map(|c| (&c.name, c.czxid))
        .chain(acked.iter().map(|a| (&a.name, a.czxid)))
    {
        match seq_number(name) {
            Some(seq) => {
                known.entry(seq).or_insert_with(|| (name.clone(), czxid));
            }
            None => {
                let bad = SequentialAnomaly::BadName { name: name.clone() };
                if !out.contains(&bad) {
                    out.push(bad);
                }
            }
        }
    }
    let ordered: Vec<&(String, u64)> = known.values().collect();
    for w in ordered.windows(2) {
        if w[1].1 <= w[0].1 {
            out.push(SequentialAnomaly::OutOfOrder {
                a: w[0].clone(),
                b: w[1].clone(),
            });
        }
    }

    // Real time: whatever completed before an invocation has a lower
    // number. Sweep invocations in time order, keeping the completed create
    // with the highest number.
    let mut by_completion: Vec<&SeqCreate> = acked.iter().collect();
    by_completion.sort_by_key(|a| a.completed);
    let mut by_invocation: Vec<&SeqCreate> = acked.iter().collect();
    by_invocation.sort_by_key(|a| a.invoked);
    let mut highest: Option<(u64, &SeqCreate)> = None;
    let mut next = 0;
    for b in &by_invocation {
        while next < by_completion.len() && by_completion[next].completed < b.invoked {
            let a = by_completion[next];
            if let Some(seq) = seq_number(&a.name) {
                if highest.is_none_or(|(h, _)| seq > h) {
                    highest = Some((seq, a));
                }
            }
            next += 1;
        }
        if let (Some((h, a)), Some(seq)) = (highest, seq_number(&b.name)) {
            if seq <= h {
                out.push(SequentialAnomaly::RealTime {
                    earlier: a.op,
                    later: b.op,
                    earlier_name: a.name.clone(),
                    later_name: b.name.clone(),
                });
            }
        }
    }

    // Children nobody acknowledged must each be the work of a distinct
    // unknown create, which got a number above every create that
    // completed before it was invoked.
    let acked_names: BTreeSet<&str> = acked.iter().map(|a| a.name.as_str()).collect();
    let mut orphans: Vec<(u64, &str)> = final_children
        .iter()
        .filter(|c| !acked_names.contains(c.name.as_str()))
        .filter_map(|c| seq_number(&c.name).map(|s| (s, c.name.as_str())))
        .collect();
    orphans.sort();
    // Highest number completed by each completion time (prefix maxima).
    let mut prefix_max: Vec<(u64, Option<u64>)> = Vec::with_capacity(by_completion.len());
    for a in &by_completion {
        let before = prefix_max.last().and_then(|p| p.1);
        prefix_max.push((a.completed, before.max(seq_number(&a.name))));
    }
    let mut floors: Vec<Option<u64>> = unknown
        .iter()
        .map(|u| {
            let n = prefix_max.partition_point(|p| p.0 < u.invoked);
            n.checked_sub(1).and_then(|i| prefix_max[i].1)
        })
        .collect();
    floors.sort();
    // The set of unknown creates that could have made a child only grows
    // with its number, so taking orphans in ascending order, the k-th needs
    // k candidates below it.
    let mut unexplained = Vec::new();
    for (k, (seq, name)) in orphans.iter().enumerate() {
        // `None` sorts first, and means no floor at all.
        let candidates = floors.partition_point(|f| f.is_none_or(|f| f < *seq));
        if candidates <= k - unexplained.len() {
            unexplained.push(name.to_string());
        }
    }
    if !unexplained.is_empty() {
        out.push(SequentialAnomaly::Unexplained { names: unexplained });
    }
    out
}

// ---------------------------------------------------------------- ephemeral

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

// ---------------------------------------------------------------- watch

/// An acknowledged write to a watched node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedWrite {
    pub op: u64,
    pub path: String,
    /// The mzxid the write's stat returned.
    pub zxid: u64,
    pub invoked: u64,
    pub completed: u64,
}

/// A watch event as a watcher received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub op: u64,
    pub zxid: u64,
    /// Run time of delivery.
    pub at: u64,
}

/// One registration of a persistent recursive watch, from the `ok` of its
/// `AddWatch` to the end of its stream or of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentSegment {
    pub watcher: u64,
    pub segment: u64,
    pub started: u64,
    pub events: Vec<Delivered>,
    pub ended: u64,
    /// The watch lived until the run stopped it after the drain (rather
    /// than ending early: session expired, queue overflowed); it then
    /// covers every acknowledged write.
    pub lasted: bool,
}

/// A stretch during which a watcher's session was disconnected (a blip too
/// short to see has `from == to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    pub watcher: u64,
    pub from: u64,
    pub to: u64,
}

/// One one-shot watch: the read that set it and what it fired with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oneshot {
    pub watcher: u64,
    /// The read's invocation index (identifies the registration).
    pub op: u64,
    pub path: String,
    /// The mzxid the read returned.
    pub read_mzxid: u64,
    pub fired: Vec<Delivered>,
    /// When the watcher stopped waiting, if it never fired, and whether it
    /// was the run that stopped it after the drain (not the session ending).
    pub ended: u64,
    pub lasted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchAnomaly {
    /// Events delivered to one watcher out of zxid order.
    OutOfOrder {
        watcher: u64,
        before: Delivered,
        after: Delivered,
    },
    /// An acknowledged write a persistent watch covered, never delivered,
    /// with no disconnect to explain it.
    Missed {
        watcher: u64,
        segment: u64,
        write_op: u64,
        zxid: u64,
    },
    /// A one-shot watch fired more than once.
    FiredTwice { watcher: u64, op: u64 },
    /// A one-shot fired for a change no newer than what its read saw.
    Stale {
        watcher: u64,
        op: u64,
        read_mzxid: u64,
        zxid: u64,
    },
    /// A one-shot that lasted to the end never fired, though an
    /// acknowledged write changed its node after its read.
    NeverFired {
        watcher: u64,
        op: u64,
        write_op: u64,
        zxid: u64,
    },
}

/// Judges watch deliveries against the acknowledged writes.
///
/// A persistent watch must deliver every acknowledged write invoked after
/// it was registered, or newer than its first event, up to its last event
/// (or all of them, if it lasted through the drain). A reconnect re-adds
/// persistent watches without replaying what happened meanwhile (as in
/// ZooKeeper), so a missed write is excused when the watcher was
/// disconnected at some time after the write was invoked and before the
/// next event it did get (or its end).
pub fn check_watch(
    writes: &[AckedWrite],
    persistent: &[PersistentSegment],
    oneshots: &[Oneshot],
    disconnects: &[Disconnect],
) -> Vec<WatchAnomaly> {
    let mut out = Vec::new();
    let out_of_order = |watcher: u64, events: &mut dyn Iterator<Item = &Delivered>| {
        let mut found = Vec::new();
        let mut last: Option<&Delivered> = None;
        for e in events {
            if let Some(l) = last {
                if e.zxid <= l.zxid {
                    found.push(WatchAnomaly::OutOfOrder {
                        watcher,
                        before: l.clone(),
                        after: e.clone(),
                    });
                }
            }
            last = Some(e);
        }
        found
    };

    for seg in persistent {
        out.extend(out_of_order(seg.watcher, &mut seg.events.iter()));
        let got: BTreeSet<u64> = seg.events.iter().map(|e| e.zxid).collect();
        let first = seg.events.first().map(|e| e.zxid);
        let last = seg.events.last().map(|e| e.zxid);
        for w in writes {
            let after_start = w.invoked > seg.started || first.is_some_and(|f| w.zxid > f);
            let before_end = seg.lasted || last.is_some_and(|l| w.zxid < l);
            if !after_start || !before_end || got.contains(&w.zxid) {
                continue;
            }
            let next_at = seg
                .events
                .iter()
                .find(|e| e.zxid > w.zxid)
                .map(|e| e.at)
                .unwrap_or(seg.ended);
            let excused = disconnects
                .iter()
                .any(|d| d.watcher == seg.watcher && d.to >= w.invoked && d.from <= next_at);
            if !excused {
                out.push(WatchAnomaly::Missed {
                    watcher: seg.watcher,
                    segment: seg.segment,
                    write_op: w.op,
                    zxid: w.zxid,
                });
            }
        }
    }

    let mut by_watcher: BTreeMap<u64, Vec<&Oneshot>> = BTreeMap::new();
    for o in oneshots {
        by_watcher.entry(o.watcher).or_default().push(o);
        if o.fired.len() > 1 {
            out.push(WatchAnomaly::FiredTwice {
                watcher: o.watcher,
                op: o.op,
            });
        }
        for e in &o.fired {
            if e.zxid <= o.read_mzxid {
                out.push(WatchAnomaly::Stale {
                    watcher: o.watcher,
                    op: o.op,
                    read_mzxid: o.read_mzxid,
                    zxid: e.zxid,
                });
            }
        }
        if o.fired.is_empty() && o.lasted {
            if let Some(w) = writes
                .iter()
                .find(|w| w.path == o.path && w.zxid > o.read_mzxid && w.completed < o.ended)
            {
                out.push(WatchAnomaly::NeverFired {
                    watcher: o.watcher,
                    op: o.op,
                    write_op: w.op,
                    zxid: w.zxid,
                });
            }
        }
    }
    for (watcher, list) in by_watcher {
        let mut events: Vec<&Delivered> = list.iter().flat_map(|o| o.fired.iter()).collect();
        events.sort_by_key(|e| (e.at, e.op));
        out.extend(out_of_order(watcher, &mut events.into_iter()));
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

    const SEC: u64 = 1_000_000_000;

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

    fn created(op: u64, invoked: u64, completed: u64, seq: u64, czxid: u64) -> SeqCreate {
        SeqCreate {
            op,
            invoked,
            completed,
            name: format!("n-{seq:010}"),
            czxid,
        }
    }

    fn children(list: &[(u64, u64)]) -> Vec<SeqChild> {
        list.iter()
            .map(|&(seq, czxid)| SeqChild {
                name: format!("n-{seq:010}"),
                czxid,
            })
            .collect()
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
    fn sequential_clean_and_planted() {
        let acked = vec![created(0, 0, 10, 0, 5), created(1, 5, 20, 1, 7)];
        let all = children(&[(0, 5), (1, 7)]);
        assert_eq!(check_sequential(&acked, &[], &all), vec![]);
        assert_eq!(
            check_sequential(&acked, &[], &all[..1]),
            vec![SequentialAnomaly::Lost {
                op: 1,
                name: "n-0000000001".into()
            }]
        );
        let swapped = children(&[(0, 9), (1, 7)]);
        assert!(matches!(
            check_sequential(&[], &vec![SeqUnknown { op: 0, invoked: 0 }; 2], &swapped)[..],
            [SequentialAnomaly::OutOfOrder { .. }]
        ));
        let dup = vec![created(0, 0, 10, 0, 5), created(1, 0, 10, 0, 5)];
        assert!(check_sequential(&dup, &[], &all)
            .iter()
            .any(|a| matches!(a, SequentialAnomaly::Duplicate { .. })));
        // Op 1 completed before op 0 was invoked, yet got the higher number.
        let late = vec![created(0, 30, 40, 0, 5), created(1, 0, 10, 1, 7)];
        assert_eq!(
            check_sequential(&late, &[], &all),
            vec![SequentialAnomaly::RealTime {
                earlier: 1,
                later: 0,
                earlier_name: "n-0000000001".into(),
                later_name: "n-0000000000".into()
            }]
        );
    }

    #[test]
    fn sequential_children_must_be_explained() {
        let acked = vec![created(0, 0, 10, 0, 5)];
        let all = children(&[(0, 5), (1, 7)]);
        // Nobody could have made n-1.
        assert_eq!(
            check_sequential(&acked, &[], &all),
            vec![SequentialAnomaly::Unexplained {
                names: vec!["n-0000000001".into()]
            }]
        );
        // An unknown create invoked after op 0 completed can.
        let later = SeqUnknown { op: 1, invoked: 20 };
        assert_eq!(
            check_sequential(&acked, std::slice::from_ref(&later), &all),
            vec![]
        );
        // But not a child numbered below what completed before it began.
        let low = children(&[(0, 5), (1, 7), (2, 9)]);
        let acked2 = vec![created(0, 0, 10, 2, 9)];
        assert_eq!(
            check_sequential(&acked2, &[later.clone(), later], &low),
            vec![SequentialAnomaly::Unexplained {
                names: vec!["n-0000000000".into(), "n-0000000001".into()]
            }]
        );
        assert_eq!(seq_number("n-0000000012"), Some(12));
        assert_eq!(seq_number("n-12"), None);
    }

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

    fn write(op: u64, zxid: u64, invoked: u64) -> AckedWrite {
        AckedWrite {
            op,
            path: "/w/0".into(),
            zxid,
            invoked,
            completed: invoked + 5,
        }
    }

    fn delivered(op: u64, zxid: u64, at: u64) -> Delivered {
        Delivered { op, zxid, at }
    }

    #[test]
    fn watch_clean_and_planted() {
        let writes = vec![write(0, 5, 10), write(1, 7, 20), write(2, 9, 30)];
        let seg = PersistentSegment {
            watcher: 1,
            segment: 0,
            started: 5,
            events: vec![
                delivered(10, 5, 16),
                delivered(11, 7, 26),
                delivered(12, 9, 36),
            ],
            ended: 50,
            lasted: true,
        };
        let one = Oneshot {
            watcher: 2,
            op: 20,
            path: "/w/0".into(),
            read_mzxid: 5,
            fired: vec![delivered(21, 7, 26)],
            ended: 26,
            lasted: false,
        };
        let clean = check_watch(
            &writes,
            std::slice::from_ref(&seg),
            std::slice::from_ref(&one),
            &[],
        );
        assert_eq!(clean, vec![]);

        let mut swapped = seg.clone();
        swapped.events.swap(1, 2);
        assert!(check_watch(&writes, &[swapped], &[], &[])
            .iter()
            .any(|a| matches!(a, WatchAnomaly::OutOfOrder { watcher: 1, .. })));

        let mut missing = seg.clone();
        missing.events.remove(1);
        let missed = WatchAnomaly::Missed {
            watcher: 1,
            segment: 0,
            write_op: 1,
            zxid: 7,
        };
        assert_eq!(
            check_watch(&writes, &[missing.clone()], &[], &[]),
            vec![missed]
        );
        // A disconnect after the write began and before the next event
        // excuses it; one before the write does not.
        let during = Disconnect {
            watcher: 1,
            from: 22,
            to: 24,
        };
        assert_eq!(
            check_watch(&writes, &[missing.clone()], &[], &[during]),
            vec![]
        );
        let before = Disconnect {
            watcher: 1,
            from: 12,
            to: 14,
        };
        assert_eq!(check_watch(&writes, &[missing], &[], &[before]).len(), 1);

        let stale = Oneshot {
            fired: vec![delivered(21, 5, 26)],
            ..one.clone()
        };
        assert!(matches!(
            check_watch(&writes, &[], &[stale], &[])[..],
            [WatchAnomaly::Stale { zxid: 5, .. }]
        ));
        let twice = Oneshot {
            fired: vec![delivered(21, 7, 26), delivered(22, 9, 36)],
            ..one.clone()
        };
        assert!(matches!(
            check_watch(&writes, &[], &[twice], &[])[..],
            [WatchAnomaly::FiredTwice { .. }]
        ));
        let silent = Oneshot {
            fired: vec![],
            ended: 60,
            lasted: true,
            ..one
        };
        assert!(matches!(
            check_watch(&writes, &[], &[silent], &[])[..],
            [WatchAnomaly::NeverFired { zxid: 7, .. }]
        ));
    }
}
