//! The two lock-service contracts the HTTP door serves, held to their
//! published text against a real `warden`: each one's example requests
//! are posted as published, every answer field is checked by name, type
//! and value, and every answer is held against the OpenAPI document
//! (validated itself with `openapi-spec-validator` from PyPI, installed by
//! this test into `target/openapi-venv`).
//!
//! - Seed 000 ("Design a Distributed Lock Service"): the path form,
//!   `POST /api/v1/locks/{lock_name}/acquire|release|renew`, answering
//!   `acquired`, `fencing_token`, `expires_at` (RFC 3339), `released`,
//!   `renewed`, `new_expires_at` (RFC 3339).
//! - Seed 004 ("Distributed Lock Manager"): the body form,
//!   `POST /api/v1/locks/acquire|renew`, answering `lock_key`,
//!   `client_id`, `fencing_token`, `acquired`, `expires_at_epoch_ms`,
//!   `renewed`, `new_expires_at` (epoch ms); 409 when not acquired, 403
//!   for a renewal once the lease lapsed and another client took it;
//!   re-entrant for the same client identity.
//!
//! Two differences from the published examples, and only these: seed
//! 000 writes its bodies with bare keys (`{ client_id: "worker-7" }`),
//! which is not JSON, so here the keys are quoted (the server stays strict
//! JSON); and an example's literal fencing token (42, 14092) is replaced
//! by the token the server granted.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::http::{get_json, post, post_text};
use serde_json::{json, Value};
use warden_server::http::holder::label_of;
use warden_testkit::{wait_until, Server};

/// Seed 000's acquire example, its keys quoted.
const SEED_000_ACQUIRE: &str =
    r#"{ "client_id": "worker-7", "ttl_ms": 30000, "wait_timeout_ms": 5000 }"#;
/// Seed 000's release example, its keys quoted.
const SEED_000_RELEASE: &str = r#"{ "client_id": "worker-7", "fencing_token": 42 }"#;
/// Seed 000's renew example, its keys quoted.
const SEED_000_RENEW: &str = r#"{ "client_id": "worker-7", "fencing_token": 42, "ttl_ms": 30000 }"#;
/// The lock seed 000 names ("lock \"payment-processor\" for 30 seconds").
const SEED_000_LOCK: &str = "payment-processor";

/// Seed 004's acquire example, verbatim.
const SEED_004_ACQUIRE: &str = r#"{
"lock_key": "inventory_item_98210",
"client_id": "client_service_worker_az1_02",
"lease_time_ms": 10000,
"block_time_ms": 2000
}"#;
/// Seed 004's renew example, verbatim.
const SEED_004_RENEW: &str = r#"{
"lock_key": "inventory_item_98210",
"client_id": "client_service_worker_az1_02",
"fencing_token": 14092,
"extend_time_ms": 5000
}"#;

/// Where the HTTP door keeps its leases (`http::locks::LOCK_ROOT`).
const LOCK_ROOT: &str = "/warden/http-locks";

/// The published example with its literal token replaced by `token`.
fn with_token(example: &str, literal: u64, token: u64) -> String {
    let from = format!("\"fencing_token\": {literal}");
    assert!(example.contains(&from), "{example} has no {from}");
    example.replace(&from, &format!("\"fencing_token\": {token}"))
}

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// Every answer of a test, to hold against the OpenAPI document at the end.
#[derive(Default)]
struct Answers(Vec<Value>);

impl Answers {
    /// Posts `body` to `path` (documented as `template`) and keeps the
    /// answer.
    fn post(&mut self, http: &str, path: &str, template: &str, body: &str) -> (u16, Value) {
        let (status, answer) = post_text(http, path, body);
        self.keep("POST", template, status, &answer);
        (status, answer)
    }

    fn get(&mut self, http: &str, path: &str, template: &str) -> (u16, Value) {
        let (status, answer) = get_json(http, path);
        self.keep("GET", template, status, &answer);
        (status, answer)
    }

    fn keep(&mut self, method: &str, template: &str, status: u16, answer: &Value) {
        self.0.push(json!({
            "method": method,
            "path": template,
            "status": status,
            "body": answer,
        }));
    }

    /// Holds every answer against the served OpenAPI document, after
    /// validating the document itself.
    fn hold_against_openapi(&self, http: &str) {
        common::openapi::hold(http, self.0.clone());
    }
}

/// The names of `answer`'s fields.
fn fields(answer: &Value) -> BTreeSet<&str> {
    answer
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {answer}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

fn u64_field(answer: &Value, name: &str) -> u64 {
    answer[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} is not a non-negative integer: {answer}"))
}

fn i64_field(answer: &Value, name: &str) -> i64 {
    answer[name]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} is not an integer: {answer}"))
}

/// `name` as an RFC 3339 instant, in ms since the Unix epoch.
fn rfc3339_field(answer: &Value, name: &str) -> i64 {
    let text = answer[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name} is not a string: {answer}"));
    let at = humantime::parse_rfc3339(text)
        .unwrap_or_else(|e| panic!("{name} {text:?} is not RFC 3339: {e}"));
    i64::try_from(at.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// The lease fields every grant and renewal carries: the name, the client,
/// a token, and one expiry written three ways. The expiry, in ms.
fn check_lease(answer: &Value, lock: &str, client: &str) -> i64 {
    assert_eq!(answer["lock_key"].as_str(), Some(lock), "{answer}");
    assert_eq!(answer["client_id"].as_str(), Some(client), "{answer}");
    assert!(u64_field(answer, "fencing_token") > 0, "{answer}");
    let expires = i64_field(answer, "expires_at_ms");
    assert_eq!(
        i64_field(answer, "expires_at_epoch_ms"),
        expires,
        "{answer}"
    );
    assert_eq!(rfc3339_field(answer, "expires_at"), expires, "{answer}");
    expires
}

const GRANT_FIELDS: &[&str] = &[
    "acquired",
    "lock_key",
    "client_id",
    "fencing_token",
    "expires_at",
    "expires_at_epoch_ms",
    "expires_at_ms",
];
const RENEWAL_FIELDS: &[&str] = &[
    "renewed",
    "new_expires_at",
    "lock_key",
    "client_id",
    "fencing_token",
    "expires_at",
    "expires_at_epoch_ms",
    "expires_at_ms",
];

/// The TTL and mtime of lease `lock`'s one node, read with a native
/// client: what the server will expire it by.
fn lease_node(server: &Server, lock: &str) -> (String, i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = warden_client::Client::connect(server.addr(), Default::default())
            .await
            .unwrap();
        let dir = format!("{LOCK_ROOT}/{lock}");
        let (children, _) = client.get_children(&dir).await.unwrap();
        assert_eq!(children.len(), 1, "one lease node: {children:?}");
        let (data, stat) = client
            .get_data(&format!("{dir}/{}", children[0]))
            .await
            .unwrap();
        let _ = client.close().await;
        (String::from_utf8(data).unwrap(), stat.mtime_ms)
    })
}

/// Seed 000's three examples on the path form, and the path form's
/// documented 409s.
#[test]
fn seed_000_examples() {
    let server = Server::start();
    let http = server.http_addr();
    let mut answers = Answers::default();
    let acquire = format!("/api/v1/locks/{SEED_000_LOCK}/acquire");
    let renew = format!("/api/v1/locks/{SEED_000_LOCK}/renew");
    let release = format!("/api/v1/locks/{SEED_000_LOCK}/release");
    let state = format!("/api/v1/locks/{SEED_000_LOCK}");

    // -> Returns: { acquired: true, fencing_token: 42, expires_at: "..." }
    let before = now_ms();
    let (st, a) = answers.post(
        http,
        &acquire,
        "/api/v1/locks/{name}/acquire",
        SEED_000_ACQUIRE,
    );
    let after = now_ms();
    assert_eq!(st, 200, "{a}");
    assert_eq!(fields(&a), set(GRANT_FIELDS), "{a}");
    assert_eq!(a["acquired"], Value::Bool(true));
    let token = u64_field(&a, "fencing_token");
    let expires = check_lease(&a, SEED_000_LOCK, "worker-7");
    // 30 s from the grant, by the server's clock (this machine's).
    let granted_at = expires - 30_000;
    assert!(
        (before - 5_000..=after + 5_000).contains(&granted_at),
        "granted at {granted_at}, asked between {before} and {after}: {a}"
    );
    let (st, s) = answers.get(http, &state, "/api/v1/locks/{name}");
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["holder"]["fencing_token"], token, "{s}");
    assert_eq!(i64_field(&s["holder"], "expires_at_ms"), expires, "{s}");
    assert_eq!(rfc3339_field(&s["holder"], "expires_at"), expires, "{s}");

    // Re-entry by the same client_id: the grant it holds.
    let (st, again) = answers.post(
        http,
        &acquire,
        "/api/v1/locks/{name}/acquire",
        SEED_000_ACQUIRE,
    );
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["fencing_token"], token, "{again}");
    assert!(check_lease(&again, SEED_000_LOCK, "worker-7") >= expires);

    // Another client is refused (409), naming the holder.
    let other = r#"{ "client_id": "worker-8", "ttl_ms": 30000, "wait_timeout_ms": 0 }"#;
    let (st, c) = answers.post(http, &acquire, "/api/v1/locks/{name}/acquire", other);
    assert_eq!(st, 409, "{c}");
    assert_eq!(
        fields(&c),
        set(&["acquired", "lock_key", "client_id", "holder", "error"]),
        "{c}"
    );
    assert_eq!(c["acquired"], Value::Bool(false));
    assert_eq!(c["client_id"], "worker-8");
    // The holder by its label: a client_id is its holder's secret.
    assert_eq!(c["holder"]["label"], label_of(None, "worker-7").as_str());
    assert!(!c.to_string().contains("worker-7"), "{c}");
    assert_eq!(c["holder"]["fencing_token"], token);

    // -> Returns: { renewed: true, new_expires_at: "..." }
    let body = with_token(SEED_000_RENEW, 42, token);
    let (st, r) = answers.post(http, &renew, "/api/v1/locks/{name}/renew", &body);
    assert_eq!(st, 200, "{r}");
    assert_eq!(fields(&r), set(RENEWAL_FIELDS), "{r}");
    assert_eq!(r["renewed"], Value::Bool(true));
    assert_eq!(u64_field(&r, "fencing_token"), token);
    let renewed = check_lease(&r, SEED_000_LOCK, "worker-7");
    assert_eq!(rfc3339_field(&r, "new_expires_at"), renewed, "{r}");
    assert!(renewed >= expires, "{a} -> {r}");

    // A stale token: 409 (the path form's documented answer).
    let stale = with_token(SEED_000_RENEW, 42, token - 1);
    let (st, e) = answers.post(http, &renew, "/api/v1/locks/{name}/renew", &stale);
    assert_eq!(st, 409, "{e}");
    assert!(
        e["error"]
            .as_str()
            .is_some_and(|m| m.contains("does not hold")),
        "{e}"
    );

    // -> Returns: { released: true }
    let body = with_token(SEED_000_RELEASE, 42, token);
    let (st, d) = answers.post(http, &release, "/api/v1/locks/{name}/release", &body);
    assert_eq!(st, 200, "{d}");
    assert_eq!(
        fields(&d),
        set(&["released", "lock_key", "client_id", "fencing_token"]),
        "{d}"
    );
    assert_eq!(d["released"], Value::Bool(true));
    assert_eq!(d["lock_key"], SEED_000_LOCK);
    assert_eq!(d["client_id"], "worker-7");
    assert_eq!(u64_field(&d, "fencing_token"), token);
    let (st, e) = answers.post(http, &release, "/api/v1/locks/{name}/release", &body);
    assert_eq!(st, 409, "released already: {e}");
    let (st, e) = answers.get(http, &state, "/api/v1/locks/{name}");
    assert_eq!(st, 404, "{e}");

    answers.hold_against_openapi(http);
}

/// Seed 004's examples on the body form: the grant, re-entry, the 409,
/// the renewal with `extend_time_ms: 5000` of a 10 s lease, and its 403
/// once the lease lapsed and another client took it.
#[test]
fn seed_004_examples() {
    let server = Server::start();
    let http = server.http_addr();
    let mut answers = Answers::default();
    let lock = "inventory_item_98210";
    let me = "client_service_worker_az1_02";
    let acquire = "/api/v1/locks/acquire";
    let renew = "/api/v1/locks/renew";

    // 200 OK (Acquired): lock_key, client_id, fencing_token, acquired,
    // expires_at_epoch_ms.
    let (st, a) = answers.post(http, acquire, acquire, SEED_004_ACQUIRE);
    assert_eq!(st, 200, "{a}");
    assert_eq!(fields(&a), set(GRANT_FIELDS), "{a}");
    assert_eq!(a["acquired"], Value::Bool(true));
    let token = u64_field(&a, "fencing_token");
    let expires = check_lease(&a, lock, me);
    let (ttl, mtime) = lease_node(&server, lock);
    // The node holds the TTL and a hash of the client id, never the id.
    assert!(
        ttl.starts_with("10000\nh1:"),
        "lease_time_ms is the TTL: {ttl}"
    );
    assert!(!ttl.contains(me), "the tree shows the client id: {ttl}");
    assert_eq!(expires, mtime + 10_000, "{a}");

    // Re-entrant: the same client identity gets the grant it holds.
    let (st, again) = answers.post(http, acquire, acquire, SEED_004_ACQUIRE);
    assert_eq!(st, 200, "{again}");
    assert_eq!(fields(&again), set(GRANT_FIELDS), "{again}");
    assert_eq!(again["acquired"], Value::Bool(true));
    assert_eq!(u64_field(&again, "fencing_token"), token);
    check_lease(&again, lock, me);

    // 409 Conflict (Failed to acquire): another client, after its block
    // time.
    let other = SEED_004_ACQUIRE.replace(me, "client_service_worker_az2_01");
    let (st, c) = answers.post(http, acquire, acquire, &other);
    assert_eq!(st, 409, "{c}");
    assert_eq!(c["acquired"], Value::Bool(false));
    assert_eq!(c["lock_key"], lock);
    assert_eq!(c["client_id"], "client_service_worker_az2_01");
    assert_eq!(c["holder"]["label"], label_of(None, me).as_str());
    assert!(!c.to_string().contains(me), "{c}");
    assert!(
        c["error"].as_str().is_some_and(|m| m.contains("2000 ms")),
        "{c}"
    );

    // 200 OK with { "renewed": true, "new_expires_at": 1774834815234 }:
    // the lease now lapses 5 s after the renewal (its TTL is 5000 ms).
    let body = with_token(SEED_004_RENEW, 14092, token);
    let (st, r) = answers.post(http, renew, renew, &body);
    assert_eq!(st, 200, "{r}");
    assert_eq!(fields(&r), set(RENEWAL_FIELDS), "{r}");
    assert_eq!(r["renewed"], Value::Bool(true));
    assert_eq!(u64_field(&r, "fencing_token"), token);
    let renewed = check_lease(&r, lock, me);
    assert_eq!(i64_field(&r, "new_expires_at"), renewed, "{r}");
    let (ttl, mtime) = lease_node(&server, lock);
    assert!(
        ttl.starts_with("5000\nh1:"),
        "extend_time_ms is the new TTL: {ttl}"
    );
    assert_eq!(renewed, mtime + 5_000, "{r}");
    let (st, s) = answers.get(
        http,
        &format!("/api/v1/locks/{lock}"),
        "/api/v1/locks/{name}",
    );
    assert_eq!(st, 200, "{s}");
    assert_eq!(
        i64_field(&s["holder"], "expires_at_epoch_ms"),
        renewed,
        "{s}"
    );

    // 403 Forbidden once the lock has expired and been acquired by
    // another client.
    wait_until(Duration::from_secs(30), "the 5 s lease lapses", || {
        get_json(http, &format!("/api/v1/locks/{lock}")).0 == 404
    });
    let (st, b) = answers.post(http, acquire, acquire, &other);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["client_id"], "client_service_worker_az2_01");
    let newer = u64_field(&b, "fencing_token");
    assert!(newer > token, "{a} then {b}");
    let (st, e) = answers.post(http, renew, renew, &body);
    assert_eq!(st, 403, "{e}");
    assert_eq!(fields(&e), set(&["error"]), "{e}");
    assert!(
        e["error"]
            .as_str()
            .is_some_and(|m| m.contains(&token.to_string())),
        "{e}"
    );

    // The new holder releases (the body form's release).
    let release = json!({"lock_key": lock, "client_id": "client_service_worker_az2_01", "fencing_token": newer});
    let (st, d) = answers.post(
        http,
        "/api/v1/locks/release",
        "/api/v1/locks/release",
        &release.to_string(),
    );
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["released"], Value::Bool(true));
    assert_eq!(u64_field(&d, "fencing_token"), newer);

    answers.hold_against_openapi(http);
}

/// The renewal's TTL on the path form too: `ttl_ms` other than the
/// acquire's is the lease's TTL from then on, on the server: a 60 s lease
/// renewed for 3 s is gone well before the 60 s are up.
#[test]
fn a_path_form_renewal_sets_its_ttl() {
    let server = Server::start();
    let http = server.http_addr();
    let (st, a) = post(
        http,
        "/api/v1/locks/ttl/acquire",
        json!({"client_id": "w", "ttl_ms": 60000}),
    );
    assert_eq!(st, 200, "{a}");
    let token = u64_field(&a, "fencing_token");
    let (st, r) = post(
        http,
        "/api/v1/locks/ttl/renew",
        json!({"client_id": "w", "fencing_token": token, "ttl_ms": 3000}),
    );
    assert_eq!(st, 200, "{r}");
    let (ttl, mtime) = lease_node(&server, "ttl");
    assert!(ttl.starts_with("3000\nh1:"), "{ttl}");
    assert_eq!(rfc3339_field(&r, "new_expires_at"), mtime + 3_000, "{r}");
    wait_until(Duration::from_secs(30), "the lease lapses at 3 s", || {
        get_json(http, "/api/v1/locks/ttl").0 == 404
    });
}
