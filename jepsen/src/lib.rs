//! Warden's Jepsen-style fault-injection suite (issue 7). What exists so
//! far are the checkers the workloads will judge their histories with:
//! [`linearizable`] for registers, and [`checkers`] for locks, sequential
//! creates, ephemerals and watches — pure functions, tested on histories
//! with planted anomalies. The harness (processes, proxies, nemeses,
//! generators, reports) comes next.

pub mod checkers;
pub mod linearizable;
