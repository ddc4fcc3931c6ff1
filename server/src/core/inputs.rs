//! What the core is handed rather than takes from the world: its clock
//! (and, with it, every deadline it decides).
//!
//! The real server hands it the OS's ([`CoreInputs::os`]); a simulator
//! running several cores in one process hands each its own, so that no
//! core reads a process-global and the same inputs give the same history.

use crate::clock::{Clock, OsClock};
use crate::config::Config;

/// The core's inputs from the world ([`super::Core::open`]).
#[derive(Debug)]
pub struct CoreInputs {
    /// Where every decision reads time.
    pub clock: Box<dyn Clock>,
}

impl CoreInputs {
    /// The real server's: the OS clock with the configured test offset
    /// (`--clock-offset-ms`, `--clock-offset-file`).
    pub fn os(cfg: &Config) -> Self {
        Self {
            clock: Box::new(OsClock::new(
                cfg.clock_offset_ms,
                cfg.clock_offset_file.clone(),
            )),
        }
    }
}
