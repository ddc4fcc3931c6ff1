//! What every door's accept loop does when `accept` fails: the failures
//! that last (out of file descriptors: EMFILE, ENFILE; out of memory) fail
//! again at once while the connection that caused them waits in the
//! backlog, so the loop pauses [`ACCEPT_ERROR_PAUSE`] before each new try
//! instead of spinning a core, and logs at most one line per door every
//! [`ACCEPT_ERROR_LOG_INTERVAL`] (with how many failed since the last one),
//! and one when accepting works again.
//!
//! The client, ZooKeeper and peer ports and the TLS listener of the HTTP
//! and gRPC doors use it; the plain HTTP and gRPC listeners are axum's,
//! which pauses a second after a failed accept and logs it.

use std::io;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::limits::{ACCEPT_ERROR_LOG_INTERVAL, ACCEPT_ERROR_PAUSE};

/// One door's failed accepts.
#[derive(Debug)]
pub struct AcceptErrors {
    door: &'static str,
    /// Failures since the last line logged.
    unlogged: u64,
    /// Failures since the last accept that worked.
    in_a_row: u64,
    last_line: Option<Instant>,
    pause: Duration,
    log_interval: Duration,
}

impl AcceptErrors {
    pub fn new(door: &'static str) -> Self {
        Self::with_timing(door, ACCEPT_ERROR_PAUSE, ACCEPT_ERROR_LOG_INTERVAL)
    }

    fn with_timing(door: &'static str, pause: Duration, log_interval: Duration) -> Self {
        Self {
            door,
            unlogged: 0,
            in_a_row: 0,
            last_line: None,
            pause,
            log_interval,
        }
    }

    /// Records a failed accept, logs it if no line was logged within the
    /// interval, and pauses before the caller tries again. True if it
    /// logged.
    pub async fn failed(&mut self, error: &io::Error) -> bool {
        self.unlogged += 1;
        self.in_a_row += 1;
        let now = Instant::now();
        let log = self
            .last_line
            .is_none_or(|at| now.duration_since(at) >= self.log_interval);
        if log {
            warn!(
                door = self.door,
                error = %error,
                failed = self.unlogged,
                pause_ms = self.pause.as_millis() as u64,
                "accept failed; pausing before each new try (one line a second at most)"
            );
            self.unlogged = 0;
            self.last_line = Some(now);
        }
        tokio::time::sleep(self.pause).await;
        log
    }

    /// Records an accept that worked (logs the end of a run of failures).
    pub fn accepted(&mut self) {
        if self.in_a_row > 0 {
            info!(
                door = self.door,
                failed = self.in_a_row,
                "accepting connections again"
            );
            self.in_a_row = 0;
            self.unlogged = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn failures_pause_and_log_once_an_interval() {
        let pause = Duration::from_millis(2);
        let interval = Duration::from_millis(50);
        let mut errors = AcceptErrors::with_timing("test", pause, interval);
        let e = io::Error::from_raw_os_error(24); // EMFILE
        let started = Instant::now();
        let mut lines = 0;
        for _ in 0..100 {
            if errors.failed(&e).await {
                lines += 1;
            }
        }
        let took = started.elapsed();
        // Each try after a pause, and a line an interval at most.
        assert!(took >= pause * 100, "{took:?}");
        let most = (took.as_millis() / interval.as_millis()) as usize + 1;
        assert!(
            (1..=most).contains(&lines),
            "{lines} lines for 100 failures"
        );
        assert_eq!(errors.in_a_row, 100);
        errors.accepted();
        assert_eq!(errors.in_a_row, 0);
    }
}
