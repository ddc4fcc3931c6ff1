//! Checkers for the lock, lease, election, sequential, ephemeral and watch
//! workloads, one module per concept. Each takes what the workload recorded
//! and returns the anomalies it found (empty = valid). They are pure
//! functions over recorded data, so the selftest can feed them histories
//! with planted anomalies.

mod ephemeral;
mod grants;
mod liveness;
mod sequential;
mod watch;

pub use ephemeral::*;
pub use grants::*;
pub use liveness::*;
pub use sequential::*;
pub use watch::*;
