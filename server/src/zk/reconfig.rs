//! ZooKeeper's reconfig request (opcode 16) read into the native
//! [`pb::ReconfigRequest`]: the server lines of ZooKeeper's dynamic
//! config, `server.ID=HOST:PEERPORT[:ELECTIONPORT][:ROLE][;[CLIENTHOST:]CLIENTPORT]`,
//! become members to add (`observer` a raft learner, `participant` or no
//! role a voter), and the leaving ids members to remove.
//!
//! Only the form is checked here; whether the changes make sense for the
//! membership (a leaving id that is no member, an address that differs
//! from a member's) is the core's ([`crate::core`]), which knows it. A
//! line that does not parse refuses the whole request (BadArguments,
//! ZooKeeper's code) before anything changes.
//!
//! Warden's raft elects on the peer port, so an election port is
//! accepted and ignored; so is the client part: a member's ZooKeeper
//! address is what the member itself reports.

use warden_protocol::pb::{self, ErrorCode};

use super::jute::Reader;
use super::proto::DecodeError;

/// Decodes a ReconfigRequest: joiningServers, leavingServers, newMembers
/// (each a comma-separated list, or null), curConfigId (-1: any).
pub fn decode(r: &mut Reader<'_>) -> Result<pb::ReconfigRequest, DecodeError> {
    let joining = r.string_or_null("joiningServers")?;
    let leaving = r.string_or_null("leavingServers")?;
    let new_members = r.string_or_null("newMembers")?;
    let cur_config_id = r.long("curConfigId")?;
    request(
        joining.as_deref(),
        leaving.as_deref(),
        new_members.as_deref(),
        cur_config_id,
    )
    .map_err(|why| DecodeError::Refused(ErrorCode::BadArguments, format!("reconfig: {why}")))
}

/// The native request for ZooKeeper's four fields; Err names what is
/// wrong. With `new_members` (ZooKeeper's non-incremental form: the whole
/// membership, lines separated by commas or newlines) the other two are
/// ignored, as ZooKeeper does.
pub fn request(
    joining: Option<&str>,
    leaving: Option<&str>,
    new_members: Option<&str>,
    cur_config_id: i64,
) -> Result<pb::ReconfigRequest, String> {
    let config_version = match cur_config_id {
        -1 => None,
        v if v < 0 => return Err(format!("curConfigId {v} is neither -1 nor a version")),
        v => Some(v as u64),
    };
    if let Some(members) = new_members {
        let mut joining = Vec::new();
        for line in members.split([',', '\n']).map(str::trim) {
            // ZooKeeper's dynamic config files carry a version line.
            if line.is_empty() || line.starts_with("version=") {
                continue;
            }
            joining.push(server_line(line)?);
        }
        if joining.is_empty() {
            return Err("newMembers names no server".to_string());
        }
        return Ok(pb::ReconfigRequest {
            joining,
            leaving: Vec::new(),
            whole: true,
            config_version,
            force: false,
        });
    }
    let joining = items(joining)
        .map(server_line)
        .collect::<Result<Vec<_>, _>>()?;
    let leaving = items(leaving)
        .map(|id| match id.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("leaving server {id:?} is not a server id")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(pb::ReconfigRequest {
        joining,
        leaving,
        whole: false,
        config_version,
        force: false,
    })
}

/// The comma-separated items of a list, trimmed, empty ones skipped.
fn items(list: Option<&str>) -> impl Iterator<Item = &str> {
    list.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// One `server.ID=HOST:PEERPORT[:ELECTIONPORT][:ROLE][;CLIENT]` line.
fn server_line(line: &str) -> Result<pb::AddMemberRequest, String> {
    let bad = |why: &str| format!("server line {line:?}: {why}");
    let (key, spec) = line
        .split_once('=')
        .ok_or_else(|| bad("expected server.ID=HOST:PORT..."))?;
    let id = key
        .trim()
        .strip_prefix("server.")
        .and_then(|id| id.parse::<u64>().ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| bad("the key must be server.ID with a positive ID"))?;
    let (server, client) = match spec.trim().split_once(';') {
        Some((s, c)) => (s, Some(c)),
        None => (spec.trim(), None),
    };
    let mut parts: Vec<&str> = server.split(':').collect();
    let learner = match parts.last().copied() {
        Some("observer") => {
            parts.pop();
            true
        }
        Some("participant") => {
            parts.pop();
            false
        }
        _ => false,
    };
    let (host, peer_port) = match parts[..] {
        [host, peer] | [host, peer, _] => (host, peer),
        _ => {
            return Err(bad(
                "expected HOST:PEERPORT[:ELECTIONPORT][:participant|:observer]",
            ))
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    // The election port may be 0, as Warden's own config shows it.
    for (i, port) in parts[1..].iter().enumerate() {
        if !port.parse::<u16>().is_ok_and(|p| p > 0 || i == 1) {
            return Err(bad(&format!("{port:?} is not a port")));
        }
    }
    if let Some(client) = client {
        let port = client.rsplit(':').next().unwrap_or_default();
        if !port.trim().parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(bad(&format!("client part {client:?} has no port")));
        }
    }
    Ok(pb::AddMemberRequest {
        id,
        addr: format!("{host}:{peer_port}"),
        learner,
        force: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(id: u64, addr: &str, learner: bool) -> pb::AddMemberRequest {
        pb::AddMemberRequest {
            id,
            addr: addr.to_string(),
            learner,
            force: false,
        }
    }

    #[test]
    fn server_lines_in_zookeepers_forms() {
        let r = request(
            Some("server.4=127.0.0.1:7104:7204:observer;127.0.0.1:2184, server.5=h:7105;2185,server.6=h:7106:participant"),
            Some("2, 3"),
            None,
            -1,
        )
        .unwrap();
        assert_eq!(
            r.joining,
            [
                add(4, "127.0.0.1:7104", true),
                add(5, "h:7105", false),
                add(6, "h:7106", false)
            ]
        );
        assert_eq!(r.leaving, [2, 3]);
        assert!(!r.whole);
        assert_eq!(r.config_version, None);
    }

    #[test]
    fn new_members_is_the_whole_membership() {
        let r = request(
            Some("server.9=x:1"),
            Some("7"),
            Some("server.1=a:7101:7201:participant;2181\nserver.2=b:7102:0:observer,version=1f"),
            0x1f,
        )
        .unwrap();
        assert!(r.whole);
        assert_eq!(r.joining, [add(1, "a:7101", false), add(2, "b:7102", true)]);
        assert!(r.leaving.is_empty());
        assert_eq!(r.config_version, Some(0x1f));
    }

    #[test]
    fn bad_lines_are_refused_naming_what_is_wrong() {
        let bad = |j: Option<&str>, l: Option<&str>, m: Option<&str>, v: i64| {
            request(j, l, m, v).unwrap_err()
        };
        assert!(bad(Some("server.4"), None, None, -1).contains("server.ID="));
        assert!(bad(Some("srv.4=h:1"), None, None, -1).contains("server.ID"));
        assert!(bad(Some("server.0=h:1"), None, None, -1).contains("positive"));
        assert!(bad(Some("server.4=h"), None, None, -1).contains("HOST:PEERPORT"));
        assert!(bad(Some("server.4=h:x"), None, None, -1).contains("\"x\" is not a port"));
        assert!(bad(Some("server.4=h:1:2:3:4"), None, None, -1).contains("HOST:PEERPORT"));
        assert!(bad(Some("server.4=:1"), None, None, -1).contains("no host"));
        assert!(bad(Some("server.4=h:1;h:"), None, None, -1).contains("client part"));
        assert!(bad(None, Some("2,x"), None, -1).contains("\"x\" is not a server id"));
        assert!(bad(None, None, Some(" , "), -1).contains("no server"));
        assert!(bad(None, None, None, -7).contains("curConfigId"));
    }
}
