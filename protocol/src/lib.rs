//! Warden's wire protocol.
//!
//! - [`pb`]: the prost messages generated from `proto/warden.proto`, the
//!   contract for clients in any language.
//! - [`codec`]: the frame codec (u32 big-endian length + one message), which
//!   rejects oversized frames before allocating for them.
//! - [`path`]: the rules a znode path must follow, checked once at every door.
//! - [`error`]: [`ErrorCode`] helpers.
//! - [`auth`]: ZooKeeper's ACL vocabulary: digest identities, permission
//!   letters, the ACL text format.
//!
//! The server and the client share this crate; nothing here does I/O.

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod auth;
pub mod codec;
pub mod error;
pub mod path;

/// Messages generated from `proto/warden.proto`.
pub mod pb {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/warden.v1.rs"));
}

/// The gRPC lock service generated from `proto/lock.proto`
/// (`warden.lock.v1`): messages, the server trait and a client.
#[cfg(feature = "grpc")]
pub mod lock {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/warden.lock.v1.rs"));

    /// `lock.proto`'s descriptors (an encoded `FileDescriptorSet`), for
    /// server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/lock_descriptor.bin"));
}

pub use codec::{FrameCodec, FrameError};
pub use pb::ErrorCode;

/// Protocol version sent in `ConnectRequest.protocol_version`.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame either side accepts (16 MiB).
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Largest data a znode may hold (1 MiB).
pub const DATA_BYTES_MAX: usize = 1024 * 1024;

/// ACL permission bits (ZooKeeper's values).
pub mod perms {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const CREATE: u32 = 4;
    pub const DELETE: u32 = 8;
    pub const ADMIN: u32 = 16;
    pub const ALL: u32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// The ACL a node gets when its create names none: world:anyone, all perms.
pub fn open_acl() -> Vec<pb::Acl> {
    vec![pb::Acl {
        perms: perms::ALL,
        scheme: "world".to_string(),
        id: "anyone".to_string(),
    }]
}
