//! The ZooKeeper port at the byte level: four-letter words, persistent
//! watches (which kazoo cannot set), and bad input.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use warden_client::{Client, ConnectOptions, CreateOptions};
use warden_server::zk::jute::{Reader, Writer};
use warden_testkit::Server;

fn four_letter(addr: &str, word: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(word.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// `echo mntr | nc HOST 2181`, ZooKeeper's documented way to ask, sends
/// the word and a newline and reads until the server closes. A server
/// that closed with the newline unread sent a reset, and nc (Debian's
/// netcat-openbsd), seeing the socket's error, printed nothing, most of
/// the time for `mntr`: the server must close cleanly (no error on the
/// asker's socket) and the answer arrive whole.
#[test]
fn a_word_with_a_newline_after_it_is_answered_whole() {
    let server = Server::start();
    for round in 0..40 {
        let word = if round % 2 == 0 { "mntr\n" } else { "ruok\n" };
        let mut s = TcpStream::connect(server.zk_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(word.as_bytes()).unwrap();
        // An asker slower than the server (nc, busy with its stdin): the
        // answer and the server's close both come before the first read.
        // Not a wait for anything; a reader that is late.
        std::thread::sleep(Duration::from_millis(100));
        let reset = s.take_error().unwrap();
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(
            reset.is_none() && read.is_ok(),
            "round {round}, {word:?}: the server reset the connection ({reset:?}, {read:?})"
        );
        assert!(
            out.contains("zk_server_state\t") || out == "imok",
            "round {round}, {word:?}: got {out:?}"
        );
    }
}

#[test]
fn four_letter_words_answer() {
    // Every word, the ones off the default whitelist included.
    let server = Server::start_with(warden_testkit::ServerOptions {
        extra_args: vec!["--4lw-whitelist".into(), "*".into()],
        ..Default::default()
    });
    assert_eq!(four_letter(server.zk_addr(), "ruok"), "imok");
    let srvr = four_letter(server.zk_addr(), "srvr");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert!(srvr.contains("Zxid: 0x"), "{srvr}");
    let mntr = four_letter(server.zk_addr(), "mntr");
    assert!(mntr.contains("zk_znode_count\t"), "{mntr}");
    let conf = four_letter(server.zk_addr(), "conf");
    assert!(conf.contains("clientPort="), "{conf}");
    // Every word ZooKeeper 3.8 has gets its answer from a standalone
    // server; the AdminServer answers the same on the HTTP port.
    for (word, starts) in [
        ("envi", "Environment:\nzookeeper.version=3.8.0-warden-"),
        ("stat", "Zookeeper version: 3.8.0-warden-"),
        ("cons", " /127.0.0.1:"),
        ("dump", "SessionTracker dump:\n"),
        ("dirs", "datadir_size: "),
        ("wchs", "0 connections watching 0 paths\n"),
        ("wchc", "\n"),
        ("wchp", "\n"),
        ("isro", "rw"),
        ("hash", ""),
        ("crst", "Connection stats reset.\n"),
        ("srst", "Server stats reset.\n"),
    ] {
        let said = four_letter(server.zk_addr(), word);
        assert!(said.starts_with(starts), "{word}: {said:?}");
    }
    assert!(four_letter(server.zk_addr(), "hash").contains(": "));
    // No word: read as a packet length far over the bound, and closed.
    assert_eq!(four_letter(server.zk_addr(), "zzzz"), "");
    let mut http = TcpStream::connect(server.http_addr()).unwrap();
    http.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    http.write_all(b"GET /commands/mntr HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    http.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    assert!(reply.contains(r#""command":"monitor""#), "{reply}");
    assert!(reply.contains(r#""server_state":"standalone""#), "{reply}");
}

/// A ZooKeeper client speaking raw jute.
struct Jute(TcpStream);

impl Jute {
    fn connect(addr: &str) -> Jute {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
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
        assert!(r.int("timeOut").unwrap() > 0);
        assert_ne!(r.long("sessionId").unwrap(), 0);
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

    /// Sends a request (header + body); returns the reply's (xid, err).
    fn call(&mut self, xid: i32, op: i32, body: &[u8]) -> (i32, i32) {
        let mut w = Writer::default();
        w.int(xid).int(op);
        w.buf.extend_from_slice(body);
        self.send(&w.buf);
        let reply = self.recv().expect("reply");
        let mut r = Reader::new(&reply);
        let x = r.int("xid").unwrap();
        let _zxid = r.long("zxid").unwrap();
        (x, r.int("err").unwrap())
    }
}

#[tokio::test]
async fn persistent_recursive_watch_through_the_zookeeper_port() {
    let server = Server::start();
    let native = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    native
        .create("/pw", b"", CreateOptions::default())
        .await
        .unwrap();

    let mut zk = Jute::connect(server.zk_addr());
    // addWatch(path, mode 1 = PERSISTENT_RECURSIVE): answered, as by
    // ZooKeeper, with an ErrorResponse (one int, 0), which ZooKeeper's
    // Java client reads (without it, it drops the connection).
    let mut w = Writer::default();
    w.string("/pw").int(1);
    let reply = zk.call_body(1, 106, &w.buf);
    assert_eq!(reply, vec![0, 0, 0, 0], "addWatch's ErrorResponse");

    // Written through the native door, seen through the ZooKeeper one.
    native
        .create("/pw/a", b"", CreateOptions::default())
        .await
        .unwrap();
    native.set_data("/pw/a", b"x", None).await.unwrap();
    native.delete("/pw/a", None).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let body = zk.recv().expect("notification");
        let mut r = Reader::new(&body);
        assert_eq!(r.int("xid").unwrap(), -1, "a watch notification");
        let _ = r.long("zxid").unwrap();
        let _ = r.int("err").unwrap();
        let kind = r.int("type").unwrap();
        let state = r.int("state").unwrap();
        assert_eq!(state, 3, "SyncConnected");
        seen.push((kind, r.string("path").unwrap()));
    }
    assert_eq!(
        seen,
        vec![
            (1, "/pw/a".to_string()),
            (3, "/pw/a".to_string()),
            (2, "/pw/a".to_string())
        ]
    );
}

#[test]
fn unknown_opcodes_and_malformed_records_get_zookeeper_errors() {
    let server = Server::start();
    let mut zk = Jute::connect(server.zk_addr());
    // reconfig (16) with no record: MarshallingError (-5), connection stays.
    assert_eq!(zk.call(1, 16, &[]), (1, -5));
    // Nor 3.9's standalone check (13).
    let mut w = Writer::default();
    w.string("/").int(-1);
    assert_eq!(zk.call(12, 13, &w.buf), (12, -6));
    // getData with a truncated record: MarshallingError (-5).
    assert_eq!(zk.call(2, 4, &[0, 0]), (2, -5));
    // An illegal path: BadArguments (-8), as ZooKeeper answers.
    let mut w = Writer::default();
    w.string("no-slash").boolean(false);
    assert_eq!(zk.call(3, 4, &w.buf), (3, -8));
    // Still serving: exists("/") is answered.
    let mut w = Writer::default();
    w.string("/").boolean(false);
    assert_eq!(zk.call(4, 3, &w.buf), (4, 0));
    // SASL (102) on a server without --zk-sasl-jaas: AuthFailed (-115)
    // with a null token, and the connection closed, as ZooKeeper answers
    // a failed SASL exchange.
    let mut sasl = Jute::connect(server.zk_addr());
    let mut w = Writer::default();
    w.int(21).int(102).buffer(&[]);
    sasl.send(&w.buf);
    let reply = sasl.recv().expect("reply");
    let mut r = Reader::new(&reply);
    assert_eq!(r.int("xid").unwrap(), 21);
    let _zxid = r.long("zxid").unwrap();
    assert_eq!(r.int("err").unwrap(), -115);
    assert_eq!(r.buffer_or_null("token").unwrap(), None);
    assert!(sasl.recv().is_none(), "the connection stayed open");
}

#[tokio::test]
async fn ephemerals_counts_check_watches_and_multi_read() {
    let server = Server::start();
    let native = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    native
        .create("/t", b"data", CreateOptions::default())
        .await
        .unwrap();
    native
        .create("/t/a", b"", CreateOptions::default())
        .await
        .unwrap();
    native
        .create("/t/b", b"", CreateOptions::default())
        .await
        .unwrap();
    native
        .create("/t/b/c", b"", CreateOptions::default())
        .await
        .unwrap();

    let mut zk = Jute::connect(server.zk_addr());
    // create /e1 as EPHEMERAL (flags 1), open ACL.
    let mut w = Writer::default();
    w.string("/e1")
        .buffer(b"")
        .int(1)
        .int(31)
        .string("world")
        .string("anyone")
        .int(1);
    assert_eq!(zk.call(1, 1, &w.buf), (1, 0));

    // getEphemerals("/") lists this session's ephemerals.
    let mut w = Writer::default();
    w.string("/");
    let reply = zk.call_body(2, 103, &w.buf);
    assert_eq!(
        Reader::new(&reply).strings("ephemerals").unwrap(),
        vec!["/e1".to_string()]
    );

    // getAllChildrenNumber("/t") counts every descendant.
    let mut w = Writer::default();
    w.string("/t");
    let reply = zk.call_body(3, 104, &w.buf);
    assert_eq!(Reader::new(&reply).int("totalNumber").unwrap(), 3);

    // checkWatches: none yet (NoWatcher -121); after exists(watch) there is one.
    let mut w = Writer::default();
    w.string("/t").int(2);
    assert_eq!(zk.call(4, 17, &w.buf), (4, -121));
    let mut e = Writer::default();
    e.string("/t").boolean(true);
    assert_eq!(zk.call(5, 3, &e.buf), (5, 0));
    assert_eq!(zk.call(6, 17, &w.buf), (6, 0));

    // multiRead: getData(/t) answered, getChildren(/missing) NoNode.
    let mut w = Writer::default();
    w.int(4).boolean(false).int(-1).string("/t").boolean(false);
    w.int(8)
        .boolean(false)
        .int(-1)
        .string("/missing")
        .boolean(false);
    w.int(-1).boolean(true).int(-1);
    let reply = zk.call_body(7, 22, &w.buf);
    let mut r = Reader::new(&reply);
    assert_eq!(
        (
            r.int("type").unwrap(),
            r.boolean("done").unwrap(),
            r.int("err").unwrap()
        ),
        (4, false, 0)
    );
    assert_eq!(r.buffer("data").unwrap(), b"data");
    // Stat: 4 longs, 3 ints, a long, 2 ints, a long.
    for _ in 0..4 {
        r.long("stat").unwrap();
    }
    let version = r.int("version").unwrap();
    assert_eq!(version, 0);
    r.int("cversion").unwrap();
    r.int("aversion").unwrap();
    r.long("ephemeralOwner").unwrap();
    assert_eq!(r.int("dataLength").unwrap(), 4);
    assert_eq!(r.int("numChildren").unwrap(), 2);
    r.long("pzxid").unwrap();
    // The second op failed on its own: an error result with NoNode.
    assert_eq!(
        (
            r.int("type").unwrap(),
            r.boolean("done").unwrap(),
            r.int("err").unwrap()
        ),
        (-1, false, -101)
    );
    assert_eq!(r.int("error").unwrap(), -101);
    assert_eq!(
        (
            r.int("type").unwrap(),
            r.boolean("done").unwrap(),
            r.int("err").unwrap()
        ),
        (-1, true, -1)
    );
}

impl Jute {
    /// Like `call`, but asserts success and returns the reply body.
    fn call_body(&mut self, xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.int(xid).int(op);
        w.buf.extend_from_slice(body);
        self.send(&w.buf);
        let reply = self.recv().expect("reply");
        let mut r = Reader::new(&reply);
        assert_eq!(r.int("xid").unwrap(), xid);
        let _ = r.long("zxid").unwrap();
        assert_eq!(r.int("err").unwrap(), 0, "op {op} failed");
        reply[16..].to_vec()
    }
}

/// whoAmI (opcode 107): a ClientInfo (scheme, user) per identity.
fn who_am_i(zk: &mut Jute, xid: i32) -> Vec<(String, String)> {
    let reply = zk.call_body(xid, 107, &[]);
    let mut r = Reader::new(&reply);
    let n = r.int("clientInfo count").unwrap();
    (0..n)
        .map(|_| (r.string("authScheme").unwrap(), r.string("user").unwrap()))
        .collect()
}

#[test]
fn who_am_i_names_the_connections_identities() {
    let server = Server::start();
    let mut zk = Jute::connect(server.zk_addr());
    let ip = ("ip".to_string(), "127.0.0.1".to_string());
    assert_eq!(who_am_i(&mut zk, 1), vec![ip.clone()]);
    // auth digest bob:pw (AuthPacket: type, scheme, credentials, xid -4).
    let mut w = Writer::default();
    w.int(0).string("digest").buffer(b"bob:bob-pw");
    assert_eq!(zk.call(-4, 100, &w.buf), (-4, 0));
    // ZooKeeper names a digest identity by its user, not the hash.
    assert_eq!(
        who_am_i(&mut zk, 2),
        vec![ip.clone(), ("digest".to_string(), "bob".to_string())]
    );
    // Another connection has only its address.
    let mut other = Jute::connect(server.zk_addr());
    assert_eq!(who_am_i(&mut other, 1), vec![ip]);
}

/// zkCli's `whoami`, `config` and `ls /zookeeper` (ZooKeeper 3.8's own
/// client), when Debian's `zookeeper` package and Java are installed;
/// skipped otherwise.
#[test]
fn zkcli_whoami_config_and_ls() {
    let cli = std::path::Path::new("/usr/share/zookeeper/bin/zkCli.sh");
    let java = std::process::Command::new("java").arg("-version").output();
    if !cli.exists() || !java.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: zkCli.sh or java not installed");
        return;
    }
    let server = Server::start();
    let mut child = std::process::Command::new(cli)
        .args(["-server", server.zk_addr()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run zkCli.sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"addauth digest carol:carol-pw\nwhoami\nconfig\nls /zookeeper\nquit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Auth scheme: User")
            && stdout.contains("ip: 127.0.0.1")
            && stdout.lines().any(|l| l.trim() == "digest: carol")
            // `config` (getConfig) and `ls /zookeeper`: the virtual subtree.
            && stdout.lines().any(|l| l.starts_with("server.1=127.0.0.1:"))
            && stdout.lines().any(|l| l.starts_with("version="))
            && stdout.contains("[config, quota]"),
        "zkCli whoami, config, ls:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// exists(path) through the ZooKeeper port: the Stat's ephemeralOwner.
fn zk_ephemeral_owner(zk: &mut Jute, xid: i32, path: &str) -> i64 {
    let mut w = Writer::default();
    w.string(path).boolean(false);
    let reply = zk.call_body(xid, 3, &w.buf);
    let mut r = Reader::new(&reply);
    for _ in 0..4 {
        r.long("stat").unwrap();
    }
    for _ in 0..3 {
        r.int("stat").unwrap();
    }
    r.long("ephemeralOwner").unwrap()
}

/// Containers and TTL nodes: ephemeralOwner 0 on the ZooKeeper port, as
/// ZooKeeper 3.8 reports them to clients (it keeps its special encodings
/// to itself: the differential test compares against it); their own Stat
/// fields (and owner 0) natively; an ephemeral's owner is its session.
#[tokio::test]
async fn ephemeral_owner_of_containers_and_ttl_nodes() {
    let server = Server::start();
    let native = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    let container = CreateOptions {
        container: true,
        ..Default::default()
    };
    native.create("/box", b"", container).await.unwrap();
    let ttl = CreateOptions {
        ttl: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    native.create("/ttl", b"", ttl).await.unwrap();
    native
        .create("/plain", b"", CreateOptions::default())
        .await
        .unwrap();

    let stat = native.exists("/box").await.unwrap().unwrap();
    assert_eq!((stat.ephemeral_owner, stat.container), (0, true));
    let stat = native.exists("/ttl").await.unwrap().unwrap();
    assert_eq!((stat.ephemeral_owner, stat.ttl_ms), (0, 3_600_000));

    let mut zk = Jute::connect(server.zk_addr());
    assert_eq!(zk_ephemeral_owner(&mut zk, 1, "/box"), 0);
    assert_eq!(zk_ephemeral_owner(&mut zk, 2, "/ttl"), 0);
    assert_eq!(zk_ephemeral_owner(&mut zk, 3, "/plain"), 0);
    let eph = CreateOptions {
        ephemeral: true,
        ..Default::default()
    };
    native.create("/eph", b"", eph).await.unwrap();
    assert_eq!(
        zk_ephemeral_owner(&mut zk, 4, "/eph") as u64,
        native.session_id()
    );
}

/// getData("/zookeeper/config", watch) on one member of a 3-node cluster:
/// the config lists the three; a learner joins; the watch fires
/// (NodeDataChanged) and the config then lists it as an observer, with
/// another version.
#[tokio::test]
async fn the_config_watch_fires_when_membership_changes() {
    let mut cluster =
        warden_testkit::Cluster::start_with_spares(3, 1, warden_testkit::ServerOptions::default());
    let mut zk = Jute::connect(cluster.zk_addr(1));
    let config = |zk: &mut Jute, xid: i32, watch: bool| -> Vec<String> {
        let mut w = Writer::default();
        w.string("/zookeeper/config").boolean(watch);
        let reply = zk.call_body(xid, 4, &w.buf);
        let data = Reader::new(&reply).buffer("data").unwrap();
        String::from_utf8(data)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let before = config(&mut zk, 1, true);
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(before.iter().all(|l| !l.contains("observer")), "{before:?}");

    cluster.launch_spare(4);
    let servers = [1, 2, 3]
        .iter()
        .map(|&i| cluster.addr(i).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let admin = Client::connect(&servers, ConnectOptions::default())
        .await
        .unwrap();
    let peer4 = cluster.peer_addr(4).to_string();
    admin.add_member(4, &peer4, true).await.unwrap();

    // The next frame is the notification (the read timeout bounds the wait).
    let body = zk.recv().expect("config watch notification");
    let mut r = Reader::new(&body);
    assert_eq!(r.int("xid").unwrap(), -1, "a watch notification");
    let _ = r.long("zxid").unwrap();
    let _ = r.int("err").unwrap();
    assert_eq!(r.int("type").unwrap(), 3, "NodeDataChanged");
    assert_eq!(r.int("state").unwrap(), 3);
    assert_eq!(r.string("path").unwrap(), "/zookeeper/config");

    let after = config(&mut zk, 2, false);
    assert_eq!(after.len(), 5, "{after:?}");
    let learner = format!("server.4={peer4}:");
    assert!(
        after
            .iter()
            .any(|l| l.starts_with(&learner) && l.contains(":observer")),
        "{after:?}"
    );
    assert_ne!(before.last(), after.last(), "the version changed");
}

/// getData("/zookeeper/config"), with or without a watch: its lines.
fn read_config(zk: &mut Jute, xid: i32, watch: bool) -> Vec<String> {
    let mut w = Writer::default();
    w.string("/zookeeper/config").boolean(watch);
    let reply = zk.call_body(xid, 4, &w.buf);
    let data = Reader::new(&reply).buffer("data").unwrap();
    String::from_utf8(data)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A member that has just started knows its peers' ZooKeeper ports only
/// once their status reaches it: until then `/zookeeper/config` lacks
/// their client part, and when it learns one the config watch fires (so
/// Curator's EnsembleTracker, which reads the config when it connects,
/// reads it again and finds every member's client address).
#[test]
fn the_config_watch_fires_when_a_zookeeper_port_is_learned() {
    let mut cluster = warden_testkit::Cluster::start(3);
    let mut incomplete = 0;
    // A few restarts, to meet the moment at least once.
    for round in 0..3 {
        cluster.stop(1);
        cluster.restart(1);
        let mut zk = Jute::connect(cluster.zk_addr(1));
        for xid in 1.. {
            let lines = read_config(&mut zk, xid, true);
            let servers = &lines[..lines.len() - 1];
            if servers.len() == 3 && servers.iter().all(|l| l.contains(';')) {
                break;
            }
            incomplete += 1;
            // The next frame is the notification (the read timeout bounds
            // the wait): without it the reader would keep the old config.
            let body = zk.recv().unwrap_or_else(|| {
                panic!("round {round}: no config watch event after reading {lines:?}")
            });
            let mut r = Reader::new(&body);
            assert_eq!(r.int("xid").unwrap(), -1, "a watch notification");
            let _ = r.long("zxid").unwrap();
            let _ = r.int("err").unwrap();
            assert_eq!(r.int("type").unwrap(), 3, "NodeDataChanged");
            let _ = r.int("state").unwrap();
            assert_eq!(r.string("path").unwrap(), "/zookeeper/config");
        }
    }
    println!("{incomplete} reads before every ZooKeeper port was known");
}

/// A ZooKeeper connection that resumes session `sid` (with its password)
/// having seen `last_zxid`, as a client does after a dropped connection.
fn resume(addr: &str, sid: i64, passwd: &[u8], last_zxid: i64) -> Jute {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut j = Jute(s);
    let mut w = Writer::default();
    w.int(0)
        .long(last_zxid)
        .int(10_000)
        .long(sid)
        .buffer(passwd)
        .boolean(false);
    j.send(&w.buf);
    let body = j.recv().expect("ConnectResponse");
    let mut r = Reader::new(&body);
    r.int("protocolVersion").unwrap();
    assert!(r.int("timeOut").unwrap() > 0, "session {sid:#x} resumed");
    assert_eq!(r.long("sessionId").unwrap(), sid);
    j
}

/// setWatches (opcode 101, xid -8), as ZooKeeper's clients send it on a
/// new connection: the watches come back, and one whose node changed
/// while the client was away fires at once.
#[tokio::test]
async fn set_watches_on_a_resumed_session() {
    let server = Server::start();
    let native = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    for p in ["/sw", "/sw-missed"] {
        native
            .create(p, b"a", CreateOptions::default())
            .await
            .unwrap();
    }
    // First connection: note the session and the last zxid seen.
    let s = TcpStream::connect(server.zk_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = Jute(s);
    let mut w = Writer::default();
    w.int(0)
        .long(0)
        .int(10_000)
        .long(0)
        .buffer(&[0u8; 16])
        .boolean(false);
    first.send(&w.buf);
    let body = first.recv().expect("ConnectResponse");
    let mut r = Reader::new(&body);
    r.int("protocolVersion").unwrap();
    r.int("timeOut").unwrap();
    let sid = r.long("sessionId").unwrap();
    let passwd = r.buffer("passwd").unwrap();
    let mut e = Writer::default();
    e.string("/sw").boolean(false);
    let mut req = Writer::default();
    req.int(1).int(3);
    req.buf.extend_from_slice(&e.buf);
    first.send(&req.buf);
    let reply = first.recv().expect("exists reply");
    let mut r = Reader::new(&reply);
    r.int("xid").unwrap();
    let seen = r.long("zxid").unwrap();
    drop(first);

    // Away: /sw-missed changes.
    native.set_data("/sw-missed", b"b", None).await.unwrap();

    let mut second = resume(server.zk_addr(), sid, &passwd, seen);
    let mut w = Writer::default();
    w.long(seen)
        .strings(&["/sw".to_string(), "/sw-missed".to_string()])
        .strings(&["/sw-later".to_string()])
        .strings(&[]);
    let mut req = Writer::default();
    req.int(-8).int(101);
    req.buf.extend_from_slice(&w.buf);
    second.send(&req.buf);
    // The change made while away fires at once: its notification comes
    // before the reply, as from ZooKeeper (which fires it while it sets
    // the watches).
    let mut frames = Vec::new();
    for _ in 0..2 {
        let body = second.recv().expect("a frame");
        let mut r = Reader::new(&body);
        let xid = r.int("xid").unwrap();
        let _ = r.long("zxid").unwrap();
        let err = r.int("err").unwrap();
        let event = (xid == -1).then(|| {
            let kind = r.int("type").unwrap();
            let _ = r.int("state").unwrap();
            (kind, r.string("path").unwrap())
        });
        frames.push((xid, err, event));
    }
    assert_eq!(
        frames,
        vec![(-1, 0, Some((3, "/sw-missed".to_string()))), (-8, 0, None)]
    );
    let next_event = |j: &mut Jute| -> (i32, String) {
        let body = j.recv().expect("a notification");
        let mut r = Reader::new(&body);
        assert_eq!(r.int("xid").unwrap(), -1, "a watch notification");
        let _ = r.long("zxid").unwrap();
        let _ = r.int("err").unwrap();
        let kind = r.int("type").unwrap();
        let _ = r.int("state").unwrap();
        (kind, r.string("path").unwrap())
    };
    // The others are set again and fire on the next change.
    native.set_data("/sw", b"b", None).await.unwrap();
    assert_eq!(next_event(&mut second), (3, "/sw".to_string()));
    native
        .create("/sw-later", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(next_event(&mut second), (1, "/sw-later".to_string()));
}
