//! Leader election against real servers: one leader at a time, succession
//! on close, on a dead server (session expiry) and on resignation,
//! `observe` reporting each change once, `lost` firing for a deposed
//! leader.
//!
//! Waits are on conditions with deadlines; nothing asserts how long
//! anything took.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::timeout;
use warden_client::{Client, ConnectOptions};
use warden_recipes::{Error, LeaderElection, Leadership};
use warden_testkit::{Cluster, Server};

/// Longest wait for anything the test expects to happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// Session timeout of a client whose server is killed: short, so its
/// session expires within the test.
const SHORT_SESSION: Duration = Duration::from_secs(2);
const PATH: &str = "/election/svc";

async fn connect(servers: &str) -> Client {
    Client::connect(servers, ConnectOptions::default())
        .await
        .expect("connect")
}

async fn wait_for_candidates(client: &Client, n: usize) {
    timeout(DEADLINE, async {
        loop {
            if let Ok((children, _)) = client.get_children(PATH).await {
                if children.len() == n {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{PATH} never had {n} candidates"));
}

/// Starts a campaign in a task; the leadership arrives on `won`.
fn campaign(
    client: Client,
    id: &'static str,
    won: mpsc::UnboundedSender<Leadership>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let leadership = LeaderElection::new(client, PATH, id)
            .campaign()
            .await
            .expect("campaign");
        let _ = won.send(leadership);
    })
}

async fn next_leader(won: &mut mpsc::UnboundedReceiver<Leadership>) -> Leadership {
    timeout(DEADLINE, won.recv())
        .await
        .expect("a leader within the deadline")
        .expect("campaigns running")
}

#[tokio::test]
async fn one_leader_and_succession_on_close_and_resign() {
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let clients = [
        connect(server.addr()).await,
        connect(server.addr()).await,
        connect(server.addr()).await,
    ];
    let (tx, mut won) = mpsc::unbounded_channel();
    for (client, id) in clients.iter().zip(["a", "b", "c"]) {
        campaign(client.clone(), id, tx.clone());
    }
    wait_for_candidates(&observer, 3).await;

    let first = next_leader(&mut won).await;
    // Exactly one: the others are still waiting, and the head is the
    // leader.
    assert!(won.try_recv().is_err(), "two leaders at once");
    let view = LeaderElection::new(observer.clone(), PATH, "observer");
    let seen = view.leader().await.unwrap().expect("someone leads");
    assert_eq!(seen.token, first.token);
    assert_eq!(seen.id, first.id);

    // The leader's client goes: the next one leads.
    let index = ["a", "b", "c"]
        .iter()
        .position(|id| *id == first.id)
        .unwrap();
    let lost = first.lost();
    clients[index].close().await.unwrap();
    let err = timeout(DEADLINE, lost).await.expect("lost fired");
    assert_eq!(
        err.code(),
        warden_client::ErrorCode::SessionExpired,
        "{err}"
    );
    let second = next_leader(&mut won).await;
    assert_ne!(second.id, first.id);
    assert!(second.token > first.token);
    assert!(won.try_recv().is_err(), "two leaders at once");

    // Resigning hands over too.
    let (second_id, second_token) = (second.id.clone(), second.token);
    second.resign().await.unwrap();
    let third = next_leader(&mut won).await;
    assert!(third.token > second_token);
    assert_ne!(third.id, first.id);
    assert_ne!(third.id, second_id);
    assert_eq!(view.leader().await.unwrap().unwrap().token, third.token);
    third.resign().await.unwrap();
    assert_eq!(view.leader().await.unwrap(), None);
}

#[tokio::test]
async fn lost_fires_when_the_leaders_node_is_deleted() {
    let server = Server::start();
    let admin = connect(server.addr()).await;
    let leader = LeaderElection::new(connect(server.addr()).await, PATH, "x")
        .campaign()
        .await
        .unwrap();
    let lost = leader.lost();
    admin.delete(leader.node(), None).await.unwrap();
    let err = timeout(DEADLINE, lost).await.expect("lost fired");
    assert!(matches!(err, Error::NotHolder(_)), "{err}");
    // Resigning a lost leadership is fine.
    leader.resign().await.unwrap();
}

#[tokio::test]
async fn observe_reports_each_change_once() {
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let view = LeaderElection::new(observer.clone(), PATH, "observer");
    let mut changes = Box::pin(view.observe());
    macro_rules! next {
        () => {
            timeout(DEADLINE, changes.next())
                .await
                .expect("a change within the deadline")
                .expect("the stream goes on")
                .expect("no error")
        };
    }
    assert_eq!(next!(), None, "nobody leads at first");

    let a = LeaderElection::new(connect(server.addr()).await, PATH, "a")
        .campaign()
        .await
        .unwrap();
    let seen = next!().expect("a leads");
    assert_eq!((seen.id.as_str(), seen.token), ("a", a.token));

    // b queues behind a: no leader change, so nothing is reported for it.
    let b_client = connect(server.addr()).await;
    let b = tokio::spawn(async move {
        LeaderElection::new(b_client, PATH, "b")
            .campaign()
            .await
            .unwrap()
    });
    wait_for_candidates(&observer, 2).await;
    let a_token = a.token;
    a.resign().await.unwrap();
    let b = timeout(DEADLINE, b).await.unwrap().unwrap();
    let seen = next!().expect("b leads");
    assert_eq!((seen.id.as_str(), seen.token), ("b", b.token));
    assert!(b.token > a_token);

    let b_token = b.token;
    b.resign().await.unwrap();
    assert_eq!(next!(), None, "nobody leads after b");

    let c = LeaderElection::new(connect(server.addr()).await, PATH, "c")
        .campaign()
        .await
        .unwrap();
    let seen = next!().expect("c leads");
    assert_eq!((seen.id.as_str(), seen.token), ("c", c.token));
    assert!(c.token > b_token);
}

#[tokio::test]
async fn leadership_passes_on_when_the_leaders_server_dies() {
    let mut cluster = Cluster::start(3);
    // The leader talks to node 1 only, so when node 1 dies its session
    // cannot move and expires.
    let leader_client = Client::connect(
        cluster.addr(1),
        ConnectOptions {
            session_timeout: SHORT_SESSION,
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    let leader = LeaderElection::new(leader_client.clone(), PATH, "on-node-1")
        .campaign()
        .await
        .unwrap();

    let (tx, mut won) = mpsc::unbounded_channel();
    let observer = connect(cluster.addr(2)).await;
    campaign(connect(cluster.addr(2)).await, "on-node-2", tx.clone());
    wait_for_candidates(&observer, 2).await;
    campaign(connect(cluster.addr(3)).await, "on-node-3", tx.clone());
    wait_for_candidates(&observer, 3).await;
    assert!(won.try_recv().is_err(), "two leaders at once");

    let lost = leader.lost();
    cluster.kill9(1);
    let err = timeout(DEADLINE, lost).await.expect("lost fired");
    assert_eq!(
        err.code(),
        warden_client::ErrorCode::SessionExpired,
        "{err}"
    );

    let next = next_leader(&mut won).await;
    assert_eq!(next.id, "on-node-2", "the next in line leads");
    assert!(next.token > leader.token);
    assert!(won.try_recv().is_err(), "two leaders at once");
}

#[tokio::test]
async fn a_dropped_campaign_withdraws_the_candidate() {
    let server = Server::start();
    let observer = connect(server.addr()).await;
    let client = connect(server.addr()).await;
    let leader = LeaderElection::new(client.clone(), PATH, "a")
        .campaign()
        .await
        .unwrap();
    let waiting =
        tokio::spawn(async move { LeaderElection::new(client, PATH, "b").campaign().await });
    wait_for_candidates(&observer, 2).await;
    waiting.abort();
    // Same session, so only the recipe can have removed it.
    wait_for_candidates(&observer, 1).await;
    leader.resign().await.unwrap();
}
