//! Time as the history records it. `mono_ns` reads CLOCK_MONOTONIC, which
//! every process on the machine shares, so times taken by a helper process
//! (an ephemeral holder the harness kills) line up with the harness's own.

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in nanoseconds (comparable across processes on one
/// machine; never goes back).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) cannot fail on Linux");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock time in nanoseconds since the Unix epoch (for people reading
/// the history; ordering uses the monotonic clock).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(b >= a);
        assert!(wall_ns() > 1_600_000_000_000_000_000);
    }
}
