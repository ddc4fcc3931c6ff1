//! The lock figures in `/metrics`, one series per kind of lock (a label
//! per lock name would grow without bound; `GET /api/v1/locks` lists the
//! locks themselves).
//!
//! Every counter, gauge and histogram is fetched from its family once, at
//! construction, and kept in an array by kind: recording is an atomic
//! add, no label hashing and no allocation.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::shape::{Kind, KINDS};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindRole {
    kind: String,
    role: String,
}

/// Whose node a removal took: the holder's or a waiter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Holder,
    Waiter,
}

fn wait_histogram() -> Histogram {
    // 1 ms .. ~9 min.
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// The families (registered) and each kind's series in them.
#[derive(Clone, Debug)]
pub struct LockMetrics {
    acquisitions_family: Family<KindLabel, Counter>,
    handoffs_family: Family<KindLabel, Counter>,
    releases_family: Family<KindLabel, Counter>,
    expired_family: Family<KindRole, Counter>,
    wait_family: Family<KindLabel, Histogram, fn() -> Histogram>,
    held_family: Family<KindLabel, Gauge>,
    waiters_family: Family<KindLabel, Gauge>,
    acquisitions: [Counter; KINDS],
    handoffs: [Counter; KINDS],
    releases: [Counter; KINDS],
    /// By kind, then holder (0) / waiter (1).
    expired: [[Counter; 2]; KINDS],
    wait: [Histogram; KINDS],
    held: [Gauge; KINDS],
    waiters: [Gauge; KINDS],
}

impl Default for LockMetrics {
    fn default() -> Self {
        let acquisitions_family = Family::<KindLabel, Counter>::default();
        let handoffs_family = Family::<KindLabel, Counter>::default();
        let releases_family = Family::<KindLabel, Counter>::default();
        let expired_family = Family::<KindRole, Counter>::default();
        let wait_family = Family::new_with_constructor(wait_histogram as fn() -> Histogram);
        let held_family = Family::<KindLabel, Gauge>::default();
        let waiters_family = Family::<KindLabel, Gauge>::default();
        let label = |k: Kind| KindLabel {
            kind: k.label().to_string(),
        };
        let per_kind =
            |f: &Family<KindLabel, Counter>| Kind::ALL.map(|k| f.get_or_create(&label(k)).clone());
        let acquisitions = per_kind(&acquisitions_family);
        let handoffs = per_kind(&handoffs_family);
        let releases = per_kind(&releases_family);
        let expired = Kind::ALL.map(|k| {
            ["holder", "waiter"].map(|role| {
                expired_family
                    .get_or_create(&KindRole {
                        kind: k.label().to_string(),
                        role: role.to_string(),
                    })
                    .clone()
            })
        });
        let wait = Kind::ALL.map(|k| wait_family.get_or_create(&label(k)).clone());
        let held = Kind::ALL.map(|k| held_family.get_or_create(&label(k)).clone());
        let waiters = Kind::ALL.map(|k| waiters_family.get_or_create(&label(k)).clone());
        LockMetrics {
            acquisitions_family,
            handoffs_family,
            releases_family,
            expired_family,
            wait_family,
            held_family,
            waiters_family,
            acquisitions,
            handoffs,
            releases,
            expired,
            wait,
            held,
            waiters,
        }
    }
}

impl LockMetrics {
    /// Adds the families to `registry` (prefixed `warden_` there).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "locks_acquisitions",
            "Lock grants (a contender node became the lowest of its lock) applied by this server, by kind of lock",
            self.acquisitions_family.clone(),
        );
        registry.register(
            "locks_handoffs",
            "Grants to a contender that had queued behind a holder (the lock passed from one holder to a waiter), by kind",
            self.handoffs_family.clone(),
        );
        registry.register(
            "locks_wait_seconds",
            "From a contender node's creation to its grant, by the leader's clock in the log (0 for a free lock), by kind",
            self.wait_family.clone(),
        );
        registry.register(
            "locks_releases",
            "Holders' nodes deleted by a client (a release, or the holder's session closed by its client), by kind",
            self.releases_family.clone(),
        );
        registry.register(
            "locks_expired",
            "Contender nodes removed by the server: a lease's TTL ran out or the owner's session expired, by kind and role (holder or waiter)",
            self.expired_family.clone(),
        );
        registry.register(
            "locks_held",
            "Locks held now (a lock with at least one contender), by kind",
            self.held_family.clone(),
        );
        registry.register(
            "locks_waiters",
            "Contenders queued behind a holder now, by kind",
            self.waiters_family.clone(),
        );
    }

    pub(super) fn granted(&self, kind: Kind, handoff: bool, waited_s: f64) {
        let k = kind.index();
        self.acquisitions[k].inc();
        if handoff {
            self.handoffs[k].inc();
        }
        self.wait[k].observe(waited_s);
    }

    pub(super) fn released(&self, kind: Kind) {
        self.releases[kind.index()].inc();
    }

    pub(super) fn expired(&self, kind: Kind, role: Role) {
        let r = match role {
            Role::Holder => 0,
            Role::Waiter => 1,
        };
        self.expired[kind.index()][r].inc();
    }

    pub(super) fn set_now(&self, kind: Kind, held: usize, waiters: usize) {
        let k = kind.index();
        self.held[k].set(held as i64);
        self.waiters[k].set(waiters as i64);
    }

    /// Acquisitions of `kind` so far (for tests).
    pub fn acquisitions(&self, kind: Kind) -> u64 {
        self.acquisitions[kind.index()].get()
    }

    /// Hand-offs of `kind` so far (for tests).
    pub fn handoffs(&self, kind: Kind) -> u64 {
        self.handoffs[kind.index()].get()
    }

    /// Expirations of `kind`'s nodes in `role` so far (for tests).
    pub fn expirations(&self, kind: Kind, role: Role) -> u64 {
        let r = match role {
            Role::Holder => 0,
            Role::Waiter => 1,
        };
        self.expired[kind.index()][r].get()
    }

    /// Releases of `kind` so far (for tests).
    pub fn releases(&self, kind: Kind) -> u64 {
        self.releases[kind.index()].get()
    }

    /// Waiters of `kind` now, as the gauge says (for tests).
    pub fn waiters(&self, kind: Kind) -> i64 {
        self.waiters[kind.index()].get()
    }
}
