//! ZooKeeper's client records (`zookeeper.jute`), mapped onto Warden's
//! wire types: a request decodes into the same `pb::request::Op` the native
//! door produces, and a `pb::Response` encodes back into ZooKeeper's reply
//! record for the request's opcode. No semantics live here: the rules are
//! the pipeline's and the tree's.

use warden_protocol::pb::{self, request::Op, response::Result as Res, ErrorCode};

use super::jute::{JuteError, Reader, Writer};

/// ZooKeeper opcodes (`ZooDefs.OpCode`).
pub mod opcode {
    pub const NOTIFICATION: i32 = 0;
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const RECONFIG: i32 = 16;
    pub const CHECK_WATCHES: i32 = 17;
    pub const MULTI_READ: i32 = 22;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const CREATE_TTL: i32 = 21;
    pub const AUTH: i32 = 100;
    /// A SASL token ([`crate::zk::sasl`]).
    pub const SASL: i32 = 102;
    pub const SET_WATCHES: i32 = 101;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const WHO_AM_I: i32 = 107;
    pub const CLOSE_SESSION: i32 = -11;
    pub const ERROR: i32 = -1;
}

/// Special xids.
pub const XID_NOTIFICATION: i32 = -1;
pub const XID_PING: i32 = -2;
pub const XID_AUTH: i32 = -4;
pub const XID_SET_WATCHES: i32 = -8;

/// ZooKeeper's `KeeperState.SyncConnected`, the state of every watch event
/// delivered on a live connection.
pub const STATE_SYNC_CONNECTED: i32 = 3;

/// ZooKeeper's numeric code for one of ours.
pub fn zk_code(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::Ok => 0,
        ErrorCode::SystemError => -1,
        ErrorCode::RuntimeInconsistency => -2,
        ErrorCode::ConnectionLoss | ErrorCode::NotReady | ErrorCode::ServerBehind => -4,
        ErrorCode::MarshallingError => -5,
        ErrorCode::Unimplemented => -6,
        ErrorCode::OperationTimeout => -7,
        ErrorCode::BadArguments | ErrorCode::InvalidPath | ErrorCode::DataTooLarge => -8,
        ErrorCode::NoNode => -101,
        ErrorCode::NoAuth => -102,
        ErrorCode::BadVersion => -103,
        ErrorCode::NoChildrenForEphemerals => -108,
        ErrorCode::NodeExists => -110,
        ErrorCode::NotEmpty => -111,
        ErrorCode::SessionExpired => -112,
        ErrorCode::InvalidAcl => -114,
        ErrorCode::AuthFailed => -115,
        ErrorCode::SessionMoved => -118,
        ErrorCode::NoWatcher => -121,
        ErrorCode::Throttled => -127,
        // ZooKeeper's QuotaExceeded: "a configured limit was exceeded",
        // which kazoo and the Java client both know.
        ErrorCode::LimitExceeded => -125,
        ErrorCode::NotReadOnly => -119,
    }
}

/// How to encode the answer to a request: its opcode, and for a multi the
/// opcode of each op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Plain(i32),
    /// A read of ZooKeeper's own subtree, forwarded as ClusterStatus and
    /// answered as the node ([`super::reserved`]).
    Reserved {
        op: i32,
        node: super::reserved::Node,
    },
    /// getChildren("/"): the tree's children, and `zookeeper`.
    RootChildren(i32),
    /// reconfig: answered as getData of `/zookeeper/config` after it.
    Reconfig,
    /// A read of `/zookeeper/quota`: the tree's node, or an empty one.
    QuotaRoot(i32),
    Multi(Vec<i32>),
    MultiRead(Vec<i32>),
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed record: {0}")]
    Jute(#[from] JuteError),
    #[error("opcode {0} is not supported")]
    Unsupported(i32),
    #[error("{0}")]
    Bad(String),
    /// Well-formed, but refused before it reaches the core (a write to
    /// ZooKeeper's own subtree).
    #[error("{1}")]
    Refused(ErrorCode, String),
}

/// ZooKeeper's ConnectRequest, and its readOnly flag (the client accepts
/// a read-only session: canBeReadOnly).
pub fn decode_connect(body: &[u8]) -> Result<(pb::ConnectRequest, bool), DecodeError> {
    let mut r = Reader::new(body);
    let _protocol_version = r.int("protocolVersion")?;
    let last_zxid_seen = r.long("lastZxidSeen")?;
    let timeout_ms = r.int("timeOut")?;
    let session_id = r.long("sessionId")?;
    let password = r.buffer("passwd")?;
    // Newer clients append a read-only flag; older ones do not.
    let read_only = r.remaining() > 0 && r.boolean("readOnly")?;
    let request = pb::ConnectRequest {
        protocol_version: warden_protocol::PROTOCOL_VERSION,
        session_id: session_id as u64,
        password,
        timeout_ms: timeout_ms.max(0) as u32,
        last_zxid_seen: last_zxid_seen.max(0) as u64,
    };
    Ok((request, read_only))
}

/// ZooKeeper's ConnectResponse (readOnly for a read-only session). A
/// refused session is answered the way ZooKeeper does it: timeout 0,
/// session 0, which clients read as expired.
pub fn encode_connect(resp: &pb::ConnectResponse) -> Writer {
    let mut w = Writer::default();
    let ok = resp.error == ErrorCode::Ok as i32;
    w.int(0)
        .int(if ok { resp.timeout_ms as i32 } else { 0 })
        .long(if ok { resp.session_id as i64 } else { 0 })
        .buffer(if ok { &resp.password } else { &[0u8; 16] })
        .boolean(ok && resp.read_only);
    w
}

fn acl_list(r: &mut Reader<'_>) -> Result<Vec<pb::Acl>, DecodeError> {
    let n = r.vec_len("acl", 12)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let perms = r.int("perms")?;
        let scheme = r.string("scheme")?;
        let id = r.string("id")?;
        out.push(pb::Acl {
            perms: perms as u32,
            scheme,
            id,
        });
    }
    Ok(out)
}

fn version(v: i32) -> Option<i32> {
    // -1 is ZooKeeper's "any version".
    (v != -1).then_some(v)
}

fn create(r: &mut Reader<'_>, with_ttl: bool) -> Result<pb::CreateRequest, DecodeError> {
    let path = r.string("path")?;
    let data = r.buffer_or_null("data")?;
    let acl = acl_list(r)?;
    let flags = r.int("flags")?;
    let ttl = if with_ttl { r.long("ttl")? } else { 0 };
    let (ephemeral, sequential, container, ttl_mode) = match flags {
        0 => (false, false, false, false),
        1 => (true, false, false, false),
        2 => (false, true, false, false),
        3 => (true, true, false, false),
        4 => (false, false, true, false),
        5 => (false, false, false, true),
        6 => (false, true, false, true),
        other => {
            return Err(DecodeError::Bad(format!(
                "{path}: unknown create mode {other}"
            )))
        }
    };
    if ttl_mode != with_ttl || (with_ttl && ttl <= 0) {
        return Err(DecodeError::Bad(format!(
            "{path}: TTL modes need createTTL with a positive ttl"
        )));
    }
    Ok(pb::CreateRequest {
        path,
        data_null: data.is_none(),
        data: data.unwrap_or_default(),
        acl,
        ephemeral,
        sequential,
        container,
        ttl_ms: ttl.max(0) as u64,
    })
}

/// SetDataRequest; null data stays null.
fn set_data(r: &mut Reader<'_>) -> Result<pb::SetDataRequest, DecodeError> {
    let path = r.string("path")?;
    let data = r.buffer_or_null("data")?;
    Ok(pb::SetDataRequest {
        path,
        data_null: data.is_none(),
        data: data.unwrap_or_default(),
        version: version(r.int("version")?),
        ttl_ms: 0,
    })
}

fn path_watch(r: &mut Reader<'_>) -> Result<(String, bool), DecodeError> {
    Ok((r.string("path")?, r.boolean("watch")?))
}

/// Decodes the body of a request with opcode `op` into a native op.
pub fn decode_request(op: i32, body: &[u8]) -> Result<(Op, Reply), DecodeError> {
    let mut r = Reader::new(body);
    let decoded = match op {
        opcode::CREATE | opcode::CREATE2 | opcode::CREATE_CONTAINER => {
            Op::Create(create(&mut r, false)?)
        }
        opcode::CREATE_TTL => Op::Create(create(&mut r, true)?),
        opcode::DELETE => Op::Delete(pb::DeleteRequest {
            path: r.string("path")?,
            version: version(r.int("version")?),
        }),
        opcode::EXISTS => {
            let (path, watch) = path_watch(&mut r)?;
            Op::Exists(pb::ExistsRequest {
                path,
                watch,
                linearizable: false,
            })
        }
        opcode::GET_DATA => {
            let (path, watch) = path_watch(&mut r)?;
            Op::GetData(pb::GetDataRequest {
                path,
                watch,
                linearizable: false,
            })
        }
        opcode::SET_DATA => Op::SetData(set_data(&mut r)?),
        opcode::GET_ACL => Op::GetAcl(pb::GetAclRequest {
            path: r.string("path")?,
        }),
        opcode::SET_ACL => Op::SetAcl(pb::SetAclRequest {
            path: r.string("path")?,
            acl: acl_list(&mut r)?,
            version: version(r.int("version")?),
        }),
        opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => {
            let (path, watch) = path_watch(&mut r)?;
            Op::GetChildren(pb::GetChildrenRequest {
                path,
                watch,
                linearizable: false,
            })
        }
        opcode::SYNC => Op::Sync(pb::SyncRequest {
            path: r.string("path")?,
        }),
        opcode::PING => Op::Ping(pb::PingRequest {}),
        // AuthPacket: an unused type, the scheme, the credentials.
        opcode::AUTH => {
            let _type = r.int("type")?;
            Op::Auth(pb::AuthRequest {
                scheme: r.string("scheme")?,
                auth: r.buffer("auth")?,
            })
        }
        opcode::CLOSE_SESSION => Op::Close(pb::CloseRequest {}),
        opcode::SET_WATCHES | opcode::SET_WATCHES2 => {
            let relative_zxid = r.long("relativeZxid")?.max(0) as u64;
            let data_watches = r.strings("dataWatches")?;
            let exist_watches = r.strings("existWatches")?;
            let child_watches = r.strings("childWatches")?;
            let (persistent_watches, persistent_recursive_watches) = if op == opcode::SET_WATCHES2 {
                (
                    r.strings("persistentWatches")?,
                    r.strings("persistentRecursiveWatches")?,
                )
            } else {
                (Vec::new(), Vec::new())
            };
            Op::SetWatches(pb::SetWatchesRequest {
                relative_zxid,
                data_watches,
                exist_watches,
                child_watches,
                persistent_watches,
                persistent_recursive_watches,
            })
        }
        opcode::ADD_WATCH => {
            let path = r.string("path")?;
            let mode = match r.int("mode")? {
                0 => pb::AddWatchMode::Persistent,
                1 => pb::AddWatchMode::PersistentRecursive,
                m => return Err(DecodeError::Bad(format!("{path}: unknown watch mode {m}"))),
            };
            Op::AddWatch(pb::AddWatchRequest {
                path,
                mode: mode as i32,
            })
        }
        opcode::GET_EPHEMERALS => Op::GetEphemerals(pb::GetEphemeralsRequest {
            prefix_path: r.string("prefixPath")?,
        }),
        opcode::GET_ALL_CHILDREN_NUMBER => Op::CountDescendants(pb::CountDescendantsRequest {
            path: r.string("path")?,
        }),
        opcode::REMOVE_WATCHES | opcode::CHECK_WATCHES => {
            let path = r.string("path")?;
            // ZooKeeper's WatcherType: Children 1, Data 2, Any 3,
            // Persistent 4, PersistentRecursive 5.
            let kind = match r.int("type")? {
                1 => pb::WatcherType::Children,
                2 => pb::WatcherType::Data,
                3 => pb::WatcherType::Any,
                4 => pb::WatcherType::Persistent,
                5 => pb::WatcherType::PersistentRecursive,
                t => {
                    return Err(DecodeError::Bad(format!(
                        "{path}: unknown watcher type {t}"
                    )))
                }
            };
            Op::RemoveWatches(pb::RemoveWatchesRequest {
                path,
                watcher_type: kind as i32,
            })
        }
        // No body.
        opcode::WHO_AM_I => Op::WhoAmI(pb::WhoAmIRequest {}),
        opcode::RECONFIG => {
            return Ok((
                Op::Reconfig(super::reconfig::decode(&mut r)?),
                Reply::Reconfig,
            ))
        }
        opcode::MULTI => return decode_multi(&mut r),
        opcode::MULTI_READ => return decode_multi_read(&mut r),
        other => return Err(DecodeError::Unsupported(other)),
    };
    super::reserved::route(decoded, Reply::Plain(op))
}

fn decode_multi(r: &mut Reader<'_>) -> Result<(Op, Reply), DecodeError> {
    let mut ops = Vec::new();
    let mut kinds = Vec::new();
    loop {
        let kind = r.int("multi header type")?;
        let done = r.boolean("multi header done")?;
        let _err = r.int("multi header err")?;
        if done {
            break;
        }
        let op = match kind {
            opcode::CREATE | opcode::CREATE2 | opcode::CREATE_CONTAINER => {
                pb::multi_op::Op::Create(create(r, false)?)
            }
            opcode::CREATE_TTL => pb::multi_op::Op::Create(create(r, true)?),
            opcode::DELETE => pb::multi_op::Op::Delete(pb::DeleteRequest {
                path: r.string("path")?,
                version: version(r.int("version")?),
            }),
            opcode::SET_DATA => pb::multi_op::Op::SetData(set_data(r)?),
            opcode::CHECK => pb::multi_op::Op::Check(pb::CheckRequest {
                path: r.string("path")?,
                version: version(r.int("version")?),
            }),
            other => return Err(DecodeError::Unsupported(other)),
        };
        // Writes to ZooKeeper's own subtree are refused in a multi too:
        // the whole multi, before any of it reaches the tree.
        match &op {
            pb::multi_op::Op::Create(c) => super::reserved::check_write(&c.path, true)?,
            pb::multi_op::Op::Delete(d) => super::reserved::check_write(&d.path, false)?,
            pb::multi_op::Op::SetData(d) => super::reserved::check_write(&d.path, false)?,
            pb::multi_op::Op::Check(_) => {}
        }
        ops.push(pb::MultiOp { op: Some(op) });
        kinds.push(kind);
    }
    Ok((Op::Multi(pb::MultiRequest { ops }), Reply::Multi(kinds)))
}

fn decode_multi_read(r: &mut Reader<'_>) -> Result<(Op, Reply), DecodeError> {
    let mut ops = Vec::new();
    let mut kinds = Vec::new();
    loop {
        let kind = r.int("multi header type")?;
        let done = r.boolean("multi header done")?;
        let _err = r.int("multi header err")?;
        if done {
            break;
        }
        let (path, watch) = path_watch(r)?;
        let op = match kind {
            opcode::GET_DATA => pb::multi_read_op::Op::GetData(pb::GetDataRequest {
                path,
                watch,
                linearizable: false,
            }),
            opcode::GET_CHILDREN => pb::multi_read_op::Op::GetChildren(pb::GetChildrenRequest {
                path,
                watch,
                linearizable: false,
            }),
            other => return Err(DecodeError::Unsupported(other)),
        };
        ops.push(pb::MultiReadOp { op: Some(op) });
        kinds.push(kind);
    }
    Ok((
        Op::MultiRead(pb::MultiReadRequest { ops }),
        Reply::MultiRead(kinds),
    ))
}

/// ephemeralOwner as ZooKeeper 3.8 reports it to clients: the owning
/// session for an ephemeral, 0 otherwise, containers and TTL nodes
/// included. ZooKeeper stores special values for those two
/// (`EphemeralType`: Long.MIN_VALUE, `0xFF00000000000000 | ttl`) but
/// `DataNode.copyStat` hides them from clients
/// (`getClientEphemeralOwner`), and tools that take a non-zero owner for
/// "ephemeral" rely on that. The native protocol reports container and
/// TTL in their own Stat fields.
pub fn zk_ephemeral_owner(s: &pb::Stat) -> i64 {
    if s.container || s.ttl_ms > 0 {
        0
    } else {
        s.ephemeral_owner as i64
    }
}

/// ZooKeeper's Stat record.
pub fn write_stat(w: &mut Writer, s: &pb::Stat) {
    w.long(s.czxid as i64)
        .long(s.mzxid as i64)
        .long(s.ctime_ms)
        .long(s.mtime_ms)
        .int(s.version)
        .int(s.cversion)
        .int(s.aversion)
        .long(zk_ephemeral_owner(s))
        .int(s.data_length as i32)
        .int(s.num_children as i32)
        .long(s.pzxid as i64);
}

fn stat_or_zero(s: &Option<pb::Stat>) -> pb::Stat {
    (*s).unwrap_or_default()
}

/// The reply to `reply` carrying `resp`: (ZooKeeper error code, body).
pub fn encode_response(reply: &Reply, resp: &pb::Response) -> (i32, Writer) {
    let code = ErrorCode::try_from(resp.error).unwrap_or(ErrorCode::SystemError);
    let mut w = Writer::default();
    let op = match reply {
        Reply::Multi(kinds) => {
            // A failed multi still answers with one result per op; the
            // error travels in them, not in the reply header.
            if let Some(Res::Multi(m)) = &resp.result {
                encode_multi(&mut w, kinds, m);
                return (0, w);
            }
            return (zk_code(code), w);
        }
        Reply::MultiRead(kinds) => {
            if let Some(Res::MultiRead(m)) = &resp.result {
                encode_multi_read(&mut w, kinds, m);
                return (0, w);
            }
            return (zk_code(code), w);
        }
        Reply::Reserved { op, node } => return super::reserved::encode(*op, *node, resp),
        // ZooKeeper answers a reconfig with the new config node's data
        // and stat (a GetDataResponse).
        Reply::QuotaRoot(op) => return super::reserved::encode_quota_root(*op, resp),
        Reply::Reconfig => {
            return super::reserved::encode(opcode::GET_DATA, super::reserved::Node::Config, resp)
        }
        Reply::RootChildren(op) => {
            let mut resp = resp.clone();
            if let Some(Res::GetChildren(c)) = &mut resp.result {
                if !c.children.iter().any(|n| n == "zookeeper") {
                    c.children.push("zookeeper".to_string());
                    if let Some(s) = &mut c.stat {
                        s.num_children += 1;
                    }
                }
            }
            return encode_response(&Reply::Plain(*op), &resp);
        }
        Reply::Plain(op) => op,
    };
    if code != ErrorCode::Ok {
        return (zk_code(code), w);
    }
    match (*op, &resp.result) {
        (opcode::CREATE, Some(Res::Create(c))) => {
            w.string(&c.path);
        }
        (opcode::CREATE2 | opcode::CREATE_CONTAINER | opcode::CREATE_TTL, Some(Res::Create(c))) => {
            w.string(&c.path);
            write_stat(&mut w, &stat_or_zero(&c.stat));
        }
        (opcode::EXISTS, Some(Res::Stat(s))) => match &s.stat {
            Some(stat) => write_stat(&mut w, stat),
            // ZooKeeper answers exists on a missing node with NoNode.
            None => return (zk_code(ErrorCode::NoNode), Writer::default()),
        },
        (opcode::GET_DATA, Some(Res::GetData(d))) => {
            w.buffer_or_null(&d.data, d.data_null);
            write_stat(&mut w, &stat_or_zero(&d.stat));
        }
        (opcode::SET_DATA | opcode::SET_ACL, Some(Res::Stat(s))) => {
            write_stat(&mut w, &stat_or_zero(&s.stat));
        }
        (opcode::GET_ACL, Some(Res::GetAcl(a))) => {
            w.int(a.acl.len() as i32);
            for acl in &a.acl {
                w.int(acl.perms as i32).string(&acl.scheme).string(&acl.id);
            }
            write_stat(&mut w, &stat_or_zero(&a.stat));
        }
        (opcode::GET_CHILDREN, Some(Res::GetChildren(c))) => {
            w.strings(&c.children);
        }
        (opcode::GET_CHILDREN2, Some(Res::GetChildren(c))) => {
            w.strings(&c.children);
            write_stat(&mut w, &stat_or_zero(&c.stat));
        }
        (opcode::SYNC, Some(Res::Sync(s))) => {
            w.string(&s.path);
        }
        (opcode::GET_EPHEMERALS, Some(Res::GetEphemerals(e))) => {
            w.strings(&e.paths);
        }
        (opcode::GET_ALL_CHILDREN_NUMBER, Some(Res::CountDescendants(c))) => {
            w.int(c.count.min(i32::MAX as u64) as i32);
        }
        (opcode::WHO_AM_I, Some(Res::WhoAmI(who))) => {
            w.int(who.ids.len() as i32);
            for id in &who.ids {
                w.string(&id.scheme).string(&zk_user(id));
            }
        }
        // ZooKeeper answers addWatch with an ErrorResponse (one int, 0
        // on success) and its Java client reads it: without it the client
        // takes the short reply for a broken connection and reconnects.
        (opcode::ADD_WATCH, _) => {
            w.int(0);
        }
        // delete, ping, close, set/remove/check watches: no body.
        _ => {}
    }
    (0, w)
}

/// The user ZooKeeper's whoAmI names for an identity (its providers'
/// `getUserName`): a digest's user name without the hash, an address or a
/// certificate subject as it is, nothing for `super` (no provider).
fn zk_user(id: &pb::Identity) -> String {
    match id.scheme.as_str() {
        "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
        "super" => String::new(),
        _ => id.id.clone(),
    }
}

fn encode_multi(w: &mut Writer, kinds: &[i32], m: &pb::MultiResponse) {
    let failed = m.results.iter().any(|r| r.error != ErrorCode::Ok as i32);
    for (i, result) in m.results.iter().enumerate() {
        let code = ErrorCode::try_from(result.error).unwrap_or(ErrorCode::SystemError);
        if failed {
            // Every op of a failed multi is an ErrorResult: 0 for the ops
            // rolled back before the failure, the failure's code, then
            // RuntimeInconsistency for the ops never tried.
            let zk = zk_code(code);
            w.int(opcode::ERROR).boolean(false).int(zk).int(zk);
            continue;
        }
        let kind = kinds.get(i).copied().unwrap_or(opcode::ERROR);
        w.int(kind).boolean(false).int(0);
        match (kind, &result.result) {
            (opcode::CREATE, Some(pb::multi_op_result::Result::Create(c))) => {
                w.string(&c.path);
            }
            (
                opcode::CREATE2 | opcode::CREATE_CONTAINER | opcode::CREATE_TTL,
                Some(pb::multi_op_result::Result::Create(c)),
            ) => {
                w.string(&c.path);
                write_stat(w, &stat_or_zero(&c.stat));
            }
            (opcode::SET_DATA, Some(pb::multi_op_result::Result::SetData(s))) => {
                write_stat(w, &stat_or_zero(&s.stat));
            }
            _ => {}
        }
    }
    w.int(-1).boolean(true).int(-1);
}

fn encode_multi_read(w: &mut Writer, kinds: &[i32], m: &pb::MultiReadResponse) {
    for (i, result) in m.results.iter().enumerate() {
        let code = ErrorCode::try_from(result.error).unwrap_or(ErrorCode::SystemError);
        if code != ErrorCode::Ok {
            let zk = zk_code(code);
            w.int(opcode::ERROR).boolean(false).int(zk).int(zk);
            continue;
        }
        let kind = kinds.get(i).copied().unwrap_or(opcode::ERROR);
        w.int(kind).boolean(false).int(0);
        match &result.result {
            Some(pb::multi_read_result::Result::GetData(d)) => {
                w.buffer_or_null(&d.data, d.data_null);
                write_stat(w, &stat_or_zero(&d.stat));
            }
            Some(pb::multi_read_result::Result::GetChildren(c)) => {
                w.strings(&c.children);
            }
            None => {}
        }
    }
    w.int(-1).boolean(true).int(-1);
}

/// A watch notification: reply header (xid -1, zxid -1, err 0) + event.
pub fn encode_event(e: &pb::WatchEvent) -> Writer {
    let mut w = Writer::default();
    w.int(XID_NOTIFICATION).long(-1).int(0);
    // Our EventType values are ZooKeeper's (NodeCreated 1 .. NodeChildrenChanged 4).
    w.int(e.r#type).int(STATE_SYNC_CONNECTED).string(&e.path);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_body(path: &str, flags: i32, ttl: Option<i64>) -> Vec<u8> {
        let mut w = Writer::default();
        w.string(path)
            .buffer(b"d")
            .int(1)
            .int(31)
            .string("world")
            .string("anyone")
            .int(flags);
        if let Some(t) = ttl {
            w.long(t);
        }
        w.buf.to_vec()
    }

    #[test]
    fn create_modes_map_to_flags() {
        let (op, reply) = decode_request(opcode::CREATE2, &create_body("/a", 3, None)).unwrap();
        assert_eq!(reply, Reply::Plain(opcode::CREATE2));
        match op {
            Op::Create(c) => assert!(c.ephemeral && c.sequential && !c.container),
            other => panic!("{other:?}"),
        }
        let (op, _) = decode_request(opcode::CREATE_TTL, &create_body("/t", 6, Some(500))).unwrap();
        match op {
            Op::Create(c) => assert!(c.sequential && c.ttl_ms == 500),
            other => panic!("{other:?}"),
        }
        assert!(decode_request(opcode::CREATE, &create_body("/x", 9, None)).is_err());
        assert!(decode_request(opcode::CREATE, &create_body("/x", 5, None)).is_err());
        assert!(decode_request(opcode::CREATE, &[0, 0]).is_err());
        assert!(matches!(
            decode_request(999, &[]),
            Err(DecodeError::Unsupported(999))
        ));
    }

    #[test]
    fn ephemeral_owner_is_zero_for_containers_and_ttl_nodes_as_in_zookeeper() {
        let stat = |ephemeral_owner, container, ttl_ms| pb::Stat {
            ephemeral_owner,
            container,
            ttl_ms,
            ..Default::default()
        };
        assert_eq!(zk_ephemeral_owner(&stat(0x1234, false, 0)), 0x1234);
        assert_eq!(zk_ephemeral_owner(&stat(0, false, 0)), 0);
        assert_eq!(zk_ephemeral_owner(&stat(0, true, 0)), 0);
        assert_eq!(zk_ephemeral_owner(&stat(0, false, 5000)), 0);
    }

    #[test]
    fn exists_on_a_missing_node_is_no_node() {
        let resp = pb::Response {
            result: Some(Res::Stat(pb::StatResponse { stat: None })),
            ..Default::default()
        };
        let (code, body) = encode_response(&Reply::Plain(opcode::EXISTS), &resp);
        assert_eq!(code, -101);
        assert!(body.buf.is_empty());
    }

    /// A multi that writes below /zookeeper is refused whole, as a request
    /// alone would be, and never reaches the tree.
    #[test]
    fn a_multi_writing_zookeepers_subtree_is_refused() {
        let mut w = Writer::default();
        // create /ok, then setData /zookeeper/config.
        w.int(opcode::CREATE).boolean(false).int(-1);
        w.buf.extend_from_slice(&create_body("/ok", 0, None));
        w.int(opcode::SET_DATA).boolean(false).int(-1);
        w.string("/zookeeper/config").buffer(b"x").int(-1);
        w.int(-1).boolean(true).int(-1);
        assert!(matches!(
            decode_request(opcode::MULTI, &w.buf),
            Err(DecodeError::Refused(ErrorCode::NoAuth, _))
        ));
        let mut w = Writer::default();
        w.int(opcode::CREATE).boolean(false).int(-1);
        w.buf
            .extend_from_slice(&create_body("/zookeeper/mine", 0, None));
        w.int(-1).boolean(true).int(-1);
        assert!(matches!(
            decode_request(opcode::MULTI, &w.buf),
            Err(DecodeError::Refused(ErrorCode::NoAuth, _))
        ));
        // Elsewhere a multi passes.
        let mut w = Writer::default();
        w.int(opcode::CREATE).boolean(false).int(-1);
        w.buf
            .extend_from_slice(&create_body("/zookeeperish", 0, None));
        w.int(-1).boolean(true).int(-1);
        assert!(decode_request(opcode::MULTI, &w.buf).is_ok());
    }

    /// ZooKeeper 3.8's Java client deserializes an ErrorResponse from a
    /// successful addWatch: the reply carries one int, 0.
    #[test]
    fn add_watch_is_answered_with_an_error_response() {
        // The core answers AddWatch with no result.
        let resp = pb::Response::default();
        let (code, body) = encode_response(&Reply::Plain(opcode::ADD_WATCH), &resp);
        assert_eq!(code, 0);
        assert_eq!(&body.buf[..], &[0, 0, 0, 0]);
        // A failed addWatch has no body, as for every failed request.
        let failed = pb::Response {
            error: ErrorCode::NoAuth as i32,
            ..Default::default()
        };
        let (code, body) = encode_response(&Reply::Plain(opcode::ADD_WATCH), &failed);
        assert_eq!(code, -102);
        assert!(body.buf.is_empty());
    }

    #[test]
    fn error_codes_are_zookeepers() {
        assert_eq!(zk_code(ErrorCode::NoNode), -101);
        assert_eq!(zk_code(ErrorCode::BadVersion), -103);
        assert_eq!(zk_code(ErrorCode::NoChildrenForEphemerals), -108);
        assert_eq!(zk_code(ErrorCode::NodeExists), -110);
        assert_eq!(zk_code(ErrorCode::NotEmpty), -111);
        assert_eq!(zk_code(ErrorCode::SessionExpired), -112);
    }
}
