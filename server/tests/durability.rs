//! Durability against a real `warden` process: after `kill -9` every
//! acknowledged write is back, whether it lives in the log or in a
//! snapshot, and sequence counters continue where they were.

use std::collections::BTreeMap;

use warden_client::{Client, ConnectOptions, CreateOptions};
use warden_testkit::{Server, ServerOptions};

async fn write_and_verify_across_kill9(snapshot_entries: Option<u64>) {
    let mut server = Server::start_with(ServerOptions {
        snapshot_entries,
        ..ServerOptions::default()
    });
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    c.create("/d", b"", CreateOptions::default()).await.unwrap();

    // Pipelined writes from many tasks; remember exactly what was acked.
    let mut tasks = Vec::new();
    for t in 0..8 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = BTreeMap::new();
            for i in 0..40 {
                let path = format!("/d/t{t}-{i}");
                let data = format!("{t}:{i}");
                c.create(&path, data.as_bytes(), CreateOptions::default())
                    .await
                    .unwrap();
                if i % 3 == 0 {
                    let data = format!("{t}:{i}:updated");
                    c.set_data(&path, data.as_bytes(), Some(0)).await.unwrap();
                    acked.insert(path, data);
                } else {
                    acked.insert(path, data);
                }
            }
            acked
        }));
    }
    let mut acked = BTreeMap::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let (seq, _) = c
        .create("/d/seq-", b"", CreateOptions::sequential())
        .await
        .unwrap();
    drop(c);

    server.kill9();
    server.restart();

    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    let (children, _) = c.get_children("/d").await.unwrap();
    assert_eq!(children.len(), acked.len() + 1);
    for (path, data) in &acked {
        let (got, _) = c.get_data(path).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&got), *data, "{path}");
    }
    // The sequence counter lives on: the next name is strictly larger.
    let (next, _) = c
        .create("/d/seq-", b"", CreateOptions::sequential())
        .await
        .unwrap();
    assert!(next > seq, "{next} after {seq}");

    // And once more, to restart from a state that itself was recovered.
    drop(c);
    server.kill9();
    server.restart();
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    assert!(c.exists(&next).await.unwrap().is_some());
    assert_eq!(c.get_children("/d").await.unwrap().0.len(), acked.len() + 2);
}

#[tokio::test]
async fn acknowledged_writes_survive_kill9_from_the_log() {
    write_and_verify_across_kill9(None).await;
}

#[tokio::test]
async fn acknowledged_writes_survive_kill9_from_snapshot_and_log() {
    // Snapshot every 50 entries: recovery = latest snapshot + log after it.
    write_and_verify_across_kill9(Some(50)).await;
}

#[test]
fn clean_shutdown_exits_zero() {
    let mut server = Server::start();
    let status = server.stop().expect("was running");
    assert!(status.success(), "{status:?}\n{}", server.log());
}
