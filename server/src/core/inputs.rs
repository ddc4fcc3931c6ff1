//! What the core is handed rather than takes from the world: its clock
//! (and, with it, every deadline it decides), the seed of every random
//! draw it makes (request ids, session ids, session passwords), and the
//! file system its raft state and snapshots live on. (Its network is
//! handed to [`super::Core::open`] beside these: a [`super::Net`].)
//!
//! The real server hands it the OS's ([`CoreInputs::os`]); a simulator
//! running several cores in one process hands each its own
//! ([`CoreInputs::seeded`]), so that no core reads a process-global and the
//! same inputs give the same history.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng, TryRngCore};

use crate::clock::{Clock, OsClock};
use crate::config::Config;
use crate::raft::files::{self, Files};
use crate::raft::logstore::LogKind;

/// The core's inputs from the world ([`super::Core::open`]).
#[derive(Debug)]
pub struct CoreInputs {
    /// Where every decision reads time.
    pub clock: Box<dyn Clock>,
    /// The seed of the core's generator ([`CoreInputs::rng`]). A whole
    /// 256-bit seed: session passwords are drawn from it, and must stay
    /// as hard to guess as 16 bytes of OS randomness.
    pub seed: [u8; 32],
    /// Where raft's log and state, and the snapshot files, are kept.
    pub files: Arc<dyn Files>,
    /// Which store holds the log: fjall on the real file system, or files
    /// of [`Self::files`].
    pub log: LogKind,
    /// Snapshots are built on the core's own thread as they fall due,
    /// rather than on a thread of their own whose end the core notices
    /// whenever it looks: what a single-threaded simulation needs to
    /// replay. The real server's core never pauses for a build.
    pub inline_snapshot_builds: bool,
}

impl CoreInputs {
    /// The real server's: the OS clock with the configured test offset
    /// (`--clock-offset-ms`, `--clock-offset-file`), and a seed from the
    /// OS's entropy.
    pub fn os(cfg: &Config) -> Self {
        Self {
            clock: Box::new(OsClock::new(
                cfg.clock_offset_ms,
                cfg.clock_offset_file.clone(),
            )),
            seed: os_seed(),
            files: files::os(),
            log: LogKind::Fjall,
            inline_snapshot_builds: false,
        }
    }

    /// A simulator's or a test's: `clock`, a seed made from `seed` alone
    /// (the same `seed`, the same draws), and `files` (the log kept in
    /// them too), snapshots built inline.
    pub fn seeded(clock: Box<dyn Clock>, seed: u64, files: Arc<dyn Files>) -> Self {
        let mut expanded = [0u8; 32];
        StdRng::seed_from_u64(seed).fill_bytes(&mut expanded);
        Self {
            clock,
            seed: expanded,
            files,
            log: LogKind::Files,
            inline_snapshot_builds: true,
        }
    }

    /// The core's generator: a cryptographically secure one (ChaCha12),
    /// so that a password drawn from it tells nothing of the next.
    pub fn rng(&self) -> StdRng {
        StdRng::from_seed(self.seed)
    }
}

/// 32 bytes of the OS's entropy.
fn os_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    // os-rng: the real server's seed, the core's only draw from the OS.
    rand::rngs::OsRng
        .try_fill_bytes(&mut seed)
        .expect("the OS has no randomness to give: no session password can be made");
    seed
}

#[cfg(test)]
mod tests {
    use warden_protocol::pb;

    use super::*;
    use crate::clock::ManualClock;
    use crate::core::proposals::Proposals;
    use crate::session::{self, Handshake, ReadOnlySessions, SessionBounds};
    use crate::tree::DataTree;

    const BOUNDS: SessionBounds = SessionBounds {
        min_timeout_ms: 1_000,
        max_timeout_ms: 60_000,
        max_sessions: 100,
    };

    /// What a core opened with `inputs` draws, in the order it draws it:
    /// its first request ids, then two new sessions (id, password) and a
    /// read-only one.
    fn draws(inputs: &CoreInputs) -> (Vec<u64>, Vec<(u64, Vec<u8>)>) {
        let mut rng = inputs.rng();
        let mut proposals = Proposals::new(&mut rng);
        let ids = vec![proposals.next_id(), proposals.next_id()];
        let tree = DataTree::new();
        let connect = pb::ConnectRequest {
            timeout_ms: 10_000,
            ..Default::default()
        };
        let mut sessions = Vec::new();
        for _ in 0..2 {
            match session::handshake(&tree, 3, BOUNDS, &connect, 0, &mut rng) {
                Handshake::Create(cs) => sessions.push((cs.session_id, cs.password)),
                other => panic!("a new session was not created: {other:?}"),
            }
        }
        let now = inputs.clock.now();
        let mut read_only = ReadOnlySessions::default();
        match read_only.handshake(&tree, 3, BOUNDS, &connect, now, &mut rng) {
            Handshake::Resume(r) => sessions.push((r.session_id, r.password)),
            other => panic!("no read-only session: {other:?}"),
        }
        (ids, sessions)
    }

    fn seeded(seed: u64) -> CoreInputs {
        let files = crate::raft::files::MemFiles::seeded(seed).as_files();
        CoreInputs::seeded(Box::new(ManualClock::new(0)), seed, files)
    }

    #[test]
    fn one_seed_gives_the_same_ids_and_passwords_another_seed_others() {
        let (ids, sessions) = draws(&seeded(7));
        assert_eq!((ids.clone(), sessions.clone()), draws(&seeded(7)));
        // Drawn, not constant: distinct within a core, and 16 bytes.
        assert_ne!(sessions[0], sessions[1]);
        assert!(sessions
            .iter()
            .all(|(id, pw)| id >> 56 == 3 && pw.len() == 16));
        let (other_ids, other_sessions) = draws(&seeded(8));
        assert_ne!(ids, other_ids);
        for (a, b) in sessions.iter().zip(&other_sessions) {
            assert_ne!(a.0, b.0, "session ids of two seeds");
            assert_ne!(a.1, b.1, "passwords of two seeds");
        }
    }

    /// The real server's seeds come from the OS: two servers (or two
    /// lives of one) never draw the same passwords.
    #[test]
    fn the_os_seed_differs_every_time() {
        let (a, b) = (os_seed(), os_seed());
        assert_ne!(a, b);
        let clock = || Box::new(ManualClock::new(0));
        let one = CoreInputs {
            seed: a,
            ..CoreInputs::seeded(clock(), 0, files::os())
        };
        let two = CoreInputs {
            seed: b,
            ..CoreInputs::seeded(clock(), 0, files::os())
        };
        assert_ne!(draws(&one).1, draws(&two).1);
    }
}
