//! Recipes with ACLs against a real `warden`: the nodes a recipe creates
//! carry the ACL its caller gave, and an operation the ACLs refuse fails
//! at once with a clear NoAuth naming the node, never a hang or a silent
//! success.

use std::time::Duration;

use tokio::time::timeout;
use warden_client::{perms, Acl, Client, ConnectOptions, ErrorCode};
use warden_protocol::auth::digest_id;
use warden_recipes::{LeaderElection, LeaseLock, Mutex};
use warden_testkit::Server;

/// A refusal must come well within this (the recipe must not retry it).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

async fn connect(server: &Server, credentials: Option<&str>) -> Client {
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    if let Some(cred) = credentials {
        c.add_auth("digest", cred.as_bytes()).await.unwrap();
    }
    c
}

/// All for bob, READ for everyone.
fn bobs() -> Vec<Acl> {
    vec![
        Acl {
            perms: perms::ALL,
            scheme: "digest".into(),
            id: digest_id("bob:pw").unwrap(),
        },
        Acl {
            perms: perms::READ,
            scheme: "world".into(),
            id: "anyone".into(),
        },
    ]
}

fn assert_no_auth(e: warden_recipes::Error, path_prefix: &str) {
    assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
    let line = e.to_string();
    assert!(
        line.starts_with(&format!("NoAuth: {path_prefix}")),
        "{line}"
    );
}

#[tokio::test]
async fn mutex_nodes_carry_the_acl_and_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let anon = connect(&server, None).await;

    let lock = Mutex::new(bob.clone(), "/locks/db")
        .unwrap()
        .with_acl(bobs());
    let guard = lock.acquire().await.unwrap();
    for node in ["/locks", "/locks/db", guard.node_path()] {
        let (acl, _) = bob.get_acl(node).await.unwrap();
        assert_eq!(acl, bobs(), "{node}");
    }
    guard.release().await.unwrap();

    // Anonymous contenders cannot queue under bob's container.
    let theirs = Mutex::new(anon.clone(), "/locks/db").unwrap();
    bob.create("/locks/db/keep", b"", Default::default())
        .await
        .unwrap(); // keeps the container from being reaped meanwhile
    let e = timeout(ANSWER_WITHIN, theirs.acquire())
        .await
        .expect("a refused acquire must not hang")
        .unwrap_err();
    assert_no_auth(e, "/locks/db/");
}

#[tokio::test]
async fn lease_lock_and_election_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let anon = connect(&server, None).await;

    let leases = LeaseLock::new(bob.clone(), "/leases").with_acl(bobs());
    let lease = leases
        .acquire("job", "w1", Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    let (acl, _) = bob.get_acl("/leases/job").await.unwrap();
    assert_eq!(acl, bobs());

    let anon_leases = LeaseLock::new(anon.clone(), "/leases");
    let e = timeout(
        ANSWER_WITHIN,
        anon_leases.acquire("job", "w2", Duration::from_secs(30), Duration::ZERO),
    )
    .await
    .expect("a refused acquire must not hang")
    .unwrap_err();
    assert_no_auth(e, "/leases/job/");
    // Nor can it release bob's lease, even knowing the token.
    let e = timeout(
        ANSWER_WITHIN,
        anon_leases.release("job", "w1", lease.fencing_token),
    )
    .await
    .expect("a refused release must not hang")
    .unwrap_err();
    assert_no_auth(e, "/leases/job/");
    leases
        .release("job", "w1", lease.fencing_token)
        .await
        .unwrap();

    let election = LeaderElection::new(bob.clone(), "/elect", "bob").with_acl(bobs());
    let leadership = election.campaign().await.unwrap();
    drop(leadership);
    let e = timeout(
        ANSWER_WITHIN,
        LeaderElection::new(anon.clone(), "/elect", "anon").campaign(),
    )
    .await
    .expect("a refused campaign must not hang")
    .unwrap_err();
    assert_no_auth(e, "/elect/");
}
