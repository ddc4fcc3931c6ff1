//! The Warden server.
//!
//! Layers, from the wire inwards:
//! - [`conn`]: one task per client connection: decode frames, hand requests
//!   to the core, write responses and pushed events back in order.
//! - [`core`]: the one task that owns the Raft node, the [`tree::DataTree`],
//!   the session liveness table and the watch registry. Requests are
//!   validated ([`ops`]), reads served from the local tree in session order,
//!   writes proposed to Raft and answered when their entry applies.
//! - [`raft`]: the Raft log and hard state in fjall, the Ready loop.
//! - [`tree`]: the deterministic state machine.
//! - [`zk`]: the ZooKeeper-compatible door (jute), a thin adapter onto the
//!   same core.

// The design is documented on private modules too, and read with
// `cargo doc --document-private-items` (as CI builds it), where links
// between them resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod accept_errors;
pub mod auth;
pub mod authority;
pub mod backup;
pub mod backupfile;
pub mod clock;
pub mod config;
pub mod conn;
pub mod core;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod http;
pub mod limits;
pub mod local_cluster;
pub mod lockstats;
pub mod opmetrics;
pub mod ops;
pub mod outbound;
pub mod raft;
pub mod sasl;
pub mod serve;
pub mod session;
pub mod tls;
pub mod tree;
pub mod ttl;
pub mod watch;
pub mod zk;

/// Log entry and snapshot formats generated from `proto/txn.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/warden.internal.rs"));
}
