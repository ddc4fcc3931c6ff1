//! Lock observability against a real 3-node cluster: locks taken through
//! the recipes (Rust client, native protocol), through the ZooKeeper port
//! (kazoo, from PyPI into `target/zk-venv`, driven by
//! `tests/zk/lock_hold.py`) and through the HTTP lock API all show up in
//! `GET /api/v1/locks` with their holder and waiters, read on another
//! node than the one they were taken through, and in `/metrics`
//! (`warden_locks_*`) with figures that move: grants, hand-offs, waits,
//! waiters, an expired lease; every node counts the same.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use common::http::{get_json, post, post_unread, request};
use serde_json::{json, Value};
use warden_client::{Client, ConnectOptions};
use warden_recipes::{LeaseLock, Mutex};
use warden_server::http::holder::{label, label_of};
use warden_testkit::{wait_until, Cluster, ServerOptions};

/// Longest wait for anything that must happen.
const WAIT: Duration = Duration::from_secs(30);

/// The value of one series (`name{labels}`) in `/metrics` at `http`; 0 if
/// it is absent.
fn metric(http: &str, series: &str) -> f64 {
    let (status, text) = request(http, "GET", "/metrics", None);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a number"))
        .unwrap_or(0.0)
}

fn series(name: &str, kind: &str) -> String {
    format!("warden_locks_{name}{{kind=\"{kind}\"}}")
}

/// `GET /api/v1/locks?QUERY` at `http`: the answer, which must be 200.
fn listing(http: &str, query: &str) -> Value {
    let (status, body) = get_json(http, &format!("/api/v1/locks?{query}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// The lock at `path` in one listing of every lock, if any.
fn lock(http: &str, path: &str) -> Option<Value> {
    listing(http, "waiters=list&limit=1000")["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .find(|l| l["path"] == path)
        .cloned()
}

/// Waits until the lock at `path` has `waiters` waiters (as `http` lists
/// it) and returns it.
fn lock_with_waiters(http: &str, path: &str, waiters: u64) -> Value {
    let mut found = None;
    wait_until(
        WAIT,
        &format!("{path} listed with {waiters} waiters"),
        || {
            found = lock(http, path).filter(|l| l["waiters"] == waiters);
            found.is_some()
        },
    );
    found.unwrap()
}

/// The kazoo helper, and its output read line by line.
struct Kazoo {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Kazoo {
    fn start(hosts: &str, path: &str) -> Kazoo {
        let venv = warden_testkit::python::zk_venv();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk/lock_hold.py");
        let mut child = Command::new(venv.join("bin/python"))
            .arg(script)
            .args([hosts, path])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run lock_hold.py");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Kazoo {
            child,
            stdin,
            lines,
        }
    }

    /// The helper's next line must be `want` (it has deadlines of its own).
    fn expect(&mut self, want: &str) {
        let line = self.lines.next().expect("a line").expect("readable");
        assert_eq!(line, want, "lock_hold.py");
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }
}

impl Drop for Kazoo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(addr: &str) -> Client {
    Client::connect(addr, ConnectOptions::default())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_every_door_are_listed_and_counted_on_every_node() {
    let cluster = tokio::task::spawn_blocking(|| {
        // Its 300 ms lease below is under the default minimum.
        let opts = ServerOptions {
            extra_args: vec!["--min-lock-ttl-ms".into(), "100".into()],
            ..Default::default()
        };
        Cluster::start_with(3, opts)
    })
    .await
    .unwrap();
    let ids = cluster.node_ids();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    // Everything is read on node c, taken through a and b.
    let http_a = cluster.http_addr(a).to_string();
    let http_c = cluster.http_addr(c).to_string();

    // A recipe Mutex: a holder on a, a waiter on b.
    let client_1 = connect(cluster.addr(a)).await;
    let client_2 = connect(cluster.addr(b)).await;
    let guard_1 = Mutex::new(client_1.clone(), "/locks/rust")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let mutex_2 = Mutex::new(client_2.clone(), "/locks/rust").unwrap();
    let waiter = tokio::spawn(async move { mutex_2.acquire().await.unwrap() });

    // The HTTP door: worker-7 holds, worker-8 waits (its answer unread).
    let (status, grant) = post(
        &http_a,
        "/api/v1/locks/jobs/acquire",
        json!({"client_id": "worker-7", "ttl_ms": 60_000, "wait_timeout_ms": 0}),
    );
    assert_eq!(status, 200, "{grant}");
    let http_token = grant["fencing_token"].as_u64().unwrap();
    let http_waiter = post_unread(
        &http_a,
        "/api/v1/locks/jobs/acquire",
        json!({"client_id": "worker-8", "ttl_ms": 60_000, "wait_timeout_ms": 25_000}),
    );

    // A recipe lease lock, held.
    let lease = LeaseLock::new(client_1.clone(), "/leases")
        .acquire("batch", "w1", Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");

    // kazoo through the ZooKeeper port of b.
    let zk_b = cluster.zk_addr(b).to_string();
    let mut kazoo = tokio::task::spawn_blocking(move || {
        let mut k = Kazoo::start(&zk_b, "/kz/lock");
        k.expect("held");
        k.expect("queued");
        k
    })
    .await
    .unwrap();

    let http = http_c.clone();
    let session_1 = format!("{:#x}", client_1.session_id());
    let session_2 = format!("{:#x}", client_2.session_id());
    let token_1 = guard_1.fencing_token();
    tokio::task::spawn_blocking(move || {
        let m = lock_with_waiters(&http, "/locks/rust", 1);
        assert_eq!(m["kind"], "mutex", "{m}");
        assert_eq!(m["holder"]["session_id"], session_1.as_str(), "{m}");
        assert_eq!(m["holder"]["fencing_token"], token_1, "{m}");
        assert_eq!(m["waiting"][0]["session_id"], session_2.as_str(), "{m}");

        let h = lock_with_waiters(&http, "/warden/http-locks/jobs", 1);
        assert_eq!(
            (&h["kind"], &h["name"]),
            (&json!("http-lease"), &json!("jobs"))
        );
        // A lease's client id is its holder's secret: shown by label.
        assert_eq!(h["holder"]["client_id"], Value::Null, "{h}");
        assert_eq!(
            h["holder"]["label"],
            label_of(None, "worker-7").as_str(),
            "{h}"
        );
        assert_eq!(h["holder"]["fencing_token"], http_token, "{h}");
        assert!(h["holder"]["expires_at_ms"].as_i64().unwrap() > 0, "{h}");
        assert_eq!(
            h["waiting"][0]["label"],
            label_of(None, "worker-8").as_str(),
            "{h}"
        );

        let l = lock_with_waiters(&http, "/leases/batch", 0);
        assert_eq!(l["kind"], "lease", "{l}");
        assert_eq!(l["holder"]["client_id"], Value::Null, "{l}");
        assert_eq!(l["holder"]["label"], label("w1").as_str(), "{l}");
        assert_eq!(l["holder"]["fencing_token"], lease.fencing_token, "{l}");

        let k = lock_with_waiters(&http, "/kz/lock", 1);
        assert_eq!(k["kind"], "kazoo", "{k}");
        assert_eq!(k["holder"]["client_id"], "kazoo-holder", "{k}");
        assert!(k["holder"]["session_id"].is_string(), "{k}");
        assert_eq!(k["waiting"][0]["client_id"], "kazoo-waiter", "{k}");

        // Page by page, one lock a page: the same locks, in path order.
        let mut paged = Vec::new();
        let mut query = "limit=1".to_string();
        loop {
            let page = listing(&http, &query);
            assert_eq!(page["consistency"], "linearizable");
            paged.extend(
                page["locks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l["path"].clone()),
            );
            match page["next"].as_str() {
                Some(next) => query = format!("limit=1&after={next}"),
                None => break,
            }
        }
        assert_eq!(
            paged,
            [
                "/kz/lock",
                "/leases/batch",
                "/locks/rust",
                "/warden/http-locks/jobs"
            ]
        );
        let only = listing(&http, "kind=kazoo&consistency=local");
        assert_eq!(only["consistency"], "local");
        assert_eq!(only["locks"].as_array().unwrap().len(), 1, "{only}");
        let (status, refused) = get_json(&http, "/api/v1/locks?limit=0");
        assert_eq!(status, 400);
        assert!(
            refused["error"].as_str().unwrap().contains("limit"),
            "{refused}"
        );

        // Every kind counted its grants and its waiter, on this node too.
        for (kind, grants) in [
            ("mutex", 1.0),
            ("http-lease", 1.0),
            ("lease", 1.0),
            ("kazoo", 1.0),
        ] {
            wait_until(WAIT, &format!("{kind} figures on node c"), || {
                metric(&http, &series("acquisitions_total", kind)) == grants
                    && metric(&http, &series("held", kind)) == 1.0
            });
        }
        for kind in ["mutex", "http-lease", "kazoo"] {
            assert_eq!(metric(&http, &series("waiters", kind)), 1.0, "{kind}");
            assert_eq!(
                metric(&http, &series("handoffs_total", kind)),
                0.0,
                "{kind}"
            );
        }
    })
    .await
    .unwrap();

    // Hand-offs: each holder lets go, each waiter is granted.
    guard_1.release().await.unwrap();
    let guard_2 = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
    let (status, released) = post(
        &http_a,
        "/api/v1/locks/jobs/release",
        json!({"client_id": "worker-7", "fencing_token": http_token}),
    );
    assert_eq!(status, 200, "{released}");
    let kazoo = tokio::task::spawn_blocking(move || {
        kazoo.send("release");
        kazoo.expect("handed");
        kazoo
    })
    .await
    .unwrap();

    let http = http_c.clone();
    let session_2 = format!("{:#x}", client_2.session_id());
    let token_2 = guard_2.fencing_token();
    let cluster = tokio::task::spawn_blocking(move || {
        let m = lock_with_waiters(&http, "/locks/rust", 0);
        assert_eq!(m["holder"]["session_id"], session_2.as_str(), "{m}");
        assert_eq!(m["holder"]["fencing_token"], token_2, "{m}");
        let h = lock_with_waiters(&http, "/warden/http-locks/jobs", 0);
        assert_eq!(
            h["holder"]["label"],
            label_of(None, "worker-8").as_str(),
            "{h}"
        );
        let k = lock_with_waiters(&http, "/kz/lock", 0);
        assert_eq!(k["holder"]["client_id"], "kazoo-waiter", "{k}");
        for kind in ["mutex", "http-lease", "kazoo"] {
            wait_until(WAIT, &format!("{kind}'s hand-off on node c"), || {
                metric(&http, &series("handoffs_total", kind)) == 1.0
                    && metric(&http, &series("acquisitions_total", kind)) == 2.0
                    && metric(&http, &series("waiters", kind)) == 0.0
            });
            // Both grants timed, the hand-off's after a real wait.
            assert_eq!(metric(&http, &series("wait_seconds_count", kind)), 2.0);
            assert!(
                metric(&http, &series("wait_seconds_sum", kind)) > 0.0,
                "{kind}"
            );
            assert_eq!(
                metric(&http, &series("releases_total", kind)),
                1.0,
                "{kind}"
            );
        }

        // The answers as the served OpenAPI document describes them.
        let mut answers = Vec::new();
        for query in [
            "waiters=list",
            "limit=1",
            "consistency=local&kind=mutex",
            "limit=0",
        ] {
            let (status, body) = get_json(&http, &format!("/api/v1/locks?{query}"));
            answers.push(
                json!({"method": "GET", "path": "/api/v1/locks", "status": status, "body": body}),
            );
        }
        common::openapi::hold(&http, answers.to_vec());

        // An HTTP lease left to lapse: removed by its TTL, counted as
        // expired (not released) on every node.
        let (status, short) = post(
            cluster.http_addr(a),
            "/api/v1/locks/short/acquire",
            json!({"client_id": "sleepy", "ttl_ms": 300, "wait_timeout_ms": 0}),
        );
        assert_eq!(status, 200, "{short}");
        let expired = "warden_locks_expired_total{kind=\"http-lease\",role=\"holder\"}";
        for &i in &cluster.node_ids() {
            let http = cluster.http_addr(i).to_string();
            wait_until(
                WAIT,
                &format!("the lapsed lease counted on node {i}"),
                || metric(&http, expired) == 1.0,
            );
            assert!(lock(&http, "/warden/http-locks/short").is_none());
            assert_eq!(metric(&http, &series("releases_total", "http-lease")), 1.0);
            // The same figures on every node.
            for (kind, grants) in [("mutex", 2.0), ("http-lease", 3.0), ("kazoo", 2.0)] {
                assert_eq!(
                    metric(&http, &series("acquisitions_total", kind)),
                    grants,
                    "{kind} on {i}"
                );
                assert_eq!(
                    metric(&http, &series("handoffs_total", kind)),
                    1.0,
                    "{kind} on {i}"
                );
            }
        }
        cluster
    })
    .await
    .unwrap();

    // Node c restarted: its index is rebuilt from its snapshot and log,
    // and what it replays is not counted again (its counters restart).
    let http = http_c.clone();
    let session_2 = format!("{:#x}", client_2.session_id());
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.stop(c);
        cluster.restart(c);
        let m = lock_with_waiters(&http, "/locks/rust", 0);
        assert_eq!(m["holder"]["session_id"], session_2.as_str(), "{m}");
        assert!(lock(&http, "/kz/lock").is_some());
        assert!(lock(&http, "/warden/http-locks/jobs").is_some());
        assert_eq!(metric(&http, &series("held", "mutex")), 1.0);
        assert_eq!(metric(&http, &series("acquisitions_total", "mutex")), 0.0);
        cluster
    })
    .await
    .unwrap();
    // A grant after the restart is counted there.
    guard_2.release().await.unwrap();
    let guard_3 = Mutex::new(client_1.clone(), "/locks/rust")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let http = http_c.clone();
    cluster = tokio::task::spawn_blocking(move || {
        wait_until(
            WAIT,
            "the grant after the restart counted on node c",
            || {
                metric(&http, &series("acquisitions_total", "mutex")) == 1.0
                    && metric(&http, &series("releases_total", "mutex")) == 1.0
            },
        );
        cluster
    })
    .await
    .unwrap();

    drop(http_waiter);
    drop(kazoo);
    guard_3.release().await.unwrap();
    drop(cluster);
}
