//! The ZooKeeper-compatible door: ZooKeeper's own client protocol (jute)
//! on `--zk-listen`, so existing ZooKeeper clients (kazoo, Curator, zkCli)
//! work unchanged against the same tree, sessions and watches.
//!
//! It is a thin adapter: [`proto`] turns jute records into the native
//! `pb::request::Op`s and native responses back into jute; [`conn`] hands
//! them to the same core, through the same pipeline, as the native door.
//! Nothing here decides anything about znodes. [`reserved`] is ZooKeeper's
//! own subtree (`/zookeeper`), [`reconfig`] reads a reconfig's server
//! lines.
//!
//! [`sasl`] runs SASL DIGEST-MD5 exchanges (`--zk-sasl-jaas`).
//!
//! A connection whose first four bytes spell a four-letter word (`ruok`,
//! `srvr`, `mntr`, ...) gets the operator's answer instead
//! ([`fourletter`]), if the word is on `--4lw-whitelist`
//! ([`crate::authority`]).

pub mod conn;
pub mod fourletter;
pub mod frames;
pub mod jute;
pub mod proto;
pub mod reconfig;
pub mod reserved;
pub mod sasl;

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::authority::{Action, Authority, Caller, Door};
use crate::core::CoreMsg;
use crate::limits::Limiter;
use crate::tls::Stream;
use crate::watch::ConnId;

/// Who may do what on the ZooKeeper port.
#[derive(Clone)]
pub struct Access {
    /// `--zk-sasl-jaas`'s users; `None`: SASL is refused.
    pub sasl_users: Option<std::sync::Arc<crate::sasl::SaslUsers>>,
    /// Decides the four-letter words ([`crate::authority`]).
    pub authority: Authority,
}

/// Accepts ZooKeeper clients until `stop`. Connection ids come from
/// `next_conn` so they never collide with the native door's. With `tls`
/// the port is ZooKeeper's secure client port: TLS only, four-letter words
/// included.
pub async fn listen(
    listener: TcpListener,
    core: mpsc::Sender<CoreMsg>,
    stop: CancellationToken,
    next_conn: std::sync::Arc<std::sync::atomic::AtomicU64>,
    tls: Option<TlsAcceptor>,
    limiter: Limiter,
    access: Access,
) {
    let mut accept_errors = crate::accept_errors::AcceptErrors::new("zookeeper");
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                accept_errors.accepted();
                a
            }
            Err(e) => {
                accept_errors.failed(&e).await;
                continue;
            }
        };
        let conn: ConnId = next_conn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let core = core.clone();
        let tls = tls.clone();
        let limiter = limiter.clone();
        let Access {
            sasl_users,
            authority,
        } = access.clone();
        tokio::spawn(async move {
            // Counted with the native door's connections. Over the limit,
            // the connection is closed at once, as ZooKeeper does (its
            // protocol has no way to say why; the log and metric do).
            let Ok(_permit) = limiter.admit(peer.ip()) else {
                return;
            };
            let (mut stream, tls_subject) = match tls {
                None => (Stream::from(tcp), None),
                Some(acceptor) => match crate::tls::accept(&acceptor, tcp).await {
                    Ok(a) => (a.stream, a.subject),
                    // A ZooKeeper client has no way to hear why: close.
                    Err(refused) => return crate::tls::log_refused("zookeeper", peer, &refused),
                },
            };
            let mut first4 = [0u8; 4];
            let read = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                stream.read_exact(&mut first4),
            )
            .await;
            if !matches!(read, Ok(Ok(_))) {
                debug!(%peer, "zk connection closed before its first bytes");
                return;
            }
            if let Some(word) = fourletter::Word::parse(&first4) {
                // A word carries no identity but the connection's.
                let ids = crate::auth::connection_ids(peer, tls_subject.as_deref());
                let caller = Caller {
                    ids: &ids,
                    addr: peer.ip(),
                };
                match authority.check(Action::FourLetterWord(word), Door::ZooKeeper, &caller) {
                    Ok(()) => fourletter::answer(stream, word, core, peer).await,
                    Err(why) => fourletter::refuse(stream, &why).await,
                }
            } else {
                conn::serve(
                    stream,
                    peer,
                    conn,
                    core,
                    first4,
                    tls_subject,
                    limiter,
                    sasl_users,
                )
                .await;
            }
        });
    }
}
