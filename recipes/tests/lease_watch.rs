//! Watching a lease's holder against a real server (`LeaseLock::watch`):
//! every grant, renewal, release and lapse in order with rising versions;
//! `acquire_notified` calls back once the caller is in line; the synced
//! state read.
//!
//! Waits are for events with a deadline; nothing asserts how long anything
//! took.

use std::time::Duration;

use tokio::time::timeout;
use warden_client::{Client, ConnectOptions};
use warden_recipes::{LeaseLock, LeaseView, LeaseWatch};
use warden_testkit::Server;

/// Longest wait for anything the test expects to happen.
const DEADLINE: Duration = Duration::from_secs(30);
const TTL_LONG: Duration = Duration::from_secs(60);
/// Short enough to lapse within the test.
const TTL_SHORT: Duration = Duration::from_secs(1);
const ROOT: &str = "/leases";

async fn connect(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .expect("connect")
}

/// The next view, which must come within the deadline and be newer.
async fn next(watch: &mut LeaseWatch, last: &mut u64) -> LeaseView {
    let view = timeout(DEADLINE, watch.next())
        .await
        .expect("a holder change within the deadline")
        .expect("the watch goes on");
    assert!(
        view.version > *last,
        "version {} after {last}",
        view.version
    );
    *last = view.version;
    view
}

/// Views until one whose holder is `client` (`None`: free).
async fn until(watch: &mut LeaseWatch, last: &mut u64, client: Option<&str>) -> LeaseView {
    loop {
        let view = next(watch, last).await;
        let holder = view.holder.as_ref().map(|h| h.client_id.as_str());
        if holder == client {
            return view;
        }
        // Only a grant's two steps (at the head, then stamped) may show
        // a holder before the one awaited.
        assert!(holder.is_some(), "free while waiting for {client:?}");
    }
}

#[tokio::test]
async fn the_watch_sees_every_holder_change_in_order() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let mut watch = leases.watch("jobs").await.expect("watch");
    let mut last = 0;
    let first = timeout(DEADLINE, watch.next()).await.unwrap().unwrap();
    assert_eq!(first.holder, None);
    last = last.max(first.version);

    let one = leases
        .acquire("jobs", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let seen = until(&mut watch, &mut last, Some("w1")).await;
    assert_eq!(seen.holder.unwrap().fencing_token, one.fencing_token);

    let renewed = leases
        .renew("jobs", "w1", one.fencing_token, TTL_LONG * 2)
        .await
        .unwrap();
    loop {
        let view = until(&mut watch, &mut last, Some("w1")).await;
        if view.holder.unwrap().expires_at_ms == renewed.expires_at_ms {
            break;
        }
    }

    // A waiter is told it is in line before it waits; the synced read
    // counts it.
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let waiter = {
        let leases = leases.clone();
        tokio::spawn(async move {
            leases
                .acquire_notified("jobs", "w2", TTL_SHORT, DEADLINE, move || {
                    let _ = queued_tx.send(());
                })
                .await
        })
    };
    timeout(DEADLINE, queued_rx).await.unwrap().unwrap();
    let state = leases.state_synced("jobs").await.unwrap().unwrap();
    assert_eq!((state.holder.client_id.as_str(), state.waiters), ("w1", 1));

    leases
        .release("jobs", "w1", one.fencing_token)
        .await
        .unwrap();
    let two = waiter.await.unwrap().unwrap().unwrap();
    assert!(two.fencing_token > one.fencing_token);
    let seen = until(&mut watch, &mut last, Some("w2")).await;
    assert_eq!(seen.holder.unwrap().fencing_token, two.fencing_token);
    // Not renewed, w2's lease lapses: the watch says so.
    until(&mut watch, &mut last, None).await;
    assert_eq!(leases.state_synced("jobs").await.unwrap(), None);
}
