//! Certificates for TLS tests, made by the real `warden certs` command in
//! a temporary directory: a throwaway CA, server certificates (valid for
//! `localhost` and `127.0.0.1`, serverAuth + clientAuth) and client
//! certificates (subject `CN=<name>`).

use std::path::PathBuf;
use std::process::Command;

use crate::binary;

/// A CA and the certificates it issued, in a directory of their own.
pub struct TlsCerts {
    dir: tempfile::TempDir,
}

impl TlsCerts {
    /// A new CA with one server certificate per name in `nodes` and one
    /// client certificate per name in `clients`.
    pub fn generate(nodes: &[&str], clients: &[&str]) -> TlsCerts {
        let dir = tempfile::Builder::new()
            .prefix("warden-certs-")
            .tempdir()
            .expect("temp dir");
        let mut cmd = Command::new(binary("warden"));
        cmd.arg("certs").arg("--dir").arg(dir.path());
        for n in nodes {
            cmd.args(["--node", n]);
        }
        for c in clients {
            cmd.args(["--client", c]);
        }
        let out = cmd.output().expect("run warden certs");
        assert!(
            out.status.success(),
            "warden certs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TlsCerts { dir }
    }

    /// The CA certificate (what `--tls-ca` takes).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Certificate `name`'s PEM file.
    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pem"))
    }

    /// Certificate `name`'s private key.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}-key.pem"))
    }

    /// `warden serve` flags for TLS everywhere with certificate `node`,
    /// plus `extra` (e.g. `--tls-client-auth required`). A cluster's nodes
    /// each need their own (a peer's certificate names its member id):
    /// [`Self::cluster_args`].
    pub fn server_args(&self, node: &str, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "--tls-cert".to_string(),
            self.cert(node).display().to_string(),
            "--tls-key".to_string(),
            self.key(node).display().to_string(),
            "--tls-ca".to_string(),
            self.ca().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// [`Self::server_args`] for every node of a cluster, each with its
    /// own certificate `n<id>` (made by [`Self::generate_cluster`]).
    pub fn cluster_args(&self, extra: &[&str]) -> Vec<String> {
        self.server_args(&format!("n{}", crate::NODE_ID), extra)
    }

    /// A new CA with node certificates `n1`..`n<nodes>` (each speaking for
    /// its member id) and one client certificate per name in `clients`.
    pub fn generate_cluster(nodes: usize, clients: &[&str]) -> TlsCerts {
        let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Self::generate(&names, clients)
    }

    /// `wardenctl` flags: trust this CA, and present certificate `client`
    /// if given.
    pub fn ctl_args(&self, client: Option<&str>) -> Vec<String> {
        let mut args = vec!["--tls-ca".to_string(), self.ca().display().to_string()];
        if let Some(c) = client {
            args.extend([
                "--tls-cert".to_string(),
                self.cert(c).display().to_string(),
                "--tls-key".to_string(),
                self.key(c).display().to_string(),
            ]);
        }
        args
    }
}
