//! Leader election against real servers: one leader at a time, succession
//! on close, on a dead server (session expiry) and on resignation,
//! `observe` reporting each change once, `lost` firing for a deposed
//! leader and not for a disconnect the session survives, `resign`
//! retried across a lost answer.
//!
//! Waits are on conditions with deadlines; nothing asserts how long
//! anything took.

mod common;

use std::time::Duration;

use common::lossy::LossyProxy;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::timeout;
use warden_client::{Client, ConnectOptions, SessionState};
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

/// A client through `proxy` with a session long enough to outlive every
/// cut the test makes.
async fn connect_through(proxy: &LossyProxy) -> Client {
    let options = ConnectOptions {
        session_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    };
    Client::connect(&proxy.addr, options).await.unwrap()
}

/// Waits until `client` has been disconnected and is connected again.
async fn reconnected(client: &Client, mut states: tokio::sync::watch::Receiver<SessionState>) {
    timeout(DEADLINE, async {
        states
            .wait_for(|s| *s == SessionState::Disconnected)
            .await
            .unwrap();
        states
            .wait_for(|s| *s == SessionState::Connected)
            .await
            .unwrap();
    })
    .await
    .expect("the client reconnects");
    assert_eq!(*client.session_events().borrow(), SessionState::Connected);
}

#[tokio::test]
async fn lost_waits_out_disconnects_the_session_survives() {
    let server = Server::start();
    let proxy = LossyProxy::start(server.addr()).await;
    let client = connect_through(&proxy).await;
    let admin = connect(server.addr()).await;
    let leader = LeaderElection::new(client.clone(), PATH, "x")
        .campaign()
        .await
        .unwrap();
    let session = client.session_id();

    // The connection breaks under lost()'s own look at the node...
    let states = client.session_events();
    proxy.lose_the_answer_to_the_next_request_with(leader.node());
    let lost = tokio::spawn(leader.lost());
    reconnected(&client, states).await;
    assert_eq!(proxy.cuts(), 1);
    // ... and again while it waits on its watch.
    let states = client.session_events();
    proxy.lose_the_answer_to_the_next_request_with("/disconnect");
    let cut = client.exists("/disconnect").await;
    assert_eq!(
        cut.unwrap_err().code(),
        warden_client::ErrorCode::ConnectionLoss
    );
    reconnected(&client, states).await;
    assert_eq!(proxy.cuts(), 2);
    assert_eq!(client.session_id(), session, "the same session throughout");
    assert!(!lost.is_finished(), "lost() resolved on a disconnect");

    // Still the leader, and lost() still watching: the deletion is what
    // it reports.
    let view = LeaderElection::new(admin.clone(), PATH, "observer");
    assert_eq!(view.leader().await.unwrap().unwrap().token, leader.token);
    admin.delete(leader.node(), None).await.unwrap();
    let err = timeout(DEADLINE, lost)
        .await
        .expect("lost fired on the deletion")
        .unwrap();
    assert!(matches!(err, Error::NotHolder(_)), "{err}");
}

#[tokio::test]
async fn lost_notices_a_deletion_after_a_read_timed_out() {
    let server = Server::start();
    let proxy = LossyProxy::start(server.addr()).await;
    let options = ConnectOptions {
        session_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_millis(300),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&proxy.addr, options).await.unwrap();
    let admin = connect(server.addr()).await;
    let leader = LeaderElection::new(client.clone(), PATH, "x")
        .campaign()
        .await
        .unwrap();

    // The server is slow to answer lost()'s look at the node: the read
    // times out while the connection stays up.
    proxy.stall_answers_from(leader.node());
    let lost = tokio::spawn(leader.lost());
    timeout(DEADLINE, async {
        while !proxy.answers_stalled() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("lost() looks at its node");
    // Sent after lost()'s read, with the same timeout: once this one has
    // timed out, so has lost()'s.
    let slow = client.exists("/slow").await;
    assert_eq!(slow.unwrap_err(), warden_client::Error::Timeout);
    proxy.release_answers();
    assert_eq!(*client.session_events().borrow(), SessionState::Connected);

    admin.delete(leader.node(), None).await.unwrap();
    let err = timeout(DEADLINE, lost)
        .await
        .expect("lost fired on the deletion, not stuck after the timeout")
        .unwrap();
    assert!(matches!(err, Error::NotHolder(_)), "{err}");
}

#[tokio::test]
async fn resign_is_retried_when_its_answer_is_lost() {
    let server = Server::start();
    let proxy = LossyProxy::start(server.addr()).await;
    let admin = connect(server.addr()).await;
    let leader = LeaderElection::new(connect_through(&proxy).await, PATH, "a")
        .campaign()
        .await
        .unwrap();
    let (tx, mut won) = mpsc::unbounded_channel();
    campaign(connect(server.addr()).await, "b", tx);
    wait_for_candidates(&admin, 2).await;

    // The delete is applied, its answer lost with the connection.
    proxy.lose_the_answer_to_the_next_request_with(leader.node());
    let node = leader.node().to_string();
    let token = leader.token;
    timeout(DEADLINE, leader.resign())
        .await
        .expect("resign returns")
        .expect("resign retries across the lost answer");
    assert_eq!(proxy.cuts(), 1, "the answer was lost");
    assert_eq!(admin.exists(&node).await.unwrap(), None);
    let next = next_leader(&mut won).await;
    assert!(next.token > token);
}

#[tokio::test]
async fn resign_waits_out_a_disconnect() {
    let server = Server::start();
    let proxy = LossyProxy::start(server.addr()).await;
    let client = connect_through(&proxy).await;
    let admin = connect(server.addr()).await;
    let leader = LeaderElection::new(client.clone(), PATH, "a")
        .campaign()
        .await
        .unwrap();
    let node = leader.node().to_string();

    // Cut off and not back yet when resign() starts: its first attempt
    // fails at once; it must wait for the reconnect and delete then.
    let mut states = client.session_events();
    proxy.lose_the_answer_to_the_next_request_with("/disconnect");
    let _ = client.exists("/disconnect").await;
    states
        .wait_for(|s| *s != SessionState::Connected)
        .await
        .unwrap();
    timeout(DEADLINE, leader.resign())
        .await
        .expect("resign returns")
        .expect("resign waits for the reconnect");
    assert_eq!(admin.exists(&node).await.unwrap(), None);
    assert_eq!(*client.session_events().borrow(), SessionState::Connected);
}
