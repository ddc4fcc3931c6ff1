//! Watches against a real `warden` process: one-shot watches fire exactly
//! once, persistent watches keep firing in zxid order, and a client sees
//! the event before it sees the data that triggered it.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use warden_client::{Client, ConnectOptions, CreateOptions, EventType};
use warden_testkit::Server;

async fn client(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap()
}

const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn oneshot_watch_fires_exactly_once() {
    let server = Server::start();
    let watcher = client(&server).await;
    let writer = client(&server).await;
    writer
        .create("/w", b"0", CreateOptions::default())
        .await
        .unwrap();

    // A persistent watch on the same path is our clock: it sees every
    // change, so we know when the one-shot watch would have fired again.
    let mut all = watcher.watch("/w", false).await.unwrap();
    let (_, _, once) = watcher.get_data_watch("/w").await.unwrap();
    let once = tokio::spawn(once);

    let s1 = writer.set_data("/w", b"1", None).await.unwrap();
    let s2 = writer.set_data("/w", b"2", None).await.unwrap();
    for expected in [s1.mzxid, s2.mzxid] {
        let e = tokio::time::timeout(EVENT_TIMEOUT, all.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.event_type, e.zxid),
            (EventType::NodeDataChanged, expected)
        );
    }
    let e = once.await.unwrap().unwrap();
    assert_eq!(e.event_type, EventType::NodeDataChanged);
    assert_eq!(e.path, "/w");
    assert_eq!(
        e.zxid, s1.mzxid,
        "fired for the first change after it was set"
    );

    // Exactly once: a new one-shot watch is the only thing that fires next.
    let (_, _, again) = watcher.get_data_watch("/w").await.unwrap();
    let s3 = writer.set_data("/w", b"3", None).await.unwrap();
    let e = tokio::time::timeout(EVENT_TIMEOUT, again)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.zxid, s3.mzxid);
}

#[tokio::test]
async fn exists_and_child_watches() {
    let server = Server::start();
    let watcher = client(&server).await;
    let writer = client(&server).await;

    let (stat, created) = watcher.exists_watch("/later").await.unwrap();
    assert!(stat.is_none());
    writer
        .create("/later", b"", CreateOptions::default())
        .await
        .unwrap();
    let e = tokio::time::timeout(EVENT_TIMEOUT, created)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event_type, EventType::NodeCreated);

    let (_, _, children) = watcher.get_children_watch("/later").await.unwrap();
    writer
        .create("/later/kid", b"", CreateOptions::default())
        .await
        .unwrap();
    let e = tokio::time::timeout(EVENT_TIMEOUT, children)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (e.event_type, e.path.as_str()),
        (EventType::NodeChildrenChanged, "/later")
    );

    let (_, _, data) = watcher.get_data_watch("/later/kid").await.unwrap();
    writer.delete("/later/kid", None).await.unwrap();
    let e = tokio::time::timeout(EVENT_TIMEOUT, data)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event_type, EventType::NodeDeleted);
}

#[tokio::test]
async fn recursive_watch_sees_every_change_in_zxid_order() {
    let server = Server::start();
    let watcher = client(&server).await;
    let writer = client(&server).await;
    writer
        .create("/r", b"", CreateOptions::default())
        .await
        .unwrap();
    let mut stream = watcher.watch("/r", true).await.unwrap();

    let mut expected = Vec::new();
    let (p, s) = writer
        .create("/r/a", b"", CreateOptions::default())
        .await
        .unwrap();
    expected.push((EventType::NodeCreated, p, s.czxid));
    let (p, s) = writer
        .create("/r/a/b", b"", CreateOptions::default())
        .await
        .unwrap();
    expected.push((EventType::NodeCreated, p, s.czxid));
    let s = writer.set_data("/r/a/b", b"x", None).await.unwrap();
    expected.push((EventType::NodeDataChanged, "/r/a/b".to_string(), s.mzxid));
    writer.delete("/r/a/b", None).await.unwrap();
    let after = writer.exists("/r/a").await.unwrap().unwrap();
    expected.push((EventType::NodeDeleted, "/r/a/b".to_string(), after.pzxid));
    // Outside the watched subtree: never seen.
    writer
        .create("/other", b"", CreateOptions::default())
        .await
        .unwrap();

    for want in expected {
        let e = tokio::time::timeout(EVENT_TIMEOUT, stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!((e.event_type, e.path, e.zxid), want);
    }
    // Removing the watch stops it.
    stream.remove().await.unwrap();
}

#[tokio::test]
async fn event_arrives_before_the_data_that_triggered_it() {
    let server = Server::start();
    let watcher = client(&server).await;
    let writer = client(&server).await;
    writer
        .create("/order", b"old", CreateOptions::default())
        .await
        .unwrap();
    for round in 0..20 {
        let (_, _, watch) = watcher.get_data_watch("/order").await.unwrap();
        let value = format!("v{round}");
        writer
            .set_data("/order", value.as_bytes(), None)
            .await
            .unwrap();
        // Poll until the watcher reads the new value...
        loop {
            let (data, _) = watcher.get_data("/order").await.unwrap();
            if data == value.as_bytes() {
                break;
            }
        }
        // ...by which time the event must already have been delivered.
        let fired = watch.now_or_never();
        assert!(
            matches!(fired, Some(Ok(ref e)) if e.event_type == EventType::NodeDataChanged),
            "round {round}: read the new data before the watch event: {fired:?}"
        );
    }
}
