//! The HTTP door against real `warden` processes: the REST lock API (both
//! body contracts, every 400 case, TTL hand-over), `/metrics`, `/health`
//! and `/status`, on a single node and through a follower of a cluster.

mod common;

use std::time::{Duration, Instant};

use common::http::{get_json, post, post_unread, request};
use serde_json::{json, Value};
use warden_server::http::holder::label_of;
use warden_testkit::{wait_until, Cluster, Server};

/// The whole `/{name}/` contract against one HTTP address.
fn lock_contract(http: &str) {
    // Grant.
    let (st, a) = post(
        http,
        "/api/v1/locks/jobs/acquire",
        json!({"client_id": "worker-7", "ttl_ms": 30000, "wait_timeout_ms": 0}),
    );
    assert_eq!(st, 200, "{a}");
    assert_eq!(a["acquired"], true);
    let token = a["fencing_token"].as_u64().expect("a token");
    assert!(a["expires_at_ms"].as_i64().expect("expiry") > 0);

    // The holder as others see it.
    let (st, s) = get_json(http, "/api/v1/locks/jobs");
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["holder"]["label"], label_of(None, "worker-7").as_str());
    assert_eq!(s["holder"]["fencing_token"], token);
    assert_eq!(s["waiters"], 0);

    // Conflict: try once, and with a wait that runs out.
    let (st, c) = post(
        http,
        "/api/v1/locks/jobs/acquire",
        json!({"client_id": "worker-8", "ttl_ms": 30000, "wait_timeout_ms": 0}),
    );
    assert_eq!(st, 409, "{c}");
    assert_eq!(c["acquired"], false);
    assert_eq!(c["holder"]["label"], label_of(None, "worker-7").as_str());
    let started = Instant::now();
    let (st, c) = post(
        http,
        "/api/v1/locks/jobs/acquire",
        json!({"client_id": "worker-8", "ttl_ms": 30000, "wait_timeout_ms": 300}),
    );
    assert_eq!(st, 409, "{c}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Renew, then stale tokens and wrong holders are refused.
    let (st, r) = post(
        http,
        "/api/v1/locks/jobs/renew",
        json!({"client_id": "worker-7", "fencing_token": token, "ttl_ms": 30000}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["renewed"], true);
    assert!(r["expires_at_ms"].as_i64().expect("expiry") >= a["expires_at_ms"].as_i64().unwrap());
    let (st, r) = post(
        http,
        "/api/v1/locks/jobs/renew",
        json!({"client_id": "worker-7", "fencing_token": token - 1, "ttl_ms": 30000}),
    );
    assert_eq!(st, 409, "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not hold")),
        "{r}"
    );
    let (st, r) = post(
        http,
        "/api/v1/locks/jobs/release",
        json!({"client_id": "worker-8", "fencing_token": token}),
    );
    assert_eq!(st, 409, "{r}");

    // Release; the lock is free; a stale release is refused.
    let (st, r) = post(
        http,
        "/api/v1/locks/jobs/release",
        json!({"client_id": "worker-7", "fencing_token": token}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["released"], true);
    let (st, _) = get_json(http, "/api/v1/locks/jobs");
    assert_eq!(st, 404);
    let (st, r) = post(
        http,
        "/api/v1/locks/jobs/release",
        json!({"client_id": "worker-7", "fencing_token": token}),
    );
    assert_eq!(st, 409, "{r}");

    // TTL expiry hands the lock to the waiter, with a higher token.
    let (st, a) = post(
        http,
        "/api/v1/locks/ttl/acquire",
        json!({"client_id": "short", "ttl_ms": 1000}),
    );
    assert_eq!(st, 200, "{a}");
    let first = a["fencing_token"].as_u64().expect("a token");
    let addr = http.to_string();
    let waiter = std::thread::spawn(move || {
        post(
            &addr,
            "/api/v1/locks/ttl/acquire",
            json!({"client_id": "next", "ttl_ms": 30000, "wait_timeout_ms": 20000}),
        )
    });
    wait_until(Duration::from_secs(10), "the waiter queues", || {
        get_json(http, "/api/v1/locks/ttl").1["waiters"] == 1
    });
    let (st, b) = waiter.join().expect("waiter thread");
    assert_eq!(st, 200, "{b}");
    assert!(b["fencing_token"].as_u64().expect("a token") > first);
    let (_, s) = get_json(http, "/api/v1/locks/ttl");
    assert_eq!(s["holder"]["label"], label_of(None, "next").as_str());
    let (st, r) = post(
        http,
        "/api/v1/locks/ttl/renew",
        json!({"client_id": "short", "fencing_token": first, "ttl_ms": 1000}),
    );
    assert_eq!(st, 409, "{r}");
}

/// Every 400 case names its problem.
fn bad_requests(http: &str) {
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "/api/v1/locks/x/acquire",
            "{not json".into(),
            "malformed JSON",
        ),
        ("/api/v1/locks/x/acquire", "[1]".into(), "JSON object"),
        (
            "/api/v1/locks/x/acquire",
            json!({"ttl_ms": 1000}).to_string(),
            "client_id",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c"}).to_string(),
            "ttl_ms",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c", "ttl_ms": 0}).to_string(),
            "ttl_ms",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c", "ttl_ms": 86_400_001u64}).to_string(),
            "ttl_ms",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c", "ttl_ms": "10"}).to_string(),
            "ttl_ms",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "", "ttl_ms": 10}).to_string(),
            "client_id",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c", "ttl_ms": 10_000, "wait_timeout_ms": -1}).to_string(),
            "wait_timeout_ms",
        ),
        (
            "/api/v1/locks/x/acquire",
            json!({"client_id": "c", "ttl_ms": 10_000, "wait_timeout_ms": 300_001}).to_string(),
            "wait_timeout_ms",
        ),
        (
            "/api/v1/locks/bad$name/acquire",
            json!({"client_id": "c", "ttl_ms": 10}).to_string(),
            "illegal lock name",
        ),
        (
            "/api/v1/locks/../acquire",
            json!({"client_id": "c", "ttl_ms": 10}).to_string(),
            "illegal lock name",
        ),
        (
            "/api/v1/locks/x/renew",
            json!({"client_id": "c", "ttl_ms": 10}).to_string(),
            "fencing_token",
        ),
        (
            "/api/v1/locks/x/release",
            json!({"client_id": "c"}).to_string(),
            "fencing_token",
        ),
        (
            "/api/v1/locks/acquire",
            json!({"client_id": "c", "lease_time_ms": 10}).to_string(),
            "lock_key",
        ),
        (
            "/api/v1/locks/acquire",
            json!({"lock_key": "a/b", "client_id": "c", "lease_time_ms": 10}).to_string(),
            "illegal lock name",
        ),
    ];
    let long = format!("/api/v1/locks/{}/acquire", "n".repeat(129));
    let mut all = cases;
    all.push((
        long.as_str(),
        json!({"client_id": "c", "ttl_ms": 10}).to_string(),
        "illegal lock name",
    ));
    for (path, body, needle) in all {
        let (st, text) = request(http, "POST", path, Some(&body));
        assert_eq!(st, 400, "{path} {body}: {text}");
        assert!(
            text.contains(needle),
            "{path} {body}: {text} lacks {needle:?}"
        );
    }
    let (st, _) = get_json(http, "/api/v1/locks/bad$name");
    assert_eq!(st, 400);
}

/// The alternative body contract: name in `lock_key`, other field names,
/// a stale renew answers 403.
fn alt_contract(http: &str) {
    let (st, a) = post(
        http,
        "/api/v1/locks/acquire",
        json!({"lock_key": "alt", "client_id": "w1", "lease_time_ms": 30000, "block_time_ms": 0}),
    );
    assert_eq!(st, 200, "{a}");
    let token = a["fencing_token"].as_u64().expect("a token");
    let (st, c) = post(
        http,
        "/api/v1/locks/acquire",
        json!({"lock_key": "alt", "client_id": "w2", "lease_time_ms": 30000, "block_time_ms": 100}),
    );
    assert_eq!(st, 409, "{c}");
    let (st, r) = post(
        http,
        "/api/v1/locks/renew",
        json!({"lock_key": "alt", "client_id": "w1", "fencing_token": token, "extend_time_ms": 30000}),
    );
    assert_eq!(st, 200, "{r}");
    let (st, r) = post(
        http,
        "/api/v1/locks/renew",
        json!({"lock_key": "alt", "client_id": "w2", "fencing_token": token, "extend_time_ms": 30000}),
    );
    assert_eq!(st, 403, "{r}");
    let (st, r) = post(
        http,
        "/api/v1/locks/release",
        json!({"lock_key": "alt", "client_id": "w1", "fencing_token": token}),
    );
    assert_eq!(st, 200, "{r}");
    let (st, r) = post(
        http,
        "/api/v1/locks/renew",
        json!({"lock_key": "alt", "client_id": "w1", "fencing_token": token, "extend_time_ms": 30000}),
    );
    assert_eq!(st, 403, "{r}");
}

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Every non-comment line is `name{labels} value`, and the document ends
/// with `# EOF`.
fn check_exposition(text: &str) {
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        assert!(value.parse::<f64>().is_ok(), "bad value in {line:?}");
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels in {line:?}");
        }
    }
}

#[test]
fn single_node_lock_api() {
    let server = Server::start();
    let http = server.http_addr();
    lock_contract(http);
    alt_contract(http);
    bad_requests(http);
}

#[test]
fn single_node_health_status_metrics_openapi() {
    let server = Server::start();
    let http = server.http_addr();
    let (st, h) = get_json(http, "/health");
    assert_eq!(st, 200, "{h}");
    assert_eq!(h["healthy"], true);
    let (st, s) = get_json(http, "/status");
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["leader_id"], s["server_id"]);
    assert_eq!(s["members"].as_array().expect("members").len(), 1);

    let (st, m) = request(http, "GET", "/metrics", None);
    assert_eq!(st, 200);
    check_exposition(&m);
    // Summed over `waited` (both label sets are exported from the start).
    let grants = |m: &str| -> f64 {
        m.lines()
            .filter(|l| l.starts_with("warden_lock_acquisitions_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = grants(&m);
    let (st, _) = post(
        http,
        "/api/v1/locks/m/acquire",
        json!({"client_id": "c", "ttl_ms": 30000}),
    );
    assert_eq!(st, 200);
    let (_, m2) = request(http, "GET", "/metrics", None);
    check_exposition(&m2);
    assert!(grants(&m2) > before, "{m2}");
    assert!(
        m2.contains(
            "warden_http_requests_total{route=\"/api/v1/locks/{name}/acquire\",code=\"200\"} 1"
        ),
        "{m2}"
    );
    assert!(sample(&m2, "warden_raft_commit_index").expect("commit index") > 0.0);
    assert!(sample(&m2, "warden_znodes").expect("znodes") > 0.0);
    // The gateway's own loopback session, and the first leader.
    assert!(sample(&m2, "warden_sessions").expect("sessions") >= 1.0);
    assert!(sample(&m2, "warden_raft_leader_changes_total").expect("leader changes") >= 1.0);
    let moved = |name: &str| sample(&m2, name).expect(name) > sample(&m, name).expect(name);
    assert!(moved("warden_raft_proposals_total"), "{m2}");
    assert!(moved("warden_raft_fsyncs_total"), "{m2}");
    assert!(moved("warden_raft_appended_entries_total"), "{m2}");
    // The gateway's lock went through the native door: its creates are
    // counted by operation, with a latency histogram.
    let creates = |m: &str| sample(m, "warden_requests_total{op=\"create\"}").unwrap_or(0.0);
    assert!(creates(&m2) > creates(&m), "{m2}");
    assert!(
        m2.contains("warden_request_duration_seconds_count{op=\"create\"}"),
        "{m2}"
    );
    // Histograms of the Ready loop's fsyncs and batch sizes, and of the
    // HTTP acquire's wait.
    assert!(
        sample(&m2, "warden_fsync_duration_seconds_count").expect("fsyncs") > 0.0,
        "{m2}"
    );
    assert!(
        sample(&m2, "warden_append_batch_entries_count").expect("batches") > 0.0,
        "{m2}"
    );
    assert!(
        sample(&m2, "warden_lock_acquire_wait_seconds_count").expect("lock wait") >= 1.0,
        "{m2}"
    );

    let (st, doc) = get_json(http, "/api/v1/openapi.json");
    assert_eq!(st, 200);
    assert!(
        doc["paths"]["/api/v1/locks/{name}/acquire"].is_object(),
        "{doc}"
    );
}

#[test]
fn cluster_follower_lock_api_and_health_on_quorum_loss() {
    let mut cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    let leader = {
        let mut found = 0;
        wait_until(Duration::from_secs(20), "a leader", || {
            let (st, s) = get_json(cluster.http_addr(ids[0]), "/status");
            found = s["leader_id"].as_u64().unwrap_or(0) as usize;
            st == 200 && found != 0
        });
        found
    };
    let follower = *ids.iter().find(|&&i| i != leader).expect("a follower");
    let http = cluster.http_addr(follower).to_string();
    wait_until(Duration::from_secs(20), "the follower is healthy", || {
        get_json(&http, "/health").0 == 200
    });
    let (_, s) = get_json(&http, "/status");
    assert_eq!(s["members"].as_array().expect("members").len(), 3);
    lock_contract(&http);
    alt_contract(&http);
    bad_requests(&http);

    // Cut the follower off from its quorum.
    for &i in ids.iter().filter(|&&i| i != follower) {
        cluster.kill9(i);
    }
    wait_until(Duration::from_secs(20), "/health says 503", || {
        get_json(&http, "/health").0 == 503
    });
    let (_, h) = get_json(&http, "/health");
    assert_eq!(h["healthy"], false);
    assert!(h["reason"].as_str().is_some_and(|r| !r.is_empty()), "{h}");
}

#[test]
fn lock_api_survives_a_server_restart() {
    let mut server = Server::start();
    let http = server.http_addr().to_string();
    let (st, a) = post(
        &http,
        "/api/v1/locks/durable/acquire",
        json!({"client_id": "w", "ttl_ms": 60000}),
    );
    assert_eq!(st, 200, "{a}");
    server.stop();
    server.restart();
    assert_eq!(server.http_addr(), http, "the HTTP port is kept");
    // The gateway's loopback session reconnects (or is replaced); meanwhile
    // requests may answer 503.
    let mut last = (0, Value::Null);
    wait_until(
        Duration::from_secs(20),
        "the lock API answers again",
        || {
            last = get_json(&http, "/api/v1/locks/durable");
            last.0 != 503
        },
    );
    assert_eq!(last.0, 200, "{}", last.1);
    assert_eq!(last.1["holder"]["fencing_token"], a["fencing_token"]);
    let (st, r) = post(
        &http,
        "/api/v1/locks/durable/release",
        json!({"client_id": "w", "fencing_token": a["fencing_token"]}),
    );
    assert_eq!(st, 200, "{r}");
}

/// An acquire by a client id that holds the lock answers its grant (with
/// the TTL it asks for); the lock stays one grant.
#[test]
fn acquire_is_idempotent_per_client_id() {
    let server = Server::start();
    let http = server.http_addr();
    let body = json!({"client_id": "w1", "ttl_ms": 60000, "wait_timeout_ms": 0});
    let (st, a) = post(http, "/api/v1/locks/idem/acquire", body.clone());
    assert_eq!(st, 200, "{a}");
    let token = a["fencing_token"].as_u64().expect("a token");
    let (st, b) = post(http, "/api/v1/locks/idem/acquire", body);
    assert_eq!(st, 200, "the holder's re-acquire is its grant: {b}");
    assert_eq!(b["acquired"], true);
    assert_eq!(b["fencing_token"], token);
    assert!(
        b["expires_at_ms"].as_i64() >= a["expires_at_ms"].as_i64(),
        "{a} {b}"
    );
    // The alternative contract too.
    let (st, c) = post(
        http,
        "/api/v1/locks/acquire",
        json!({"lock_key": "idem", "client_id": "w1", "lease_time_ms": 60000}),
    );
    assert_eq!(st, 200, "{c}");
    assert_eq!(c["fencing_token"], token);
    // Another TTL: still the grant, with that TTL from now.
    let (st, e) = post(
        http,
        "/api/v1/locks/idem/acquire",
        json!({"client_id": "w1", "ttl_ms": 20000}),
    );
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["fencing_token"], token);
    let expiry = |a: &Value| a["expires_at_ms"].as_i64().expect("an expiry");
    assert!(expiry(&e) < expiry(&c), "{c} {e}");
    let (_, s) = get_json(http, "/api/v1/locks/idem");
    assert_eq!(s["holder"]["fencing_token"], token);
    assert_eq!(s["holder"]["expires_at_ms"], e["expires_at_ms"]);
    assert_eq!(s["waiters"], 0);
    let (st, r) = post(
        http,
        "/api/v1/locks/idem/release",
        json!({"client_id": "w1", "fencing_token": token}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(get_json(http, "/api/v1/locks/idem").0, 404);
}

/// An acquire that does not wait runs to its end whoever hangs up (see
/// `a_retry_through_another_server_after_a_lost_answer_is_the_same_grant`);
/// a waiter that hangs up gives its place up, as a gRPC deadline does.
#[test]
fn a_waiter_that_hangs_up_leaves_the_queue() {
    let server = Server::start();
    let http = server.http_addr();
    let (st, a) = post(
        http,
        "/api/v1/locks/hang/acquire",
        json!({"client_id": "w0", "ttl_ms": 60000, "wait_timeout_ms": 0}),
    );
    assert_eq!(st, 200, "{a}");
    let first = a["fencing_token"].as_u64().expect("a token");
    let waiting = post_unread(
        http,
        "/api/v1/locks/hang/acquire",
        json!({"client_id": "w1", "ttl_ms": 60000, "wait_timeout_ms": 30000}),
    );
    wait_until(Duration::from_secs(20), "w1 waits", || {
        get_json(http, "/api/v1/locks/hang").1["waiters"] == 1
    });
    drop(waiting);
    wait_until(Duration::from_secs(20), "w1 leaves the queue", || {
        get_json(http, "/api/v1/locks/hang").1["waiters"] == 0
    });
    let (st, r) = post(
        http,
        "/api/v1/locks/hang/release",
        json!({"client_id": "w0", "fencing_token": first}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(get_json(http, "/api/v1/locks/hang").0, 404);
}

/// On a 3-node cluster: a grant whose answer is lost, retried through
/// another server, is the same grant; a waiter whose request is retried
/// through another server keeps its one place in line.
#[test]
fn a_retry_through_another_server_after_a_lost_answer_is_the_same_grant() {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    let http: Vec<String> = ids
        .iter()
        .map(|&i| cluster.http_addr(i).to_string())
        .collect();
    for h in &http {
        wait_until(Duration::from_secs(20), "every server is healthy", || {
            get_json(h, "/health").0 == 200
        });
    }
    let acquire = |id: &str, wait_ms: u64| json!({"client_id": id, "ttl_ms": 60000, "wait_timeout_ms": wait_ms});

    // w1's grant commits, its answer is lost.
    let unread = post_unread(&http[0], "/api/v1/locks/lost/acquire", acquire("w1", 0));
    let mut holder = Value::Null;
    wait_until(Duration::from_secs(20), "w1's grant is committed", || {
        holder = get_json(&http[1], "/api/v1/locks/lost").1["holder"].clone();
        holder["label"] == label_of(None, "w1").as_str()
    });
    drop(unread);
    let (st, a) = post(&http[1], "/api/v1/locks/lost/acquire", acquire("w1", 0));
    assert_eq!(
        st, 200,
        "the retry is granted, not queued behind itself: {a}"
    );
    assert_eq!(a["fencing_token"], holder["fencing_token"]);
    let token = a["fencing_token"].as_u64().expect("a token");

    // w2 waits through one server, and retries (its client timed out)
    // through another while the first request still waits.
    let first = {
        let h = http[0].clone();
        let body = acquire("w2", 20000);
        std::thread::spawn(move || post(&h, "/api/v1/locks/lost/acquire", body))
    };
    wait_until(Duration::from_secs(20), "w2 waits", || {
        get_json(&http[2], "/api/v1/locks/lost").1["waiters"] == 1
    });
    let retry = {
        let h = http[2].clone();
        let body = acquire("w2", 20000);
        std::thread::spawn(move || post(&h, "/api/v1/locks/lost/acquire", body))
    };
    let (st, r) = post(
        &http[1],
        "/api/v1/locks/lost/release",
        json!({"client_id": "w1", "fencing_token": token}),
    );
    assert_eq!(st, 200, "{r}");
    let (st1, b1) = first.join().expect("first request");
    let (st2, b2) = retry.join().expect("retried request");
    assert_eq!((st1, st2), (200, 200), "{b1} {b2}");
    assert_eq!(
        b1["fencing_token"], b2["fencing_token"],
        "one place, one grant"
    );
    assert!(b1["fencing_token"].as_u64().expect("a token") > token);
    let (_, s) = get_json(&http[0], "/api/v1/locks/lost");
    assert_eq!(s["holder"]["label"], label_of(None, "w2").as_str());
    assert_eq!(s["waiters"], 0, "w2 left no second node: {s}");
}
