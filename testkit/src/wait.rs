//! Waiting on a condition with a deadline, never a fixed sleep.

use std::time::{Duration, Instant};

/// Polls `cond` until it holds or `timeout` passes; panics naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
