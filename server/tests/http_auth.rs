//! The HTTP lock API with authentication against a real `warden`: Basic
//! and Bearer credentials become digest identities, bad ones answer 401,
//! an ACL refusal answers 403 naming the node, and the right identity gets
//! 200.

mod common;

use base64::Engine as _;
use serde_json::{json, Value};
use warden_protocol::auth::digest_id;
use warden_testkit::{Server, ServerOptions};

/// One POST with extra headers; (status, JSON body).
fn post(addr: &str, path: &str, headers: &[(&str, String)], body: Value) -> (u16, Value) {
    let (status, text) =
        common::http::request_with(addr, "POST", path, headers, Some(&body.to_string()));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn basic(credentials: &str) -> (&'static str, String) {
    (
        "Authorization",
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        ),
    )
}

fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

fn acquire_body() -> Value {
    json!({"client_id": "w1", "ttl_ms": 30000, "wait_timeout_ms": 0})
}

#[test]
fn http_locks_401_403_200() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, format!("{}\n", digest_id("bob:bob-pw").unwrap())).unwrap();
    let server = Server::start_with(ServerOptions {
        extra_args: vec![
            "--auth-users".into(),
            users.display().to_string(),
            "--http-token".into(),
            "s3cret-token=bob:bob-pw".into(),
            // Only bob may use the lock API's nodes.
            "--http-lock-acl".into(),
            format!("digest:{}:cdrwa", digest_id("bob:bob-pw").unwrap()),
        ],
        ..Default::default()
    });
    let http = server.http_addr();
    let url = "/api/v1/locks/jobs/acquire";

    // 401: an unknown token, a wrong password, a malformed header.
    for headers in [
        vec![bearer("nope")],
        vec![basic("bob:wrong")],
        vec![basic("carol:pw")],
        vec![("Authorization", "Basic !!!".to_string())],
        vec![("Authorization", "Digest x".to_string())],
    ] {
        let (st, body) = post(http, url, &headers, acquire_body());
        assert_eq!(st, 401, "{headers:?}: {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    let (_, body) = post(http, url, &[basic("bob:wrong")], acquire_body());
    assert!(
        body["error"].as_str().unwrap().contains("AuthFailed"),
        "{body}"
    );

    // 200 for bob, by token.
    let (st, granted) = post(http, url, &[bearer("s3cret-token")], acquire_body());
    assert_eq!(st, 200, "{granted}");
    let token = granted["fencing_token"].as_u64().unwrap();

    // 403 for an anonymous caller: the lock's nodes grant it nothing. The
    // error names the node and the permission.
    let (st, body) = post(http, url, &[], acquire_body());
    assert_eq!(st, 403, "{body}");
    let e = body["error"].as_str().unwrap();
    assert!(
        e.starts_with("NoAuth: /warden/http-locks") && e.contains("not granted to"),
        "{e}"
    );
    let (st, body) = post(
        http,
        "/api/v1/locks/jobs/release",
        &[],
        json!({"client_id": "w1", "fencing_token": token}),
    );
    assert_eq!(st, 403, "{body}");

    // bob again, by Basic: the same identity renews and releases.
    let (st, body) = post(
        http,
        "/api/v1/locks/jobs/renew",
        &[basic("bob:bob-pw")],
        json!({"client_id": "w1", "fencing_token": token, "ttl_ms": 30000}),
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = post(
        http,
        "/api/v1/locks/jobs/release",
        &[basic("bob:bob-pw")],
        json!({"client_id": "w1", "fencing_token": token}),
    );
    assert_eq!(st, 200, "{body}");
}

/// The served OpenAPI document declares the two credential schemes and,
/// for every lock operation, the 401 and 403 answers the test above gets.
#[test]
fn openapi_documents_credentials_and_refusals() {
    let server = Server::start();
    let (st, doc) = common::http::get_json(server.http_addr(), "/api/v1/openapi.json");
    assert_eq!(st, 200, "{doc}");
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["basicAuth"]["scheme"], "basic", "{schemes}");
    assert_eq!(schemes["bearerAuth"]["scheme"], "bearer", "{schemes}");
    let paths = doc["paths"].as_object().expect("paths");
    let mut operations = 0;
    for (path, item) in paths.iter().filter(|(p, _)| p.starts_with("/api/v1/locks")) {
        for (method, op) in item.as_object().expect("a path item") {
            operations += 1;
            for status in ["401", "403"] {
                // The listing refuses nobody: it shows what the caller may read.
                if path == "/api/v1/locks" && status == "403" {
                    continue;
                }
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} does not document {status}"
                );
            }
        }
    }
    // acquire, renew, release in both contracts, the state, the push
    // doors (acquire events, watch, WebSocket) and the listing.
    assert_eq!(operations, 11);
    let error = &doc["components"]["schemas"]["Error"];
    assert_eq!(error["properties"]["error"]["type"], "string", "{error}");
}
