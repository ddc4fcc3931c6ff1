//! Session life under faults: reconnects, watch re-registration, expiry,
//! heartbeats, timeouts, clean close.
//!
//! These use the in-memory fake server only: they need to cut connections,
//! hang the server and expire sessions on demand, which the fake offers and
//! a real single `warden serve` cannot do from a test. (The jepsen suite
//! covers the same ground against real servers.)

mod common;

use std::time::Duration;

use futures::StreamExt;
use tokio::time::{timeout, Instant};
use warden_client::{
    Client, ConnectOptions, CreateOptions, Error, EventType, SessionState, WatchEvent,
};

use common::connect;
use common::fake::FakeWarden;

/// Longest wait for anything that must happen.
const WAIT: Duration = Duration::from_secs(5);
/// How often a condition is re-checked.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `cond` holds, failing the test after [`WAIT`].
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_state(client: &Client, state: SessionState) {
    let mut events = client.session_events();
    timeout(WAIT, events.wait_for(|s| *s == state))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {state:?}"))
        .expect("the state channel stays open");
}

/// Retries `exists("/")` until the client is back (calls made while it is
/// reconnecting fail fast with ConnectionLoss).
async fn wait_usable(client: &Client) {
    let deadline = Instant::now() + WAIT;
    loop {
        match client.exists("/").await {
            Ok(_) => return,
            Err(Error::ConnectionLoss) if Instant::now() < deadline => {
                tokio::time::sleep(POLL).await
            }
            Err(e) => panic!("client did not come back: {e}"),
        }
    }
}

async fn fired<F: std::future::Future<Output = warden_client::Result<WatchEvent>>>(
    watch: F,
) -> WatchEvent {
    timeout(WAIT, watch)
        .await
        .expect("the watch should fire")
        .expect("the watch should fire, not fail")
}

fn options_with(request_timeout: Duration) -> ConnectOptions {
    ConnectOptions {
        request_timeout,
        ..common::test_options()
    }
}

#[tokio::test]
async fn reconnect_resumes_the_session_and_its_watches() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let (_, created) = c
        .create("/r", b"0", CreateOptions::default())
        .await
        .unwrap();
    let (_, _, data_watch) = c.get_data_watch("/r").await.unwrap();
    let (_, _, child_watch) = c.get_children_watch("/r").await.unwrap();
    let (_, exist_watch) = c.exists_watch("/missing").await.unwrap();
    let mut stream = c.watch("/p", true).await.unwrap();

    fake.drop_connections();
    wait_until("the watches are re-sent", || {
        !fake.set_watches_seen().is_empty()
    })
    .await;
    wait_state(&c, SessionState::Connected).await;

    let connects = fake.connects_seen();
    let resume = connects.last().expect("a resume");
    assert_eq!(connects.len(), 2);
    assert_eq!(resume.session_id, c.session_id());
    assert!(!resume.password.is_empty());
    assert!(resume.last_zxid_seen >= created.czxid);

    let sent = &fake.set_watches_seen()[0];
    assert_eq!(sent.relative_zxid, resume.last_zxid_seen);
    assert_eq!(sent.data_watches, vec!["/r"]);
    assert_eq!(sent.child_watches, vec!["/r"]);
    assert_eq!(sent.exist_watches, vec!["/missing"]);
    assert_eq!(sent.persistent_recursive_watches, vec!["/p"]);
    assert!(sent.persistent_watches.is_empty());

    // Every watch works on the new connection.
    fake.set_data("/r", b"1");
    assert_eq!(
        fired(data_watch).await.event_type,
        EventType::NodeDataChanged
    );
    c.create("/r/kid", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(
        fired(child_watch).await.event_type,
        EventType::NodeChildrenChanged
    );
    c.create("/missing", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(fired(exist_watch).await.event_type, EventType::NodeCreated);
    c.create("/p", b"", CreateOptions::default()).await.unwrap();
    let event = timeout(WAIT, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeCreated, "/p")
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn changes_missed_while_away_fire_on_return() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    c.create("/m", b"0", CreateOptions::default())
        .await
        .unwrap();
    let (_, _, watch) = c.get_data_watch("/m").await.unwrap();

    fake.set_accepting(false);
    fake.drop_connections();
    wait_state(&c, SessionState::Disconnected).await;
    // Calls fail fast while disconnected.
    assert_eq!(c.get_data("/m").await.unwrap_err(), Error::ConnectionLoss);

    fake.set_data("/m", b"changed behind our back");
    fake.set_accepting(true);
    let event = fired(watch).await;
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeDataChanged, "/m")
    );
    wait_usable(&c).await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn in_flight_requests_fail_with_connection_loss() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    fake.set_stalled(true);
    let before = fake.requests_seen();
    let pending = tokio::spawn({
        let c = c.clone();
        async move { c.get_data("/").await }
    });
    wait_until("the request reaches the server", || {
        fake.requests_seen() > before
    })
    .await;
    fake.set_stalled(false);
    fake.drop_connections();
    assert_eq!(pending.await.unwrap().unwrap_err(), Error::ConnectionLoss);
    wait_usable(&c).await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn unanswered_request_times_out() {
    let fake = FakeWarden::start();
    let c = Client::connect(&fake.addr, options_with(Duration::from_millis(300)))
        .await
        .unwrap();
    fake.set_stalled(true);
    let err = c.get_data("/").await.unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert_eq!(err.code(), warden_client::ErrorCode::OperationTimeout);
    fake.set_stalled(false);
    wait_usable(&c).await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn server_expiry_ends_calls_and_watches() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let (_, _, watch) = c.get_data_watch("/").await.unwrap();
    let mut stream = c.watch("/x", false).await.unwrap();
    fake.expire(c.session_id());
    wait_state(&c, SessionState::Expired).await;

    assert_eq!(
        timeout(WAIT, watch).await.unwrap(),
        Err(Error::SessionExpired)
    );
    assert_eq!(
        timeout(WAIT, stream.next()).await.unwrap(),
        Some(Err(Error::SessionExpired))
    );
    assert_eq!(timeout(WAIT, stream.next()).await.unwrap(), None);
    let err = c.get_data("/").await.unwrap_err();
    assert_eq!(err, Error::SessionExpired);
    assert_eq!(
        err.to_string(),
        "SessionExpired: the session has expired; create a new client"
    );
    assert_eq!(
        c.watch("/y", true).await.unwrap_err(),
        Error::SessionExpired
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn expired_when_no_server_takes_the_session_back_in_time() {
    let fake = FakeWarden::start();
    fake.set_timeout_ms(600);
    let c = connect(&fake.addr).await;
    fake.set_accepting(false);
    fake.drop_connections();
    wait_state(&c, SessionState::Expired).await;
    assert_eq!(c.exists("/").await.unwrap_err(), Error::SessionExpired);
}

#[tokio::test]
async fn refused_resume_means_expired() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let started = Instant::now();
    fake.set_accepting(false);
    fake.drop_connections();
    fake.expire(c.session_id());
    fake.set_accepting(true);
    wait_state(&c, SessionState::Expired).await;
    // Told by the server, not waited out (the timeout is 10 s).
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn heartbeats_keep_an_idle_session() {
    let fake = FakeWarden::start();
    fake.set_timeout_ms(300);
    let c = connect(&fake.addr).await;
    wait_until("the client pings", || fake.pings_seen() >= 5).await;
    assert_eq!(*c.session_events().borrow(), SessionState::Connected);
    assert_eq!(fake.connects_seen().len(), 1, "no reconnect needed");
    c.close().await.unwrap();
}

#[tokio::test]
async fn silent_server_is_left_for_another_connection() {
    let fake = FakeWarden::start();
    fake.set_timeout_ms(600);
    let c = connect(&fake.addr).await;
    fake.set_stalled(true);
    wait_until("the client reconnects", || fake.connects_seen().len() >= 2).await;
    fake.set_stalled(false);
    assert_eq!(fake.connects_seen()[1].session_id, c.session_id());
    wait_usable(&c).await;
    c.close().await.unwrap();
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_session() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let id = c.session_id();
    c.create("/mine", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let clone = c.clone();
    drop(c);
    assert!(
        clone.exists("/mine").await.unwrap().is_some(),
        "a clone keeps it open"
    );
    drop(clone);
    wait_until("the session is closed", || !fake.session_alive(id)).await;
    assert!(!fake.exists("/mine"));
}

#[tokio::test]
async fn removing_persistent_watches_reaches_the_server() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let w = c.watch("/a", false).await.unwrap();
    assert_eq!(fake.persistent_watch_count(), 1);
    w.remove().await.unwrap();
    assert_eq!(fake.persistent_watch_count(), 0);

    let first = c.watch("/b", true).await.unwrap();
    let second = c.watch("/b", true).await.unwrap();
    assert_eq!(
        fake.persistent_watch_count(),
        1,
        "one server watch per path and mode"
    );
    drop(first);
    // Requests are answered in order: once sync returns, a removal sent
    // before it has been applied.
    c.sync("/").await.unwrap();
    assert_eq!(
        fake.persistent_watch_count(),
        1,
        "the other handle still needs it"
    );
    drop(second);
    c.sync("/").await.unwrap();
    assert_eq!(fake.persistent_watch_count(), 0);
    c.close().await.unwrap();
}

#[tokio::test]
async fn close_while_disconnected_is_local_and_says_so() {
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let id = c.session_id();
    fake.set_accepting(false);
    fake.drop_connections();
    wait_state(&c, SessionState::Disconnected).await;
    // Closed here, but the server never heard: not a success.
    let err = timeout(WAIT, c.close()).await.unwrap().unwrap_err();
    assert_eq!(err, Error::ConnectionLoss);
    assert_eq!(*c.session_events().borrow(), SessionState::Closed);
    assert_eq!(c.exists("/").await.unwrap_err(), Error::Closed);
    assert!(fake.session_alive(id), "the server still has the session");
    // Closing again: the session is over here, nothing more to report.
    c.close().await.unwrap();
}

#[tokio::test]
async fn close_the_server_never_answers_is_a_timeout() {
    // Found by the Jepsen ephemeral workload: close() used to report
    // success when its request went unanswered (a leader cut off by a
    // partition), while the session and its ephemerals lived on.
    let fake = FakeWarden::start();
    let c = Client::connect(&fake.addr, options_with(Duration::from_millis(300)))
        .await
        .unwrap();
    let id = c.session_id();
    fake.set_stalled(true);
    let err = timeout(WAIT, c.close()).await.unwrap().unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert_eq!(*c.session_events().borrow(), SessionState::Closed);
    assert!(fake.session_alive(id));
}

#[tokio::test]
async fn session_timeout_is_what_the_server_grants() {
    let fake = FakeWarden::start();
    fake.set_timeout_ms(450);
    let _c = Client::connect(
        &fake.addr,
        ConnectOptions {
            session_timeout: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(fake.connects_seen()[0].timeout_ms, 30_000);
    // Pinging at a third of the granted 450 ms, not of the asked 30 s.
    wait_until("the client pings", || fake.pings_seen() >= 3).await;
}

#[tokio::test]
async fn close_the_server_refuses_is_an_error() {
    // Found by the Jepsen ephemeral workload (partition): a server cut off
    // from the leader answered the close with NotReady, and close() said
    // Ok while the session and its ephemerals lived on.
    let fake = FakeWarden::start();
    let c = connect(&fake.addr).await;
    let id = c.session_id();
    fake.set_close_refusal(Some(warden_client::ErrorCode::NotReady));
    let err = timeout(WAIT, c.close()).await.unwrap().unwrap_err();
    assert_eq!(err.code(), warden_client::ErrorCode::NotReady, "{err:?}");
    assert_eq!(*c.session_events().borrow(), SessionState::Closed);
    assert!(fake.session_alive(id));
}
