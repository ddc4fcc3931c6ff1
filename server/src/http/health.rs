//! `/health` and `/status`: the core's member view, as JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tokio::sync::oneshot;
use warden_protocol::pb;

use super::{error, Http};
use crate::core::CoreMsg;

/// How long a handler waits for the core's answer.
pub(crate) const CORE_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// A server whose applied index trails the commit index by more than this
/// many entries is not caught up.
pub const HEALTH_LAG_MAX: u64 = 1000;

#[derive(Serialize)]
struct Member {
    id: u64,
    addr: String,
    client_addr: String,
    role: String,
    term: u64,
    commit_index: u64,
    applied_index: u64,
    lag: u64,
    voter: bool,
    reachable: bool,
}

#[derive(Serialize)]
struct ClusterView {
    server_id: u64,
    /// 0 when no leader is known.
    leader_id: u64,
    members: Vec<Member>,
}

impl From<pb::ClusterStatusResponse> for ClusterView {
    fn from(s: pb::ClusterStatusResponse) -> Self {
        ClusterView {
            server_id: s.server_id,
            leader_id: s.leader_id,
            members: s
                .members
                .into_iter()
                .map(|m| Member {
                    id: m.id,
                    addr: m.addr,
                    client_addr: m.client_addr,
                    role: m.role,
                    term: m.term,
                    commit_index: m.commit_index,
                    applied_index: m.applied_index,
                    lag: m.lag,
                    voter: m.voter,
                    reachable: m.reachable,
                })
                .collect(),
        }
    }
}

pub(crate) async fn cluster_status(http: &Http) -> Option<pb::ClusterStatusResponse> {
    let (tx, rx) = oneshot::channel();
    http.core.send(CoreMsg::Cluster { reply: tx }).await.ok()?;
    tokio::time::timeout(CORE_ANSWER_TIMEOUT, rx)
        .await
        .ok()?
        .ok()
}

/// `GET /status`: the member view of `wardenctl cluster status`.
pub(crate) async fn status(State(http): State<Arc<Http>>) -> Response {
    match cluster_status(&http).await {
        Some(s) => Json(ClusterView::from(s)).into_response(),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the core did not answer"),
    }
}

/// Why this server is not healthy, if it is not.
pub(crate) fn unhealthy_reason(s: &pb::ClusterStatusResponse) -> Option<String> {
    if s.leader_id == 0 {
        return Some("no leader is known".into());
    }
    let voters = s.members.iter().filter(|m| m.voter).count();
    let reachable = s
        .members
        .iter()
        .filter(|m| m.voter && (m.reachable || m.id == s.server_id))
        .count();
    if reachable * 2 <= voters {
        return Some(format!(
            "cut off from the quorum: {reachable} of {voters} voters reachable"
        ));
    }
    if s.leader_id != s.server_id {
        let leader_reachable = s.members.iter().any(|m| m.id == s.leader_id && m.reachable);
        if !leader_reachable {
            return Some(format!("leader {} is not reachable", s.leader_id));
        }
    }
    if let Some(me) = s.members.iter().find(|m| m.id == s.server_id) {
        if me.lag > HEALTH_LAG_MAX {
            return Some(format!(
                "not caught up: applied index {} trails commit index {}",
                me.applied_index, me.commit_index
            ));
        }
    }
    None
}

/// `GET /health`: 200 when this server is in a group with a leader, can
/// reach a quorum and has applied what is committed; 503 with the reason
/// otherwise.
pub(crate) async fn health(State(http): State<Arc<Http>>) -> Response {
    let Some(s) = cluster_status(&http).await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"healthy": false, "reason": "the core did not answer"})),
        )
            .into_response();
    };
    http.metrics.record_cluster(&s);
    match unhealthy_reason(&s) {
        None => Json(serde_json::json!({
            "healthy": true,
            "server_id": s.server_id,
            "leader_id": s.leader_id,
        }))
        .into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "healthy": false,
                "reason": reason,
                "server_id": s.server_id,
                "leader_id": s.leader_id,
            })),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, reachable: bool, lag: u64) -> pb::MemberStatus {
        pb::MemberStatus {
            id,
            voter: true,
            reachable,
            lag,
            ..Default::default()
        }
    }

    fn view(me: u64, leader: u64, members: Vec<pb::MemberStatus>) -> pb::ClusterStatusResponse {
        pb::ClusterStatusResponse {
            server_id: me,
            leader_id: leader,
            members,
        }
    }

    #[test]
    fn healthy_with_a_leader_and_a_quorum() {
        let s = view(
            2,
            1,
            vec![member(1, true, 0), member(2, true, 0), member(3, false, 0)],
        );
        assert_eq!(unhealthy_reason(&s), None);
    }

    #[test]
    fn unhealthy_without_leader_quorum_or_catch_up() {
        let s = view(
            2,
            0,
            vec![member(1, true, 0), member(2, true, 0), member(3, true, 0)],
        );
        assert!(unhealthy_reason(&s).unwrap().contains("no leader"));
        // The member view marks only peers; this server counts as reachable.
        let s = view(
            2,
            1,
            vec![
                member(1, false, 0),
                member(2, false, 0),
                member(3, false, 0),
            ],
        );
        assert!(unhealthy_reason(&s).unwrap().contains("quorum"));
        let s = view(
            2,
            1,
            vec![member(1, false, 0), member(2, true, 0), member(3, true, 0)],
        );
        assert!(unhealthy_reason(&s).unwrap().contains("leader 1"));
        let s = view(
            2,
            1,
            vec![
                member(1, true, 0),
                member(2, true, HEALTH_LAG_MAX + 1),
                member(3, true, 0),
            ],
        );
        assert!(unhealthy_reason(&s).unwrap().contains("caught up"));
    }
}
