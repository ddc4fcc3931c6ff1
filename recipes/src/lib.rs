//! Coordination recipes on Warden, built only on `warden-client`'s public
//! API, so they work the same on one node and on a cluster.
//!
//! Every recipe keeps its state in znodes under a path the caller chooses
//! (e.g. `/locks/payments`), in the classic ZooKeeper/Curator shapes:
//! ephemeral-sequential contenders under a container node, each waiting on
//! its predecessor only. The fencing token of a grant is the czxid of the
//! node that won it: strictly increasing across grants of the same lock.

mod error;
mod fenced;
mod mutex;

pub use error::{Error, Result};
pub use fenced::{FencedResource, Stale};
pub use mutex::{Holder, LockLost, Mutex, MutexGuard};

mod election;
mod lease;

pub use election::{LeaderElection, LeaderInfo, Leadership};
pub use lease::{Lease, LeaseLock};
