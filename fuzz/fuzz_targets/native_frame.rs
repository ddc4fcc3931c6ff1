//! The native protocol's frame decoder (both sides), then each request's plan/apply/read.
//! The work is in `warden_server::fuzzing::native_frame`, shared with the stable
//! corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzzing::native_frame(data));
