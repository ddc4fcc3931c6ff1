//! The one helper integration tests use to run real `warden` processes.
//!
//! - binaries are found next to the test executable (`target/<profile>/`),
//!   or at `$WARDEN_BIN` / `$WARDENCTL_BIN`; `cargo test --workspace` builds
//!   them before any test runs;
//! - each server gets its own temporary data directory and an OS-chosen
//!   port, and is ready when it prints `warden listening client=ADDR`;
//! - its log goes to a file; if the test fails (panics) the directory is
//!   kept and its path printed, so the log can be read afterwards;
//! - [`wait_until`] polls a condition with a deadline instead of sleeping.
//!
//! Two shapes share one process type underneath ([`Process`](process::Process), private):
//!
//! - [`Server`]: one single-node `warden serve`;
//! - [`Cluster`]: N `warden serve` processes forming one Raft group, each
//!   with its own data directory under one temporary directory, addressed
//!   by 1-based node ids.
//!
//! A cluster node prints its ready line only once a leader is elected and
//! it has caught up, which needs a quorum of the group up. So a cluster is
//! started in two steps: launch every process, then wait for every ready
//! line against one deadline. Waiting for node 1 before launching node 2
//! would wait forever. The same holds when bringing nodes back: see
//! [`Cluster::restart_many`].

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod cluster;
pub mod debian;
mod front;
mod ports;
mod process;
pub mod python;
pub mod raw;
mod server;
mod signal;
pub mod tls;
mod wait;

pub use cluster::{Cluster, LEADER_TIMEOUT};
pub use front::Front;
pub use ports::free_ports;
pub use process::{binary, ServerOptions, NODE_ID, READY_TIMEOUT, STOP_TIMEOUT};
pub use server::Server;
pub use signal::{process_exists, sigkill, sigterm};
pub use tls::TlsCerts;
pub use wait::wait_until;
