//! [`Client`]: the handle applications hold.
//!
//! Each method checks its arguments (path rules, data size, option
//! combinations) without a round trip, builds one wire request, hands it to
//! the connection task (see `connection.rs`) and waits — at most the request
//! timeout — for the answer, which it turns into typed values or an
//! [`Error`] naming the path. The handle holds no mutable state of its own,
//! so it is cheap to clone and safe to use from many tasks at once; calls
//! from all clones are pipelined on the one connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use warden_protocol::pb::ClusterStatusResponse as ClusterStatus;
use warden_protocol::{pb, ErrorCode};

use crate::connection::{self, Command};
use crate::error::{decode_code, Error, Result};
use crate::multi::{self, Op, OpResult};
use crate::types::{
    check_data, check_path, Acl, ConnectOptions, CreateOptions, SessionState, Stat,
};
use crate::watch::{
    persistent_channel, OneshotKind, OneshotWatch, PersistentMode, PersistentWatch, Registration,
};

/// A session with a Warden ensemble. Clones share the session.
///
/// Dropping the last clone closes the session (its ephemeral nodes go), as
/// does [`Client::close`], which also waits for the server to confirm.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    commands: mpsc::Sender<Command>,
    state: watch::Receiver<SessionState>,
    session_id: u64,
    options: ConnectOptions,
    next_watch_id: AtomicU64,
}

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// From the connected server's tree (never older than what this session
    /// has already seen).
    Local,
    /// After a Raft ReadIndex round: reflects every write committed before
    /// the read began.
    Linearizable,
    /// From the local tree, leaving a one-shot watch.
    Watch,
}

impl Client {
    /// Opens a new session with one of `servers` (`"host:port,host:port"`),
    /// trying them in a random order until one accepts or
    /// `options.connect_timeout` passes.
    pub async fn connect(servers: &str, options: ConnectOptions) -> Result<Client> {
        Self::open(servers, options, None).await
    }

    /// Like [`connect`](Self::connect), over TLS: every server must present
    /// a certificate from the CA in `tls` that names its host. A TLS
    /// failure (an untrusted server, a client certificate the server
    /// refuses) fails at once with the cause, since retrying cannot help.
    pub async fn connect_tls(
        servers: &str,
        options: ConnectOptions,
        tls: crate::TlsOptions,
    ) -> Result<Client> {
        Self::open(servers, options, Some(tls)).await
    }

    async fn open(
        servers: &str,
        options: ConnectOptions,
        tls: Option<crate::TlsOptions>,
    ) -> Result<Client> {
        let handles = connection::connect(servers, options.clone(), tls).await?;
        Ok(Client {
            inner: Arc::new(Inner {
                commands: handles.commands,
                state: handles.state,
                session_id: handles.session_id,
                options,
                next_watch_id: AtomicU64::new(1),
            }),
        })
    }

    /// The session's id (stable across reconnects).
    pub fn session_id(&self) -> u64 {
        self.inner.session_id
    }

    /// The session's state now and every change after: `Connected`,
    /// `Disconnected` (reconnecting), then finally `Expired` or `Closed`.
    /// A `watch` channel keeps the latest state, so a quick
    /// Disconnected→Connected blip may be seen as no change at all; the
    /// terminal states are never missed.
    pub fn session_events(&self) -> watch::Receiver<SessionState> {
        self.inner.state.clone()
    }

    /// Creates `path` with `data`. Returns the created path (with the
    /// sequence suffix, for sequential nodes) and its stat.
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        options: CreateOptions,
    ) -> Result<(String, Stat)> {
        self.create_or_null(path, Some(data), options).await
    }

    /// Like [`create`](Self::create); `None` creates the node with null
    /// data (ZooKeeper's `create(path, null, ...)`), which
    /// [`get_data_or_null`](Self::get_data_or_null) tells from empty data.
    pub async fn create_or_null(
        &self,
        path: &str,
        data: Option<&[u8]>,
        options: CreateOptions,
    ) -> Result<(String, Stat)> {
        let mut request = multi::create_request(path, data.unwrap_or_default(), &options)?;
        request.data_null = data.is_none();
        let response = self
            .call(path, pb::request::Op::Create(request), None)
            .await?;
        match response.result {
            Some(pb::response::Result::Create(created)) => {
                let stat = required(created.stat, path)?;
                Ok((created.path, stat))
            }
            _ => Err(malformed(path)),
        }
    }

    /// Deletes `path` if it has no children (and, given a version, if its
    /// version matches).
    pub async fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        check_path(path)?;
        let op = pb::request::Op::Delete(pb::DeleteRequest {
            path: path.to_string(),
            version,
        });
        self.call(path, op, None).await.map(drop)
    }

    /// Replaces the data of `path` (if its version matches, given one).
    pub async fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        self.set_data_on_the_wire(path, Some(data), version, 0)
            .await
    }

    /// Like [`set_data`](Self::set_data); `None` sets the data to null.
    pub async fn set_data_or_null(
        &self,
        path: &str,
        data: Option<&[u8]>,
        version: Option<i32>,
    ) -> Result<Stat> {
        self.set_data_on_the_wire(path, data, version, 0).await
    }

    /// Like [`set_data`](Self::set_data), and gives the node `ttl` as its
    /// new TTL, counted from this write: a lease renewed for another
    /// length. The node must have been created with a TTL (else
    /// `BadArguments` naming it); the data and the TTL change together.
    pub async fn set_data_with_ttl(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
        ttl: Duration,
    ) -> Result<Stat> {
        let ttl_ms = CreateOptions::with_ttl(ttl).validate(path)?;
        self.set_data_on_the_wire(path, Some(data), version, ttl_ms)
            .await
    }

    /// set_data on the wire: `None` is null data; `ttl_ms` 0 keeps the TTL.
    async fn set_data_on_the_wire(
        &self,
        path: &str,
        data: Option<&[u8]>,
        version: Option<i32>,
        ttl_ms: u64,
    ) -> Result<Stat> {
        check_path(path)?;
        check_data(path, data.unwrap_or_default())?;
        let op = pb::request::Op::SetData(pb::SetDataRequest {
            path: path.to_string(),
            data: data.unwrap_or_default().to_vec(),
            version,
            ttl_ms,
            data_null: data.is_none(),
        });
        let response = self.call(path, op, None).await?;
        match response.result {
            Some(pb::response::Result::Stat(s)) => required(s.stat, path),
            _ => Err(malformed(path)),
        }
    }

    /// The data and stat of `path`. Null data reads as empty here; see
    /// [`get_data_or_null`](Self::get_data_or_null).
    pub async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        let (data, stat, _) = self.get_data_as(path, Read::Local).await?;
        Ok((data.unwrap_or_default(), stat))
    }

    /// The data and stat of `path`; `None` for null data (a node created
    /// or last set without any, as ZooKeeper clients can), as distinct
    /// from empty data.
    pub async fn get_data_or_null(&self, path: &str) -> Result<(Option<Vec<u8>>, Stat)> {
        let (data, stat, _) = self.get_data_as(path, Read::Local).await?;
        Ok((data, stat))
    }

    /// Like [`get_data`](Self::get_data), reflecting every write committed
    /// before the call (a Raft ReadIndex round on the server).
    pub async fn get_data_linearizable(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        let (data, stat, _) = self.get_data_as(path, Read::Linearizable).await?;
        Ok((data.unwrap_or_default(), stat))
    }

    /// Like [`get_data`](Self::get_data), and sets a one-shot watch that
    /// fires on the node's next data change or deletion.
    pub async fn get_data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, OneshotWatch)> {
        let (data, stat, watch) = self.get_data_as(path, Read::Watch).await?;
        Ok((
            data.unwrap_or_default(),
            stat,
            watch.ok_or_else(|| malformed(path))?,
        ))
    }

    async fn get_data_as(
        &self,
        path: &str,
        read: Read,
    ) -> Result<(Option<Vec<u8>>, Stat, Option<OneshotWatch>)> {
        check_path(path)?;
        let op = pb::request::Op::GetData(pb::GetDataRequest {
            path: path.to_string(),
            watch: read == Read::Watch,
            linearizable: read == Read::Linearizable,
        });
        let (registration, watch) = oneshot_for(read, OneshotKind::Data, path);
        let response = self.call(path, op, registration).await?;
        match response.result {
            Some(pb::response::Result::GetData(got)) => {
                let data = (!got.data_null).then_some(got.data);
                Ok((data, required(got.stat, path)?, watch))
            }
            _ => Err(malformed(path)),
        }
    }

    /// The stat of `path`, or `None` if there is no such node.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        Ok(self.exists_as(path, Read::Local).await?.0)
    }

    /// Like [`exists`](Self::exists), linearizable.
    pub async fn exists_linearizable(&self, path: &str) -> Result<Option<Stat>> {
        Ok(self.exists_as(path, Read::Linearizable).await?.0)
    }

    /// Like [`exists`](Self::exists), and sets a one-shot watch: it fires
    /// when the node is created (if absent now), or changes or is deleted
    /// (if present).
    pub async fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, OneshotWatch)> {
        let (stat, watch) = self.exists_as(path, Read::Watch).await?;
        Ok((stat, watch.ok_or_else(|| malformed(path))?))
    }

    async fn exists_as(
        &self,
        path: &str,
        read: Read,
    ) -> Result<(Option<Stat>, Option<OneshotWatch>)> {
        check_path(path)?;
        let op = pb::request::Op::Exists(pb::ExistsRequest {
            path: path.to_string(),
            watch: read == Read::Watch,
            linearizable: read == Read::Linearizable,
        });
        let (registration, watch) = oneshot_for(read, OneshotKind::Exist, path);
        match self.call(path, op, registration).await {
            Ok(response) => match response.result {
                Some(pb::response::Result::Stat(s)) => Ok((s.stat, watch)),
                None => Ok((None, watch)),
                _ => Err(malformed(path)),
            },
            // Servers may answer a missing node either way.
            Err(e) if e.code() == ErrorCode::NoNode => Ok((None, watch)),
            Err(e) => Err(e),
        }
    }

    /// The names (not paths) of the children of `path`, sorted, and its
    /// stat.
    pub async fn get_children(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        let (children, stat, _) = self.get_children_as(path, Read::Local).await?;
        Ok((children, stat))
    }

    /// Like [`get_children`](Self::get_children), linearizable.
    pub async fn get_children_linearizable(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        let (children, stat, _) = self.get_children_as(path, Read::Linearizable).await?;
        Ok((children, stat))
    }

    /// Like [`get_children`](Self::get_children), and sets a one-shot watch
    /// that fires when a child is added or removed, or the node is deleted.
    pub async fn get_children_watch(
        &self,
        path: &str,
    ) -> Result<(Vec<String>, Stat, OneshotWatch)> {
        let (children, stat, watch) = self.get_children_as(path, Read::Watch).await?;
        Ok((children, stat, watch.ok_or_else(|| malformed(path))?))
    }

    async fn get_children_as(
        &self,
        path: &str,
        read: Read,
    ) -> Result<(Vec<String>, Stat, Option<OneshotWatch>)> {
        check_path(path)?;
        let op = pb::request::Op::GetChildren(pb::GetChildrenRequest {
            path: path.to_string(),
            watch: read == Read::Watch,
            linearizable: read == Read::Linearizable,
        });
        let (registration, watch) = oneshot_for(read, OneshotKind::Child, path);
        let response = self.call(path, op, registration).await?;
        match response.result {
            Some(pb::response::Result::GetChildren(got)) => {
                Ok((got.children, required(got.stat, path)?, watch))
            }
            _ => Err(malformed(path)),
        }
    }

    /// Applies `ops` atomically: all of them, or none. On failure the error
    /// is [`Error::Multi`], naming the index, code and path of the op that
    /// failed.
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let request = multi::encode(&ops)?;
        let response = self.call_raw(pb::request::Op::Multi(request), None).await?;
        let code = decode_code(response.error);
        let result = match response.result {
            Some(pb::response::Result::Multi(m)) => Some(m),
            None => None,
            Some(_) => return Err(malformed("")),
        };
        multi::decode(&ops, code, &response.message, result)
    }

    /// Waits until the connected server has applied every write committed
    /// before the call, so that later reads on this session see them.
    pub async fn sync(&self, path: &str) -> Result<()> {
        check_path(path)?;
        let op = pb::request::Op::Sync(pb::SyncRequest {
            path: path.to_string(),
        });
        self.call(path, op, None).await.map(drop)
    }

    /// The members of the Raft group as the connected server sees them
    /// (role, term, commit and applied index, lag).
    pub async fn cluster_status(&self) -> Result<ClusterStatus> {
        let op = pb::request::Op::ClusterStatus(pb::ClusterStatusRequest::default());
        let response = self.call("", op, None).await?;
        match response.result {
            Some(pb::response::Result::ClusterStatus(status)) => Ok(status),
            _ => Err(malformed("")),
        }
    }

    /// This connection's identities as ACLs match them, as (scheme, id):
    /// `ip` and its address, `x509` and a certificate's subject, and what
    /// [`Client::add_auth`] added (`digest`, and `super` for the super user).
    pub async fn who_am_i(&self) -> Result<Vec<(String, String)>> {
        let op = pb::request::Op::WhoAmI(pb::WhoAmIRequest {});
        let response = self.call("", op, None).await?;
        match response.result {
            Some(pb::response::Result::WhoAmI(w)) => {
                Ok(w.ids.into_iter().map(|i| (i.scheme, i.id)).collect())
            }
            _ => Err(malformed("")),
        }
    }

    /// Adds server `id` (peer address `addr`) to the group as a voter, or
    /// as a non-voting learner. Adding an existing learner as a voter
    /// promotes it. Start the new server with `--join` first.
    ///
    /// Refused (BadArguments, naming the live and needed counts) when the
    /// group would be left with fewer voters the server has heard from
    /// lately than a quorum: a voter that is not running, say. Add a new
    /// server as a learner first; see [`Client::add_member_with`] to force.
    pub async fn add_member(&self, id: u64, addr: &str, learner: bool) -> Result<()> {
        self.add_member_with(pb::AddMemberRequest {
            id,
            addr: addr.to_string(),
            learner,
            force: false,
        })
        .await
    }

    /// [`Client::add_member`] with every field of the request, `force`
    /// (skip the quorum check: disaster recovery only) among them.
    pub async fn add_member_with(&self, r: pb::AddMemberRequest) -> Result<()> {
        let op = pb::request::Op::AddMember(r);
        self.call("", op, None).await.map(drop)
    }

    /// Removes server `id` from the group; refused, as
    /// [`Client::add_member`], when it would leave no live quorum.
    pub async fn remove_member(&self, id: u64) -> Result<()> {
        self.remove_member_with(pb::RemoveMemberRequest { id, force: false })
            .await
    }

    /// [`Client::remove_member`] with every field of the request.
    pub async fn remove_member_with(&self, r: pb::RemoveMemberRequest) -> Result<()> {
        let op = pb::request::Op::RemoveMember(r);
        self.call("", op, None).await.map(drop)
    }

    /// The ACL of `path` and its stat.
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        check_path(path)?;
        let op = pb::request::Op::GetAcl(pb::GetAclRequest {
            path: path.to_string(),
        });
        let response = self.call(path, op, None).await?;
        match response.result {
            Some(pb::response::Result::GetAcl(got)) => Ok((got.acl, required(got.stat, path)?)),
            _ => Err(malformed(path)),
        }
    }

    /// Replaces the ACL of `path` (if its aversion matches, given one).
    pub async fn set_acl(&self, path: &str, acl: Vec<Acl>, version: Option<i32>) -> Result<Stat> {
        check_path(path)?;
        let op = pb::request::Op::SetAcl(pb::SetAclRequest {
            path: path.to_string(),
            acl,
            version,
        });
        let response = self.call(path, op, None).await?;
        match response.result {
            Some(pb::response::Result::Stat(s)) => required(s.stat, path),
            _ => Err(malformed(path)),
        }
    }

    /// Adds an identity to this session's connection, as ZooKeeper's
    /// `addAuth`: scheme `digest` with `user:password` makes the client
    /// `digest:user:BASE64HASH`, which ACLs can grant permissions to. A
    /// refusal is [`ErrorCode::AuthFailed`] (unknown scheme, malformed
    /// credentials, or a wrong password where the server checks them);
    /// it changes nothing and the session goes on.
    ///
    /// Accepted auths are remembered and sent again, before anything else,
    /// on every reconnect.
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<()> {
        let op = pb::request::Op::Auth(pb::AuthRequest {
            scheme: scheme.to_string(),
            auth: auth.to_vec(),
        });
        // The error line names what was refused: `AuthFailed: digest auth`.
        self.call(&format!("{scheme} auth"), op, None)
            .await
            .map(drop)
    }

    /// Sets a persistent watch on `path`: every creation, deletion, data
    /// change and child-list change of that node. With `recursive`, every
    /// creation, deletion and data change of the node and all its
    /// descendants (no child-list events: creations and deletions say it).
    /// The node need not exist.
    pub async fn watch(&self, path: &str, recursive: bool) -> Result<PersistentWatch> {
        check_path(path)?;
        let id = self.inner.next_watch_id.fetch_add(1, Ordering::Relaxed);
        let (sink, handle) =
            persistent_channel(id, path, recursive, self.inner.commands.downgrade());
        let mode = PersistentMode::from_recursive(recursive);
        let op = pb::request::Op::AddWatch(pb::AddWatchRequest {
            path: path.to_string(),
            mode: mode.add_mode() as i32,
        });
        let registration = Registration::Persistent {
            id,
            path: path.to_string(),
            mode,
            sink,
        };
        // On failure the handle drops; the task has forgotten the watch
        // already or forgets it when the drop's removal arrives.
        self.call(path, op, Some(registration)).await?;
        Ok(handle)
    }

    /// Closes the session: the server deletes its ephemeral nodes and ends
    /// its watches. Later calls on any clone fail with [`Error::Closed`].
    /// Closing a session that is already over is not an error.
    ///
    /// `Ok` means the server confirmed. The client is closed locally
    /// either way; if the server's confirmation does not come (the client
    /// is disconnected: [`Error::ConnectionLoss`]; no answer within the
    /// request timeout: [`Error::Timeout`]), the close may or may not have
    /// reached the server, and if it did not, the session and its
    /// ephemeral nodes live on until the session times out.
    pub async fn close(&self) -> Result<()> {
        if self.inner.state.borrow().is_terminal() {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        if self
            .inner
            .commands
            .send(Command::Close { reply })
            .await
            .is_err()
        {
            return Ok(());
        }
        // The task bounds the wait for the server's answer itself.
        rx.await.unwrap_or(Ok(()))
    }

    /// Sends `op` about `path` and turns a refusal into [`Error::Api`].
    async fn call(
        &self,
        path: &str,
        op: pb::request::Op,
        registration: Option<Registration>,
    ) -> Result<pb::Response> {
        let response = self.call_raw(op, registration).await?;
        match decode_code(response.error) {
            ErrorCode::Ok => Ok(response),
            code => Err(Error::api(code, path, response.message)),
        }
    }

    /// Sends `op` and waits for the raw response, at most the request
    /// timeout.
    async fn call_raw(
        &self,
        op: pb::request::Op,
        registration: Option<Registration>,
    ) -> Result<pb::Response> {
        if let Some(err) = self.ended() {
            return Err(err);
        }
        let (reply, rx) = oneshot::channel();
        let command = Command::Request {
            op,
            registration,
            reply,
        };
        let exchange = async {
            if self.inner.commands.send(command).await.is_err() {
                return Err(self.ended().unwrap_or(Error::Closed));
            }
            rx.await
                .unwrap_or_else(|_| Err(self.ended().unwrap_or(Error::Closed)))
        };
        tokio::time::timeout(self.inner.options.request_timeout, exchange)
            .await
            .unwrap_or(Err(Error::Timeout))
    }

    /// The error every call gets once the session is over.
    fn ended(&self) -> Option<Error> {
        match *self.inner.state.borrow() {
            SessionState::Expired => Some(Error::SessionExpired),
            SessionState::Closed => Some(Error::Closed),
            SessionState::Connected | SessionState::Disconnected => None,
        }
    }
}

/// The registration and the future of a one-shot watch, for reads that set
/// one.
fn oneshot_for(
    read: Read,
    kind: OneshotKind,
    path: &str,
) -> (Option<Registration>, Option<OneshotWatch>) {
    if read != Read::Watch {
        return (None, None);
    }
    let (tx, rx) = oneshot::channel();
    let registration = Registration::Oneshot {
        kind,
        path: path.to_string(),
        tx,
    };
    (
        Some(registration),
        Some(OneshotWatch::new(path.to_string(), rx)),
    )
}

/// A stat the server must send with a successful answer.
fn required(stat: Option<Stat>, path: &str) -> Result<Stat> {
    stat.ok_or_else(|| malformed(path))
}

/// An answer whose shape does not fit the request.
fn malformed(path: &str) -> Error {
    Error::api(
        ErrorCode::MarshallingError,
        path,
        "the server's answer does not fit the request",
    )
}
