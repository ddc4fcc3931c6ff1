//! The hidden switches of `warden serve`: test hooks (a clock offset, lost
//! removal proposals, small snapshot chunks, the old snapshot transfer)
//! and the KNOWN-BAD modes the Jepsen selftest and the attack tests run
//! against to show that they catch what each one breaks. None of them is
//! in `--help`; every one keeps its flag, environment variable and config
//! file key like any other flag.

use clap::Args;

use super::ConfigError;

/// The hidden flags of `warden serve` (flattened into
/// [`ServeArgs`](super::ServeArgs)).
#[derive(Debug, Clone, Args)]
pub struct Switches {
    /// Tests of clock skew only: add this to this server's wall clock.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        allow_negative_numbers = true,
        env = "WARDEN_CLOCK_OFFSET_MS"
    )]
    pub clock_offset_ms: i64,
    /// Tests of clock jumps only: a file holding a clock offset in ms,
    /// re-read while the server runs (a missing or empty file is 0), so a
    /// test can jump this server's wall clock at run time.
    #[arg(long, hide = true, env = "WARDEN_CLOCK_OFFSET_FILE")]
    pub clock_offset_file: Option<std::path::PathBuf>,
    /// KNOWN-BAD, for the Jepsen selftest only: answer linearizable reads
    /// and `sync` from this server's own tree, without ReadIndex, so a
    /// partitioned or lagging server serves stale data. The suite must
    /// catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_SKIP_READ_INDEX")]
    pub unsafe_skip_read_index: bool,
    /// KNOWN-BAD, for the Jepsen selftest only: TTL and container removals
    /// in flight outlive a role change, so one lost with a leadership is
    /// never proposed again while this server leads (a lease outlives its
    /// TTL). The suite must catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_KEEP_REMOVALS_ACROSS_ROLES")]
    pub unsafe_keep_removals_across_roles: bool,
    /// Tests only: this server's first N removal proposals (expired TTL
    /// nodes, empty containers) are counted in flight but never handed to
    /// raft, as if lost with its leadership.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        env = "WARDEN_UNSAFE_LOSE_REMOVAL_PROPOSALS"
    )]
    pub unsafe_lose_removal_proposals: u64,
    /// KNOWN-BAD, for tests only: tag ZooKeeper-port writes with an xid
    /// this server makes, recognised on a second apply only among the
    /// session's last 64 answers (the scheme before exactly-once writes),
    /// so a write proposed again after a leader change can apply twice.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_BOUNDED_DEDUP")]
    pub unsafe_bounded_dedup: bool,
    /// Bytes per chunk when a snapshot is streamed to a follower (tests
    /// use small chunks to make a small tree take several).
    #[arg(
        long,
        default_value_t = crate::raft::snapstream::CHUNK_BYTES_DEFAULT,
        hide = true,
        env = "WARDEN_SNAPSHOT_CHUNK_BYTES"
    )]
    pub snapshot_chunk_bytes: usize,
    /// KNOWN-BAD, for tests of the follower's check only: the next this
    /// many snapshot transfers from this server get a byte flipped.
    #[arg(
        long,
        default_value_t = 0,
        hide = true,
        env = "WARDEN_UNSAFE_CORRUPT_SNAPSHOT_TRANSFERS"
    )]
    pub unsafe_corrupt_snapshot_transfers: u64,
    /// Send snapshots to followers the way earlier versions did: the whole
    /// tree in one raft message on the peer link, read on this server's
    /// core and built on the follower's (for comparisons, and for
    /// followers of a version that cannot receive a streamed snapshot).
    #[arg(long, hide = true, env = "WARDEN_INLINE_SNAPSHOTS")]
    pub inline_snapshots: bool,
    /// KNOWN-BAD, for the Jepsen selftest only: the Raft log's sync hands
    /// writes to the OS without fsync, so entries this server acknowledged
    /// are lost when its machine loses power (the suite's `lose-unsynced`
    /// nemesis). The suite must catch it.
    #[arg(long, hide = true, env = "WARDEN_UNSAFE_SKIP_FSYNC")]
    pub unsafe_skip_fsync: bool,
}

impl Switches {
    /// The bounds of the switches that take a number.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let chunk_max = crate::raft::snapstream::CHUNK_BYTES_MAX;
        if !(1..=chunk_max).contains(&self.snapshot_chunk_bytes) {
            return Err(ConfigError::Limit {
                flag: "--snapshot-chunk-bytes",
                min: 1,
                max: chunk_max,
                got: self.snapshot_chunk_bytes,
            });
        }
        Ok(())
    }
}
