//! add_watch, remove_watches and set_watches (re-registering after a
//! reconnect, firing at once what the client missed).

use warden_protocol::path;
use warden_protocol::pb::{
    self, response::Result as Res, AddWatchMode, ErrorCode, EventType, WatcherType,
};

use std::collections::HashSet;

use super::Failure;
use crate::limits::{self, Limit};
use crate::proto::AuthId;
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchKind, WatchRegistry};

/// Most paths in one SetWatches.
const SET_WATCHES_PATHS_MAX: usize = 100_000;

/// READ on the node when it exists (as ZooKeeper 3.8.4 checks); a watch
/// on a node yet to be created needs nothing, like an exists watch.
pub(super) fn add(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    ids: &[AuthId],
    r: &pb::AddWatchRequest,
) -> Result<Option<Res>, Failure> {
    super::acl::require(tree, &r.path, warden_protocol::perms::READ, ids)?;
    let kind = match AddWatchMode::try_from(r.mode) {
        Ok(AddWatchMode::Persistent) => WatchKind::Persistent,
        Ok(AddWatchMode::PersistentRecursive) => WatchKind::PersistentRecursive,
        Err(_) => {
            return Err(Failure::new(
                ErrorCode::BadArguments,
                format!("{}: unknown watch mode {}", r.path, r.mode),
            ))
        }
    };
    watches
        .try_add(conn, kind, &r.path)
        .map_err(|m| Failure::new(ErrorCode::LimitExceeded, m))?;
    Ok(None)
}

pub(super) fn remove(
    watches: &mut WatchRegistry,
    conn: ConnId,
    r: &pb::RemoveWatchesRequest,
) -> Result<Option<Res>, Failure> {
    let Ok(kind) = WatcherType::try_from(r.watcher_type) else {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!("{}: unknown watcher type {}", r.path, r.watcher_type),
        ));
    };
    if watches.remove(conn, kind, &r.path) {
        Ok(None)
    } else {
        Err(Failure::new(ErrorCode::NoWatcher, r.path.clone()))
    }
}

pub(super) fn check(
    watches: &WatchRegistry,
    conn: ConnId,
    r: &pb::CheckWatchesRequest,
) -> Result<Option<Res>, Failure> {
    let Ok(kind) = WatcherType::try_from(r.watcher_type) else {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!("{}: unknown watcher type {}", r.path, r.watcher_type),
        ));
    };
    if watches.has(conn, kind, &r.path) {
        Ok(None)
    } else {
        Err(Failure::new(ErrorCode::NoWatcher, r.path.clone()))
    }
}

pub(super) fn check_set(r: &pb::SetWatchesRequest) -> Result<(), Failure> {
    let lists = [
        &r.data_watches,
        &r.exist_watches,
        &r.child_watches,
        &r.persistent_watches,
        &r.persistent_recursive_watches,
    ];
    let total: usize = lists.iter().map(|l| l.len()).sum();
    if total > SET_WATCHES_PATHS_MAX {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!("set_watches of {total} paths exceeds the limit of {SET_WATCHES_PATHS_MAX}"),
        ));
    }
    for p in lists.into_iter().flatten() {
        path::validate(p).map_err(|e| Failure::new(ErrorCode::InvalidPath, e.to_string()))?;
    }
    Ok(())
}

/// Re-registers a reconnecting client's watches; returns the events for
/// changes after `relative_zxid` that the client missed (ZooKeeper's rules).
/// All or nothing: if the watches to re-arm would take the session past
/// `--max-watches-per-session`, none is and no event is sent.
pub(super) fn set(
    tree: &DataTree,
    watches: &mut WatchRegistry,
    conn: ConnId,
    r: &pb::SetWatchesRequest,
) -> Result<Vec<pb::WatchEvent>, Failure> {
    let mut adds: Vec<(WatchKind, &str)> = Vec::new();
    let zxid = tree.applied_index();
    let rel = r.relative_zxid;
    let mut events = Vec::new();
    let mut push = |t: EventType, p: &str| {
        events.push(pb::WatchEvent {
            r#type: t as i32,
            path: p.to_string(),
            zxid,
        })
    };
    for p in &r.data_watches {
        match tree.stat(p) {
            None => push(EventType::NodeDeleted, p),
            Some(s) if s.mzxid > rel => push(EventType::NodeDataChanged, p),
            Some(_) => adds.push((WatchKind::Data, p)),
        }
    }
    for p in &r.exist_watches {
        match tree.stat(p) {
            Some(_) => push(EventType::NodeCreated, p),
            None => adds.push((WatchKind::Data, p)),
        }
    }
    for p in &r.child_watches {
        match tree.stat(p) {
            None => push(EventType::NodeDeleted, p),
            Some(s) if s.pzxid > rel => push(EventType::NodeChildrenChanged, p),
            Some(_) => adds.push((WatchKind::Child, p)),
        }
    }
    for p in &r.persistent_watches {
        adds.push((WatchKind::Persistent, p));
    }
    for p in &r.persistent_recursive_watches {
        adds.push((WatchKind::PersistentRecursive, p));
    }
    let mut new: HashSet<(WatchKind, &str)> = HashSet::new();
    for &(kind, p) in &adds {
        if !watches.contains(conn, kind, p) {
            new.insert((kind, p));
        }
    }
    let room = watches.room(conn);
    if new.len() > room {
        let held = watches.len_of(conn);
        return Err(Failure::new(
            ErrorCode::LimitExceeded,
            limits::message(
                Limit::WatchesPerSession,
                held.saturating_add(room),
                format!(
                    "set_watches would re-arm {} watches on top of the {held} the session holds on this server; none was set",
                    new.len()
                ),
            ),
        ));
    }
    for (kind, p) in adds {
        watches.add(conn, kind, p);
    }
    Ok(events)
}
