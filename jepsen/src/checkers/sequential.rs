//! Sequential creates: none lost, none duplicated, sequence order matching
//! commit order and real time, no unexplained children.

use std::collections::{BTreeMap, BTreeSet};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
