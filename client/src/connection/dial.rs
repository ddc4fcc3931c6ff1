//! Opening a session: the server list, the first connect and the
//! handshake, before the task ([`Connection`]) takes over.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rand::seq::SliceRandom;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_util::codec::Framed;
use tracing::debug;
use warden_protocol::{pb, ErrorCode, FrameCodec, PROTOCOL_VERSION};

use super::reconnect::Backoff;
use super::{Connection, Handles, Transport, SERVERS_MAX};
use crate::error::{decode_code, Error, Result};
use crate::tls::{tls_error, Stream, TlsOptions};
use crate::types::ConnectOptions;

/// Parses `"host:port,host:port"`.
pub(crate) fn parse_servers(servers: &str) -> Result<Vec<String>> {
    let list: Vec<String> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if list.is_empty() {
        return Err(Error::BadArguments(
            "no servers given (expected host:port,host:port)".into(),
        ));
    }
    if list.len() > SERVERS_MAX {
        return Err(Error::BadArguments(format!(
            "{} servers given, at most {SERVERS_MAX} allowed",
            list.len()
        )));
    }
    for server in &list {
        match server.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(Error::BadArguments(format!("{server}: expected host:port"))),
        }
    }
    Ok(list)
}

/// Opens a new session on one of `servers` and starts the task that owns
/// it. Gives up after `options.connect_timeout`.
pub(crate) async fn connect(
    servers: &str,
    options: ConnectOptions,
    tls: Option<TlsOptions>,
) -> Result<Handles> {
    options.validate()?;
    let mut servers = parse_servers(servers)?;
    // Spread clients over the ensemble, as ZooKeeper does.
    servers.shuffle(&mut rand::rng());
    let deadline = Instant::now() + options.connect_timeout;
    let mut backoff = Backoff::new();
    let mut last_error = String::from("no server answered");
    for attempt in 0.. {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let addr = servers[attempt % servers.len()].clone();
        let request = pb::ConnectRequest {
            protocol_version: PROTOCOL_VERSION,
            session_id: 0,
            password: Vec::new(),
            timeout_ms: options.session_timeout_ms(),
            last_zxid_seen: 0,
        };
        match timeout(deadline - now, handshake(&addr, tls.as_ref(), request)).await {
            Ok(Ok((transport, response))) => {
                let next_server = (attempt + 1) % servers.len();
                return Ok(Connection::start(
                    servers,
                    next_server,
                    addr,
                    options,
                    tls,
                    transport,
                    response,
                ));
            }
            // Not a passing trouble: the same TLS set-up fails the same way
            // every time, and a server that found the request itself bad
            // (a plaintext client on a TLS port, say) will again.
            Ok(Err(AttemptError::Tls(e))) => return Err(Error::Connect(e)),
            Ok(Err(
                e @ AttemptError::Refused {
                    code: ErrorCode::BadArguments,
                    ..
                },
            )) => return Err(Error::Connect(format!("{addr}: {e}"))),
            Ok(Err(e)) => last_error = format!("{addr}: {e}"),
            Err(_) => last_error = format!("{addr}: no answer within the connect timeout"),
        }
        debug!(error = %last_error, "connection attempt failed");
        let pause = backoff
            .next()
            .min(deadline.saturating_duration_since(Instant::now()));
        tokio::time::sleep(pause).await;
    }
    Err(Error::Connect(last_error))
}

/// Why one connection attempt failed.
#[derive(Debug)]
pub(super) enum AttemptError {
    Io(String),
    /// TLS failed: the handshake, or the server's verdict on our
    /// certificate right after it.
    Tls(String),
    Refused {
        code: ErrorCode,
        message: String,
    },
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::Io(e) | AttemptError::Tls(e) => f.write_str(e),
            AttemptError::Refused { code, message } if message.is_empty() => {
                write!(f, "refused: {code}")
            }
            AttemptError::Refused { code, message } => write!(f, "refused: {code}: {message}"),
        }
    }
}

/// Connects to `addr` and runs the Connect handshake.
pub(super) async fn handshake(
    addr: &str,
    tls: Option<&TlsOptions>,
    request: pb::ConnectRequest,
) -> Result<(Transport, pb::ConnectResponse), AttemptError> {
    let io = |e: &dyn std::fmt::Display| AttemptError::Io(e.to_string());
    let tcp = TcpStream::connect(addr).await.map_err(|e| io(&e))?;
    // Requests are small and latency-bound; do not let Nagle hold them.
    tcp.set_nodelay(true).map_err(|e| io(&e))?;
    let stream = match tls {
        None => Stream::Plain(tcp),
        Some(tls) => tls.connect(addr, tcp).await.map_err(AttemptError::Tls)?,
    };
    // With TLS 1.3 the server judges our certificate after the handshake
    // is done on our side: its refusal arrives as the first read's error.
    let frame_err = |e: warden_protocol::FrameError| match &e {
        warden_protocol::FrameError::Io(io_err) => match tls_error(io_err) {
            Some(cause) => AttemptError::Tls(format!("TLS with {addr} failed: {cause}")),
            None => AttemptError::Io(e.to_string()),
        },
        _ => AttemptError::Io(e.to_string()),
    };
    let mut transport = Framed::new(stream, FrameCodec::new());
    let resuming = request.session_id;
    transport
        .send(pb::ClientFrame {
            kind: Some(pb::client_frame::Kind::Connect(request)),
        })
        .await
        .map_err(frame_err)?;
    let response = match transport.next().await {
        Some(Ok(pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Connect(response)),
        })) => response,
        Some(Ok(_)) => return Err(io(&"the server answered the handshake with another frame")),
        Some(Err(e)) => return Err(frame_err(e)),
        None => return Err(io(&"the server closed the connection during the handshake")),
    };
    let code = decode_code(response.error);
    if code != ErrorCode::Ok {
        return Err(AttemptError::Refused {
            code,
            message: response.message,
        });
    }
    if response.session_id == 0 || (resuming != 0 && response.session_id != resuming) {
        // A server that hands us another session than the one we asked to
        // resume has lost ours: from our side, that is expiry.
        return Err(AttemptError::Refused {
            code: ErrorCode::SessionExpired,
            message: format!(
                "asked for session {resuming:#x}, got {:#x}",
                response.session_id
            ),
        });
    }
    Ok((transport, response))
}

/// The session timeout the server granted (what we asked, if it says 0).
pub(super) fn negotiated(options: &ConnectOptions, timeout_ms: u32) -> Duration {
    if timeout_ms == 0 {
        options.session_timeout
    } else {
        Duration::from_millis(u64::from(timeout_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse() {
        assert_eq!(
            parse_servers("a:1, b:2 ,,[::1]:3").unwrap(),
            vec!["a:1", "b:2", "[::1]:3"]
        );
        for bad in ["", " , ", "a", "a:", ":1", "a:70000", "a:x"] {
            let err = parse_servers(bad).unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadArguments, "{bad:?}");
        }
        let many = vec!["h:1"; SERVERS_MAX + 1].join(",");
        assert!(parse_servers(&many).is_err());
    }

    #[test]
    fn negotiated_timeout_falls_back_to_requested() {
        let o = ConnectOptions::default();
        assert_eq!(negotiated(&o, 0), o.session_timeout);
        assert_eq!(negotiated(&o, 4000), Duration::from_secs(4));
    }
}
