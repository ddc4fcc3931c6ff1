//! The snapshot loader: decode, DataTree::from_snapshot, invariants, reload.
//! The work is in `warden_server::fuzzing::snapshot`, shared with the stable
//! corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzzing::snapshot(data));
