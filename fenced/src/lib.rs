//! The resource side of fencing.
//!
//! A lock cannot stop a holder that paused (a GC pause, a stopped VM, a
//! partition) past its lease: the lock passed to someone else meanwhile,
//! and the paused holder, when it wakes, still believes it holds it and
//! writes. Warden's locks give every grant a fencing token larger than all
//! earlier grants' of the same lock; the resource must refuse a write whose
//! token is older than one it already accepted. This crate is that
//! resource side:
//!
//! - [`store`] and [`api`]: `warden-fenced`, a key-value store service
//!   (HTTP, durable on disk in fjall) keeping per key the value and the
//!   highest token seen, refusing older tokens;
//! - [`sql`]: [`FencedSql`], the same rule as one SQL
//!   `UPDATE ... WHERE last_fencing_token <= :token` (SQLite via rusqlite);
//! - [`client`]: a small async client of the store's API.
//!
//! Both accept a token equal to the highest seen: one grant may write many
//! times. `docs/fencing.md` describes running the store and its API.
//!
//! The SQL recipe lives here rather than in `warden-recipes` because it
//! compiles SQLite in, and the recipes crate is linked into the server and
//! every client of the recipes.

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod client;
pub mod sql;
pub mod store;

pub use client::{request, ClientError, StoreClient};
pub use sql::{FencedSql, FencedSqlError};
pub use store::{Record, Stale, Store, StoreError};
