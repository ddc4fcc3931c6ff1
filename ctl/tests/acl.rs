//! `wardenctl --auth`, `getacl`, `setacl`, `create --acl` and `digest`
//! against a real server with a super user and a user list.

// Shared helpers; this file starts its servers itself, with flags.
#[allow(dead_code)]
mod common;

use std::process::{Command, Output, Stdio};

use common::{ok_stdout, wardenctl};
use warden_protocol::auth::digest_id;
use warden_testkit::{Server, ServerOptions};

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

fn assert_fails_with(out: &Output, code: i32, line: &str) {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    assert_eq!(stderr(out), format!("{line}\n"));
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
}

fn secured() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, format!("{}\n", digest_id("bob:bob-pw").unwrap())).unwrap();
    let server = Server::start_with(ServerOptions {
        extra_args: vec![
            "--super-digest".into(),
            digest_id("admin:root-pw").unwrap(),
            "--auth-users".into(),
            users.display().to_string(),
        ],
        ..Default::default()
    });
    (server, dir)
}

#[test]
fn digest_prints_what_the_server_flags_take() {
    let bob = digest_id("bob:bob-pw").unwrap();
    // No server is needed: a bogus address is never dialled.
    let out = wardenctl("127.0.0.1:1", &["digest", "bob:bob-pw"]);
    assert_eq!(ok_stdout(&out), format!("{bob}\n"));
    let out = wardenctl("127.0.0.1:1", &["digest", "bob:bob-pw", "--json"]);
    assert_eq!(ok_stdout(&out), format!("{{\"digest\":\"{bob}\"}}\n"));
    let out = wardenctl("127.0.0.1:1", &["digest", "no-colon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: BadArguments:"), "{out:?}");
    // `warden digest` prints the same.
    let out = Command::new(warden_testkit::binary("warden"))
        .args(["digest", "bob:bob-pw"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ok_stdout(&out), format!("{bob}\n"));
}

#[test]
fn auth_getacl_setacl_and_create_acl() {
    let (server, _dir) = secured();
    let addr = server.addr();
    let bob = digest_id("bob:bob-pw").unwrap();
    let acl = format!("digest:{bob}:cdrwa,world:anyone:r");
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["create", "--acl", &acl, "/cfg", "v0"])),
        "/cfg\n"
    );

    // Anonymous: may read, not write; the digest hash is hidden from
    // readers without ADMIN.
    assert_eq!(ok_stdout(&wardenctl(addr, &["get", "/cfg"])), "v0\n");
    assert_eq!(
        ok_stdout(&wardenctl(addr, &["getacl", "/cfg"])),
        "digest:bob:x:cdrwa\nworld:anyone:r\n"
    );
    assert_fails_with(
        &wardenctl(addr, &["set", "/cfg", "v1"]),
        1,
        "error: NoAuth: /cfg: WRITE not granted to ip:127.0.0.1",
    );

    // As bob (flag, or WARDEN_AUTH).
    let as_bob = ["--auth", "bob:bob-pw"];
    assert_eq!(
        ok_stdout(&wardenctl(
            addr,
            &[&as_bob[..], &["getacl", "/cfg"]].concat()
        )),
        format!("digest:{bob}:cdrwa\nworld:anyone:r\n")
    );
    assert_eq!(
        ok_stdout(&wardenctl(
            addr,
            &[&as_bob[..], &["set", "/cfg", "v1"]].concat()
        )),
        ""
    );
    let out = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--servers", addr, "set", "/cfg", "v2"])
        .env("WARDEN_AUTH", "bob:bob-pw")
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ok_stdout(&out), "");
    assert_eq!(ok_stdout(&wardenctl(addr, &["get", "/cfg"])), "v2\n");

    // setacl: ADMIN, and the aversion guard.
    assert_fails_with(
        &wardenctl(addr, &["setacl", "/cfg", "world:anyone:cdrwa"]),
        1,
        "error: NoAuth: /cfg: ADMIN not granted to ip:127.0.0.1",
    );
    assert_fails_with(
        &wardenctl(
            addr,
            &[
                &as_bob[..],
                &["setacl", "--version", "5", "/cfg", "world:anyone:r"],
            ]
            .concat(),
        ),
        1,
        "error: BadVersion: /cfg",
    );
    let json = ok_stdout(&wardenctl(
        addr,
        &[
            &as_bob[..],
            &[
                "setacl",
                "--version",
                "0",
                "/cfg",
                "auth::cdrwa,world:anyone:r",
                "--json",
            ],
        ]
        .concat(),
    ));
    assert!(json.contains("\"aversion\":1"), "{json}");
    let json = ok_stdout(&wardenctl(
        addr,
        &[&as_bob[..], &["getacl", "/cfg", "--json"]].concat(),
    ));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["path"], "/cfg");
    assert_eq!(v["acl"][0]["scheme"], "digest");
    assert_eq!(v["acl"][0]["id"], bob);
    assert_eq!(v["acl"][0]["perms"], "cdrwa");
    assert_eq!(v["acl"][1]["perms"], "r");
    assert_eq!(v["stat"]["aversion"], 1);

    // The super user passes everything.
    assert_eq!(
        ok_stdout(&wardenctl(
            addr,
            &[
                "--auth",
                "admin:root-pw",
                "setacl",
                "/cfg",
                "world:anyone:cdrwa"
            ]
        )),
        ""
    );
    assert_eq!(ok_stdout(&wardenctl(addr, &["set", "/cfg", "open"])), "");

    // Bad credentials and bad ACL text.
    assert_fails_with(
        &wardenctl(addr, &["--auth", "bob:wrong", "get", "/cfg"]),
        1,
        "error: AuthFailed: wrong password for user \"bob\"",
    );
    let out = wardenctl(addr, &["setacl", "/cfg", "world:anyone"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).starts_with("error: InvalidAcl:"), "{out:?}");
    assert_fails_with(
        &wardenctl(addr, &["create", "--acl", "world:nobody:r", "/bad"]),
        1,
        "error: InvalidAcl: /bad: ACL entry world:nobody: the world scheme's only id is anyone",
    );
}
