//! Watches: every acknowledged change delivered, in order, once.

use std::collections::{BTreeMap, BTreeSet};

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
