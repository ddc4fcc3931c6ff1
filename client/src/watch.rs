//! Watches: the handles callers hold and the registry the connection task
//! keeps.
//!
//! The server keeps watches per *connection*, one per (path, kind), and
//! pushes a bare `WatchEvent {type, path, zxid}` when one fires. The client
//! therefore keeps its own registry to know which of its callers an event
//! is for, and to re-register everything on a new connection
//! (`SetWatchesRequest`). Only the connection task touches the registry.
//!
//! Two kinds of watch:
//!
//! - **One-shot** ([`OneshotWatch`], from `get_data_watch`, `exists_watch`,
//!   `get_children_watch`): a future that resolves with the first event, as
//!   in ZooKeeper. Routing follows ZooKeeper: `NodeCreated` and
//!   `NodeDataChanged` fire data and exist watches of the path,
//!   `NodeChildrenChanged` fires child watches, `NodeDeleted` fires all
//!   three. A one-shot watch is registered only when its read succeeded (or,
//!   for `exists`, found no node), and an `exists` that found the node
//!   registers a *data* watch, which is what the server holds for it too —
//!   that matters when re-registering after a reconnect.
//! - **Persistent** ([`PersistentWatch`], from `Client::watch`): a stream of
//!   every event on the path (`recursive`: on the path and its descendants,
//!   never `NodeChildrenChanged`). Each stream has a bounded queue; a caller
//!   that falls more than [`PERSISTENT_WATCH_EVENTS_MAX`] events behind gets
//!   [`Error::WatchLagged`] and the watch is removed, rather than the
//!   connection task blocking or buffering without bound. Dropping the
//!   stream (or calling [`PersistentWatch::remove`]) removes the server's
//!   watch once no other stream of the same kind watches that path.
//!
//! When the session ends, every watch gets the terminal error
//! (`SessionExpired` or `Closed`); a disconnect alone does not end them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use warden_protocol::{pb, ErrorCode};

use crate::connection::Command;
use crate::error::{Error, Result};
use crate::types::{EventType, WatchEvent};

/// Events a persistent watch buffers for a slow reader before it is
/// dropped with [`Error::WatchLagged`].
pub const PERSISTENT_WATCH_EVENTS_MAX: usize = 1024;

/// Most watches (one-shot and persistent, live handles) one client keeps;
/// a read that would set one more fails with `Throttled` before it is sent.
pub const WATCHES_MAX: usize = 1 << 20;

/// Path bytes per `SetWatchesRequest` when re-registering after a
/// reconnect, well under the frame limit; more watches take more requests.
pub(crate) const SET_WATCHES_BATCH_BYTES_MAX: usize = 128 * 1024;

/// Identifies one persistent-watch handle inside its client.
pub(crate) type WatchId = u64;

/// The one-shot watch a read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OneshotKind {
    Data,
    Exist,
    Child,
}

/// The two persistent modes of `AddWatchRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PersistentMode {
    Persistent,
    Recursive,
}

impl PersistentMode {
    pub(crate) fn from_recursive(recursive: bool) -> Self {
        if recursive {
            PersistentMode::Recursive
        } else {
            PersistentMode::Persistent
        }
    }

    pub(crate) fn add_mode(self) -> pb::AddWatchMode {
        match self {
            PersistentMode::Persistent => pb::AddWatchMode::Persistent,
            PersistentMode::Recursive => pb::AddWatchMode::PersistentRecursive,
        }
    }

    pub(crate) fn watcher_type(self) -> pb::WatcherType {
        match self {
            PersistentMode::Persistent => pb::WatcherType::Persistent,
            PersistentMode::Recursive => pb::WatcherType::PersistentRecursive,
        }
    }
}

type OneshotSender = oneshot::Sender<Result<WatchEvent>>;

/// The task's end of a persistent watch: the event queue, and a slot for
/// the error that ends the stream.
#[derive(Debug)]
pub(crate) struct PersistentSink {
    events: mpsc::Sender<WatchEvent>,
    end: oneshot::Sender<Error>,
}

impl PersistentSink {
    fn finish(self, err: Error) {
        // The receiver may be gone already; then nobody needs the reason.
        let _ = self.end.send(err);
    }
}

/// A watch a request asks the connection task to record.
#[derive(Debug)]
pub(crate) enum Registration {
    /// Recorded when the read's answer arrives, if the read succeeded.
    Oneshot {
        kind: OneshotKind,
        path: String,
        tx: OneshotSender,
    },
    /// Recorded when the `AddWatch` is sent (so no event that follows the
    /// server's registration is missed), forgotten if it fails.
    Persistent {
        id: WatchId,
        path: String,
        mode: PersistentMode,
        sink: PersistentSink,
    },
}

impl Registration {
    pub(crate) fn path(&self) -> &str {
        match self {
            Registration::Oneshot { path, .. } | Registration::Persistent { path, .. } => path,
        }
    }
}

/// Where a one-shot watch goes once its read has been answered with
/// `code`: `None` when no watch was set.
pub(crate) fn oneshot_kind_after(
    kind: OneshotKind,
    code: ErrorCode,
    node_exists: bool,
) -> Option<OneshotKind> {
    match (kind, code) {
        (OneshotKind::Data, ErrorCode::Ok) => Some(OneshotKind::Data),
        (OneshotKind::Child, ErrorCode::Ok) => Some(OneshotKind::Child),
        (OneshotKind::Exist, ErrorCode::Ok) if node_exists => Some(OneshotKind::Data),
        (OneshotKind::Exist, ErrorCode::Ok | ErrorCode::NoNode) => Some(OneshotKind::Exist),
        _ => None,
    }
}

/// A persistent watch the server should forget: its last handle went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerRemoval {
    pub path: String,
    pub mode: PersistentMode,
}

/// All watches of one client, owned by the connection task.
#[derive(Debug, Default)]
pub(crate) struct WatchRegistry {
    data: HashMap<String, Vec<OneshotSender>>,
    exist: HashMap<String, Vec<OneshotSender>>,
    child: HashMap<String, Vec<OneshotSender>>,
    persistent: HashMap<String, Vec<(WatchId, PersistentSink)>>,
    recursive: HashMap<String, Vec<(WatchId, PersistentSink)>>,
    /// Where each persistent handle is, for removal by id.
    ids: HashMap<WatchId, (PersistentMode, String)>,
    oneshot_count: usize,
}

impl WatchRegistry {
    /// Live entries (one-shot senders, including ones whose future was
    /// dropped but whose event has not come yet, plus persistent handles).
    pub(crate) fn len(&self) -> usize {
        self.oneshot_count + self.ids.len()
    }

    fn oneshot_map(&mut self, kind: OneshotKind) -> &mut HashMap<String, Vec<OneshotSender>> {
        match kind {
            OneshotKind::Data => &mut self.data,
            OneshotKind::Exist => &mut self.exist,
            OneshotKind::Child => &mut self.child,
        }
    }

    fn persistent_map(
        &mut self,
        mode: PersistentMode,
    ) -> &mut HashMap<String, Vec<(WatchId, PersistentSink)>> {
        match mode {
            PersistentMode::Persistent => &mut self.persistent,
            PersistentMode::Recursive => &mut self.recursive,
        }
    }

    /// Records a one-shot watch (kind already decided by
    /// [`oneshot_kind_after`]). Futures dropped earlier on the same path are
    /// pruned here, so abandoned watches do not pile up.
    pub(crate) fn add_oneshot(&mut self, kind: OneshotKind, path: String, tx: OneshotSender) {
        let list = self.oneshot_map(kind).entry(path).or_default();
        let before = list.len();
        list.retain(|tx| !tx.is_closed());
        let pruned = before - list.len();
        list.push(tx);
        self.oneshot_count = self.oneshot_count + 1 - pruned;
    }

    pub(crate) fn add_persistent(
        &mut self,
        id: WatchId,
        path: String,
        mode: PersistentMode,
        sink: PersistentSink,
    ) {
        self.ids.insert(id, (mode, path.clone()));
        self.persistent_map(mode)
            .entry(path)
            .or_default()
            .push((id, sink));
    }

    /// Forgets a persistent handle. Returns what the server should forget,
    /// if this was the last handle of its kind on its path.
    pub(crate) fn remove_persistent(&mut self, id: WatchId) -> Option<ServerRemoval> {
        let (mode, path) = self.ids.remove(&id)?;
        let map = self.persistent_map(mode);
        let list = map.get_mut(&path)?;
        list.retain(|(other, _)| *other != id);
        if list.is_empty() {
            map.remove(&path);
            Some(ServerRemoval { path, mode })
        } else {
            None
        }
    }

    /// Delivers an event to every watch it fires. Returns the persistent
    /// watches the server should forget because their last handle was
    /// dropped or overflowed on the way.
    pub(crate) fn route(&mut self, event: &WatchEvent) -> Vec<ServerRemoval> {
        let kinds: &[OneshotKind] = match event.event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                &[OneshotKind::Data, OneshotKind::Exist]
            }
            EventType::NodeChildrenChanged => &[OneshotKind::Child],
            EventType::NodeDeleted => &[OneshotKind::Data, OneshotKind::Exist, OneshotKind::Child],
        };
        for &kind in kinds {
            if let Some(list) = self.oneshot_map(kind).remove(&event.path) {
                self.oneshot_count -= list.len();
                for tx in list {
                    // A dropped OneshotWatch just misses its event.
                    let _ = tx.send(Ok(event.clone()));
                }
            }
        }

        let mut removals = Vec::new();
        self.deliver(
            PersistentMode::Persistent,
            &event.path,
            event,
            &mut removals,
        );
        if event.event_type != EventType::NodeChildrenChanged {
            let mut cur = Some(event.path.as_str());
            while let Some(path) = cur {
                self.deliver(PersistentMode::Recursive, path, event, &mut removals);
                cur = (path != "/").then(|| warden_protocol::path::parent(path));
            }
        }
        removals
    }

    fn deliver(
        &mut self,
        mode: PersistentMode,
        path: &str,
        event: &WatchEvent,
        removals: &mut Vec<ServerRemoval>,
    ) {
        let map = self.persistent_map(mode);
        let Some(list) = map.get_mut(path) else {
            return;
        };
        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(list.len());
        for (id, sink) in list.drain(..) {
            match sink.events.try_send(event.clone()) {
                Ok(()) => kept.push((id, sink)),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    sink.finish(Error::WatchLagged {
                        path: path.to_string(),
                    });
                    dropped.push(id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => dropped.push(id),
            }
        }
        *list = kept;
        if list.is_empty() {
            map.remove(path);
            removals.push(ServerRemoval {
                path: path.to_string(),
                mode,
            });
        }
        for id in dropped {
            self.ids.remove(&id);
        }
    }

    /// Ends every watch with `err` (the session is over).
    pub(crate) fn fail_all(&mut self, err: &Error) {
        for map in [&mut self.data, &mut self.exist, &mut self.child] {
            for (_, list) in map.drain() {
                for tx in list {
                    let _ = tx.send(Err(err.clone()));
                }
            }
        }
        for map in [&mut self.persistent, &mut self.recursive] {
            for (_, list) in map.drain() {
                for (_, sink) in list {
                    sink.finish(err.clone());
                }
            }
        }
        self.ids.clear();
        self.oneshot_count = 0;
    }

    /// The requests that re-register every watch on a new connection,
    /// split so that none carries more than
    /// [`SET_WATCHES_BATCH_BYTES_MAX`] bytes of paths. Empty when there is
    /// nothing to re-register.
    pub(crate) fn set_watches(&self, relative_zxid: u64) -> Vec<pb::SetWatchesRequest> {
        let live_oneshot = |map: &HashMap<String, Vec<OneshotSender>>| -> Vec<String> {
            let mut paths: Vec<String> = map
                .iter()
                .filter(|(_, list)| list.iter().any(|tx| !tx.is_closed()))
                .map(|(path, _)| path.clone())
                .collect();
            paths.sort();
            paths
        };
        let live_persistent =
            |map: &HashMap<String, Vec<(WatchId, PersistentSink)>>| -> Vec<String> {
                let mut paths: Vec<String> = map.keys().cloned().collect();
                paths.sort();
                paths
            };
        let lists = [
            live_oneshot(&self.data),
            live_oneshot(&self.exist),
            live_oneshot(&self.child),
            live_persistent(&self.persistent),
            live_persistent(&self.recursive),
        ];

        let empty = || pb::SetWatchesRequest {
            relative_zxid,
            ..Default::default()
        };
        let mut requests = Vec::new();
        let mut current = empty();
        let mut current_bytes = 0;
        for (which, paths) in lists.into_iter().enumerate() {
            for path in paths {
                if current_bytes > 0 && current_bytes + path.len() > SET_WATCHES_BATCH_BYTES_MAX {
                    requests.push(std::mem::replace(&mut current, empty()));
                    current_bytes = 0;
                }
                current_bytes += path.len();
                let slot = match which {
                    0 => &mut current.data_watches,
                    1 => &mut current.exist_watches,
                    2 => &mut current.child_watches,
                    3 => &mut current.persistent_watches,
                    _ => &mut current.persistent_recursive_watches,
                };
                slot.push(path);
            }
        }
        if current_bytes > 0 {
            requests.push(current);
        }
        requests
    }
}

/// A one-shot watch: resolves with the first event on its path after the
/// read that set it, or with `SessionExpired`/`Closed` if the session ends
/// first. It survives disconnects (the client re-registers it).
///
/// Dropping it only stops the delivery: the server still holds the watch
/// until it fires, as in ZooKeeper.
#[derive(Debug)]
#[must_use = "a watch does nothing unless awaited"]
pub struct OneshotWatch {
    path: String,
    rx: oneshot::Receiver<Result<WatchEvent>>,
}

impl OneshotWatch {
    pub(crate) fn new(path: String, rx: oneshot::Receiver<Result<WatchEvent>>) -> Self {
        Self { path, rx }
    }

    /// The path the watch is on.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Future for OneshotWatch {
    type Output = Result<WatchEvent>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The sender only disappears without a value when the connection
        // task is gone, i.e. the client is closed.
        Poll::Ready(ready!(Pin::new(&mut self.rx).poll(cx)).unwrap_or(Err(Error::Closed)))
    }
}

/// A persistent (optionally recursive) watch: a [`Stream`] of every event on
/// its path, across reconnects, until removed. The stream ends with one
/// error item when the watch cannot go on (`SessionExpired`, `Closed`,
/// `WatchLagged`).
///
/// Dropping it removes the watch, as does [`PersistentWatch::remove`], which
/// also waits for the server to confirm.
#[derive(Debug)]
#[must_use = "a watch does nothing unless polled"]
pub struct PersistentWatch {
    id: WatchId,
    path: String,
    recursive: bool,
    events: Option<mpsc::Receiver<WatchEvent>>,
    end: Option<oneshot::Receiver<Error>>,
    /// Weak, so that live watches do not keep a dropped client's session
    /// open.
    commands: mpsc::WeakSender<Command>,
    removed: bool,
}

/// Makes both ends of a persistent watch.
pub(crate) fn persistent_channel(
    id: WatchId,
    path: &str,
    recursive: bool,
    commands: mpsc::WeakSender<Command>,
) -> (PersistentSink, PersistentWatch) {
    let (events_tx, events_rx) = mpsc::channel(PERSISTENT_WATCH_EVENTS_MAX);
    let (end_tx, end_rx) = oneshot::channel();
    (
        PersistentSink {
            events: events_tx,
            end: end_tx,
        },
        PersistentWatch {
            id,
            path: path.to_string(),
            recursive,
            events: Some(events_rx),
            end: Some(end_rx),
            commands,
            removed: false,
        },
    )
}

impl PersistentWatch {
    /// The path the watch is on.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the watch covers descendants too.
    pub fn is_recursive(&self) -> bool {
        self.recursive
    }

    /// Removes the watch and waits for the server to drop it (when this was
    /// the last handle on that path and mode). A session that is already
    /// over counts as removed.
    pub async fn remove(mut self) -> Result<()> {
        self.removed = true;
        let Some(commands) = self.commands.upgrade() else {
            return Ok(());
        };
        let (reply, rx) = oneshot::channel();
        let cmd = Command::RemoveWatch {
            id: self.id,
            reply: Some(reply),
        };
        if commands.send(cmd).await.is_err() {
            return Ok(());
        }
        match rx.await {
            Ok(result) => result,
            Err(_) => Ok(()),
        }
    }
}

impl Stream for PersistentWatch {
    type Item = Result<WatchEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(events) = &mut this.events {
            match ready!(events.poll_recv(cx)) {
                Some(event) => return Poll::Ready(Some(Ok(event))),
                // The task let go of the queue: the watch has ended; all
                // buffered events were delivered first.
                None => this.events = None,
            }
        }
        if let Some(end) = &mut this.end {
            let err = ready!(Pin::new(end).poll(cx)).unwrap_or(Error::Closed);
            this.end = None;
            this.removed = true;
            return Poll::Ready(Some(Err(err)));
        }
        Poll::Ready(None)
    }
}

impl Drop for PersistentWatch {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let Some(commands) = self.commands.upgrade() else {
            return;
        };
        let cmd = Command::RemoveWatch {
            id: self.id,
            reply: None,
        };
        match commands.try_send(cmd) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                // Drop cannot wait; hand the send to the runtime. Were there
                // none, the task still drops the watch at its next event,
                // when it finds the queue closed.
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let _ = commands.send(cmd).await;
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(t: EventType, path: &str) -> WatchEvent {
        WatchEvent {
            event_type: t,
            path: path.into(),
            zxid: 7,
        }
    }

    fn oneshot_on(
        reg: &mut WatchRegistry,
        kind: OneshotKind,
        path: &str,
    ) -> oneshot::Receiver<Result<WatchEvent>> {
        let (tx, rx) = oneshot::channel();
        reg.add_oneshot(kind, path.into(), tx);
        rx
    }

    fn fired(rx: &mut oneshot::Receiver<Result<WatchEvent>>) -> bool {
        matches!(rx.try_recv(), Ok(Ok(_)))
    }

    fn persistent_on(
        reg: &mut WatchRegistry,
        id: WatchId,
        path: &str,
        mode: PersistentMode,
    ) -> PersistentWatch {
        // No task behind this channel: dropping the handle sends nothing.
        let (commands, _) = mpsc::channel::<Command>(1);
        let recursive = mode == PersistentMode::Recursive;
        let (sink, watch) = persistent_channel(id, path, recursive, commands.downgrade());
        reg.add_persistent(id, path.into(), mode, sink);
        watch
    }

    fn drain(watch: &mut PersistentWatch) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        while let Ok(e) = watch.events.as_mut().unwrap().try_recv() {
            out.push(e);
        }
        out
    }

    #[test]
    fn oneshot_routing_follows_zookeeper() {
        use EventType::*;
        use OneshotKind::*;
        // (event, kind) -> fires?
        let table = [
            (NodeCreated, Data, true),
            (NodeCreated, Exist, true),
            (NodeCreated, Child, false),
            (NodeDataChanged, Data, true),
            (NodeDataChanged, Exist, true),
            (NodeDataChanged, Child, false),
            (NodeChildrenChanged, Data, false),
            (NodeChildrenChanged, Exist, false),
            (NodeChildrenChanged, Child, true),
            (NodeDeleted, Data, true),
            (NodeDeleted, Exist, true),
            (NodeDeleted, Child, true),
        ];
        for (t, kind, expected) in table {
            let mut reg = WatchRegistry::default();
            let mut rx = oneshot_on(&mut reg, kind, "/a");
            let mut other = oneshot_on(&mut reg, kind, "/b");
            reg.route(&event(t, "/a"));
            assert_eq!(fired(&mut rx), expected, "{t:?} on a {kind:?} watch");
            assert!(!fired(&mut other), "an event on /a must not fire /b");
            assert_eq!(reg.len(), if expected { 1 } else { 2 });
        }
    }

    #[test]
    fn oneshot_fires_exactly_once() {
        let mut reg = WatchRegistry::default();
        let mut a = oneshot_on(&mut reg, OneshotKind::Data, "/a");
        let mut b = oneshot_on(&mut reg, OneshotKind::Data, "/a");
        reg.route(&event(EventType::NodeDataChanged, "/a"));
        assert!(
            fired(&mut a) && fired(&mut b),
            "every watcher of the path fires"
        );
        assert_eq!(reg.len(), 0);
        // A second change finds no watch left.
        reg.route(&event(EventType::NodeDataChanged, "/a"));
        assert!(reg.set_watches(0).is_empty());
    }

    #[test]
    fn where_a_read_leaves_its_watch() {
        use ErrorCode::*;
        use OneshotKind::*;
        assert_eq!(oneshot_kind_after(Data, Ok, true), Some(Data));
        assert_eq!(oneshot_kind_after(Data, NoNode, false), None);
        assert_eq!(oneshot_kind_after(Child, Ok, true), Some(Child));
        assert_eq!(oneshot_kind_after(Child, NoNode, false), None);
        // exists on a present node holds a data watch, as on the server.
        assert_eq!(oneshot_kind_after(Exist, Ok, true), Some(Data));
        assert_eq!(oneshot_kind_after(Exist, Ok, false), Some(Exist));
        assert_eq!(oneshot_kind_after(Exist, NoNode, false), Some(Exist));
        assert_eq!(oneshot_kind_after(Exist, ConnectionLoss, false), None);
    }

    #[test]
    fn persistent_watch_sees_every_event_on_its_path_only() {
        let mut reg = WatchRegistry::default();
        let mut w = persistent_on(&mut reg, 1, "/a", PersistentMode::Persistent);
        for t in [
            EventType::NodeCreated,
            EventType::NodeDataChanged,
            EventType::NodeChildrenChanged,
            EventType::NodeDeleted,
        ] {
            reg.route(&event(t, "/a"));
        }
        reg.route(&event(EventType::NodeCreated, "/a/b"));
        reg.route(&event(EventType::NodeCreated, "/ab"));
        let got: Vec<_> = drain(&mut w).into_iter().map(|e| e.event_type).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(reg.len(), 1, "persistent watches stay after firing");
    }

    #[test]
    fn recursive_watch_sees_descendants_but_never_children_changed() {
        let mut reg = WatchRegistry::default();
        let mut w = persistent_on(&mut reg, 1, "/a", PersistentMode::Recursive);
        let mut root = persistent_on(&mut reg, 2, "/", PersistentMode::Recursive);
        reg.route(&event(EventType::NodeCreated, "/a/b/c"));
        reg.route(&event(EventType::NodeChildrenChanged, "/a"));
        reg.route(&event(EventType::NodeDataChanged, "/a"));
        reg.route(&event(EventType::NodeDeleted, "/ab"));
        let paths: Vec<_> = drain(&mut w).into_iter().map(|e| e.path).collect();
        assert_eq!(paths, vec!["/a/b/c", "/a"]);
        assert_eq!(
            drain(&mut root).len(),
            3,
            "the root's recursive watch sees all"
        );
    }

    #[test]
    fn removing_the_last_handle_asks_the_server() {
        let mut reg = WatchRegistry::default();
        let _w1 = persistent_on(&mut reg, 1, "/a", PersistentMode::Persistent);
        let _w2 = persistent_on(&mut reg, 2, "/a", PersistentMode::Persistent);
        let _w3 = persistent_on(&mut reg, 3, "/a", PersistentMode::Recursive);
        assert_eq!(reg.remove_persistent(1), None, "another handle remains");
        assert_eq!(
            reg.remove_persistent(2),
            Some(ServerRemoval {
                path: "/a".into(),
                mode: PersistentMode::Persistent
            })
        );
        assert_eq!(reg.remove_persistent(2), None, "unknown ids are ignored");
        assert_eq!(reg.len(), 1);
    }

    #[test]
    fn dropped_stream_is_forgotten_at_the_next_event() {
        let mut reg = WatchRegistry::default();
        let mut w = persistent_on(&mut reg, 1, "/a", PersistentMode::Persistent);
        drop(w.events.take());
        let removals = reg.route(&event(EventType::NodeDataChanged, "/a"));
        assert_eq!(
            removals,
            vec![ServerRemoval {
                path: "/a".into(),
                mode: PersistentMode::Persistent
            }]
        );
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn slow_reader_gets_lagged_error_then_end() {
        let mut reg = WatchRegistry::default();
        let mut w = persistent_on(&mut reg, 1, "/a", PersistentMode::Persistent);
        for _ in 0..=PERSISTENT_WATCH_EVENTS_MAX {
            reg.route(&event(EventType::NodeDataChanged, "/a"));
        }
        assert_eq!(reg.len(), 0);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut n = 0;
        loop {
            match Pin::new(&mut w).poll_next(&mut cx) {
                Poll::Ready(Some(Ok(_))) => n += 1,
                Poll::Ready(Some(Err(e))) => {
                    assert_eq!(e, Error::WatchLagged { path: "/a".into() });
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(n, PERSISTENT_WATCH_EVENTS_MAX, "buffered events come first");
        assert!(matches!(
            Pin::new(&mut w).poll_next(&mut cx),
            Poll::Ready(None)
        ));
    }

    #[test]
    fn fail_all_ends_every_watch() {
        let mut reg = WatchRegistry::default();
        let mut a = oneshot_on(&mut reg, OneshotKind::Child, "/a");
        let mut w = persistent_on(&mut reg, 1, "/b", PersistentMode::Recursive);
        reg.fail_all(&Error::SessionExpired);
        assert_eq!(a.try_recv(), Ok(Err(Error::SessionExpired)));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            Pin::new(&mut w).poll_next(&mut cx),
            Poll::Ready(Some(Err(Error::SessionExpired)))
        ));
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn set_watches_lists_each_kind_and_skips_abandoned_ones() {
        let mut reg = WatchRegistry::default();
        let _d = oneshot_on(&mut reg, OneshotKind::Data, "/d");
        let _e = oneshot_on(&mut reg, OneshotKind::Exist, "/e");
        let _c = oneshot_on(&mut reg, OneshotKind::Child, "/c");
        drop(oneshot_on(&mut reg, OneshotKind::Child, "/gone"));
        let _p = persistent_on(&mut reg, 1, "/p", PersistentMode::Persistent);
        let _r = persistent_on(&mut reg, 2, "/r", PersistentMode::Recursive);
        let reqs = reg.set_watches(42);
        assert_eq!(
            reqs,
            vec![pb::SetWatchesRequest {
                relative_zxid: 42,
                data_watches: vec!["/d".into()],
                exist_watches: vec!["/e".into()],
                child_watches: vec!["/c".into()],
                persistent_watches: vec!["/p".into()],
                persistent_recursive_watches: vec!["/r".into()],
            }]
        );
    }

    #[test]
    fn set_watches_is_split_into_bounded_batches() {
        let mut reg = WatchRegistry::default();
        let long = "x".repeat(1000);
        let mut keep = Vec::new();
        for i in 0..300 {
            keep.push(oneshot_on(
                &mut reg,
                OneshotKind::Data,
                &format!("/{long}{i}"),
            ));
        }
        let reqs = reg.set_watches(1);
        assert!(reqs.len() >= 2);
        let mut total = 0;
        for r in &reqs {
            let bytes: usize = r.data_watches.iter().map(String::len).sum();
            assert!(bytes <= SET_WATCHES_BATCH_BYTES_MAX);
            assert_eq!(r.relative_zxid, 1);
            total += r.data_watches.len();
        }
        assert_eq!(total, 300);
    }

    #[test]
    fn abandoned_oneshots_are_pruned_on_the_next_registration() {
        let mut reg = WatchRegistry::default();
        for _ in 0..10 {
            drop(oneshot_on(&mut reg, OneshotKind::Data, "/a"));
        }
        assert!(reg.len() <= 1);
    }
}
