//! The Warden server.

/// Log entry and snapshot formats generated from `proto/txn.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/warden.internal.rs"));
}
