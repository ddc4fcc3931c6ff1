//! Helpers shared by the recipes' integration tests.

#![allow(dead_code)]

pub mod held;
pub mod late;
pub mod lossy;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use warden_client::{Client, ConnectOptions};

/// Longest wait for anything that must happen.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A client of its own (its own session, as a separate process would have).
pub async fn connect(addr: &str) -> Client {
    let options = ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
    };
    Client::connect(addr, options)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// Polls `cond` until it holds; panics naming `what` after [`DEADLINE`].
pub async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    let mut pause = Duration::from_millis(5);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
