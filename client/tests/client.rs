//! End-to-end scenarios for the client library.
//!
//! Every scenario runs against a real `warden serve` process of its own
//! (the `real::` tests).

mod common;

use std::time::Duration;

use futures::StreamExt;
use warden_client::{
    Client, CreateOptions, Error, ErrorCode, EventType, Op, OpResult, SessionState, WatchEvent,
};

use common::connect;

/// Longest wait for an event that must come.
const EVENT_WAIT: Duration = Duration::from_secs(5);

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod real {
            $(
                #[tokio::test]
                async fn $name() {
                    let server = super::common::WardenServer::start();
                    super::$name(&server.addr).await;
                }
            )*
        }
    };
}

scenarios!(
    crud_round_trip,
    version_conflict,
    oneshot_watch_fires_exactly_once,
    exists_and_children_watches,
    persistent_watch_stream,
    recursive_watch_stream,
    multi_reports_the_failing_op,
    multi_applies_all,
    ephemeral_goes_with_its_session,
    sequential_names_increase,
    pipelined_requests,
    bad_arguments_fail_without_a_round_trip,
    acl_round_trip,
);

async fn next_event<F: std::future::Future<Output = warden_client::Result<WatchEvent>>>(
    watch: F,
) -> WatchEvent {
    tokio::time::timeout(EVENT_WAIT, watch)
        .await
        .expect("the watch should fire")
        .expect("the watch should fire, not fail")
}

async fn next_streamed(stream: &mut warden_client::PersistentWatch) -> (EventType, String) {
    let event = tokio::time::timeout(EVENT_WAIT, stream.next())
        .await
        .expect("an event should come")
        .expect("the stream should not end")
        .expect("the stream should not fail");
    (event.event_type, event.path)
}

async fn crud_round_trip(addr: &str) {
    let c = connect(addr).await;
    assert_ne!(c.session_id(), 0);
    assert_eq!(*c.session_events().borrow(), SessionState::Connected);

    let (path, stat) = c
        .create("/crud", b"v1", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(path, "/crud");
    assert_eq!(stat.version, 0);
    assert_eq!(stat.data_length, 2);
    assert_eq!(stat.czxid, stat.mzxid);

    let (data, got) = c.get_data("/crud").await.unwrap();
    assert_eq!(data, b"v1");
    assert_eq!(got, stat);

    let set = c.set_data("/crud", b"v2", Some(0)).await.unwrap();
    assert_eq!(set.version, 1);
    assert!(set.mzxid > stat.mzxid);
    let (data, _) = c.get_data_linearizable("/crud").await.unwrap();
    assert_eq!(data, b"v2");

    c.create("/crud/kid", b"", CreateOptions::default())
        .await
        .unwrap();
    let (children, parent) = c.get_children("/crud").await.unwrap();
    assert_eq!(children, vec!["kid"]);
    assert_eq!(parent.num_children, 1);
    let (root_children, _) = c.get_children_linearizable("/").await.unwrap();
    assert!(root_children.contains(&"crud".to_string()));

    let err = c.delete("/crud", None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotEmpty);
    assert_eq!(err.to_string(), "NotEmpty: /crud");

    c.delete("/crud/kid", None).await.unwrap();
    c.delete("/crud", Some(1)).await.unwrap();
    assert_eq!(c.exists("/crud").await.unwrap(), None);
    assert_eq!(c.exists_linearizable("/crud").await.unwrap(), None);
    c.sync("/").await.unwrap();

    let err = c.get_data("/crud").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNode);
    assert_eq!(err.to_string(), "NoNode: /crud");
    let err = c
        .create("/crud/a/b", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNode);

    c.create("/dup", b"", CreateOptions::default())
        .await
        .unwrap();
    let err = c
        .create("/dup", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "NodeExists: /dup");

    c.close().await.unwrap();
    assert_eq!(*c.session_events().borrow(), SessionState::Closed);
    assert_eq!(c.get_data("/dup").await.unwrap_err(), Error::Closed);
    c.close().await.unwrap();
}

async fn version_conflict(addr: &str) {
    let c = connect(addr).await;
    c.create("/ver", b"0", CreateOptions::default())
        .await
        .unwrap();
    c.set_data("/ver", b"1", Some(0)).await.unwrap();

    let err = c.set_data("/ver", b"2", Some(0)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);
    assert_eq!(err.to_string(), "BadVersion: /ver");
    assert!(matches!(&err, Error::Api { path, .. } if path == "/ver"));

    let err = c.delete("/ver", Some(7)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);

    // Nothing changed.
    let (data, stat) = c.get_data("/ver").await.unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"1"[..], 1));
    c.close().await.unwrap();
}

async fn oneshot_watch_fires_exactly_once(addr: &str) {
    let c = connect(addr).await;
    c.create("/once", b"0", CreateOptions::default())
        .await
        .unwrap();
    let (_, _, first) = c.get_data_watch("/once").await.unwrap();
    let (_, _, second) = c.get_data_watch("/once").await.unwrap();
    assert_eq!(first.path(), "/once");

    let s1 = c.set_data("/once", b"1", None).await.unwrap();
    let _s2 = c.set_data("/once", b"2", None).await.unwrap();

    // Both watchers of the path see the first change, and only it.
    let expected = WatchEvent {
        event_type: EventType::NodeDataChanged,
        path: "/once".into(),
        zxid: s1.mzxid,
    };
    assert_eq!(next_event(first).await, expected);
    assert_eq!(next_event(second).await, expected);

    // A watch set now is not fired by anything left over from the second
    // change: the first event it sees is the third change's.
    let (_, _, again) = c.get_data_watch("/once").await.unwrap();
    let s3 = c.set_data("/once", b"3", None).await.unwrap();
    assert_eq!(next_event(again).await.zxid, s3.mzxid);

    // Deletion fires data watches too.
    let (_, _, gone) = c.get_data_watch("/once").await.unwrap();
    c.delete("/once", None).await.unwrap();
    assert_eq!(next_event(gone).await.event_type, EventType::NodeDeleted);

    // No watch is left by a read that failed.
    let err = c.get_data_watch("/once").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNode);
    c.close().await.unwrap();
}

async fn exists_and_children_watches(addr: &str) {
    let c = connect(addr).await;
    let (stat, created) = c.exists_watch("/ew").await.unwrap();
    assert_eq!(stat, None);
    let (_, made) = c
        .create("/ew", b"", CreateOptions::default())
        .await
        .unwrap();
    let event = next_event(created).await;
    assert_eq!(
        (event.event_type, event.path.as_str(), event.zxid),
        (EventType::NodeCreated, "/ew", made.czxid)
    );

    let (stat, changed) = c.exists_watch("/ew").await.unwrap();
    assert!(stat.is_some());
    c.set_data("/ew", b"x", None).await.unwrap();
    assert_eq!(
        next_event(changed).await.event_type,
        EventType::NodeDataChanged
    );

    let (children, _, kids) = c.get_children_watch("/ew").await.unwrap();
    assert!(children.is_empty());
    c.create("/ew/a", b"", CreateOptions::default())
        .await
        .unwrap();
    let event = next_event(kids).await;
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeChildrenChanged, "/ew")
    );
    c.close().await.unwrap();
}

async fn persistent_watch_stream(addr: &str) {
    let c = connect(addr).await;
    let mut w = c.watch("/pw", false).await.unwrap();
    assert_eq!((w.path(), w.is_recursive()), ("/pw", false));
    c.create("/pw", b"", CreateOptions::default())
        .await
        .unwrap();
    c.set_data("/pw", b"1", None).await.unwrap();
    c.create("/pw/a", b"", CreateOptions::default())
        .await
        .unwrap();
    c.set_data("/pw/a", b"1", None).await.unwrap(); // not this path: no event
    c.delete("/pw/a", None).await.unwrap();
    c.delete("/pw", None).await.unwrap();
    let expected = [
        (EventType::NodeCreated, "/pw"),
        (EventType::NodeDataChanged, "/pw"),
        (EventType::NodeChildrenChanged, "/pw"),
        (EventType::NodeChildrenChanged, "/pw"),
        (EventType::NodeDeleted, "/pw"),
    ];
    for (t, p) in expected {
        assert_eq!(next_streamed(&mut w).await, (t, p.to_string()));
    }
    // It is still there after all that.
    c.create("/pw", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(
        next_streamed(&mut w).await,
        (EventType::NodeCreated, "/pw".into())
    );
    w.remove().await.unwrap();
    c.close().await.unwrap();
}

async fn recursive_watch_stream(addr: &str) {
    let c = connect(addr).await;
    let mut w = c.watch("/rw", true).await.unwrap();
    c.create("/rw", b"", CreateOptions::default())
        .await
        .unwrap();
    c.create("/rw/a", b"", CreateOptions::default())
        .await
        .unwrap();
    c.create("/rw/a/b", b"", CreateOptions::default())
        .await
        .unwrap();
    c.set_data("/rw/a/b", b"x", None).await.unwrap();
    c.create("/rwx", b"", CreateOptions::default())
        .await
        .unwrap(); // a sibling, not a child
    c.delete("/rw/a/b", None).await.unwrap();
    let expected = [
        (EventType::NodeCreated, "/rw"),
        (EventType::NodeCreated, "/rw/a"),
        (EventType::NodeCreated, "/rw/a/b"),
        (EventType::NodeDataChanged, "/rw/a/b"),
        (EventType::NodeDeleted, "/rw/a/b"),
    ];
    for (t, p) in expected {
        assert_eq!(next_streamed(&mut w).await, (t, p.to_string()));
    }
    drop(w);
    c.close().await.unwrap();
}

async fn multi_reports_the_failing_op(addr: &str) {
    let c = connect(addr).await;
    let err = c
        .multi(vec![
            Op::create("/m1", b"a".to_vec(), CreateOptions::default()),
            Op::check("/m1", Some(5)),
            Op::create("/m2", b"b".to_vec(), CreateOptions::default()),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Multi { index: 1, code: ErrorCode::BadVersion, path, .. } if path == "/m1"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "BadVersion: /m1 (op 1 of the multi)");
    assert_eq!(err.code(), ErrorCode::BadVersion);
    // Nothing was applied.
    assert_eq!(c.exists("/m1").await.unwrap(), None);
    assert_eq!(c.exists("/m2").await.unwrap(), None);

    // A bad path is caught before sending, still naming its op.
    let err = c
        .multi(vec![Op::check("/", None), Op::delete("nope", None)])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Multi {
                index: 1,
                code: ErrorCode::InvalidPath,
                ..
            }
        ),
        "{err:?}"
    );
    c.close().await.unwrap();
}

async fn multi_applies_all(addr: &str) {
    let c = connect(addr).await;
    c.create("/mm", b"", CreateOptions::default())
        .await
        .unwrap();
    let results = c
        .multi(vec![
            Op::create("/mm/a", b"1".to_vec(), CreateOptions::default()),
            Op::set_data("/mm", b"x".to_vec(), Some(0)),
            Op::check("/mm", Some(1)),
            Op::delete("/mm/a", None),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 4);
    let OpResult::Create { path, stat } = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!(path, "/mm/a");
    let OpResult::SetData { stat: set } = &results[1] else {
        panic!("{results:?}")
    };
    assert_eq!(set.version, 1);
    assert_eq!(stat.czxid, set.mzxid, "one multi, one zxid");
    assert_eq!(results[2], OpResult::Check);
    assert_eq!(results[3], OpResult::Delete);
    assert_eq!(c.exists("/mm/a").await.unwrap(), None);
    c.close().await.unwrap();
}

async fn ephemeral_goes_with_its_session(addr: &str) {
    let owner = connect(addr).await;
    let observer = connect(addr).await;
    assert_ne!(owner.session_id(), observer.session_id());
    owner
        .create("/eph", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let (stat, gone) = observer.exists_watch("/eph").await.unwrap();
    assert_eq!(stat.expect("created").ephemeral_owner, owner.session_id());

    let err = owner
        .create("/eph/kid", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoChildrenForEphemerals);

    owner.close().await.unwrap();
    assert_eq!(next_event(gone).await.event_type, EventType::NodeDeleted);
    assert_eq!(observer.exists("/eph").await.unwrap(), None);
    assert_eq!(owner.exists("/eph").await.unwrap_err(), Error::Closed);
    observer.close().await.unwrap();
}

async fn sequential_names_increase(addr: &str) {
    let c = connect(addr).await;
    c.create("/seq", b"", CreateOptions::default())
        .await
        .unwrap();
    let mut names = Vec::new();
    for _ in 0..3 {
        let (name, _) = c
            .create("/seq/n-", b"", CreateOptions::sequential())
            .await
            .unwrap();
        let suffix = name.strip_prefix("/seq/n-").expect("prefix kept");
        assert_eq!(suffix.len(), 10, "{name}");
        assert!(suffix.bytes().all(|b| b.is_ascii_digit()), "{name}");
        names.push(name);
    }
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    let (lock, stat) = c
        .create("/seq/lock-", b"", CreateOptions::ephemeral_sequential())
        .await
        .unwrap();
    let suffix = |name: &str| {
        name[name.len() - 10..]
            .parse::<u64>()
            .expect("numeric suffix")
    };
    assert!(suffix(&lock) > suffix(&names[2]), "{lock} after {names:?}");
    assert_eq!(stat.ephemeral_owner, c.session_id());
    c.close().await.unwrap();
}

async fn pipelined_requests(addr: &str) {
    const N: usize = 200;
    let c = connect(addr).await;
    c.create("/pipe", b"", CreateOptions::default())
        .await
        .unwrap();
    let creates = (0..N).map(|i| {
        let c = c.clone();
        async move {
            c.create(&format!("/pipe/{i:03}"), b"", CreateOptions::default())
                .await
        }
    });
    let created = futures::future::try_join_all(creates).await.unwrap();
    assert_eq!(created.len(), N);
    let (children, stat) = c.get_children("/pipe").await.unwrap();
    assert_eq!(children.len(), N);
    assert_eq!(stat.num_children as usize, N);
    let reads = children.iter().map(|name| {
        let c = c.clone();
        let path = format!("/pipe/{name}");
        async move { c.get_data(&path).await }
    });
    assert_eq!(futures::future::try_join_all(reads).await.unwrap().len(), N);
    c.close().await.unwrap();
}

async fn bad_arguments_fail_without_a_round_trip(addr: &str) {
    let c = connect(addr).await;
    for bad in ["", "nope", "/a/", "/a//b", "/a/../b"] {
        let err = c.get_data(bad).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidPath, "{bad:?}");
    }
    let err = c
        .create("/", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidPath);
    let big = vec![0u8; warden_protocol::DATA_BYTES_MAX + 1];
    let err = c.set_data("/big", &big, None).await.unwrap_err();
    assert_eq!(err.to_string(), "DataTooLarge: /big");
    let err = c
        .create(
            "/ttl",
            b"",
            CreateOptions {
                ephemeral: true,
                ttl: Some(Duration::from_secs(1)),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments);
    // The session is unharmed.
    assert!(c.exists("/").await.unwrap().is_some());
    c.close().await.unwrap();
}

async fn acl_round_trip(addr: &str) {
    let c = connect(addr).await;
    c.create("/acl", b"", CreateOptions::default())
        .await
        .unwrap();
    let acl = vec![warden_client::Acl {
        perms: warden_client::perms::ALL,
        scheme: "world".into(),
        id: "anyone".into(),
    }];
    let stat = c.set_acl("/acl", acl.clone(), Some(0)).await.unwrap();
    assert_eq!(stat.aversion, 1);
    let err = c.set_acl("/acl", acl.clone(), Some(0)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion);
    let (got, stat) = c.get_acl("/acl").await.unwrap();
    assert_eq!(got, acl);
    assert_eq!(stat.aversion, 1);
    c.close().await.unwrap();
}

/// No server at all: connecting gives up after the connect timeout.
#[tokio::test]
async fn connect_gives_up_after_its_timeout() {
    let options = warden_client::ConnectOptions {
        connect_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    // Port 1 on loopback: nothing listens there.
    let err = Client::connect("127.0.0.1:1", options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err:?}");
    assert_eq!(err.code(), ErrorCode::ConnectionLoss);
    assert!(
        err.to_string()
            .starts_with("ConnectionLoss: could not connect: 127.0.0.1:1: "),
        "{err}"
    );

    let err = Client::connect(" , ", options).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments);
}
