//! The HTTP lock API's acquire/renew/release bodies, both contracts.
//! The work is in `warden_server::fuzzing::http_json`, shared with the stable
//! corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzzing::http_json(data));
