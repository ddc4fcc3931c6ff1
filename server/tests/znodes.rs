//! Znode semantics against a real `warden` process: CRUD and Stat,
//! sequential naming, version guards, multi atomicity, ACL storage,
//! container and TTL removal.

use std::time::Duration;

use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, Op, OpResult};
use warden_testkit::Server;

async fn client(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .expect("connect")
}

/// Polls `cond` until true, failing after `timeout`.
async fn eventually<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn create_get_set_delete_with_stat() {
    let server = Server::start();
    let c = client(&server).await;

    let (path, stat) = c
        .create("/app", b"v0", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(path, "/app");
    assert_eq!(stat.version, 0);
    assert_eq!(stat.czxid, stat.mzxid);
    assert_eq!(stat.data_length, 2);
    assert_eq!(stat.ephemeral_owner, 0);

    let (data, got) = c.get_data("/app").await.unwrap();
    assert_eq!(data, b"v0");
    assert_eq!(got, stat);

    let stat2 = c.set_data("/app", b"v1", Some(0)).await.unwrap();
    assert_eq!(stat2.version, 1);
    assert!(stat2.mzxid > stat.mzxid);
    assert_eq!(stat2.czxid, stat.czxid);

    c.create("/app/child", b"", CreateOptions::default())
        .await
        .unwrap();
    let (children, parent) = c.get_children("/app").await.unwrap();
    assert_eq!(children, vec!["child".to_string()]);
    assert_eq!(parent.num_children, 1);
    assert_eq!(parent.cversion, 1);

    let err = c
        .create("/app", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NodeExists);
    assert_eq!(err.to_string(), "NodeExists: /app");
    let err = c
        .create("/missing/x", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNode);
    let err = c.delete("/app", None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotEmpty);

    c.delete("/app/child", None).await.unwrap();
    c.delete("/app", None).await.unwrap();
    assert_eq!(c.exists("/app").await.unwrap(), None);
    assert_eq!(
        c.get_data("/app").await.unwrap_err().code(),
        ErrorCode::NoNode
    );
}

#[tokio::test]
async fn version_conflicts_are_refused_and_change_nothing() {
    let server = Server::start();
    let c = client(&server).await;
    c.create("/v", b"a", CreateOptions::default())
        .await
        .unwrap();
    c.set_data("/v", b"b", None).await.unwrap(); // version 1

    let err = c.set_data("/v", b"stale", Some(0)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);
    assert_eq!(err.to_string(), "BadVersion: /v");
    let err = c.delete("/v", Some(0)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);

    let (data, stat) = c.get_data("/v").await.unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"b"[..], 1));
    c.delete("/v", Some(1)).await.unwrap();
}

#[tokio::test]
async fn sequential_names_are_unique_and_increasing() {
    let server = Server::start();
    let c = client(&server).await;
    c.create("/q", b"", CreateOptions::default()).await.unwrap();
    // Pipelined from many tasks at once.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.create(
                "/q/item-",
                format!("{i}").as_bytes(),
                CreateOptions::sequential(),
            )
            .await
            .unwrap()
            .0
        }));
    }
    let mut names = Vec::new();
    for t in tasks {
        names.push(t.await.unwrap());
    }
    names.sort();
    let expected: Vec<String> = (0..20).map(|i| format!("/q/item-{i:010}")).collect();
    assert_eq!(names, expected);

    // The number counts the parent's child creations (ZooKeeper's rule):
    // a delete does not advance it, and a name is never reused.
    c.delete("/q/item-0000000019", None).await.unwrap();
    let (p, _) = c
        .create("/q/item-", b"", CreateOptions::sequential())
        .await
        .unwrap();
    assert_eq!(p, "/q/item-0000000020");
}

#[tokio::test]
async fn multi_is_all_or_nothing() {
    let server = Server::start();
    let c = client(&server).await;
    c.create("/m", b"0", CreateOptions::default())
        .await
        .unwrap();

    // The third op fails: nothing of the first two is applied.
    let err = c
        .multi(vec![
            Op::create("/m/a", b"x".to_vec(), CreateOptions::default()),
            Op::set_data("/m", b"1".to_vec(), Some(0)),
            Op::check("/m", Some(7)),
        ])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);
    match &err {
        warden_client::Error::Multi { index, .. } => assert_eq!(*index, 2),
        other => panic!("expected a multi error, got {other:?}"),
    }
    assert_eq!(c.exists("/m/a").await.unwrap(), None);
    assert_eq!(c.get_data("/m").await.unwrap().0, b"0");

    // All succeed together, later ops seeing earlier ones.
    let results = c
        .multi(vec![
            Op::create("/m/a", b"x".to_vec(), CreateOptions::default()),
            Op::create("/m/a/b", b"y".to_vec(), CreateOptions::default()),
            Op::set_data("/m", b"1".to_vec(), Some(0)),
            Op::check("/m/a", Some(0)),
            Op::delete("/m/a/b", None),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    assert!(matches!(&results[0], OpResult::Create { path, .. } if path == "/m/a"));
    assert!(matches!(&results[2], OpResult::SetData { stat } if stat.version == 1));
    assert_eq!(c.exists("/m/a/b").await.unwrap(), None);
    assert_eq!(c.get_data("/m").await.unwrap().0, b"1");
}

#[tokio::test]
async fn acls_are_stored_and_versioned() {
    let server = Server::start();
    let c = client(&server).await;
    c.create("/acl", b"", CreateOptions::default())
        .await
        .unwrap();
    let (acl, stat) = c.get_acl("/acl").await.unwrap();
    assert_eq!(acl.len(), 1);
    assert_eq!(
        (acl[0].scheme.as_str(), acl[0].id.as_str()),
        ("world", "anyone")
    );
    assert_eq!(stat.aversion, 0);

    // ADMIN kept: setting the ACL again must reach the version check
    // (without ADMIN it is NoAuth, before any version is looked at).
    let read_only = vec![warden_client::Acl {
        perms: warden_client::perms::READ | warden_client::perms::ADMIN,
        scheme: "world".into(),
        id: "anyone".into(),
    }];
    let stat = c.set_acl("/acl", read_only.clone(), Some(0)).await.unwrap();
    assert_eq!(stat.aversion, 1);
    let err = c
        .set_acl("/acl", read_only.clone(), Some(0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);
    assert_eq!(c.get_acl("/acl").await.unwrap().0, read_only);
}

#[tokio::test]
async fn containers_and_ttl_nodes_are_removed_by_the_leader() {
    let server = Server::start();
    let c = client(&server).await;

    // A container stays while it never had a child, goes once emptied.
    c.create("/box", b"", CreateOptions::container())
        .await
        .unwrap();
    c.create("/box/item", b"", CreateOptions::default())
        .await
        .unwrap();
    c.delete("/box/item", None).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "empty container removed",
        || async { c.exists("/box").await.unwrap().is_none() },
    )
    .await;

    // A TTL node lives while it has a child, goes once childless and
    // unmodified for its TTL.
    c.create(
        "/lease",
        b"",
        CreateOptions::with_ttl(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    c.create("/lease/held", b"", CreateOptions::default())
        .await
        .unwrap();
    c.create(
        "/lease2",
        b"",
        CreateOptions::with_ttl(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(10),
        "expired TTL node removed",
        || async { c.exists("/lease2").await.unwrap().is_none() },
    )
    .await;
    assert!(
        c.exists("/lease").await.unwrap().is_some(),
        "a TTL node with a child stays"
    );
    c.delete("/lease/held", None).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "TTL node removed once childless",
        || async { c.exists("/lease").await.unwrap().is_none() },
    )
    .await;

    // A container that never had a child is not removed.
    c.create("/fresh", b"", CreateOptions::container())
        .await
        .unwrap();
    c.sync("/").await.unwrap();
    assert!(c.exists("/fresh").await.unwrap().is_some());
}

#[tokio::test]
async fn linearizable_reads_and_sync() {
    let server = Server::start();
    let a = client(&server).await;
    let b = client(&server).await;
    a.create("/lin", b"1", CreateOptions::default())
        .await
        .unwrap();
    b.sync("/lin").await.unwrap();
    assert_eq!(b.get_data_linearizable("/lin").await.unwrap().0, b"1");
    assert!(b.exists_linearizable("/lin").await.unwrap().is_some());
}

/// `set_data_with_ttl` gives a TTL node a new TTL from that write (the
/// server removes it by the new one); a node created without a TTL
/// refuses one, naming the node, and keeps its data.
#[tokio::test]
async fn set_data_with_ttl_changes_a_ttl_nodes_ttl() {
    let server = Server::start();
    let c = client(&server).await;
    c.create(
        "/long",
        b"",
        CreateOptions::with_ttl(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    let stat = c
        .set_data_with_ttl("/long", b"short now", None, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(stat.version, 1);
    // Far within the old TTL: only the new one removes it.
    eventually(
        Duration::from_secs(10),
        "the node removed at its new TTL",
        || async { c.exists("/long").await.unwrap().is_none() },
    )
    .await;

    c.create("/plain", b"v", CreateOptions::default())
        .await
        .unwrap();
    let e = c
        .set_data_with_ttl("/plain", b"w", None, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::BadArguments, "{e}");
    match &e {
        warden_client::Error::Api { path, message, .. } => {
            assert_eq!(path, "/plain");
            assert!(message.contains("created without one"), "{message}");
        }
        other => panic!("expected the server's refusal, got {other:?}"),
    }
    let (data, stat) = c.get_data("/plain").await.unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"v"[..], 0));
    // A zero TTL is refused before anything is sent.
    let e = c
        .set_data_with_ttl("/plain", b"w", None, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, warden_client::Error::BadArguments(_)), "{e}");
}

/// Null data (ZooKeeper's `create(path, null)`) through the native
/// protocol: kept apart from empty data, and through the log, a snapshot
/// and a restart.
#[tokio::test]
async fn null_data_is_not_empty_data_and_survives_a_restart() {
    let mut server = Server::start_with(warden_testkit::ServerOptions {
        snapshot_entries: Some(3),
        ..Default::default()
    });
    let c = client(&server).await;
    c.create_or_null("/null", None, CreateOptions::default())
        .await
        .unwrap();
    c.create("/empty", b"", CreateOptions::default())
        .await
        .unwrap();
    let (data, stat) = c.get_data_or_null("/null").await.unwrap();
    assert_eq!((data, stat.data_length), (None, 0));
    assert_eq!(c.get_data("/null").await.unwrap().0, b"");
    assert_eq!(
        c.get_data_or_null("/empty").await.unwrap().0,
        Some(Vec::new())
    );
    c.set_data_or_null("/empty", None, None).await.unwrap();
    c.set_data_or_null("/null", Some(b"x"), Some(0))
        .await
        .unwrap();
    c.set_data_or_null("/null", None, Some(1)).await.unwrap();
    for i in 0..5 {
        // Past --snapshot-entries: the restart loads a snapshot.
        c.create(&format!("/pad{i}"), b"p", CreateOptions::default())
            .await
            .unwrap();
    }
    drop(c);
    server.stop();
    server.restart();
    let c = client(&server).await;
    assert_eq!(c.get_data_or_null("/null").await.unwrap().0, None);
    assert_eq!(c.get_data_or_null("/empty").await.unwrap().0, None);
    assert_eq!(
        c.get_data_or_null("/pad0").await.unwrap().0,
        Some(b"p".to_vec())
    );
    let log = server.log();
    assert!(log.contains("restored snapshot"), "{log}");
}
