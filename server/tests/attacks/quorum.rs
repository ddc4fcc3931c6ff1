//! Membership changes that would lose the quorum (issue 26, attack 1's
//! second half): on every door, a change that leaves fewer voters heard
//! from lately than a quorum of the new voter set is refused, naming the
//! live and needed counts, and nothing changes; `--force` makes it anyway;
//! `warden serve --force-new-cluster` is the way back.
//!
//! Red before the rule: the README's `cluster add 5 127.0.0.1:...` was
//! accepted (the lone server then waited for ever for a voter that does
//! not exist), and so were the additions and the removal below on a
//! cluster with a node down.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Output;
use std::time::{Duration, Instant};

use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_server::zk::jute::{Reader, Writer};
use warden_testkit::{Cluster, Server, ServerOptions};

/// An address where no server runs (port 1 is never a warden's).
const NOBODY: &str = "127.0.0.1:1";
const SUPER: &str = "admin:root-pw";

fn wardenctl(servers: &str, args: &[&str]) -> Output {
    std::process::Command::new(warden_testkit::binary("wardenctl"))
        .arg("--servers")
        .arg(servers)
        .args(args)
        .output()
        .expect("run wardenctl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(15),
    }
}

async fn admin(servers: &str) -> Client {
    let c = Client::connect(servers, opts()).await.expect("connect");
    c.add_auth("digest", SUPER.as_bytes()).await.expect("auth");
    c
}

fn with_super() -> ServerOptions {
    ServerOptions {
        extra_args: super_args(),
        ..Default::default()
    }
}

fn super_args() -> Vec<String> {
    vec![
        "--super-digest".into(),
        warden_protocol::auth::digest_id(SUPER).unwrap(),
    ]
}

/// Member ids as `server` lists them.
async fn member_ids(c: &Client) -> Vec<u64> {
    let status = c.cluster_status().await.expect("cluster status");
    status.members.iter().map(|m| m.id).collect()
}

/// The README's attack, as the issue tried it: a server started with no
/// flags, `wardenctl cluster add 5` of an address where nothing runs.
#[tokio::test]
async fn adding_a_dead_voter_to_a_default_server_is_refused() {
    let server = Server::start();
    let out = wardenctl(server.addr(), &["cluster", "add", "5", NOBODY]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "accepted: {err}");
    assert!(
        err.contains(
            "refused: after adding 5 as a voter the cluster would have 2 voters, \
             1 of them heard from in the last"
        ) && err.contains("2 needed")
            && err.contains("not heard from: 5"),
        "{err}"
    );
    // Nothing changed, and the server still takes writes.
    let c = Client::connect(server.addr(), opts()).await.unwrap();
    assert_eq!(member_ids(&c).await, [1]);
    c.create("/after", b"", CreateOptions::default())
        .await
        .expect("a write after the refused change");
    // As a learner it is harmless (the quorum is as it was), and allowed.
    let out = wardenctl(server.addr(), &["cluster", "add", "5", NOBODY, "--learner"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.create("/after-learner", b"", CreateOptions::default())
        .await
        .expect("a write with a dead learner");
}

/// Three voters, one down: adding a server that is not running (2 live
/// of 4, 3 needed) and removing a live one (1 of 2, 2 needed) are refused
/// on the native door and on ZooKeeper's reconfig alike, even to the super
/// user; removing the dead one is fine.
#[tokio::test]
async fn with_one_of_three_down_no_door_may_lose_the_quorum() {
    let mut cluster = Cluster::start_with(3, with_super());
    let leader = cluster.leader();
    let down = if leader == 3 { 2 } else { 3 };
    let live = [1, 2, 3]
        .into_iter()
        .find(|&i| i != leader && i != down)
        .unwrap();
    let c = admin(cluster.addr(leader)).await;
    c.create("/before", b"", CreateOptions::default())
        .await
        .unwrap();
    cluster.kill9(down);
    // Until the leader reports it unreachable (its record is older than
    // the rule's window by then).
    let status_c = admin(cluster.addr(leader)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = status_c.cluster_status().await.unwrap();
        if status
            .members
            .iter()
            .any(|m| m.id == down as u64 && !m.reachable)
        {
            break;
        }
        assert!(Instant::now() < deadline, "node {down} still reachable");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Native door: a voter that is not running. (A fresh session: the
    // request waits a moment for server 4 to call in, and holds its
    // connection's answers meanwhile.)
    let err = admin(cluster.addr(leader))
        .await
        .add_member(4, NOBODY, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(
            "after adding 4 as a voter the cluster would have 4 voters, 2 of them heard from"
        ) && msg.contains("3 needed"),
        "{msg}"
    );
    // Native door: removing a live voter.
    let err = c.remove_member(live as u64).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "after removing {live} the cluster would have 2 voters, 1 of them heard from"
        )) && msg.contains("2 needed"),
        "{msg}"
    );
    // wardenctl says the same.
    let out = wardenctl(
        cluster.addr(leader),
        &["--auth", SUPER, "cluster", "remove", &live.to_string()],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("2 needed"),
        "{}",
        text(&out.stderr)
    );

    // ZooKeeper's reconfig, as the super user: the same rule.
    let mut zk = Jute::connect(cluster.zk_addr(leader));
    zk.auth_digest(SUPER);
    let (code, body) = zk.reconfig(Some(&format!("server.4={NOBODY}:participant")), None);
    assert_eq!(code, -8, "reconfig add: {body}");
    let (code, _) = zk.reconfig(None, Some(&live.to_string()));
    assert_eq!(code, -8, "reconfig remove of a live voter");

    // Nothing changed; writes go on.
    assert_eq!(member_ids(&c).await, [1, 2, 3]);
    c.create("/during", b"", CreateOptions::default())
        .await
        .expect("a write with one node down");
    // Removing the dead one keeps 2 live of 2: allowed.
    c.remove_member(down as u64)
        .await
        .expect("remove the dead one");
    let mut left: Vec<u64> = [1, 2, 3]
        .into_iter()
        .filter(|&i| i != down)
        .map(|i| i as u64)
        .collect();
    left.sort_unstable();
    assert_eq!(member_ids(&c).await, left);
    c.create("/after", b"", CreateOptions::default())
        .await
        .expect("a write after removing the dead one");
}

/// `--force` makes the change the rule refuses (here the README's dead
/// voter: the lone server loses its quorum), and `--force-new-cluster`
/// brings the server back as the only voter with its data.
#[tokio::test]
async fn force_makes_it_anyway_and_force_new_cluster_recovers() {
    let mut cluster = Cluster::start(1);
    let servers = cluster.servers();
    let c = Client::connect(&servers, opts()).await.unwrap();
    c.create("/kept", b"v", CreateOptions::default())
        .await
        .unwrap();
    // wardenctl's own session cannot close once the quorum is gone (its
    // close is a write): only a refusal would be wrong here.
    let out = wardenctl(&servers, &["cluster", "add", "5", NOBODY, "--force"]);
    assert!(
        !text(&out.stderr).contains("refused"),
        "forced add: {}",
        text(&out.stderr)
    );
    assert_eq!(member_ids(&c).await, [1, 5]);
    // The quorum is lost: a write cannot commit.
    let err = c
        .create("/lost", b"", CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            ErrorCode::NotReady | ErrorCode::OperationTimeout | ErrorCode::ConnectionLoss
        ),
        "{err}"
    );
    drop(c);

    cluster.stop(1);
    cluster.set_extra_args(1, vec!["--force-new-cluster".into()]);
    cluster.restart(1);
    assert!(
        cluster.log(1).contains("--force-new-cluster"),
        "{}",
        cluster.log(1)
    );
    let c = Client::connect(&servers, opts()).await.unwrap();
    assert_eq!(c.get_data("/kept").await.unwrap().0, b"v");
    assert_eq!(member_ids(&c).await, [1]);
    c.create("/new", b"", CreateOptions::default())
        .await
        .expect("a write after the forced start");
    drop(c);
    // And without the flag again: the group is still this server alone.
    cluster.stop(1);
    cluster.set_extra_args(1, Vec::new());
    cluster.restart(1);
    let c = Client::connect(&servers, opts()).await.unwrap();
    assert_eq!(member_ids(&c).await, [1]);
    assert!(c.get_data("/new").await.is_ok());
}

/// A 3-node cluster loses two nodes for good; the survivor, restarted with
/// `--force-new-cluster`, keeps the data written before, takes writes,
/// and a server added back (empty, with `--join`) catches up.
#[tokio::test]
async fn the_survivor_of_a_lost_quorum_starts_a_new_cluster() {
    let mut cluster = Cluster::start_with(3, with_super());
    let c = admin(&cluster.servers()).await;
    for i in 0..20 {
        c.create(&format!("/k{i}"), b"before", CreateOptions::default())
            .await
            .unwrap();
    }
    drop(c);
    // Every node has everything (node 1 is the survivor).
    let one = cluster.addr(1).to_string();
    let c1 = admin(&one).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while c1.get_data("/k19").await.is_err() {
        assert!(Instant::now() < deadline, "node 1 never had /k19");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c1);
    cluster.kill9(2);
    cluster.kill9(3);
    let _ = std::fs::remove_dir_all(cluster.node_dir(2).join("data"));
    let _ = std::fs::remove_dir_all(cluster.node_dir(3).join("data"));
    cluster.stop(1);

    let mut forced = super_args();
    forced.push("--force-new-cluster".into());
    cluster.set_extra_args(1, forced);
    cluster.restart(1);
    let c = admin(&one).await;
    for i in 0..20 {
        assert_eq!(c.get_data(&format!("/k{i}")).await.unwrap().0, b"before");
    }
    assert_eq!(member_ids(&c).await, [1]);
    c.create("/after", b"new", CreateOptions::default())
        .await
        .expect("a write on the new cluster");

    // Node 2 comes back empty and is added as a voter: it calls in
    // (--join), so the rule lets it join; it catches up.
    let mut join = super_args();
    join.push("--join".into());
    cluster.set_extra_args(2, join);
    cluster.launch_spare(2);
    let peer2 = cluster.peer_addr(2).to_string();
    c.add_member(2, &peer2, false)
        .await
        .expect("add node 2 back");
    cluster.await_ready(2);
    let c2 = admin(cluster.addr(2)).await;
    assert_eq!(c2.get_data("/after").await.unwrap().0, b"new");
    assert_eq!(c2.get_data("/k0").await.unwrap().0, b"before");
    assert_eq!(member_ids(&c).await, [1, 2]);
    c.create("/two", b"", CreateOptions::default())
        .await
        .expect("a write with two voters");
}

/// A ZooKeeper client speaking raw jute: enough for auth and reconfig.
struct Jute(TcpStream);

impl Jute {
    fn connect(addr: &str) -> Jute {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut j = Jute(s);
        let mut w = Writer::default();
        w.int(0)
            .long(0)
            .int(10_000)
            .long(0)
            .buffer(&[0u8; 16])
            .boolean(false);
        j.send(&w.buf);
        let body = j.recv().expect("ConnectResponse");
        let mut r = Reader::new(&body);
        assert_eq!(r.int("protocolVersion").unwrap(), 0);
        j
    }

    fn send(&mut self, body: &[u8]) {
        self.0
            .write_all(&(body.len() as u32).to_be_bytes())
            .unwrap();
        self.0.write_all(body).unwrap();
    }

    fn recv(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).ok()?;
        let mut body = vec![0; u32::from_be_bytes(len) as usize];
        self.0.read_exact(&mut body).ok()?;
        Some(body)
    }

    /// Sends a request; the reply's err and the rest of its body.
    fn call(&mut self, xid: i32, op: i32, body: &[u8]) -> (i32, Vec<u8>) {
        let mut w = Writer::default();
        w.int(xid).int(op);
        w.buf.extend_from_slice(body);
        self.send(&w.buf);
        let reply = self.recv().expect("reply");
        let mut r = Reader::new(&reply);
        assert_eq!(r.int("xid").unwrap(), xid);
        let _zxid = r.long("zxid").unwrap();
        let err = r.int("err").unwrap();
        let rest = reply[reply.len() - r.remaining()..].to_vec();
        (err, rest)
    }

    /// `addauth digest USER:PASSWORD`.
    fn auth_digest(&mut self, credentials: &str) {
        let mut w = Writer::default();
        w.int(0).string("digest").buffer(credentials.as_bytes());
        let (err, _) = self.call(-4, 100, &w.buf);
        assert_eq!(err, 0, "addauth");
    }

    /// ZooKeeper's reconfig (opcode 16), incremental, from any version.
    fn reconfig(&mut self, joining: Option<&str>, leaving: Option<&str>) -> (i32, String) {
        let mut w = Writer::default();
        for part in [joining, leaving, None] {
            match part {
                Some(s) => w.string(s),
                None => w.int(-1),
            };
        }
        w.long(-1);
        let (err, rest) = self.call(7, 16, &w.buf);
        (err, text(&rest))
    }
}
