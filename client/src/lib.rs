//! Async client for Warden.
//!
//! ```no_run
//! use warden_client::{Client, ConnectOptions, CreateOptions};
//!
//! # async fn demo() -> warden_client::Result<()> {
//! let client = Client::connect("127.0.0.1:7000", ConnectOptions::default()).await?;
//! client.create("/app", b"config", CreateOptions::default()).await?;
//! let (data, stat, changed) = client.get_data_watch("/app").await?;
//! println!("{} at version {}", String::from_utf8_lossy(&data), stat.version);
//! client.set_data("/app", b"new", Some(stat.version)).await?;
//! println!("{:?}", changed.await?); // NodeDataChanged /app
//! client.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! A [`Client`] is a cheap handle (an `Arc`) over one background task that
//! owns everything mutable: the TCP connection, the requests in flight, the
//! watch registry, the heartbeat. Calls become commands on a bounded channel
//! and come back on a `oneshot`; many calls from many tasks are pipelined on
//! the one connection, and the server answers them in order. See
//! `connection.rs` for the task's life (connected → disconnected →
//! reconnected, or over) and `watch.rs` for how events reach their
//! watchers.
//!
//! # Errors and retries
//!
//! Every failure is an [`Error`] with a protocol [`ErrorCode`]
//! ([`Error::code`]). Two deserve care:
//!
//! - `ConnectionLoss`: the connection broke while the call was in flight. A
//!   write may or may not have been applied. The session lives on; the client
//!   reconnects on its own (watch [`Client::session_events`]).
//! - `SessionExpired`: the session is over, its ephemeral nodes are gone and
//!   so are its watches. Every later call fails the same way; make a new
//!   client. Code that holds a lock must treat this as having lost it.
//!
//! Arguments are checked before anything is sent: an illegal path, data over
//! [`DATA_BYTES_MAX`](warden_protocol::DATA_BYTES_MAX) or nonsensical create
//! options fail at once, with no round trip.

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod client;
mod connection;
mod error;
mod multi;
mod tls;
mod types;
mod watch;

pub use client::Client;
pub use error::{Error, Result};
pub use multi::{Op, OpResult};
pub use tls::{Stream, TlsOptions};
pub use types::{
    Acl, ConnectOptions, CreateOptions, EventType, SessionState, Stat, WatchEvent,
    CONNECT_TIMEOUT_DEFAULT, REQUEST_TIMEOUT_DEFAULT, SESSION_TIMEOUT_DEFAULT,
};
pub use warden_protocol::pb::{ClusterStatusResponse as ClusterStatus, MemberStatus};
pub use warden_protocol::{perms, ErrorCode};
pub use watch::{OneshotWatch, PersistentWatch, PERSISTENT_WATCH_EVENTS_MAX, WATCHES_MAX};
