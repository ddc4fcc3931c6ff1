//! `wardenctl getacl`, `setacl` and `digest`, and the ACL text they
//! share with `create --acl`: zkCli's `scheme:id:perms[,...]` with
//! permission letters from `cdrwa`.

use std::io::{self, Write};

use serde::Serialize;
use warden_client::{Acl, Client, ErrorCode};
use warden_protocol::auth::{format_acl_entry, parse_acl, perms_letters};

use crate::{Failure, NodeJson, Output, StatJson};

/// Parses an ACL argument; a malformed one is a usage error (exit 2).
pub fn parse(text: &str) -> Result<Vec<Acl>, Failure> {
    parse_acl(text).map_err(|e| Failure::Exit {
        code: 2,
        message: format!("{}: {e}", ErrorCode::InvalidAcl),
    })
}

/// `getacl PATH`: one entry per line (`scheme:id:perms`, the form setacl
/// takes), or one JSON object.
pub async fn get(client: &Client, path: &str, out: &Output) -> Result<(), Failure> {
    let (acl, stat) = client.get_acl(path).await?;
    if out.json {
        let entries: Vec<AclJson> = acl.iter().map(AclJson::from).collect();
        out.json_line(&GetAclJson {
            path,
            acl: entries,
            stat: StatJson::from(&stat),
        })
    } else {
        let mut stdout = io::stdout().lock();
        for a in &acl {
            writeln!(stdout, "{}", format_acl_entry(a))?;
        }
        Ok(())
    }
}

/// `setacl PATH ACL [--version N]`.
pub async fn set(
    client: &Client,
    path: &str,
    acl: &str,
    version: Option<i32>,
    out: &Output,
) -> Result<(), Failure> {
    let acl = parse(acl)?;
    let stat = client.set_acl(path, acl, version).await?;
    out.json_only(|| NodeJson::new(path, &stat))
}

/// `digest USER:PASSWORD`: what --super-digest, --auth-users and digest
/// ACL entries take. Needs no server.
pub fn digest(credentials: &str, out: &Output) -> Result<(), Failure> {
    let id = warden_protocol::auth::digest_id(credentials).map_err(|e| Failure::Exit {
        code: 2,
        message: format!("BadArguments: {e}"),
    })?;
    out.line(&id, || DigestJson { digest: &id })
}

#[derive(Debug, Serialize)]
struct AclJson<'a> {
    scheme: &'a str,
    id: &'a str,
    perms: String,
}

impl<'a> From<&'a Acl> for AclJson<'a> {
    fn from(a: &'a Acl) -> Self {
        AclJson {
            scheme: &a.scheme,
            id: &a.id,
            perms: perms_letters(a.perms),
        }
    }
}

#[derive(Debug, Serialize)]
struct GetAclJson<'a> {
    path: &'a str,
    acl: Vec<AclJson<'a>>,
    stat: StatJson,
}

#[derive(Debug, Serialize)]
struct DigestJson<'a> {
    digest: &'a str,
}
