//! Raft: the log and hard state on disk ([`storage`]), snapshot files
//! ([`snapfile`]), the node that drives
//! `raft::RawNode` through its Ready loop ([`node`]), and the bridge from
//! raft-rs's slog logging into tracing ([`logger`]).

pub mod logger;
pub mod node;
pub mod snapfile;
pub mod storage;
pub mod transport;
pub mod watermark;

pub use node::{RaftNode, ReadyHandler, Undelivered};
pub use storage::{DiskStorage, StorageError};
