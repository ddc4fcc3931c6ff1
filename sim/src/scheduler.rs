//! The discrete-event scheduler: a heap of events keyed by (time,
//! sequence). The sequence number is the order events were scheduled in,
//! so that events due at the same time run in a fixed order and the heap
//! never compares events themselves.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTime;

struct Scheduled<E> {
    at: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    /// Reversed: `BinaryHeap` is a max-heap, and the earliest comes first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

pub struct Scheduler<E> {
    now: SimTime,
    next_seq: u64,
    heap: BinaryHeap<Scheduled<E>>,
}

impl<E> Default for Scheduler<E> {
    fn default() -> Self {
        Self {
            now: SimTime::default(),
            next_seq: 0,
            heap: BinaryHeap::new(),
        }
    }
}

impl<E> Scheduler<E> {
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` at `at`; an event in the past runs now (after
    /// the ones already due now).
    pub fn at(&mut self, at: SimTime, event: E) {
        let at = at.max(self.now);
        self.heap.push(Scheduled {
            at,
            seq: self.next_seq,
            event,
        });
        self.next_seq += 1;
    }

    pub fn after_us(&mut self, us: u64, event: E) {
        self.at(self.now.plus_us(us), event);
    }

    /// The next event, moving time to it; `None` when none is due by
    /// `until`.
    pub fn next(&mut self, until: SimTime) -> Option<(SimTime, E)> {
        if self.heap.peek()?.at > until {
            return None;
        }
        let s = self.heap.pop()?;
        self.now = s.at;
        Some((s.at, s.event))
    }

    pub fn pending(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_run_in_time_order_and_ties_in_the_order_scheduled() {
        let mut s = Scheduler::default();
        s.at(SimTime(30), "c");
        s.at(SimTime(10), "a");
        s.at(SimTime(30), "d");
        s.at(SimTime(20), "b");
        let mut order = Vec::new();
        while let Some((t, e)) = s.next(SimTime(u64::MAX)) {
            order.push((t.0, e));
        }
        assert_eq!(order, [(10, "a"), (20, "b"), (30, "c"), (30, "d")]);
    }

    #[test]
    fn nothing_runs_past_the_end_and_the_past_runs_now() {
        let mut s = Scheduler::default();
        s.at(SimTime(50), 1);
        s.at(SimTime(5), 0);
        assert_eq!(s.next(SimTime(10)), Some((SimTime(5), 0)));
        assert_eq!(s.next(SimTime(10)), None);
        s.at(SimTime(1), 2);
        assert_eq!(s.next(SimTime(10)), Some((SimTime(5), 2)));
    }
}
