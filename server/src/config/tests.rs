//! The flags' parsing and checks (`warden serve`'s own tests).

use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn parse(args: &[&str]) -> Result<Config, ConfigError> {
    let mut all = vec!["warden"];
    all.extend_from_slice(args);
    Cli::parse_from(all).serve.validate()
}

#[test]
fn defaults_make_a_single_node() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.id, 1);
    assert_eq!(
        c.peers,
        vec![Peer {
            id: 1,
            addr: "127.0.0.1:7100".into()
        }]
    );
    assert_eq!(c.tick, Duration::from_millis(100));
    assert_eq!(c.limits, Limits::default());
}

#[test]
fn limits_are_parsed_and_checked() {
    let c = parse(&[
        "--max-connections-per-ip",
        "5000",
        "--max-request-bytes",
        "4096",
    ])
    .unwrap();
    assert_eq!(c.limits.connections_per_ip, 5000);
    assert_eq!(c.limits.request_bytes, 4096);
    let err = parse(&["--max-watches-per-session", "0"]).unwrap_err();
    assert!(
        err.to_string().contains("--max-watches-per-session"),
        "{err}"
    );
    assert!(parse(&["--max-request-bytes", "100000000"]).is_err());
    assert!(parse(&["--max-outstanding-requests", "100000"]).is_err());
}

#[test]
fn peers_are_parsed_and_checked() {
    let c = parse(&["--id", "2", "--peers", "1=a:1, 2=b:2,3=c:3"]).unwrap();
    assert_eq!(c.peers.len(), 3);
    assert!(parse(&["--peers", "2=b:2"])
        .unwrap_err()
        .to_string()
        .contains("id 1 is not listed"));
    assert!(parse(&["--peers", "x=b:2"]).is_err());
    assert!(parse(&["--peers", "1=a:1,1=b:2"]).is_err());
    assert!(parse(&["--id", "0"]).is_err());
    assert_eq!(parse(&["--zk-listen", "off"]).unwrap().zk_listen, None);
    assert!(parse(&["--zk-listen", "nope"]).is_err());
    assert_eq!(parse(&[]).unwrap().grpc_listen, None);
    assert_eq!(
        parse(&["--grpc-listen", "127.0.0.1:7300"])
            .unwrap()
            .grpc_listen,
        Some("127.0.0.1:7300".parse().unwrap())
    );
    assert!(parse(&["--grpc-listen", "nope"])
        .unwrap_err()
        .to_string()
        .contains("--grpc-listen"));
    assert!(parse(&["--election-ticks", "3", "--heartbeat-ticks", "3"]).is_err());
    assert!(parse(&["--super-digest", "nocolon"]).is_err());
    assert!(parse(&["--super-digest", "admin:aGFzaA=="]).is_ok());
    assert!(parse(&["--auth-users", "/nonexistent/users"]).is_err());
    let err = parse(&["--zk-sasl-jaas", "/nonexistent/jaas.conf"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--zk-sasl-jaas /nonexistent/jaas.conf:"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let jaas = dir.path().join("jaas.conf");
    std::fs::write(&jaas, "Server { m required user_bob=\"secret\"; };").unwrap();
    let c = parse(&["--zk-sasl-jaas", jaas.to_str().unwrap()]).unwrap();
    assert_eq!(c.zk_sasl.unwrap().password("bob"), Some("secret"));
    assert!(parse(&[]).unwrap().zk_sasl.is_none());
    let c = parse(&["--http-token", "t1=bob:pw", "--http-token", "t2=al:x:y"]).unwrap();
    assert_eq!(c.http_tokens[1], ("t2".to_string(), "al:x:y".to_string()));
    assert!(parse(&["--http-token", "t1"]).is_err());
    assert!(parse(&["--http-token", "t1=bob"]).is_err());
    assert!(parse(&["--http-token", "t=a:b", "--http-token", "t=c:d"]).is_err());
    assert_eq!(
        parse(&["--http-lock-acl", "digest:svc:aA==:cdrwa,world:anyone:r"])
            .unwrap()
            .http_lock_acl
            .len(),
        2
    );
    assert!(parse(&["--http-lock-acl", "bogus"]).is_err());
    assert!(parse(&[
        "--min-session-timeout-ms",
        "5",
        "--max-session-timeout-ms",
        "4"
    ])
    .is_err());
}

#[test]
fn force_new_cluster_and_join_are_refused_together() {
    assert!(parse(&["--force-new-cluster"]).unwrap().force_new_cluster);
    let e = parse(&["--force-new-cluster", "--join"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot go together"), "{e}");
}

#[test]
fn every_flag_has_its_environment_variable() {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    let mut checked = 0;
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        let want = format!("WARDEN_{}", long.to_uppercase().replace('-', "_"));
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(want.as_str()),
            "--{long}"
        );
        checked += 1;
    }
    assert!(checked > 30, "{checked}");
}

#[test]
fn http_tokens_come_from_a_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, "# tokens\n\nt2=carol:pw\n  t3=dan:a:b  \n").unwrap();
    let file = path.to_str().unwrap();
    let c = parse(&["--http-token", "t1=bob:pw", "--http-token-file", file]).unwrap();
    let tokens: Vec<_> = c.http_tokens.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tokens, ["t1", "t2", "t3"]);
    assert_eq!(c.http_tokens[2].1, "dan:a:b");
    // A token in both places is refused like one given twice.
    assert!(parse(&["--http-token", "t2=x:y", "--http-token-file", file]).is_err());
    // A bad line is named by its number, and the secret is not shown.
    std::fs::write(&path, "t1=bob:pw\nsecret-without-user\n").unwrap();
    let e = parse(&["--http-token-file", file]).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains(file), "{e}");
    assert!(!e.contains("secret-without-user"), "{e}");
    let e = parse(&["--http-token-file", "/nonexistent/tokens"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--http-token-file /nonexistent/tokens"), "{e}");
}

#[test]
fn tls_flags_must_make_sense_together() {
    let err = |args: &[&str]| parse(args).unwrap_err().to_string();
    assert!(err(&["--tls-cert", "c.pem"]).contains("--tls-cert needs --tls-key"));
    assert!(err(&["--tls-key", "k.pem"]).contains("--tls-key needs --tls-cert"));
    assert!(err(&["--tls-ca", "ca.pem"]).contains("--tls-ca needs --tls-cert"));
    assert!(err(&["--tls-client-auth", "required"]).contains("needs --tls-cert"));
    assert!(err(&[
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--tls-client-auth",
        "required"
    ])
    .contains("needs --tls-ca"));
    // A file that is not there is named, with its flag.
    let e = err(&["--tls-cert", "/nonexistent/c.pem", "--tls-key", "k.pem"]);
    assert!(e.contains("--tls-cert /nonexistent/c.pem"), "{e}");
    assert!(parse(&[]).unwrap().tls.is_none());
}

#[test]
fn a_tls_cluster_needs_a_ca() {
    use crate::tls::certs::{Ca, Role, LOCAL_SANS};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::open_or_create(dir.path()).unwrap();
    let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
    let node = ca.issue("n1", Role::Node, &sans).unwrap();
    let (cert, key) = (node.cert.to_str().unwrap(), node.key.to_str().unwrap());
    let ca_path = ca.cert_path();
    let ca_path = ca_path.to_str().unwrap();
    let cluster = ["--peers", "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3"];
    let mut args = vec!["--tls-cert", cert, "--tls-key", key];
    // One node: TLS for clients without a CA is fine.
    assert!(parse(&args).unwrap().tls.is_some());
    args.extend(cluster);
    let e = parse(&args).unwrap_err().to_string();
    assert!(
        e.contains("--tls-ca (or --peer-tls-ca) is required for a cluster with TLS"),
        "{e}"
    );
    args.extend(["--tls-ca", ca_path]);
    let tls = parse(&args).unwrap().tls.unwrap();
    assert!(tls.peers.is_some());
    // A key that is not the certificate's.
    let other = ca.issue("n2", Role::Node, &sans).unwrap();
    let e = parse(&[
        "--tls-cert",
        cert,
        "--tls-key",
        other.key.to_str().unwrap(),
        "--tls-ca",
        ca_path,
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("TLS set-up"), "{e}");
}

#[test]
fn a_node_certificate_must_speak_for_its_own_id() {
    use crate::tls::certs::{Ca, Role, LOCAL_SANS};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::open_or_create(dir.path()).unwrap();
    let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
    let ca_path = ca.cert_path();
    let ca_path = ca_path.to_str().unwrap().to_string();
    let cluster = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3";
    let args = |issued: &crate::tls::certs::Issued, id: &str, peers: Option<&str>| {
        let mut args = vec![
            "--id".to_string(),
            id.to_string(),
            "--tls-cert".to_string(),
            issued.cert.to_str().unwrap().to_string(),
            "--tls-key".to_string(),
            issued.key.to_str().unwrap().to_string(),
            "--tls-ca".to_string(),
            ca_path.clone(),
        ];
        if let Some(p) = peers {
            args.extend(["--peers".to_string(), p.to_string()]);
        }
        args
    };
    let check = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        parse(&args).map(|_| ()).map_err(|e| e.to_string())
    };
    let n2 = ca.issue("n2", Role::Node, &sans).unwrap();
    check(args(&n2, "2", Some(cluster))).unwrap();
    let e = check(args(&n2, "1", Some(cluster))).unwrap_err();
    assert!(
        e.contains("speaks for member 2") && e.contains("--id 1"),
        "{e}"
    );
    // Alone, too: the certificate is not this server's.
    assert!(check(args(&n2, "1", None)).is_err());
    // A certificate naming no member: a single server's, not a peer's.
    for unnamed in [
        ca.issue("node", Role::Node, &sans).unwrap(),
        ca.issue("alice", Role::Client, &[]).unwrap(),
    ] {
        check(args(&unnamed, "1", None)).unwrap();
        let e = check(args(&unnamed, "1", Some(cluster))).unwrap_err();
        assert!(e.contains("names no member id"), "{e}");
    }
}
