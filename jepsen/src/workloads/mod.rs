//! The workloads: each a `run` that drives clients and records the history,
//! and a `check` that judges it (see [`crate::workload`]).

pub mod client_faults;
pub mod election;
pub mod ephemeral;
pub mod lease;
pub mod lock;
pub mod lock_set;
pub mod register;
pub mod sequential;
pub mod session_order;
mod support;
pub mod watch;
pub mod zk_pipeline;
