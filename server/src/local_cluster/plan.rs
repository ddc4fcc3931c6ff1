//! The plan: flags checked into ports, directories and `warden serve`
//! arguments per node, and the checks made before anything starts.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::path::PathBuf;

use clap::Args;

use super::{
    node_cert_name, LocalClusterError, BASE_PORT_DEFAULT, CLIENT_CERT_NAME, HTTP_PORT_OFFSET,
    NODE_COUNTS, PEER_PORT_OFFSET, TLS_DIR, ZK_PORT_OFFSET,
};

/// Flags of `warden local-cluster`.
#[derive(Debug, Clone, Args)]
pub struct LocalClusterArgs {
    /// How many nodes: 3 (survives one failure) or 5 (survives two).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Node i keeps its data in DIR/node-i and its log in DIR/node-i.log.
    #[arg(long, value_name = "DIR", default_value = "warden-local-cluster")]
    pub data_dir: PathBuf,
    /// Node i listens for clients on P+i-1, for peers on P+100+i-1 and for
    /// HTTP on P+200+i-1 and for ZooKeeper clients on P+300+i-1, all on
    /// 127.0.0.1.
    #[arg(long, value_name = "P", default_value_t = BASE_PORT_DEFAULT)]
    pub base_port: u16,
    /// Raft tick of every node (default: that of `warden serve`).
    #[arg(long)]
    pub tick_ms: Option<u64>,
    /// TLS everywhere: a throwaway CA and certificates in DIR/tls (node-i
    /// for each node, `client` for wardenctl), every port TLS only, peer
    /// links mutual TLS.
    #[arg(long)]
    pub tls: bool,
}

/// Everything about the cluster decided before anything starts.
#[derive(Debug, Clone)]
pub struct Plan {
    pub dir: PathBuf,
    /// Passed through to every node; `warden serve` checks the range, so
    /// the rule lives in one place.
    pub tick_ms: Option<u64>,
    pub nodes: Vec<NodePlan>,
    /// With `--tls`: where the CA and certificates go (`DIR/tls`).
    pub tls_dir: Option<PathBuf>,
}

/// One node's addresses and files.
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub id: u64,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub http: SocketAddr,
    /// ZooKeeper-protocol address.
    pub zk: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub pid_file: PathBuf,
}

impl LocalClusterArgs {
    pub fn validate(self) -> Result<Plan, LocalClusterError> {
        if !NODE_COUNTS.contains(&self.nodes) {
            return Err(LocalClusterError::Nodes(self.nodes));
        }
        let base = self.base_port;
        // The highest port handed out: the last node's ZooKeeper port.
        let last = u32::from(base) + u32::from(ZK_PORT_OFFSET) + self.nodes as u32 - 1;
        if base == 0 || last > u32::from(u16::MAX) {
            return Err(LocalClusterError::BasePort {
                base,
                nodes: self.nodes,
                last,
            });
        }
        let at = |offset: u16, i: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, base + offset + i));
        let nodes = (1..=self.nodes as u16)
            .map(|id| NodePlan {
                id: u64::from(id),
                client: at(0, id - 1),
                peer: at(PEER_PORT_OFFSET, id - 1),
                http: at(HTTP_PORT_OFFSET, id - 1),
                zk: at(ZK_PORT_OFFSET, id - 1),
                data_dir: self.data_dir.join(format!("node-{id}")),
                log: self.data_dir.join(format!("node-{id}.log")),
                pid_file: self.data_dir.join(format!("node-{id}.pid")),
            })
            .collect();
        Ok(Plan {
            tls_dir: self.tls.then(|| self.data_dir.join(TLS_DIR)),
            dir: self.data_dir,
            tick_ms: self.tick_ms,
            nodes,
        })
    }
}

impl Plan {
    /// `--peers` of every node: `1=127.0.0.1:7100,2=...`.
    pub fn peers(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The arguments after `warden` that start `node`.
    pub fn serve_args(&self, node: &NodePlan) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "serve".into(),
            "--id".into(),
            node.id.to_string().into(),
            "--peers".into(),
            self.peers().into(),
            "--peer-listen".into(),
            node.peer.to_string().into(),
            "--listen".into(),
            node.client.to_string().into(),
            "--http-listen".into(),
            node.http.to_string().into(),
            "--zk-listen".into(),
            node.zk.to_string().into(),
            "--data-dir".into(),
            node.data_dir.clone().into(),
        ];
        if let Some(tick_ms) = self.tick_ms {
            args.extend(["--tick-ms".into(), tick_ms.to_string().into()]);
        }
        if let Some(tls) = &self.tls_dir {
            let name = node_cert_name(node.id);
            args.extend([
                "--tls-cert".into(),
                tls.join(format!("{name}.pem")).into(),
                "--tls-key".into(),
                tls.join(format!("{name}-key.pem")).into(),
                "--tls-ca".into(),
                tls.join(crate::tls::certs::CA_FILE).into(),
            ]);
        }
        args
    }

    /// With `--tls`: the certificate wardenctl presents (`client.pem`).
    pub fn client_cert(&self) -> Option<crate::tls::certs::Issued> {
        self.tls_dir.as_ref().map(|tls| crate::tls::certs::Issued {
            cert: tls.join(format!("{CLIENT_CERT_NAME}.pem")),
            key: tls.join(format!("{CLIENT_CERT_NAME}-key.pem")),
            member_id: None,
        })
    }
}

/// Creates the directory and checks every port is free, so that a clash
/// (another cluster still running, say) is one clear error up front rather
/// than nodes failing one by one. The HTTP ports are not checked: nothing
/// binds them yet.
pub(super) fn prepare(plan: &Plan) -> Result<(), LocalClusterError> {
    std::fs::create_dir_all(&plan.dir).map_err(|source| LocalClusterError::CreateDir {
        path: plan.dir.clone(),
        source,
    })?;
    if let Some(tls) = &plan.tls_dir {
        use crate::tls::certs::{Ca, Role, LOCAL_SANS};
        // The CA is kept across runs of the same directory; the node and
        // client certificates are made anew each time.
        let ca = Ca::open_or_create(tls)?;
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        for node in &plan.nodes {
            ca.issue(&node_cert_name(node.id), Role::Node, &sans)?;
        }
        ca.issue(CLIENT_CERT_NAME, Role::Client, &[])?;
    }
    let mut held = Vec::new();
    for node in &plan.nodes {
        for (what, addr) in [
            ("client", node.client),
            ("peer", node.peer),
            ("ZooKeeper", node.zk),
        ] {
            let listener =
                StdTcpListener::bind(addr).map_err(|source| LocalClusterError::Port {
                    id: node.id,
                    what,
                    addr,
                    source,
                })?;
            // Held until all are checked, then released for the nodes.
            held.push(listener);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LocalClusterArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, LocalClusterError> {
        let mut all = vec!["warden"];
        all.extend_from_slice(args);
        Cli::parse_from(all).args.validate()
    }

    #[test]
    fn defaults_lay_out_three_nodes() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.dir, PathBuf::from("warden-local-cluster"));
        let n2 = &p.nodes[1];
        assert_eq!(n2.id, 2);
        assert_eq!(n2.client.to_string(), "127.0.0.1:7001");
        assert_eq!(n2.peer.to_string(), "127.0.0.1:7101");
        assert_eq!(n2.http.to_string(), "127.0.0.1:7201");
        assert_eq!(n2.data_dir, PathBuf::from("warden-local-cluster/node-2"));
        assert_eq!(n2.log, PathBuf::from("warden-local-cluster/node-2.log"));
        assert_eq!(
            p.peers(),
            "1=127.0.0.1:7100,2=127.0.0.1:7101,3=127.0.0.1:7102"
        );
    }

    #[test]
    fn serve_args_name_this_node_and_all_peers() {
        let p = plan(&[
            "--nodes",
            "5",
            "--base-port",
            "9000",
            "--data-dir",
            "/d",
            "--tick-ms",
            "20",
        ])
        .unwrap();
        let args: Vec<String> = p
            .serve_args(&p.nodes[4])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let flag = |name: &str| {
            let i = args.iter().position(|a| a == name).unwrap();
            args[i + 1].clone()
        };
        assert_eq!(args[0], "serve");
        assert_eq!(flag("--id"), "5");
        assert_eq!(flag("--listen"), "127.0.0.1:9004");
        assert_eq!(flag("--peer-listen"), "127.0.0.1:9104");
        assert!(flag("--peers").ends_with(",5=127.0.0.1:9104"));
        assert_eq!(flag("--peers").split(',').count(), 5);
        assert_eq!(flag("--data-dir"), "/d/node-5");
        assert_eq!(flag("--tick-ms"), "20");
        assert!(!plan(&[])
            .unwrap()
            .serve_args(&p.nodes[0])
            .contains(&"--tick-ms".into()));
    }

    #[test]
    fn only_three_or_five_nodes() {
        for n in ["0", "1", "2", "4", "6", "7"] {
            let e = plan(&["--nodes", n]).unwrap_err();
            assert!(e.to_string().contains("--nodes must be 3 or 5"), "{e}");
        }
        assert_eq!(plan(&["--nodes", "5"]).unwrap().nodes.len(), 5);
    }

    #[test]
    fn ports_must_fit() {
        assert!(plan(&["--base-port", "0"]).is_err());
        // 65233 + 300 + 2 = 65535 is the last usable layout for 3 nodes.
        assert!(plan(&["--base-port", "65233"]).is_ok());
        let e = plan(&["--base-port", "65234"]).unwrap_err();
        assert!(e.to_string().contains("65234..=65536"), "{e}");
    }
}
