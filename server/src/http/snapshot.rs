//! `GET /api/v1/snapshot`: a backup of the whole state, as a snapshot file
//! (`raft/snapfile.rs`: header, raft's metadata, the tree, xxh3 checksum),
//! the very format a data dir keeps its snapshots in, so `warden restore`
//! reads it with the same checks.
//!
//! Consistent and complete: the handler first does a linearizable read
//! on a session of its own (ReadIndex: this server has applied every write
//! acknowledged before the request), then asks the core to freeze the tree
//! as applied now (a pointer per node). Any server answers, not only the
//! leader.
//!
//! Streamed, never built whole: a blocking thread, off the core, encodes
//! the frozen view once to learn its length (the header and
//! `Content-Length` announce it), then again in chunks of about 64 KiB
//! ([`crate::tree::STREAM_CHUNK`]) sent as they are made, at most
//! [`CHUNKS_QUEUED`] ahead of the client ([`crate::backupfile::Writer`]
//! hashes them and ends the file with the checksum). Memory is the view's
//! pointers and a few chunks, whatever the tree's size. A client that goes
//! away stops the encoding; if the encoding failed midway the connection
//! would close short of its `Content-Length`, which a client sees as
//! truncated.
//!
//! Only the admin may take one ([`crate::authority`], `Action::Backup`):
//! a backup holds every znode whatever its ACL, and every session's
//! password. With `--super-digest` that is the super user
//! (`Authorization: Basic` of its user:password, or a bearer token
//! standing for it); without, callers on this server's own host.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tracing::info;

use super::{ApiError, CallerAddr, Http};
use crate::authority::Action;
use crate::core::CoreMsg;

/// Chunks encoded ahead of what the client has taken.
const CHUNKS_QUEUED: usize = 4;

pub(crate) async fn snapshot(
    State(http): State<Arc<Http>>,
    ConnectInfo(CallerAddr(from)): ConnectInfo<CallerAddr>,
    headers: HeaderMap,
) -> Response {
    match take(&http, &headers, from).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn take(http: &Http, headers: &HeaderMap, from: SocketAddr) -> Result<Response, ApiError> {
    let credentials = http.authorize(Action::Backup, headers, from)?;
    // Every write acknowledged before this request is applied here once
    // the linearizable read answers.
    let client = http.locks.connect(credentials.as_deref()).await?;
    let synced = client.exists_linearizable("/").await;
    let _ = client.close().await;
    synced.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no leader confirmed the snapshot's read (no quorum?): {e}"),
        )
    })?;
    let (tx, rx) = oneshot::channel();
    let unavailable = || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    http.core
        .send(CoreMsg::Freeze { reply: tx })
        .await
        .map_err(|_| unavailable())?;
    let crate::core::Frozen { meta, view } = rx
        .await
        .map_err(|_| unavailable())?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let nodes = view.node_count();
    let index = meta.index;
    let term = meta.term;
    let internal = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    let (view, data_len) = tokio::task::spawn_blocking(move || {
        let mut view = view;
        let len = view.encoded_len();
        (view, len)
    })
    .await
    .map_err(|e| internal(e.to_string()))?;
    let (mut writer, head, total) =
        crate::backupfile::Writer::start(&meta, data_len as u64).map_err(internal)?;
    let (tx, mut rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    tokio::task::spawn_blocking(move || {
        let send = |chunk: Vec<u8>| tx.blocking_send(Bytes::from(chunk)).is_ok();
        let sent = send(head)
            && view.encode_chunks(|chunk| {
                writer.data(&chunk);
                send(chunk)
            })
            && send(writer.trailer().to_vec());
        crate::core::snapshots::release_freed_memory();
        if sent {
            info!(index, term, nodes, bytes = total, "backup snapshot sent");
        } else {
            info!(
                index,
                term, "backup snapshot not sent whole: the client went away"
            );
        }
    });
    let body =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|c| c.map(Ok::<_, Infallible>)));
    let name = format!("warden-{index}-{term}.snap");
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
            (header::CONTENT_LENGTH, total.to_string()),
            (
                header::HeaderName::from_static("x-warden-snapshot-index"),
                index.to_string(),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}
