//! Warden's Jepsen-style fault-injection suite (issue 7): real `warden`
//! processes behind harness-owned TCP proxies, nemeses that kill, pause,
//! partition and reconfigure them, workloads whose every operation is
//! recorded in a [`history`], checkers that judge the whole history, and a
//! report per run.

// Read with `cargo doc --document-private-items` (as CI builds it), where
// links to private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod checkers;
pub mod clock;
pub mod cluster;
pub mod convergence;
pub mod disk;
pub mod faultfs;
pub mod history;
pub mod http;
pub mod linearizable;
pub mod nemesis;
pub mod proxy;
pub mod report;
pub mod run;
pub mod selftest;
pub mod workload;
pub mod workloads;
