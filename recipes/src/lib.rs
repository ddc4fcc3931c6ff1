//! Coordination recipes on Warden, built only on `warden-client`'s public
//! API, so they work the same on one node and on a cluster.
//!
//! Every recipe keeps its state in znodes under a path the caller chooses
//! (e.g. `/locks/payments`), in the classic ZooKeeper/Curator shapes:
//! ephemeral-sequential contenders under a container node, each waiting on
//! its predecessor only. The fencing token of a grant is the czxid of the
//! node that won it: strictly increasing across grants of the same lock.

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod barrier;
mod election;
mod error;
mod fenced;
mod lease;
mod mutex;
mod queue;
mod rwlock;
mod semaphore;

pub use barrier::{DoubleBarrier, READY_NODE};
pub use election::{LeaderElection, LeaderInfo, Leadership};
pub use error::{Error, Result};
pub use fenced::{FencedResource, Stale};
pub use lease::{Lease, LeaseLock, LeaseState, LeaseView, LeaseWatch};
pub use mutex::{Holder, LockLost, Mutex, MutexGuard};
pub use rwlock::{ReadWriteLock, RwLockGuard, RwLockHandle, RwLockMode, READ_KIND, WRITE_KIND};
pub use semaphore::{Semaphore, SemaphoreLease, LEASE_KIND};

/// The Rust examples of `docs/recipes.md`, compiled (and run, which only
/// defines their functions) as doctests, so the page stays true to the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/recipes.md")]
mod docs_recipes {}
