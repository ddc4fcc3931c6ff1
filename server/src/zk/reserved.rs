//! ZooKeeper's own subtree as ZooKeeper shows it: `/zookeeper`, with
//! `config` and `quota` under it, and `zookeeper` among the root's
//! children.
//!
//! `/zookeeper` and `/zookeeper/config` are virtual: served by this door
//! only, never stored in the tree. A read of one of them is forwarded as a
//! ClusterStatus request, so it is answered in the connection's turn, and
//! `/zookeeper/config` is computed from the members the answering server
//! knows, in ZooKeeper's dynamic-config format (what `getConfig` and
//! Curator's EnsembleTracker read). Writes to them are refused (NoAuth, as
//! ZooKeeper refuses writes to its read-only config node; NodeExists for
//! creating one of them).
//!
//! Quotas are the tree's ([`crate::tree::quota`]): everything below
//! `/zookeeper/quota` is read and written in the tree like any node, and
//! `/zookeeper/quota` itself is read from the tree, or shown as an empty
//! node until the first quota brings it there. Anything else below
//! `/zookeeper` does not exist, and is not created.
//! A watch asked with getData or exists on `/zookeeper/config` fires
//! (NodeDataChanged) once, when the membership next changes or the server
//! learns a member's ZooKeeper port (the config then gains its client
//! part); other watches on these nodes are not set.

use warden_protocol::pb::{self, request::Op, response::Result as Res, ErrorCode};

use super::jute::Writer;
use super::proto::{opcode, write_stat, zk_code, DecodeError, Reply};

pub const ROOT: &str = "/zookeeper";
pub const CONFIG: &str = "/zookeeper/config";
pub const QUOTA: &str = "/zookeeper/quota";
const QUOTA_PREFIX: &str = "/zookeeper/quota/";

/// A path in the reserved subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Root,
    Config,
    Quota,
    /// Below `/zookeeper` but none of the three: it does not exist.
    Missing,
}

pub fn node(path: &str) -> Option<Node> {
    match path {
        ROOT => Some(Node::Root),
        CONFIG => Some(Node::Config),
        QUOTA => Some(Node::Quota),
        // Quotas: the tree's.
        p if p.starts_with(QUOTA_PREFIX) => None,
        p if p.starts_with("/zookeeper/") => Some(Node::Missing),
        _ => None,
    }
}

/// Routes a decoded request: reads of the subtree become a ClusterStatus
/// request answered as the node, writes to it are refused, and
/// getChildren("/") is marked to gain `zookeeper`. Everything else passes.
pub fn route(op: Op, reply: Reply) -> Result<(Op, Reply), DecodeError> {
    let Reply::Plain(code) = reply else {
        return Ok((op, reply));
    };
    let read = match &op {
        Op::Exists(r) => Some(&r.path),
        Op::GetData(r) => Some(&r.path),
        Op::GetChildren(r) => Some(&r.path),
        Op::GetAcl(r) => Some(&r.path),
        _ => None,
    };
    if let Some(path) = read {
        if path == QUOTA {
            return Ok((op, Reply::QuotaRoot(code)));
        }
        if let Some(node) = node(path) {
            // getConfig's watch: on the config node, by getData or exists.
            let watch = match &op {
                Op::Exists(r) => r.watch,
                Op::GetData(r) => r.watch,
                _ => false,
            };
            let status = Op::ClusterStatus(pb::ClusterStatusRequest {
                watch_config: watch && node == Node::Config,
            });
            return Ok((status, Reply::Reserved { op: code, node }));
        }
        if path == "/" && matches!(op, Op::GetChildren(_)) {
            return Ok((op, Reply::RootChildren(code)));
        }
        return Ok((op, reply));
    }
    let (path, creating) = match &op {
        Op::Create(r) => (&r.path, true),
        Op::Delete(r) => (&r.path, false),
        Op::SetData(r) => (&r.path, false),
        Op::SetAcl(r) => (&r.path, false),
        _ => return Ok((op, reply)),
    };
    check_write(path, creating)?;
    Ok((op, reply))
}

/// Refuses a write to `path` (a create when `creating`) in the subtree,
/// for a request alone or an op of a multi.
pub fn check_write(path: &str, creating: bool) -> Result<(), DecodeError> {
    match node(path) {
        None => Ok(()),
        Some(n) if creating && n != Node::Missing => Err(DecodeError::Refused(
            ErrorCode::NodeExists,
            path.to_string(),
        )),
        Some(_) => Err(DecodeError::Refused(
            ErrorCode::NoAuth,
            format!("{path}: ZooKeeper's own subtree is read-only"),
        )),
    }
}

/// The answer to a read of `node` with opcode `op`, from a ClusterStatus
/// response: (ZooKeeper error code, body).
pub fn encode(op: i32, node: Node, resp: &pb::Response) -> (i32, Writer) {
    let mut w = Writer::default();
    let code = ErrorCode::try_from(resp.error).unwrap_or(ErrorCode::SystemError);
    if code != ErrorCode::Ok {
        return (zk_code(code), w);
    }
    let Some(Res::ClusterStatus(status)) = &resp.result else {
        return (zk_code(ErrorCode::SystemError), w);
    };
    let (data, children): (Vec<u8>, &[&str]) = match node {
        Node::Missing => return (zk_code(ErrorCode::NoNode), w),
        Node::Root => (Vec::new(), &["config", "quota"]),
        Node::Config => (config(status).into_bytes(), &[]),
        Node::Quota => (Vec::new(), &[]),
    };
    let stat = pb::Stat {
        data_length: data.len() as u32,
        num_children: children.len() as u32,
        ..Default::default()
    };
    match op {
        opcode::EXISTS => write_stat(&mut w, &stat),
        opcode::GET_DATA => {
            w.buffer(&data);
            write_stat(&mut w, &stat);
        }
        opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => {
            let names: Vec<String> = children.iter().map(|c| c.to_string()).collect();
            w.strings(&names);
            if op == opcode::GET_CHILDREN2 {
                write_stat(&mut w, &stat);
            }
        }
        opcode::GET_ACL => {
            let acl = match node {
                Node::Config => config_acl(),
                _ => vec![pb::Acl {
                    perms: warden_protocol::perms::ALL,
                    scheme: "world".into(),
                    id: "anyone".into(),
                }],
            };
            w.int(acl.len() as i32);
            for a in &acl {
                w.int(a.perms as i32).string(&a.scheme).string(&a.id);
            }
            write_stat(&mut w, &stat);
        }
        _ => {}
    }
    (0, w)
}

/// The answer to a read of `/zookeeper/quota` (opcode `op`) that the
/// tree answered: its own, or, while the tree has no such node yet, an
/// empty node's.
pub fn encode_quota_root(op: i32, resp: &pb::Response) -> (i32, Writer) {
    let missing = resp.error == ErrorCode::NoNode as i32
        || matches!(&resp.result, Some(Res::Stat(s)) if s.stat.is_none());
    if !missing {
        return super::proto::encode_response(&Reply::Plain(op), resp);
    }
    let empty = pb::Response {
        result: Some(Res::ClusterStatus(Default::default())),
        ..Default::default()
    };
    encode(op, Node::Quota, &empty)
}

/// The ACL of `/zookeeper/config`, ZooKeeper's: world:anyone may only
/// read it. A reconfig needs ADMIN on it, so only the super user
/// (`--super-digest`) may make one.
pub fn config_acl() -> Vec<pb::Acl> {
    vec![pb::Acl {
        perms: warden_protocol::perms::READ,
        scheme: "world".into(),
        id: "anyone".into(),
    }]
}

/// The `version=` of [`config`] for this membership: what a reconfig's
/// curConfigId is checked against.
pub fn config_version(status: &pb::ClusterStatusResponse) -> u64 {
    fingerprint(&member_lines(status))
}

/// The membership in ZooKeeper's dynamic-config format: per member
/// `server.ID=PEERHOST:PEERPORT:0:ROLE;ZKHOST:ZKPORT`, then `version=HEX`.
/// Voters are participants, learners observers; the client part is left
/// out until the member has reported its ZooKeeper port. Warden's Raft
/// replicates and elects on one peer port, and ZooKeeper's parser (which
/// Curator's EnsembleTracker runs on this text) refuses a line whose
/// quorum and election ports are equal, so the election port is given as
/// 0: "none of its own". ZooKeeper's version is the
/// zxid of the last reconfig; here it is a fingerprint (FNV-1a) of the
/// member lines, so it changes exactly when they do (membership, or a
/// ZooKeeper port learned) and every member that knows every port computes
/// the same one.
pub fn config(status: &pb::ClusterStatusResponse) -> String {
    let mut out = member_lines(status);
    let version = fingerprint(&out);
    out.push_str(&format!("version={version:x}"));
    out
}

/// One `server.` line per member, sorted by id.
fn member_lines(status: &pb::ClusterStatusResponse) -> String {
    let mut members: Vec<&pb::MemberStatus> = status.members.iter().collect();
    members.sort_by_key(|m| m.id);
    let mut out = String::new();
    for m in members {
        let role = if m.voter { "participant" } else { "observer" };
        out.push_str(&format!("server.{}={}:0:{role}", m.id, m.addr));
        if !m.zk_addr.is_empty() {
            out.push_str(&format!(";{}", m.zk_addr));
        }
        out.push('\n');
    }
    out
}

/// FNV-1a of the member lines. ZooKeeper reads the version as a signed
/// long in hex (a zxid), and refuses the whole config if it does not fit:
/// 63 bits.
fn fingerprint(lines: &str) -> u64 {
    let version = lines.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    version & i64::MAX as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, voter: bool, zk: &str) -> pb::MemberStatus {
        pb::MemberStatus {
            id,
            addr: format!("127.0.0.1:710{id}"),
            zk_addr: zk.to_string(),
            voter,
            ..Default::default()
        }
    }

    #[test]
    fn config_is_zookeepers_dynamic_format() {
        let status = pb::ClusterStatusResponse {
            members: vec![member(2, false, ""), member(1, true, "127.0.0.1:2181")],
            ..Default::default()
        };
        let text = config(&status);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..2],
            [
                "server.1=127.0.0.1:7101:0:participant;127.0.0.1:2181",
                "server.2=127.0.0.1:7102:0:observer",
            ]
        );
        let version = lines[2].strip_prefix("version=").unwrap();
        assert!(i64::from_str_radix(version, 16).is_ok(), "{version}");
        // Another membership, another version.
        let fewer = pb::ClusterStatusResponse {
            members: vec![member(1, true, "127.0.0.1:2181")],
            ..Default::default()
        };
        assert_ne!(config(&fewer).lines().last(), Some(lines[2]));
    }

    /// ZooKeeper's parser (Curator's EnsembleTracker runs it) reads the
    /// version with `Long.parseLong(v, 16)`: it must fit a signed long for
    /// every membership, not only for half of them.
    #[test]
    fn the_config_version_is_a_positive_long() {
        for n in 1..=64u64 {
            let status = pb::ClusterStatusResponse {
                members: (1..=n % 7 + 1)
                    .map(|id| member(id * n, id % 2 == 0, "127.0.0.1:2181"))
                    .collect(),
                ..Default::default()
            };
            let text = config(&status);
            let version = text
                .lines()
                .last()
                .unwrap()
                .strip_prefix("version=")
                .unwrap();
            assert!(i64::from_str_radix(version, 16).is_ok(), "{version}");
        }
    }

    #[test]
    fn writes_to_the_subtree_are_refused_and_reads_rerouted() {
        let set = Op::SetData(pb::SetDataRequest {
            path: CONFIG.into(),
            ..Default::default()
        });
        assert!(matches!(
            route(set, Reply::Plain(opcode::SET_DATA)),
            Err(DecodeError::Refused(ErrorCode::NoAuth, _))
        ));
        let create = Op::Create(pb::CreateRequest {
            path: QUOTA.into(),
            ..Default::default()
        });
        assert!(matches!(
            route(create, Reply::Plain(opcode::CREATE)),
            Err(DecodeError::Refused(ErrorCode::NodeExists, _))
        ));
        // zkCli's setquota creates nodes below /zookeeper/quota: the
        // tree's, as are reads there and of /zookeeper/quota itself.
        let quota = Op::Create(pb::CreateRequest {
            path: "/zookeeper/quota/app".into(),
            ..Default::default()
        });
        let (op, reply) = route(quota, Reply::Plain(opcode::CREATE)).unwrap();
        assert!(matches!(op, Op::Create(_)));
        assert_eq!(reply, Reply::Plain(opcode::CREATE));
        let children = Op::GetChildren(pb::GetChildrenRequest {
            path: QUOTA.into(),
            ..Default::default()
        });
        let (op, reply) = route(children, Reply::Plain(opcode::GET_CHILDREN)).unwrap();
        assert!(matches!(op, Op::GetChildren(_)));
        assert_eq!(reply, Reply::QuotaRoot(opcode::GET_CHILDREN));
        let elsewhere = Op::Create(pb::CreateRequest {
            path: "/zookeeper/other".into(),
            ..Default::default()
        });
        assert!(matches!(
            route(elsewhere, Reply::Plain(opcode::CREATE)),
            Err(DecodeError::Refused(ErrorCode::NoAuth, _))
        ));
        let get = Op::GetData(pb::GetDataRequest {
            path: CONFIG.into(),
            ..Default::default()
        });
        let (op, reply) = route(get, Reply::Plain(opcode::GET_DATA)).unwrap();
        assert!(matches!(op, Op::ClusterStatus(_)));
        assert_eq!(
            reply,
            Reply::Reserved {
                op: opcode::GET_DATA,
                node: Node::Config
            }
        );
        // A look-alike outside the subtree is the tree's.
        let other = Op::GetData(pb::GetDataRequest {
            path: "/zookeeperish".into(),
            ..Default::default()
        });
        let (op, _) = route(other, Reply::Plain(opcode::GET_DATA)).unwrap();
        assert!(matches!(op, Op::GetData(_)));
    }
}
