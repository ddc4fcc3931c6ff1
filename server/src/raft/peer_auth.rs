//! Who a peer link speaks for, and what is refused because of it.
//!
//! With TLS, a link is bound at the handshake to the member id its
//! certificate names ([`crate::tls::peer_id`]): an inbound link whose
//! certificate names none is closed, every frame on a bound link must
//! carry that id as its sender (any other is dropped), and an outbound
//! link must reach the member it dialled. The core then holds the bound
//! id to the member list, frame by frame ([`Refusal::NonMember`]), so a
//! member removed while its link is up is no longer heard either.
//!
//! Without TLS nothing binds a link: the peer port trusts its network
//! (docs/security.md says so), and only the member list is checked.
//!
//! Every refusal is counted (`warden_peer_refused_total{reason}` on
//! `/metrics`) and logged at `warn` (but [`Refusal::NonMember`]), at most
//! once a second per reason so that a flood of forged frames cannot flood
//! the log (the rest at `debug`; the metric counts them all).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{debug, warn};

use crate::opmetrics::OpMetrics;
use crate::tls::peer_id::member_id_of_chain;

/// Why a peer's connection or frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// An inbound TLS link whose certificate names no member id (a
    /// client's certificate, say): closed after the handshake.
    Certificate,
    /// A frame whose sender is not the member its link is bound to:
    /// dropped.
    Sender,
    /// An outbound link whose certificate names another member than the
    /// one dialled (or none): closed, dialled again later.
    WrongPeer,
    /// A frame from an id that is not a member: dropped by the core.
    /// Logged at `debug` only: a member being added or just removed sends
    /// these in the ordinary course.
    NonMember,
    /// An inbound connection past the peer port's caps (per source address
    /// or in all, `limits::PEER_CONNECTIONS_*`): closed at once.
    Connections,
    /// A frame over `limits::PEER_FRAME_BYTES_MAX` (refused from its
    /// length, before its body is read) or one that does not decode: the
    /// connection is closed.
    Frame,
}

/// Every refusal, for the metric's labels (each starts at 0).
pub const REFUSALS: [Refusal; 6] = [
    Refusal::Certificate,
    Refusal::Sender,
    Refusal::WrongPeer,
    Refusal::NonMember,
    Refusal::Connections,
    Refusal::Frame,
];

impl Refusal {
    /// The `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Certificate => "certificate",
            Refusal::Sender => "sender",
            Refusal::WrongPeer => "wrong_peer",
            Refusal::NonMember => "non_member",
            Refusal::Connections => "connections",
            Refusal::Frame => "frame",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static LAST_WARN_MS: [AtomicU64; REFUSALS.len()] = [const { AtomicU64::new(0) }; REFUSALS.len()];
/// At most one `warn` line per reason in this interval.
const WARN_INTERVAL_MS: u64 = 1000;

/// Counts a refusal and logs it: `peer` is the connection's remote
/// address, `what` says what was refused and why.
pub fn refused(metrics: &OpMetrics, refusal: Refusal, peer: Option<SocketAddr>, what: &str) {
    metrics.peer_refused(refusal.name());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let last = &LAST_WARN_MS[refusal.index()];
    let prev = last.load(Ordering::Relaxed);
    let peer = peer.map(|p| p.to_string()).unwrap_or_default();
    if refusal != Refusal::NonMember
        && now.saturating_sub(prev) >= WARN_INTERVAL_MS
        && last
            .compare_exchange(prev, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        warn!(
            reason = refusal.name(),
            peer,
            "peer refused: {what} (further ones within a second are logged at debug; warden_peer_refused_total counts them all)"
        );
    } else {
        debug!(reason = refusal.name(), peer, "peer refused: {what}");
    }
}

/// Whether an outbound link reached the member `expected`: the peer's
/// verified certificate must name that id.
pub fn outbound_reached(
    chain: Option<&[rustls::pki_types::CertificateDer<'_>]>,
    expected: u64,
) -> Result<(), String> {
    match member_id_of_chain(chain) {
        Ok(id) if id == expected => Ok(()),
        Ok(id) => Err(format!(
            "dialled member {expected}, but its certificate speaks for member {id}"
        )),
        Err(e) => Err(format!("dialled member {expected}, but {e}")),
    }
}
