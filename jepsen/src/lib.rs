//! Warden's Jepsen-style fault-injection suite (issue 7). What exists so
//! far: the register linearizability checker ([`linearizable`]) the
//! `register` workload will judge its histories with.

pub mod linearizable;
