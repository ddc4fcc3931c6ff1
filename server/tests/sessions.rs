//! Sessions against a real `warden` process: ephemeral nodes go when their
//! client dies (expiry) or closes, never while the session is alive; a
//! session survives a reconnect.

use std::time::Duration;

use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, EventType, SessionState};
use warden_protocol::pb::{self, request::Op};
use warden_testkit::raw::RawConn;
use warden_testkit::{Server, ServerOptions};

fn opts(session_timeout: Duration) -> ConnectOptions {
    ConnectOptions {
        session_timeout,
        ..ConnectOptions::default()
    }
}

/// Opens a session over a raw connection and creates an ephemeral node;
/// dropping the connection is exactly what the server sees when a client
/// process dies.
fn raw_session_with_ephemeral(addr: &str, path: &str, timeout_ms: u32) -> (RawConn, u64) {
    let mut conn = RawConn::connect(addr);
    let hello = conn.connect_request(pb::ConnectRequest {
        protocol_version: 1,
        timeout_ms,
        ..Default::default()
    });
    assert_eq!(hello.error, 0, "{hello:?}");
    let r = conn.request(
        1,
        Op::Create(pb::CreateRequest {
            path: path.into(),
            ephemeral: true,
            ..Default::default()
        }),
    );
    assert_eq!(r.error, 0, "{r:?}");
    (conn, hello.session_id)
}

#[tokio::test]
async fn ephemeral_goes_when_its_client_dies_and_not_before() {
    let server = Server::start();
    let observer = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    let (socket, session_id) = raw_session_with_ephemeral(server.addr(), "/eph", 1500);
    let stat = observer.exists("/eph").await.unwrap().expect("created");
    assert_eq!(stat.ephemeral_owner, session_id);

    let (_, watch) = observer.exists_watch("/eph").await.unwrap();
    let died = std::time::Instant::now();
    drop(socket); // the client "dies": no close, no more heartbeats

    let event = tokio::time::timeout(Duration::from_secs(20), watch)
        .await
        .expect("ephemeral removed within the session timeout plus slack")
        .unwrap();
    assert_eq!(event.event_type, EventType::NodeDeleted);
    // Never while the session was alive: not before its timeout ran out.
    assert!(
        died.elapsed() >= Duration::from_millis(1500),
        "removed after {:?}, before the 1.5 s session timeout",
        died.elapsed()
    );
    assert_eq!(observer.exists("/eph").await.unwrap(), None);
}

#[tokio::test]
async fn ephemeral_goes_at_once_on_clean_close() {
    let server = Server::start();
    let observer = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    let owner = Client::connect(server.addr(), opts(Duration::from_secs(30)))
        .await
        .unwrap();
    owner
        .create("/lock", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let (_, watch) = observer.exists_watch("/lock").await.unwrap();
    owner.close().await.unwrap();
    // The session timeout is 30 s: removal within 10 s is the close, not expiry.
    let event = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert_eq!(
        owner.get_data("/").await.unwrap_err().code(),
        ErrorCode::SessionExpired
    );
}

#[tokio::test]
async fn heartbeats_keep_an_idle_session_alive() {
    let server = Server::start();
    let owner = Client::connect(server.addr(), opts(Duration::from_millis(1000)))
        .await
        .unwrap();
    owner
        .create("/alive", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let observer = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    // Idle for three session timeouts: pings alone must keep it.
    let (_, watch) = observer.exists_watch("/alive").await.unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(3), watch).await;
    assert!(
        fired.is_err(),
        "the ephemeral of a live session was removed: {fired:?}"
    );
    assert!(observer.exists("/alive").await.unwrap().is_some());
    assert_eq!(*owner.session_events().borrow(), SessionState::Connected);
}

#[tokio::test]
async fn session_survives_a_server_restart_and_keeps_its_ephemerals() {
    let mut server = Server::start_with(ServerOptions::default());
    let c = Client::connect(server.addr(), opts(Duration::from_secs(20)))
        .await
        .unwrap();
    let id = c.session_id();
    c.create("/mine", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let mut states = c.session_events();

    server.kill9();
    server.restart();

    // The client notices, reconnects to the same address and resumes.
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            states.changed().await.unwrap();
            if *states.borrow() == SessionState::Connected {
                break;
            }
        }
    })
    .await
    .expect("reconnected");
    assert_eq!(c.session_id(), id);
    let stat = c.exists("/mine").await.unwrap().expect("ephemeral kept");
    assert_eq!(stat.ephemeral_owner, id);
}

#[tokio::test]
async fn resuming_an_expired_session_is_refused() {
    let server = Server::start();
    let (socket, session_id) = raw_session_with_ephemeral(server.addr(), "/gone", 1000);
    drop(socket);
    let observer = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while observer.exists("/gone").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "session never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Now resume it: the server says SessionExpired.
    let c = RawConn::connect(server.addr()).connect_request(pb::ConnectRequest {
        protocol_version: 1,
        session_id,
        timeout_ms: 1000,
        ..Default::default()
    });
    assert_eq!(c.error, ErrorCode::SessionExpired as i32);
}
