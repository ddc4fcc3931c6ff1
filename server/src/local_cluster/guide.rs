//! What the supervisor prints once every node is ready: the connect
//! string on stdout and a short guide on stderr.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use super::{
    Plan, ME, SERVERS_LINE_PREFIX, TLS_CA_LINE_PREFIX, TLS_CERT_LINE_PREFIX, TLS_KEY_LINE_PREFIX,
    ZK_SERVERS_LINE_PREFIX,
};

/// The stdout line, and a short guide on stderr.
pub(super) fn announce(
    plan: &Plan,
    ready: &BTreeMap<u64, String>,
    pids: &BTreeMap<u64, Option<u32>>,
) {
    let servers = ready.values().cloned().collect::<Vec<_>>().join(",");
    let zk_servers = plan
        .nodes
        .iter()
        .map(|n| n.zk.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // With TLS, absolute paths, so the lines work from any directory.
    let absolute = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let tls = plan
        .client_cert()
        .zip(plan.tls_dir.clone())
        .map(|(client, dir)| {
            (
                absolute(dir.join(crate::tls::certs::CA_FILE)),
                absolute(client.cert),
                absolute(client.key),
            )
        });
    let mut stdout = std::io::stdout().lock();
    let tls_lines = |out: &mut std::io::StdoutLock<'_>| match &tls {
        None => Ok(()),
        Some((ca, cert, key)) => writeln!(
            out,
            "{TLS_CA_LINE_PREFIX}{}\n{TLS_CERT_LINE_PREFIX}{}\n{TLS_KEY_LINE_PREFIX}{}",
            ca.display(),
            cert.display(),
            key.display()
        ),
    };

    let mut guide = format!("{ME}: {} nodes ready\n", plan.nodes.len());
    for node in &plan.nodes {
        let pid = pids
            .get(&node.id)
            .copied()
            .flatten()
            .map_or_else(|| "?".to_string(), |p| p.to_string());
        guide += &format!(
            "  node {}  client {}  zookeeper {}  peer {}  pid {pid}  log {}\n",
            node.id,
            node.client,
            node.zk,
            node.peer,
            node.log.display()
        );
    }
    let last = plan.nodes.last().map_or(1, |n| n.id);
    let wardenctl = match &tls {
        None => "wardenctl".to_string(),
        Some((ca, cert, key)) => format!(
            "wardenctl --tls-ca {} --tls-cert {} --tls-key {}",
            ca.display(),
            cert.display(),
            key.display()
        ),
    };
    if tls.is_some() {
        guide +=
            "TLS everywhere: client, ZooKeeper and HTTP ports speak TLS only, peers mutual TLS\n";
    }
    guide += &format!(
        "Use it from another shell:\n  \
           export {SERVERS_LINE_PREFIX}{servers}\n  \
           {wardenctl} ls /\n\
         Fail a node:  kill -9 $(cat {})  (nodes are not restarted)\n\
         Ctrl-C stops the cluster; data and logs stay in {}",
        plan.dir.join(format!("node-{last}.pid")).display(),
        plan.dir.display()
    );
    // The guide goes out before the lines scripts wait for, so whoever
    // has read those lines finds the guide already written.
    eprintln!("{guide}");
    if let Err(e) = writeln!(stdout, "{SERVERS_LINE_PREFIX}{servers}")
        .and_then(|()| writeln!(stdout, "{ZK_SERVERS_LINE_PREFIX}{zk_servers}"))
        .and_then(|()| tls_lines(&mut stdout))
        .and_then(|()| stdout.flush())
    {
        // Stdout may be a closed pipe; the cluster is still worth running.
        eprintln!("{ME}: warning: cannot write to stdout: {e}");
    }
    drop(stdout);
}
