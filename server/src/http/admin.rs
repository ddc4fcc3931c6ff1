//! ZooKeeper's AdminServer on the HTTP port: `GET /commands/NAME` answers
//! each four-letter word as JSON shaped like ZooKeeper 3.8's (the same
//! names and aliases: `monitor`/`mntr`, `server_stats`/`srvr`, ...), for
//! the tools that use the AdminServer instead of the words. `GET
//! /commands` lists them. The figures are the words' own
//! ([`crate::zk::fourletter`]). Commands whose word is off
//! `--4lw-whitelist` (those that list sessions, clients or paths, or reset
//! statistics) are the admin's ([`crate::authority`]).

use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::{CallerAddr, Http};
use crate::authority::Action;
use crate::core::admin::{AdminReport, ConnReport};
use crate::zk::fourletter::{self, Host, Word, FULL_VERSION, NOT_SERVING, WORDS};

/// `GET /commands`: a page of links, as ZooKeeper's.
pub(crate) async fn list() -> Response {
    let mut page = String::from("<h1>Commands</h1>\n");
    for (_, _, names) in WORDS {
        page.push_str(&format!(
            "<a href=\"/commands/{0}\">{0}</a><br/>\n",
            names[0]
        ));
    }
    ([(header::CONTENT_TYPE, "text/html")], page).into_response()
}

/// `GET /commands/{name}`: answered if [`crate::authority`] lets the
/// caller have it (its word is on `--4lw-whitelist`, or the caller is the
/// admin), else 401/403 with the reason in `error`.
pub(crate) async fn command(
    State(http): State<Arc<Http>>,
    ConnectInfo(CallerAddr(from)): ConnectInfo<CallerAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(word) = Word::from_command(&name) else {
        return answer(
            StatusCode::NOT_FOUND,
            Value::Null,
            Map::new(),
            Some(format!("Unknown command: {name}")),
        );
    };
    let cmd = Value::from(word.command());
    if let Err(refused) = http.authorize(Action::AdminCommand(word), &headers, from) {
        return answer(
            refused.status(),
            cmd,
            Map::new(),
            Some(refused.message().to_string()),
        );
    }
    let Some(r) = fourletter::report(&http.core, word).await else {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            cmd,
            Map::new(),
            Some("the server is shutting down".into()),
        );
    };
    if !word.always_answered() && !fourletter::answering(&r) {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            cmd,
            Map::new(),
            Some(NOT_SERVING.into()),
        );
    }
    let host = fourletter::host(r.stats.data_dir.clone(), word).await;
    answer(StatusCode::OK, cmd, fields(word, &r, &host), None)
}

/// ZooKeeper's envelope: the command's fields, `command` and `error`.
fn answer(
    status: StatusCode,
    command: Value,
    mut fields: Map<String, Value>,
    error: Option<String>,
) -> Response {
    fields.insert("command".into(), command);
    fields.insert("error".into(), error.map_or(Value::Null, Value::from));
    (status, Json(Value::Object(fields))).into_response()
}

fn connection(c: &ConnReport) -> Value {
    let f = &c.figures;
    let mut m = json!({
        "remote_socket_address": c.peer.to_string(),
        "interest_ops": 1,
        "outstanding_requests": c.outstanding,
        "packets_received": f.received,
        "packets_sent": f.sent,
    });
    if c.session_id != 0 {
        let l = &f.latency;
        let more = json!({
            "session_id": format!("{:x}", c.session_id),
            "last_operation": f.last_op,
            "established": f.established_ms,
            "session_timeout": c.session_timeout_ms,
            "last_cxid": f.last_cxid.map_or(-1, |x| x as i64),
            "last_zxid": f.last_zxid,
            "last_response_time": f.last_response_ms,
            "last_latency": l.last_ms(),
            "min_latency": l.min_ms(),
            "avg_latency": l.avg_ms() as u64,
            "max_latency": l.max_ms(),
        });
        if let (Value::Object(m), Value::Object(more)) = (&mut m, more) {
            m.extend(more);
        }
    }
    m
}

/// `server_stats` (and `stats`): ZooKeeper's ServerStats bean.
fn server_stats(r: &AdminReport, host: &Host) -> Value {
    let l = &r.server.latency;
    json!({
        "packets_sent": r.server.sent,
        "packets_received": r.server.received,
        "data_dir_size": host.data_dir_bytes,
        "log_dir_size": host.data_dir_bytes,
        "last_processed_zxid": r.stats.status.applied_index,
        "outstanding_requests": r.outstanding,
        "server_state": fourletter::mode(r),
        "avg_latency": (l.avg_ms() * 10_000.0).round() / 10_000.0,
        "max_latency": l.max_ms(),
        "min_latency": l.min_ms(),
        "num_alive_client_connections": r.stats.connections,
        "provider_null": false,
        "uptime": r.server.started.elapsed().as_millis() as u64,
    })
}

fn fields(word: Word, r: &AdminReport, host: &Host) -> Map<String, Value> {
    let s = &r.stats;
    let v = match word {
        Word::Ruok | Word::Crst | Word::Srst => json!({}),
        Word::Srvr | Word::Stat => {
            let mut v = json!({
                "version": FULL_VERSION,
                "read_only": s.read_only,
                "server_stats": server_stats(r, host),
                "node_count": s.nodes,
            });
            if word == Word::Stat {
                v["connections"] = r.connections.iter().map(connection).collect();
                v["secure_connections"] = json!([]);
            }
            v
        }
        Word::Cons => json!({
            "connections": r.connections.iter().map(connection).collect::<Vec<_>>(),
            "secure_connections": [],
        }),
        Word::Mntr => Value::Object(
            fourletter::monitor(r, host, false)
                .into_iter()
                .map(|(k, v)| {
                    // Numbers as numbers, as ZooKeeper's JSON has them.
                    let value = v
                        .parse::<i64>()
                        .map(Value::from)
                        .or_else(|_| v.parse::<f64>().map(Value::from))
                        .unwrap_or(Value::from(v));
                    (k.to_string(), value)
                })
                .collect(),
        ),
        Word::Envi => Value::Object(
            fourletter::environment(&s.data_dir)
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::from(v)))
                .collect(),
        ),
        Word::Conf => {
            let dir = s.data_dir.display().to_string();
            let mut v = json!({
                "data_dir": dir,
                "data_dir_size": host.data_dir_bytes,
                "data_log_dir": dir,
                "data_log_size": host.data_dir_bytes,
                "tick_time": s.tick_ms,
                "max_client_cnxns": s.max_client_cnxns,
                "min_session_timeout": s.min_session_timeout_ms,
                "max_session_timeout": s.max_session_timeout_ms,
                "server_id": s.status.id,
                "client_port_listen_backlog": -1,
            });
            let port = if s.zk_tls {
                "secure_client_port"
            } else {
                "client_port"
            };
            v[port] = json!(s.zk_port);
            v
        }
        Word::Dirs => json!({
            "datadir_size": host.data_dir_bytes,
            "logdir_size": host.data_dir_bytes,
        }),
        Word::Wchs => {
            let paths: std::collections::BTreeSet<&String> =
                r.watches.iter().flat_map(|(_, p)| p).collect();
            json!({
                "num_connections": r.watches.len(),
                "num_paths": paths.len(),
                "num_total_watches": s.watches,
            })
        }
        Word::Wchc => {
            let by_session: Map<String, Value> = r
                .watches
                .iter()
                .map(|(sid, paths)| ((*sid as i64).to_string(), json!(paths)))
                .collect();
            json!({ "session_id_to_watched_paths": by_session })
        }
        Word::Wchp => {
            let mut by_path: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
            for (sid, paths) in &r.watches {
                for p in paths {
                    by_path.entry(p).or_default().push(*sid as i64);
                }
            }
            json!({ "path_to_session_ids": by_path })
        }
        Word::Dump => {
            let ephemerals: Map<String, Value> = r
                .sessions
                .iter()
                .filter(|s| !s.ephemerals.is_empty())
                .map(|s| ((s.session_id as i64).to_string(), json!(s.ephemerals)))
                .collect();
            let timeouts: Map<String, Value> = r
                .sessions
                .iter()
                .map(|s| ((s.session_id as i64).to_string(), json!(s.timeout_ms)))
                .collect();
            json!({
                "session_id_to_ephemeral_paths": ephemerals,
                "session_id_to_timeout_ms": timeouts,
            })
        }
        Word::Isro => json!({ "read_only": s.read_only }),
        Word::Hash => json!({
            "digests": r.digest.iter().map(|d| json!({
                "zxid": d.zxid,
                "digest": d.digest as i64,
            })).collect::<Vec<_>>(),
        }),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
