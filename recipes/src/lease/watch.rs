//! Watching a lease's holder: each change of holder, fencing token or
//! expiry, in order, each with its [`LeaseView::version`].
//!
//! A persistent recursive watch on the lease's queue node (which need not
//! exist) delivers every creation, deletion and data change under it, in
//! zxid order, across reconnects. Each event that can change the holder
//! (a member created or deleted, the holder's node written) is followed by
//! a read of the lease ([`LeaseLock::view`]); a read that finds the same
//! holder, token and expiry yields nothing. Waiters' touches (writes of
//! other members) are skipped without a read.
//!
//! The watch is set *before* the first read, so no change after that read
//! is missed; but changes may coalesce: two changes that land before one
//! read are seen as the second (as any ZooKeeper-style watch, this gives
//! every state that lasted long enough to be read, not every transition).
//! The stream ends with an error when the session ends or the watch lags
//! too far behind (`WatchLagged`).

use futures::{FutureExt as _, StreamExt as _};
use warden_client::{EventType, PersistentWatch, WatchEvent};

use super::{check_name, join_path, LeaseLock, LeaseView};
use crate::error::{Error, Result};

/// A lease's holder changes: see the module docs. Made by
/// [`LeaseLock::watch`]; dropping it removes the server's watch.
#[derive(Debug)]
pub struct LeaseWatch {
    lock: LeaseLock,
    name: String,
    dir: String,
    events: PersistentWatch,
    /// The last view yielded, and the holder's node name then.
    last: Option<(LeaseView, Option<String>)>,
    /// Events that may have changed the holder were taken and the lease
    /// not read since (a cancelled `next` reads first thing next time).
    dirty: bool,
}

impl LeaseLock {
    /// Watches lease `name`'s holder. The first [`LeaseWatch::next`] is
    /// the lease as it is now; each later one the next change of holder,
    /// token or expiry.
    pub async fn watch(&self, name: &str) -> Result<LeaseWatch> {
        check_name(name)?;
        let dir = self.dir(name);
        let events = self.client.watch(&dir, true).await?;
        Ok(LeaseWatch {
            lock: self.clone(),
            name: name.to_string(),
            dir,
            events,
            last: None,
            dirty: false,
        })
    }
}

impl LeaseWatch {
    /// The lease now (first call), then its next holder change. Cancel
    /// safe between changes: a dropped call loses no event.
    pub async fn next(&mut self) -> Result<LeaseView> {
        loop {
            if let (Some((_, head)), false) = (&self.last, self.dirty) {
                let head = head.clone();
                let mut relevant = false;
                // Wait for one event, then take whatever else is queued
                // already: one read for a burst.
                let first = self.events.next().await;
                relevant |= self.relevant(first, head.as_deref())?;
                while let Some(more) = self.events.next().now_or_never() {
                    relevant |= self.relevant(more, head.as_deref())?;
                }
                if !relevant {
                    continue;
                }
                self.dirty = true;
            }
            let (view, head) = self.lock.view_with_head(&self.name).await?;
            let changed = self
                .last
                .as_ref()
                .is_none_or(|(last, _)| !last.same_holder(&view));
            self.last = Some((view.clone(), head));
            self.dirty = false;
            if changed {
                return Ok(view);
            }
        }
    }

    /// Whether `event` may change the holder (an error ends the watch).
    fn relevant(
        &self,
        event: Option<warden_client::Result<WatchEvent>>,
        head: Option<&str>,
    ) -> Result<bool> {
        let event = match event {
            Some(Ok(e)) => e,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(Error::Client(warden_client::Error::Closed)),
        };
        Ok(match event.event_type {
            EventType::NodeDataChanged => {
                head.is_some_and(|h| event.path == join_path(&self.dir, h))
            }
            _ => true,
        })
    }
}
