//! ZooKeeper's four-letter words, as operators' scripts use them: `ruok`,
//! `srvr`, `stat`, `mntr`, `conf`, `cons`. Each is answered in plain text
//! and the connection closed.

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use crate::core::{CoreMsg, ServerStats};
use crate::tls::Stream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    Ruok,
    Srvr,
    Stat,
    Mntr,
    Conf,
    Cons,
}

impl Word {
    pub fn parse(b: &[u8; 4]) -> Option<Word> {
        match b {
            b"ruok" => Some(Word::Ruok),
            b"srvr" => Some(Word::Srvr),
            b"stat" => Some(Word::Stat),
            b"mntr" => Some(Word::Mntr),
            b"conf" => Some(Word::Conf),
            b"cons" => Some(Word::Cons),
            _ => None,
        }
    }
}

fn mode(s: &ServerStats) -> &'static str {
    if s.members == 1 {
        "standalone"
    } else if s.status.role == "leader" {
        "leader"
    } else {
        "follower"
    }
}

pub fn render(word: Word, s: &ServerStats) -> String {
    let version = concat!("warden-", env!("CARGO_PKG_VERSION"));
    match word {
        Word::Ruok => "imok".to_string(),
        Word::Srvr | Word::Stat => {
            let mut out = format!("Zookeeper version: {version}, compatible\n");
            if word == Word::Stat {
                out.push_str(&format!("Clients:\n {} connection(s)\n\n", s.connections));
            }
            out.push_str(&format!(
                "Latency min/avg/max: 0/0/0\nReceived: 0\nSent: 0\nConnections: {}\nOutstanding: 0\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
                s.connections,
                s.status.applied_index,
                mode(s),
                s.nodes
            ));
            out
        }
        Word::Mntr => format!(
            "zk_version\t{version}\nzk_server_state\t{}\nzk_znode_count\t{}\nzk_watch_count\t{}\nzk_ephemerals_count\t{}\nzk_num_alive_connections\t{}\nzk_outstanding_requests\t0\nzk_approximate_data_size\t0\n",
            mode(s),
            s.nodes,
            s.watches,
            s.ephemerals,
            s.connections
        ),
        Word::Conf => format!(
            "clientPort={}\nserverId={}\ntickTime={}\nminSessionTimeout={}\nmaxSessionTimeout={}\n",
            s.zk_port, s.status.id, s.tick_ms, s.min_session_timeout_ms, s.max_session_timeout_ms
        ),
        Word::Cons => format!("{} connection(s)\n", s.connections),
    }
}

pub async fn answer(mut stream: Stream, word: Word, core: mpsc::Sender<CoreMsg>) {
    let (tx, rx) = oneshot::channel();
    if core.send(CoreMsg::Stats { reply: tx }).await.is_err() {
        return;
    }
    let Ok(stats) = rx.await else { return };
    let _ = stream.write_all(render(word, &stats).as_bytes()).await;
    let _ = stream.shutdown().await;
}
