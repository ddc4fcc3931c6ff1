//! Who may change the cluster, read it whole, or ask for its sessions
//! (issue 26, items 1, 4 and 7): `server/src/authority.rs` decides, every
//! door asks it.
//!
//! Each attack is made the way an attacker would: against a server started
//! with no flags, from an address that is not loopback (the test makes a
//! network namespace with a veth pair and the server listens on the
//! pair's host end, so its callers come from a non-loopback address; both
//! are removed after the test), and against a server with a super user,
//! as anonymous and as another user. Each must be refused with an error
//! that says why, be counted in `/metrics`, and change nothing: the member
//! list, the statistics.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use warden_client::{perms, Acl, Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_protocol::auth::digest_id;
use warden_testkit::{Server, ServerOptions};

const SUPER: &str = "admin:root-pw";
const DEADLINE: Duration = Duration::from_secs(20);
/// Between looks at something that is not ready yet.
const POLL: Duration = Duration::from_millis(50);
/// A peer address nothing listens on.
const NOWHERE: &str = "127.0.0.1:9";

/// A network namespace joined to this one by a veth pair, made for one
/// test and removed when dropped (a panic included). The host end's
/// address is an address of this host that is not loopback: a server
/// listening there sees its callers come from it.
struct Elsewhere {
    ns: String,
    host_if: String,
    /// The host end's address.
    host_ip: String,
}

impl Elsewhere {
    fn new() -> Elsewhere {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        assert!(n < 64, "one /30 per namespace, 64 per test process");
        let pid = std::process::id();
        let net = Elsewhere {
            ns: format!("wa{pid}n{n}"),
            host_if: format!("wa{pid}h{n}"),
            host_ip: format!("10.{}.{}.{}", 248 + (pid >> 8) % 8, pid & 255, n * 4 + 1),
        };
        let ns_if = format!("wa{pid}p{n}");
        let ns_ip = format!("10.{}.{}.{}", 248 + (pid >> 8) % 8, pid & 255, n * 4 + 2);
        // Made before the first command, so whatever was made is removed.
        let host = |args: &[&str]| ip(&[], args);
        let inside = |args: &[&str]| ip(&["netns", "exec", &net.ns, "ip"], args);
        host(&["netns", "add", &net.ns]);
        host(&[
            "link",
            "add",
            &net.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
        ]);
        host(&["link", "set", &ns_if, "netns", &net.ns]);
        host(&[
            "addr",
            "add",
            &format!("{}/30", net.host_ip),
            "dev",
            &net.host_if,
        ]);
        host(&["link", "set", &net.host_if, "up"]);
        inside(&["addr", "add", &format!("{ns_ip}/30"), "dev", &ns_if]);
        inside(&["link", "set", &ns_if, "up"]);
        net
    }
}

impl Drop for Elsewhere {
    fn drop(&mut self) {
        // Deleting one end deletes the pair.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// Runs `ip PREFIX ARGS` (`prefix` empty, or `netns exec NS ip`), or
/// panics saying what failed (these tests need root, as CI runs them).
fn ip(prefix: &[&str], args: &[&str]) {
    let mut cmd = Command::new("ip");
    cmd.args(prefix).args(args);
    let out = cmd.output().expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {} {}: {} (the authority attacks need root for a network namespace)",
        prefix.join(" "),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GET path` over HTTP/1.0, with `Authorization: Basic` of `credentials`:
/// (status, body).
fn http_get(addr: &str, path: &str, credentials: Option<&str>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut request = format!("GET {path} HTTP/1.0\r\n");
    if let Some(c) = credentials {
        let basic = base64::engine::general_purpose::STANDARD.encode(c);
        request.push_str(&format!("Authorization: Basic {basic}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&reply[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, reply[split + 4..].to_vec())
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// `warden_authority_refusals_total` for `action` at `door`, from `/metrics`.
fn refusals(server: &Server, action: &str, door: &str) -> u64 {
    let (status, body) = http_get(server.http_addr(), "/metrics", None);
    assert_eq!(status, 200);
    let series = format!("warden_authority_refusals_total{{action=\"{action}\",door=\"{door}\"}} ");
    text(&body)
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A four-letter word's answer on the ZooKeeper port.
fn four_letter(addr: &str, word: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(word.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    text(&out)
}

fn message(e: &warden_client::Error) -> String {
    match e {
        warden_client::Error::Api { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}

async fn connect(server: &Server, credentials: Option<&str>) -> Client {
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    if let Some(cred) = credentials {
        c.add_auth("digest", cred.as_bytes()).await.unwrap();
    }
    c
}

async fn member_ids(c: &Client) -> Vec<u64> {
    let mut ids: Vec<u64> = c
        .cluster_status()
        .await
        .unwrap()
        .members
        .iter()
        .map(|m| m.id)
        .collect();
    ids.sort_unstable();
    ids
}

fn super_server(extra: &[&str]) -> Server {
    let mut extra_args = vec!["--super-digest".to_string(), digest_id(SUPER).unwrap()];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_with(ServerOptions {
        extra_args,
        ..Default::default()
    })
}

/// The first attack: an anonymous `cluster add` of a dead voter
/// took a default server's quorum for good. From another host it is
/// refused, says how to configure an admin, and the group is as it was.
#[tokio::test]
async fn a_default_server_refuses_membership_changes_from_another_host() {
    let net = Elsewhere::new();
    let server = Server::start_with(ServerOptions {
        listen_ip: net.host_ip.clone(),
        ..Default::default()
    });
    let c = connect(&server, None).await;
    let who = c.who_am_i().await.unwrap();
    assert!(
        who.contains(&("ip".to_string(), net.host_ip.clone())),
        "the caller is not loopback: {who:?}"
    );
    let add = c.add_member(5, "127.0.0.1:7999", false).await.unwrap_err();
    assert_eq!(add.code(), ErrorCode::NoAuth, "{add:?}");
    let said = message(&add);
    for part in ["membership", "loopback", "--super-digest", &net.host_ip] {
        assert!(said.contains(part), "{part:?} not in {said:?}");
    }
    let remove = c.remove_member(5).await.unwrap_err();
    assert_eq!(remove.code(), ErrorCode::NoAuth, "{remove:?}");
    // Nothing changed: one member, and it takes writes.
    assert_eq!(member_ids(&c).await, [1]);
    c.create("/after", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(refusals(&server, "membership_change", "native"), 2);
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("admin action refused"))
        .unwrap_or_else(|| panic!("no warning in the log:\n{log}"));
    assert!(line.contains(&net.host_ip), "{line}");
}

/// The second attack: an anonymous backup handed a node ACL'd
/// to alice, digest hashes and session passwords to anyone. From another
/// host, a default server refuses it, and the AdminServer commands that
/// list sessions and paths, while those that show neither still answer.
#[tokio::test]
async fn a_default_server_refuses_a_backup_to_another_host() {
    let net = Elsewhere::new();
    let server = Server::start_with(ServerOptions {
        listen_ip: net.host_ip.clone(),
        ..Default::default()
    });
    let alice = connect(&server, Some("alice:alice-pw")).await;
    let only_alice = vec![Acl {
        perms: perms::ALL,
        scheme: "digest".into(),
        id: digest_id("alice:alice-pw").unwrap(),
    }];
    alice
        .create(
            "/alice-only",
            b"alice-secret-data",
            CreateOptions::persistent().acl(only_alice),
        )
        .await
        .unwrap();
    let (status, body) = http_get(server.http_addr(), "/api/v1/snapshot", None);
    assert_eq!(status, 403, "{}", text(&body));
    let said = text(&body);
    assert!(said.contains("--super-digest"), "{said}");
    assert!(said.contains(&net.host_ip), "{said}");
    assert!(!said.contains("alice-secret-data"));
    // Credentials do not make another host the admin of a server that
    // has none.
    let (status, _) = http_get(
        server.http_addr(),
        "/api/v1/snapshot",
        Some("alice:alice-pw"),
    );
    assert_eq!(status, 403);
    assert_eq!(refusals(&server, "backup", "http"), 2);
    // The AdminServer: sessions and paths are the admin's...
    let (status, body) = http_get(server.http_addr(), "/commands/dump", None);
    assert_eq!(status, 403, "{}", text(&body));
    assert!(!text(&body).contains("/alice-only"));
    assert_eq!(refusals(&server, "admin_dump", "http"), 1);
    // ... the figures are everyone's.
    let (status, body) = http_get(server.http_addr(), "/commands/monitor", None);
    assert_eq!(status, 200, "{}", text(&body));
}

/// With a super user, loopback is no admin: anonymous callers and other
/// users are refused membership changes; the super user makes them.
#[tokio::test]
async fn with_a_super_user_only_the_super_user_changes_membership() {
    let server = super_server(&[]);
    let anon = connect(&server, None).await;
    let bob = connect(&server, Some("bob:bob-pw")).await;
    for c in [&anon, &bob] {
        let e = c.add_member(2, NOWHERE, true).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
        assert!(message(&e).contains("super user"), "{e:?}");
        let e = c.remove_member(2).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
    }
    assert_eq!(member_ids(&anon).await, [1]);
    assert_eq!(refusals(&server, "membership_change", "native"), 4);
    let admin = connect(&server, Some(SUPER)).await;
    admin.add_member(2, NOWHERE, true).await.unwrap();
    assert_eq!(member_ids(&admin).await, [1, 2]);
    // Answered once applied here.
    admin.remove_member(2).await.unwrap();
    assert_eq!(member_ids(&admin).await, [1]);
}

/// `mntr`'s `zk_packets_received`.
fn packets_received(server: &Server) -> u64 {
    four_letter(server.zk_addr(), "mntr")
        .lines()
        .find_map(|l| l.strip_prefix("zk_packets_received\t"))
        .expect("zk_packets_received")
        .trim()
        .parse()
        .unwrap()
}

/// The four-letter words and AdminServer commands that show sessions and
/// paths, or reset statistics: off the whitelist, they are refused on the
/// ZooKeeper port as ZooKeeper refuses them, and on the AdminServer to all
/// but the super user; the statistics are not reset.
#[tokio::test]
async fn with_a_super_user_sessions_paths_and_resets_are_the_super_users() {
    let server = super_server(&[]);
    let c = connect(&server, None).await;
    c.create("/eph-private", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    let _watch = c.get_data_watch("/eph-private").await.unwrap();
    for _ in 0..20 {
        c.get_data("/eph-private").await.unwrap();
    }
    let before = packets_received(&server);
    assert!(before >= 20, "{before}");
    for word in ["dump", "cons", "wchc", "wchp", "stat", "srst", "crst"] {
        assert_eq!(
            four_letter(server.zk_addr(), word),
            format!("{word} is not executed because it is not in the whitelist.\n"),
        );
    }
    for command in ["stat_reset", "connection_stat_reset", "dump", "watches"] {
        let (status, body) = http_get(server.http_addr(), &format!("/commands/{command}"), None);
        assert_eq!(status, 401, "{command}: {}", text(&body));
        let said = text(&body);
        assert!(said.contains("super user"), "{said}");
        assert!(!said.contains("/eph-private"), "{said}");
        let (status, _) = http_get(
            server.http_addr(),
            &format!("/commands/{command}"),
            Some("bob:bob-pw"),
        );
        assert_eq!(status, 403, "{command}");
    }
    // Nothing was reset: the count only grew.
    let after = packets_received(&server);
    assert!(after >= before, "statistics reset: {before} -> {after}");
    assert_eq!(refusals(&server, "4lw_srst", "zookeeper"), 1);
    assert_eq!(refusals(&server, "admin_srst", "http"), 2);
    // The words that show neither still answer anyone.
    assert_eq!(four_letter(server.zk_addr(), "ruok"), "imok");
    let (status, _) = http_get(server.http_addr(), "/commands/monitor", None);
    assert_eq!(status, 200);
    // The super user has them all.
    let (status, body) = http_get(server.http_addr(), "/commands/dump", Some(SUPER));
    assert_eq!(status, 200);
    assert!(text(&body).contains("/eph-private"), "{}", text(&body));
}

/// `--4lw-whitelist` is ZooKeeper's `4lw.commands.whitelist`: `*` opens
/// every word, a list only its words, a word ZooKeeper lacks is refused at
/// start-up naming it.
#[tokio::test]
async fn the_whitelist_is_the_operators() {
    let all = Server::start_with(ServerOptions {
        extra_args: vec!["--4lw-whitelist".into(), "*".into()],
        ..Default::default()
    });
    let c = connect(&all, None).await;
    c.create("/eph", b"", CreateOptions::ephemeral())
        .await
        .unwrap();
    assert!(four_letter(all.zk_addr(), "dump").contains("\t/eph\n"));
    let few = Server::start_with(ServerOptions {
        extra_args: vec!["--4lw-whitelist".into(), "ruok, isro".into()],
        ..Default::default()
    });
    assert_eq!(four_letter(few.zk_addr(), "ruok"), "imok");
    assert_eq!(
        four_letter(few.zk_addr(), "mntr"),
        "mntr is not executed because it is not in the whitelist.\n"
    );
    let out = Command::new(warden_testkit::binary("warden"))
        .args(["serve", "--4lw-whitelist", "ruok,mntrr", "--data-dir"])
        .arg(tempfile::tempdir().unwrap().path())
        .env_remove("WARDEN_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("\"mntrr\" is not a four-letter word"), "{err}");
}

/// Item 7: a backup remembers the members its cluster had; a server
/// restored from it must take its members from its operator (`--peers`,
/// here from the config file), not dial the old cluster's. The old
/// cluster added member 3 at OLD; the restored server is told member 3
/// is at NEW: it must speak to NEW.
#[tokio::test]
async fn a_restore_takes_its_members_from_the_operator() {
    let old_member = TcpListener::bind("127.0.0.1:0").unwrap();
    let old_addr = old_member.local_addr().unwrap().to_string();
    let mut old = Server::start();
    let c = connect(&old, None).await;
    c.create("/kept", b"v", CreateOptions::default())
        .await
        .unwrap();
    c.add_member(3, &old_addr, true).await.unwrap();
    let (status, backup) = http_get(old.http_addr(), "/api/v1/snapshot", None);
    assert_eq!(status, 200, "{}", text(&backup));
    drop(c);
    old.stop();
    drop(old_member);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.snap");
    std::fs::write(&file, &backup).unwrap();
    let config = dir.path().join("warden.toml");
    std::fs::write(&config, "").unwrap();
    let mut restored = Server::start_with(ServerOptions {
        extra_args: vec!["--config".into(), config.display().to_string()],
        ..Default::default()
    });
    restored.stop();
    let data = restored.data_dir().join("data");
    std::fs::remove_dir_all(&data).unwrap();
    let out = warden_restore(&file, &data);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let new_member = TcpListener::bind("127.0.0.1:0").unwrap();
    new_member.set_nonblocking(true).unwrap();
    let new_addr = new_member.local_addr().unwrap().to_string();
    std::fs::write(&config, format!("peers = \"1=127.0.0.1:1,3={new_addr}\"\n")).unwrap();
    restored.restart();
    let c = connect(&restored, None).await;
    assert_eq!(c.get_data("/kept").await.unwrap().0, b"v");
    // The restored server's status reports reach the member at NEW.
    let deadline = Instant::now() + DEADLINE;
    let mut links = Vec::new();
    loop {
        if let Ok((s, _)) = new_member.accept() {
            s.set_nonblocking(true).unwrap();
            links.push(s);
        }
        let mut buf = [0u8; 256];
        if links
            .iter_mut()
            .any(|s| matches!(s.read(&mut buf), Ok(1..)))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restored server never spoke to member 3 at {new_addr} (its log:\n{})",
            restored.log()
        );
        tokio::time::sleep(POLL).await;
    }
    // The restore said which of the backup's members it left behind.
    let said = text(&out.stdout);
    assert!(said.contains(&format!("3={old_addr}")), "{said}");
}

fn warden_restore(file: &Path, data: &Path) -> std::process::Output {
    Command::new(warden_testkit::binary("warden"))
        .arg("restore")
        .arg("--snapshot")
        .arg(file)
        .arg("--data-dir")
        .arg(data)
        .args(["--id", "1"])
        .output()
        .unwrap()
}
