//! [`Server`]: one single-node `warden serve` with its own data directory.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Instant;

use crate::ports::{free_ports, PORT_ATTEMPTS_MAX};
use crate::process::{keep_on_panic, Process};
use crate::{ServerOptions, READY_TIMEOUT};

/// A running `warden serve` process with its own data directory.
pub struct Server {
    process: Process,
    dir: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("warden-test-")
            .tempdir()
            .expect("temp dir");
        // Ports below the ephemeral range, so that a restart finds its
        // ports free again (see `free_ports`); a port taken between the
        // check and the bind means another try on new ports.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ports = free_ports(3);
            let ip = &opts.listen_ip;
            let mut process = Process::new(
                dir.path().to_path_buf(),
                format!("{ip}:{}", ports[0]),
                None,
                opts.clone(),
            );
            process.zk_listen = format!("{ip}:{}", ports[1]);
            process.http_listen = format!("{ip}:{}", ports[2]);
            let mut s = Server { process, dir: None };
            s.process.launch();
            match s.process.try_await_ready(Instant::now() + READY_TIMEOUT) {
                Ok(()) => {
                    s.dir = Some(dir);
                    return s;
                }
                Err(e) if attempt < PORT_ATTEMPTS_MAX && e.contains("Address already in use") => {
                    drop(s);
                    let _ = std::fs::remove_dir_all(dir.path().join("data"));
                }
                Err(e) => {
                    // Keep the log: Drop keeps the directory of a failing test.
                    s.dir = Some(dir);
                    panic!("{e}");
                }
            }
        }
    }

    /// `host:port` of the ZooKeeper-protocol port.
    pub fn zk_addr(&self) -> &str {
        &self.process.zk_listen
    }

    /// `host:port` of the HTTP port.
    pub fn http_addr(&self) -> &str {
        &self.process.http_listen
    }

    /// `host:port` of the gRPC port, if the server was started with one
    /// (`--grpc-listen` in [`ServerOptions::extra_args`]).
    pub fn grpc_addr(&self) -> Option<&str> {
        self.process.grpc.as_deref()
    }

    /// `host:port` of the client port.
    pub fn addr(&self) -> &str {
        &self.process.listen
    }

    pub fn data_dir(&self) -> &Path {
        &self.process.dir
    }

    pub fn log_path(&self) -> PathBuf {
        self.process.log_path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGKILL: no shutdown code runs, nothing is flushed that was not
    /// already synced.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop()
    }

    /// Starts the server again on the same data directory and port.
    pub fn restart(&mut self) {
        assert!(
            self.process.child.is_none(),
            "stop or kill the server first"
        );
        self.process.restart();
    }

    /// Starts the server again on the same data directory and port; says
    /// why (with its log) if it exits or hangs before it is ready.
    pub fn try_restart(&mut self) -> Result<(), String> {
        assert!(
            self.process.child.is_none(),
            "stop or kill the server first"
        );
        self.process.launch();
        self.process.try_await_ready(Instant::now() + READY_TIMEOUT)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.kill9();
        keep_on_panic(&mut self.dir, "server");
    }
}

#[cfg(test)]
mod tests {
    //! These start real servers: build the binaries first
    //! (`cargo build --workspace`; `cargo test --workspace` does it).

    use super::*;
    use std::net::TcpStream;

    #[test]
    fn server_stops_and_restarts_on_its_port() {
        let mut server = Server::start();
        let addr = server.addr().to_string();
        assert!(TcpStream::connect(&addr).is_ok());
        let status = server.stop().expect("was running");
        assert!(status.success(), "{status:?}\n{}", server.log());
        server.restart();
        assert_eq!(server.addr(), addr);
        assert!(TcpStream::connect(&addr).is_ok());
    }
}
