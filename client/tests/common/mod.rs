//! Shared helpers for the client's integration tests.
//!
//! - [`WardenServer`] is a real `warden serve` process, started through the
//!   shared helper (`warden-testkit`).
//! - [`fake::FakeWarden`] is an in-memory stand-in speaking the same wire
//!   protocol, used only by `tests/session.rs` to push the client's
//!   connection state machine in ways a real server cannot be pushed on
//!   demand (a silent server, a connection cut mid-request, expiry pushed
//!   at a chosen moment). Everything else runs against the real server.

// Each test binary uses a different part of these helpers.
#![allow(dead_code)]

pub mod fake;

use std::time::Duration;

use warden_client::{Client, ConnectOptions};

/// Options for test clients: short enough that a hung test fails quickly.
pub fn test_options() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
    }
}

/// Connects a client with [`test_options`].
pub async fn connect(addr: &str) -> Client {
    Client::connect(addr, test_options())
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// A real `warden serve` process (through the shared test helper), with
/// its client address at hand.
pub struct WardenServer {
    pub addr: String,
    inner: warden_testkit::Server,
}

impl WardenServer {
    pub fn start() -> WardenServer {
        let inner = warden_testkit::Server::start();
        WardenServer {
            addr: inner.addr().to_string(),
            inner,
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.inner.log()
    }
}
