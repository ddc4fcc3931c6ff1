//! The `warden-fenced` process over HTTP: both request shapes, refusals of
//! stale tokens, bad input, flags and environment, and a restart after
//! SIGKILL that keeps every answered write.

mod common;

use common::{launch, Fenced};
use serde_json::{json, Value};
use warden_fenced::{ClientError, Record, Stale};

/// Seed 003's write request, verbatim in shape.
const SEED_WRITE: &str =
    r#"{"clientID": "client1", "fencingToken": {"key": "l1", "value": 33}, "data": "hi"}"#;

#[tokio::test]
async fn writes_reads_and_stale_refusals() {
    let store = Fenced::start();
    let client = store.client();

    // The plain shape.
    let (status, answer) = client
        .request(
            "PUT",
            "/v1/keys/balance",
            Some(r#"{"value": 100, "fencing_token": 5, "client_id": "A"}"#),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"success": true, "key": "balance", "fencing_token": 5})
    );
    let (status, answer) = client
        .request("GET", "/v1/keys/balance", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"key": "balance", "value": 100, "fencing_token": 5, "client_id": "A"})
    );

    // Equal: the same holder writing again (POST works as PUT).
    let (status, answer) = client
        .request(
            "POST",
            "/v1/keys/balance",
            Some(r#"{"value": 90, "fencing_token": 5}"#),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");

    // Higher: a newer grant.
    client
        .write("balance", json!(250), 9, Some("B"))
        .await
        .unwrap();

    // Lower: refused, naming the key, the token offered and the highest.
    let (status, answer) = client
        .request(
            "PUT",
            "/v1/keys/balance",
            Some(r#"{"value": 80, "fencing_token": 5}"#),
        )
        .await
        .unwrap();
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["success"], false);
    assert_eq!(answer["key"], "balance");
    assert_eq!(answer["fencing_token"], 5);
    assert_eq!(answer["highest_fencing_token"], 9);
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.contains("balance") && message.contains('5') && message.contains('9'),
        "{message}"
    );
    match client.write("balance", json!(1), 8, None).await {
        Err(ClientError::Stale(stale)) => assert_eq!(
            stale,
            Stale {
                key: "balance".into(),
                offered: 8,
                highest: 9
            }
        ),
        other => panic!("expected Stale, got {other:?}"),
    }
    // The refused writes changed nothing.
    assert_eq!(
        client.read("balance").await.unwrap(),
        Some(Record {
            value: json!(250),
            fencing_token: 9,
            client_id: Some("B".into())
        })
    );

    // Seed 003's shape, on its route and on the key's.
    let (status, answer) = client
        .request("POST", "/write", Some(SEED_WRITE))
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["success"], true);
    let (status, answer) = client
        .request("POST", "/v1/keys/l1", Some(SEED_WRITE))
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        client.read("l1").await.unwrap(),
        Some(Record {
            value: json!("hi"),
            fencing_token: 33,
            client_id: Some("client1".into())
        })
    );
    let stale_seed =
        r#"{"clientID": "client2", "fencingToken": {"key": "l1", "value": 32}, "data": "late"}"#;
    let (status, answer) = client
        .request("POST", "/write", Some(stale_seed))
        .await
        .unwrap();
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["success"], false);
    assert_eq!(answer["highest_fencing_token"], 33);

    // Keys with any characters, percent-encoded in the URL.
    client.write("a/b c é", json!([1]), 1, None).await.unwrap();
    assert_eq!(
        client.read("a/b c é").await.unwrap().unwrap().value,
        json!([1])
    );
    // Never written: 404 naming the key.
    let (status, answer) = client.request("GET", "/v1/keys/nope", None).await.unwrap();
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["key"], "nope");
    assert_eq!(client.read("nope").await.unwrap(), None);
}

#[tokio::test]
async fn bad_input_is_400_naming_the_problem_and_the_store_keeps_serving() {
    let store = Fenced::start();
    let client = store.client();
    let cases: &[(&str, &str, &str, &str)] = &[
        ("PUT", "/v1/keys/k", "{not json", "not valid JSON"),
        (
            "PUT",
            "/v1/keys/k",
            r#"{"value": 1}"#,
            "missing the fencing token",
        ),
        (
            "PUT",
            "/v1/keys/k",
            r#"{"value": 1, "fencing_token": -3}"#,
            "fencing_token must be an integer",
        ),
        (
            "PUT",
            "/v1/keys/k",
            r#"{"fencing_token": 3}"#,
            "missing the value",
        ),
        (
            "POST",
            "/write",
            r#"{"data": "x", "fencing_token": 3}"#,
            "no key",
        ),
        ("POST", "/v1/keys/k", SEED_WRITE, "two different keys"),
        (
            "POST",
            "/write",
            r#"{"data": "x", "fencingToken": "7"}"#,
            "fencingToken must be an object",
        ),
    ];
    for (method, path, body, expected) in cases {
        let (status, answer) = client.request(method, path, Some(body)).await.unwrap();
        assert_eq!(status, 400, "{method} {path} {body}: {answer}");
        assert_eq!(answer["success"], false, "{answer}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(
            message.contains(expected),
            "{body}: {message:?} lacks {expected:?}"
        );
    }
    // A control character in the key (percent-encoded in the URL).
    let (status, answer) = client
        .request(
            "PUT",
            "/v1/keys/a%07b",
            Some(r#"{"value": 1, "fencing_token": 1}"#),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("control"),
        "{answer}"
    );
    // An unknown route: 404 naming the routes.
    let (status, answer) = client.request("GET", "/v2/things", None).await.unwrap();
    assert_eq!(status, 404);
    assert!(
        answer["error"].as_str().unwrap().contains("/v1/keys/{key}"),
        "{answer}"
    );
    // A method a route does not take: 405 naming the ones it does.
    let (status, answer) = client.request("DELETE", "/v1/keys/k", None).await.unwrap();
    assert_eq!(status, 405);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("GET, PUT or POST"),
        "{answer}"
    );
    // Still serving; nothing was written by the refused requests.
    assert_eq!(client.read("k").await.unwrap(), None);
    client.write("k", json!("ok"), 1, None).await.unwrap();
    assert_eq!(client.read("k").await.unwrap().unwrap().value, json!("ok"));
}

#[tokio::test]
async fn a_restart_after_sigkill_keeps_every_answered_write() {
    let mut store = Fenced::start();
    let client = store.client();
    for i in 0..20u64 {
        let key = format!("key-{}", i % 4);
        client
            .write(&key, json!({"i": i}), 100 + i, Some("writer"))
            .await
            .unwrap();
    }
    // No clean shutdown: only what was fsync'd before answering survives.
    store.kill9();
    store.restart();
    let client = store.client();
    for k in 0..4u64 {
        let last = 16 + k;
        assert_eq!(
            client.read(&format!("key-{k}")).await.unwrap(),
            Some(Record {
                value: json!({"i": last}),
                fencing_token: 100 + last,
                client_id: Some("writer".into())
            }),
            "key-{k}"
        );
    }
    // The highest token survived too: an older one is still refused.
    match client.write("key-0", json!("late"), 110, None).await {
        Err(ClientError::Stale(s)) => assert_eq!((s.offered, s.highest), (110, 116)),
        other => panic!("expected Stale, got {other:?}"),
    }
    // A clean stop exits 0.
    assert!(store.stop().success());
}

#[tokio::test]
async fn flags_come_from_the_environment_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let listen = format!("127.0.0.1:{}", warden_testkit::free_ports(1)[0]);
    let (first, addr) = launch(
        &[],
        &[
            ("WARDEN_FENCED_LISTEN", listen.as_str()),
            ("WARDEN_FENCED_DATA_DIR", data),
        ],
        &dir.path().join("env.log"),
    )
    .unwrap();
    assert_eq!(addr, listen);
    let client = warden_fenced::StoreClient::new(addr);
    client.write("k", Value::Null, 1, None).await.unwrap();
    assert!(std::path::Path::new(data).is_dir());

    // A second store on the same data dir is refused, saying why.
    let second = launch(
        &["--listen", "127.0.0.1:0", "--data-dir", data],
        &[],
        &dir.path().join("second.log"),
    );
    let why = second.map(|(running, _)| drop(running)).unwrap_err();
    assert!(why.contains("in use by another process"), "{why}");
    drop(first);

    let bad = launch(
        &["--listen", "nowhere", "--data-dir", data],
        &[],
        &dir.path().join("bad.log"),
    );
    let why = bad.map(|(running, _)| drop(running)).unwrap_err();
    assert!(why.contains("--listen"), "{why}");
}
