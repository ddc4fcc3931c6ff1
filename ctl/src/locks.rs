//! `wardenctl locks --http ADDR`: every lock the servers recognise (HTTP
//! leases, the recipes' locks, ZooKeeper clients' locks), from
//! `GET /api/v1/locks`, page after page, as a table for people or one
//! JSON object per lock (the server's, as it sent it) with `--json`.

use std::io::{self, Write as _};
use std::time::Duration;

use serde_json::Value;
use warden_client::TlsOptions;

use super::{http_get, Failure, Output};

/// Largest page answer accepted (a page of 1000 locks with their waiters
/// stays well below).
const PAGE_BYTES_MAX: u64 = 64 << 20;

#[derive(Debug, clap::Args)]
pub struct LocksArgs {
    /// The HTTP address of a server (`warden serve --http-listen`).
    #[arg(long, value_name = "ADDR", env = "WARDEN_HTTP")]
    http: String,
    /// Only locks of this kind: http-lease, lease, mutex, kazoo, zk-lock,
    /// election.
    #[arg(long)]
    kind: Option<String>,
    /// List each lock's waiters too (a WAITING column; `waiting` in JSON).
    #[arg(long)]
    waiters: bool,
    /// Read what this server has applied, without confirming with the
    /// leader (faster, possibly stale on a follower).
    #[arg(long)]
    local: bool,
    /// Locks asked for per request (all pages are read).
    #[arg(long, value_name = "N", default_value_t = 100)]
    page: usize,
}

fn fail(message: impl Into<String>) -> Failure {
    Failure::Exit {
        code: 1,
        message: message.into(),
    }
}

pub async fn run(
    args: &LocksArgs,
    tls: Option<TlsOptions>,
    auth: Option<&str>,
    timeout: Duration,
    out: &Output,
) -> Result<(), Failure> {
    let mut query = format!("limit={}", args.page);
    if let Some(kind) = &args.kind {
        query.push_str(&format!("&kind={}", encode(kind)));
    }
    if args.waiters {
        query.push_str("&waiters=list");
    }
    if args.local {
        query.push_str("&consistency=local");
    }
    let mut locks = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/locks?{query}");
        if let Some(a) = &after {
            path.push_str(&format!("&after={}", encode(a)));
        }
        let fetch = http_get::fetch(&args.http, &path, tls.clone(), auth, PAGE_BYTES_MAX);
        let body = tokio::time::timeout(timeout, fetch)
            .await
            .map_err(|_| fail(format!("{}: no answer within the timeout", args.http)))??;
        let page: Value = serde_json::from_slice(&body)
            .map_err(|e| fail(format!("{}: not a JSON answer: {e}", args.http)))?;
        let listed = page["locks"]
            .as_array()
            .ok_or_else(|| fail(format!("{}: an answer without locks", args.http)))?;
        for lock in listed {
            if out.json {
                out.json_line(lock)?;
            } else {
                locks.push(lock.clone());
            }
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    if !out.json {
        print_table(&locks, args.waiters)?;
    }
    Ok(())
}

/// Who holds or waits, for people: a lease's label (the server never
/// shows a lease's client id, its holder's secret), the node's text, else
/// the session.
fn who(c: &Value) -> String {
    if let Some(id) = c["label"].as_str().or(c["client_id"].as_str()) {
        return id.to_string();
    }
    match c["session_id"].as_str() {
        Some(s) => format!("session {s}"),
        None => "-".to_string(),
    }
}

fn print_table(locks: &[Value], waiters: bool) -> Result<(), Failure> {
    let mut rows = vec![vec![
        "KIND".to_string(),
        "LOCK".to_string(),
        "HOLDER".to_string(),
        "TOKEN".to_string(),
        "WAITERS".to_string(),
    ]];
    if waiters {
        rows[0].push("WAITING".to_string());
    }
    for l in locks {
        let mut row = vec![
            l["kind"].as_str().unwrap_or("?").to_string(),
            l["name"].as_str().unwrap_or("?").to_string(),
            who(&l["holder"]),
            l["holder"]["fencing_token"].to_string(),
            l["waiters"].to_string(),
        ];
        if waiters {
            let waiting: Vec<String> = l["waiting"]
                .as_array()
                .map(|w| w.iter().map(who).collect())
                .unwrap_or_default();
            row.push(if waiting.is_empty() {
                "-".to_string()
            } else {
                waiting.join(", ")
            });
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut stdout = io::stdout().lock();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        writeln!(stdout, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Percent-encodes a query value (a znode path may hold any character
/// but NUL); `/` and the unreserved characters stay as they are.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("/locks/a b&c=d%é"), "/locks/a%20b%26c%3Dd%25%C3%A9");
        assert_eq!(
            encode("/warden/http-locks/jobs.x_y~"),
            "/warden/http-locks/jobs.x_y~"
        );
    }

    #[test]
    fn holders_show_a_client_id_or_a_session() {
        assert_eq!(who(&serde_json::json!({"client_id": "w-7"})), "w-7");
        assert_eq!(
            who(&serde_json::json!({"label": "h-0123456789ab"})),
            "h-0123456789ab"
        );
        assert_eq!(
            who(&serde_json::json!({"session_id": "0x1"})),
            "session 0x1"
        );
        assert_eq!(who(&serde_json::json!({})), "-");
    }
}
