//! Lease locks against a real server: grants, FIFO waiting, expiry at the
//! TTL unless renewed, refusals of stale tokens, wait timeouts.
//!
//! Waits are on conditions with deadlines; nothing asserts how long
//! anything took.

use std::time::Duration;

use tokio::time::timeout;
use warden_client::{Client, ConnectOptions};
use warden_recipes::{Error, Lease, LeaseLock};
use warden_testkit::Server;

/// Longest wait for anything the test expects to happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// A TTL long enough never to lapse during a test.
const TTL_LONG: Duration = Duration::from_secs(60);
/// A TTL short enough to lapse within a test.
const TTL_SHORT: Duration = Duration::from_secs(2);
/// Renewal interval for `TTL_SHORT` leases: well inside the TTL.
const RENEW_INTERVAL: Duration = Duration::from_millis(300);
/// How many renewals keep a `TTL_SHORT` lease alive past its first expiry.
const RENEWALS: u32 = 10;
const ROOT: &str = "/leases";

async fn connect(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .expect("connect")
}

/// Waits until `dir` has `n` children.
async fn wait_for_children(client: &Client, dir: &str, n: usize) {
    timeout(DEADLINE, async {
        loop {
            if let Ok((children, _)) = client.get_children(dir).await {
                if children.len() == n {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{dir} never had {n} children"));
}

#[tokio::test]
async fn acquire_renew_release() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("jobs", "worker-1", TTL_LONG, Duration::ZERO)
        .await
        .expect("acquire")
        .expect("free lease is granted at once");
    assert_eq!(lease.name, "jobs");
    assert_eq!(lease.client_id, "worker-1");
    assert!(lease.fencing_token > 0);
    assert!(lease.expires_at_ms > 0);

    let renewed = leases
        .renew("jobs", "worker-1", lease.fencing_token, TTL_LONG)
        .await
        .expect("renew");
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    assert!(renewed.expires_at_ms >= lease.expires_at_ms);

    // Held: a try-lock by someone else fails.
    assert_eq!(
        leases
            .acquire("jobs", "worker-2", TTL_LONG, Duration::ZERO)
            .await
            .expect("try"),
        None
    );
    leases
        .release("jobs", "worker-1", lease.fencing_token)
        .await
        .expect("release");

    let next = leases
        .acquire("jobs", "worker-2", TTL_LONG, Duration::ZERO)
        .await
        .expect("acquire")
        .expect("released lease is free");
    assert!(next.fencing_token > lease.fencing_token);
}

#[tokio::test]
async fn waiters_get_the_lease_in_fifo_order() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let first = leases
        .acquire("q", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();

    let spawn_waiter = |id: &'static str| {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("q", id, TTL_LONG, DEADLINE).await })
    };
    let w2 = spawn_waiter("w2");
    wait_for_children(&observer, "/leases/q", 2).await;
    let w3 = spawn_waiter("w3");
    wait_for_children(&observer, "/leases/q", 3).await;

    leases
        .release("q", "w1", first.fencing_token)
        .await
        .unwrap();
    let second: Lease = timeout(DEADLINE, w2)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.client_id, "w2");
    assert!(second.fencing_token > first.fencing_token);
    // w3 queued after w2, so it cannot hold while w2 does.
    assert!(!w3.is_finished());

    leases
        .release("q", "w2", second.fencing_token)
        .await
        .unwrap();
    let third = timeout(DEADLINE, w3)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(third.client_id, "w3");
    assert!(third.fencing_token > second.fencing_token);
}

#[tokio::test]
async fn lease_expires_at_its_ttl_unless_renewed() {
    let server = Server::start();
    let holder = LeaseLock::new(connect(&server).await, ROOT);
    // The waiter has its own client, as another process would.
    let waiter = LeaseLock::new(connect(&server).await, ROOT);
    let lease = holder
        .acquire("exp", "holder", TTL_SHORT, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.acquire("exp", "waiter", TTL_SHORT, DEADLINE).await });

    // Renew well past the first expiry: the lease stays ours.
    let mut latest = lease.clone();
    for _ in 0..RENEWALS {
        tokio::time::sleep(RENEW_INTERVAL).await;
        latest = holder
            .renew("exp", "holder", lease.fencing_token, TTL_SHORT)
            .await
            .expect("renewal of a live lease");
    }
    let ttl_ms = i64::try_from(TTL_SHORT.as_millis()).unwrap();
    assert!(
        latest.expires_at_ms > lease.expires_at_ms + ttl_ms / 2,
        "renewals moved the expiry: {lease:?} -> {latest:?}"
    );
    assert!(!waiting.is_finished(), "the waiter got a lease still held");

    // Stop renewing: the server removes it at its TTL and the waiter gets it.
    let got = timeout(DEADLINE, waiting)
        .await
        .expect("the waiter got the lapsed lease")
        .unwrap()
        .unwrap()
        .expect("granted before its wait timeout");
    assert_eq!(got.client_id, "waiter");
    assert!(got.fencing_token > lease.fencing_token);

    let err = holder
        .renew("exp", "holder", lease.fencing_token, TTL_SHORT)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotHolder(_)), "{err}");
}

#[tokio::test]
async fn stale_renew_and_release_are_refused() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("s", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let token = lease.fencing_token;

    let not_holder = |r: Result<(), Error>| {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::NotHolder(_)), "{err}");
    };
    not_holder(leases.renew("s", "w1", token + 1, TTL_LONG).await.map(drop));
    not_holder(leases.renew("s", "w2", token, TTL_LONG).await.map(drop));
    not_holder(leases.release("s", "w2", token).await);
    not_holder(leases.release("s", "w1", token - 1).await);
    not_holder(
        leases
            .renew("nosuch", "w1", token, TTL_LONG)
            .await
            .map(drop),
    );

    let err = leases.renew("s", "w1", token, TTL_SHORT).await.unwrap_err();
    assert!(matches!(err, Error::BadArguments(_)), "{err}");

    // Still held by w1 after all that.
    leases.renew("s", "w1", token, TTL_LONG).await.unwrap();
    leases.release("s", "w1", token).await.unwrap();
    // Once released, the old token is stale too.
    not_holder(leases.release("s", "w1", token).await);
    not_holder(leases.renew("s", "w1", token, TTL_LONG).await.map(drop));

    // And a newer grant's holder is not fooled by the old token.
    let newer = leases
        .acquire("s", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(newer.fencing_token > token);
    not_holder(leases.renew("s", "w1", token, TTL_LONG).await.map(drop));
}

#[tokio::test]
async fn wait_timeout_gives_none_and_removes_the_waiter() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("t", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let got = leases
        .acquire("t", "w2", TTL_LONG, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(got, None);
    let (children, _) = observer.get_children("/leases/t").await.unwrap();
    assert_eq!(
        children.len(),
        1,
        "only the holder's node is left: {children:?}"
    );
    leases
        .release("t", "w1", lease.fencing_token)
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_arguments_are_refused_without_a_round_trip() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    for (name, ttl) in [("", TTL_LONG), ("a/b", TTL_LONG), ("a", Duration::ZERO)] {
        let err = leases
            .acquire(name, "w", ttl, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BadArguments(_)), "{err}");
    }
}

#[tokio::test]
async fn a_dropped_acquire_removes_its_waiter_node() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("d", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let waiting = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("d", "w2", TTL_LONG, DEADLINE).await })
    };
    wait_for_children(&observer, "/leases/d", 2).await;
    waiting.abort();
    // Long before its TTL, the waiter's node is gone.
    wait_for_children(&observer, "/leases/d", 1).await;
    leases
        .release("d", "w1", lease.fencing_token)
        .await
        .unwrap();
}
