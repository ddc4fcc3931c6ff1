//! Raft: the log and hard state on disk ([`storage`], in a log store:
//! [`logstore`]), snapshot files ([`snapfile`]), both over a file layer
//! the simulator can crash ([`files`]), the node that drives
//! `raft::RawNode` through its Ready loop ([`node`]), and the bridge from
//! raft-rs's slog logging into tracing ([`logger`]), the check every
//! raft protobuf from outside passes before it is decoded ([`wire_guard`]),
//! snapshot files streamed to followers ([`snapstream`]), who a peer
//! link speaks for ([`peer_auth`]), and the disaster-recovery start as the
//! group's only voter ([`force_new_cluster`]).

pub mod files;
pub mod force_new_cluster;
pub mod logger;
pub mod logstore;
pub mod node;
pub mod peer_auth;
mod peer_link;
pub mod snapfile;
pub mod snapstream;
pub mod storage;
pub mod transport;
pub mod watermark;
pub mod wire_guard;

pub use node::{RaftNode, ReadyHandler, Undelivered};
pub use storage::{DiskStorage, StorageError};
