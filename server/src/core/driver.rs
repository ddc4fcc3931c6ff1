//! The real server's driver: the tokio loop around the [`Core`].
//!
//! It decides nothing. It waits for what comes (a connection's message, a
//! peer's event, the tick), hands it to the core, takes whatever else is
//! already queued into the same turn, ends the turn
//! ([`Core::end_turn`]: one Ready, one fsync, for the whole batch), and
//! reports the core's state to whoever started it. A simulator drives the
//! same core with the same calls, on simulated time.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info};

use super::{Core, CoreError, CoreMsg, CoreState};
use crate::raft::transport::PeerEvent;

/// Most messages handled before the Ready loop runs (one fsync per batch).
const BATCH_MSGS_MAX: usize = 1024;
/// Longest a batch of messages may keep the core from its tick and its
/// other queue: a tick that comes late delays heartbeats, and a leader
/// that does not heartbeat for an election timeout loses its followers.
const BATCH_TIME_MAX: Duration = Duration::from_millis(20);
/// A turn of the core's loop at least this long is logged (`the core was
/// busy`): what its clients waited for.
const CORE_BUSY_LOGGED: Duration = Duration::from_millis(200);

/// Runs `core` until `shutdown` fires, every sender is dropped, or the
/// core fails.
pub async fn run(
    mut core: Core,
    mut rx: mpsc::Receiver<CoreMsg>,
    mut peer_rx: mpsc::Receiver<PeerEvent>,
    state: watch::Sender<CoreState>,
    mut shutdown: oneshot::Receiver<()>,
) -> Result<(), CoreError> {
    let mut ticker = tokio::time::interval(core.tick_interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut woke;
    let result = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            msg = rx.recv() => {
                let Some(msg) = msg else { break Ok(()) };
                woke = core.now();
                core.handle(msg);
                drain(&mut core, &mut rx, &mut peer_rx);
            }
            frame = peer_rx.recv() => {
                woke = core.now();
                if let Some(frame) = frame {
                    core.on_peer(frame);
                    drain(&mut core, &mut rx, &mut peer_rx);
                }
            }
            _ = ticker.tick() => {
                woke = core.now();
                core.on_tick();
            }
        }
        if let Err(e) = core.end_turn() {
            break Err(e);
        }
        // A turn of the loop this long kept every client of this server,
        // and raft's ticks, waiting.
        let busy = core.now().saturating_duration_since(woke);
        if busy >= CORE_BUSY_LOGGED {
            info!(busy_ms = busy.as_millis() as u64, "the core was busy");
        }
        if *state.borrow() == CoreState::Starting && core.is_ready() {
            info!(
                leader = core.leader_id(),
                applied = core.applied_index(),
                "ready"
            );
            let _ = state.send(CoreState::Ready);
        }
    };
    if let Err(e) = &result {
        error!(error = %e, "core stopped");
    }
    core.stop();
    let _ = state.send(CoreState::Stopped);
    result
}

/// After the first message of a batch: whatever else is already queued
/// on either side, peers first, up to the batch bounds, so one Ready (one
/// fsync) covers it all. Taking both sides matters: the acks that commit
/// the last batch arrive while its fsync runs, and handled only after a
/// batch of new requests they would wait for a second fsync before the
/// commit is seen.
fn drain(
    core: &mut Core,
    rx: &mut mpsc::Receiver<CoreMsg>,
    peer_rx: &mut mpsc::Receiver<PeerEvent>,
) {
    let started = core.now();
    for _ in 0..BATCH_MSGS_MAX {
        if core.now().saturating_duration_since(started) >= BATCH_TIME_MAX {
            break;
        }
        let mut any = false;
        if let Ok(frame) = peer_rx.try_recv() {
            core.on_peer(frame);
            any = true;
        }
        if let Ok(msg) = rx.try_recv() {
            core.handle(msg);
            any = true;
        }
        if !any {
            break;
        }
    }
}
