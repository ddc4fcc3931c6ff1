//! The harness's network: one small TCP proxy in front of every port of
//! every node, so that faults need no root, no Docker and no iptables.
//!
//! Each node gets a *peer* proxy (every other node reaches its Raft port
//! through it) and a *client* proxy (clients reach its client port through
//! it). Links are directed: `(from, to)` carries what `from` sends to `to`
//! on connections `from` opened. A peer proxy tells which node opened a
//! connection by finding the process that owns the connecting socket
//! (`/proc/net/tcp` → socket inode → `/proc/<pid>/fd`), so that one
//! listening address per node is enough for per-link faults, and members
//! re-added by a conf change (whose address every node then shares) keep
//! their per-link faults.
//!
//! A link is in one of three modes:
//! - `Pass`: bytes flow.
//! - `Drop`: connections are closed at once and new ones closed on accept
//!   (what a refused or reset connection looks like).
//! - `BlackHole`: connections stay open and bytes vanish (what a silent
//!   network failure looks like: only timeouts tell). When the link heals,
//!   black-holed connections are closed, since their streams lost bytes.
//! - `Delay(ms)`: what `from` sends arrives that many milliseconds late,
//!   in order (the other direction of the connection is not delayed); a
//!   link that then turns `BlackHole` loses what was still on its way, as
//!   a link that fails does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One end of a link: a node (by id) or any client process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Endpoint {
    Node(u64),
    Client,
}

/// What a link does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Pass,
    Drop,
    BlackHole,
    /// Milliseconds.
    Delay(u64),
}

/// The harness's network of proxies (cheap to clone).
#[derive(Clone)]
pub struct Net {
    inner: Arc<Inner>,
}

struct Inner {
    /// Directed links not in `Pass` mode.
    faults: Mutex<HashMap<(Endpoint, u64), Mode>>,
    /// Bumped at every change, so connections re-check their mode.
    generation: watch::Sender<u64>,
    /// Process id → node id, for telling which node opened a connection.
    pids: Mutex<HashMap<u32, u64>>,
    /// Open client connections (any port) per node, for telling where a
    /// workload's sessions sit.
    clients: Mutex<HashMap<u64, usize>>,
    stop: CancellationToken,
}

impl Default for Net {
    fn default() -> Self {
        Net::new()
    }
}

impl Net {
    pub fn new() -> Net {
        Net {
            inner: Arc::new(Inner {
                faults: Mutex::new(HashMap::new()),
                generation: watch::channel(0).0,
                pids: Mutex::new(HashMap::new()),
                clients: Mutex::new(HashMap::new()),
                stop: CancellationToken::new(),
            }),
        }
    }

    /// Records that process `pid` is node `node` (at every (re)start).
    pub fn set_pid(&self, node: u64, pid: u32) {
        let mut pids = self.inner.pids.lock().expect("pids lock");
        pids.retain(|_, n| *n != node);
        pids.insert(pid, node);
    }

    /// The mode of the link `from → to`.
    pub fn mode(&self, from: Endpoint, to: u64) -> Mode {
        self.inner
            .faults
            .lock()
            .expect("faults lock")
            .get(&(from, to))
            .copied()
            .unwrap_or(Mode::Pass)
    }

    /// Sets the links `from → to` for every pair given.
    pub fn set(&self, links: &[(Endpoint, u64)], mode: Mode) {
        {
            let mut faults = self.inner.faults.lock().expect("faults lock");
            for &l in links {
                if mode == Mode::Pass {
                    faults.remove(&l);
                } else {
                    faults.insert(l, mode);
                }
            }
        }
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Cuts both directions between every node of `a` and every node of
    /// `b`.
    pub fn cut(&self, a: &[u64], b: &[u64], mode: Mode) {
        let mut links = Vec::new();
        for &x in a {
            for &y in b {
                if x != y {
                    links.push((Endpoint::Node(x), y));
                    links.push((Endpoint::Node(y), x));
                }
            }
        }
        self.set(&links, mode);
    }

    /// Every link back to `Pass`.
    pub fn heal(&self) {
        self.inner.faults.lock().expect("faults lock").clear();
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// The links currently faulty, for the history.
    pub fn faults(&self) -> Vec<((Endpoint, u64), Mode)> {
        let mut v: Vec<_> = self
            .inner
            .faults
            .lock()
            .expect("faults lock")
            .iter()
            .map(|(k, m)| (*k, *m))
            .collect();
        v.sort_by_key(|((from, to), _)| (*from, *to));
        v
    }

    /// How many client connections are open to each node (through any of
    /// its proxies, passing bytes).
    pub fn client_connections(&self) -> std::collections::BTreeMap<u64, usize> {
        self.inner
            .clients
            .lock()
            .expect("clients lock")
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    /// Starts a proxy to node `to`'s `upstream` port; connections are from
    /// `Endpoint::Client` (`peer == false`) or from the node that opened
    /// them (`peer == true`). Returns the address it listens on.
    pub async fn listen(
        &self,
        to: u64,
        peer: bool,
        upstream: SocketAddr,
        listen: SocketAddr,
    ) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let net = self.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = net.inner.stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((stream, from_addr)) = accepted else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let net = net.clone();
                tokio::spawn(async move {
                    let from = if peer {
                        net.identify(from_addr, addr).await
                    } else {
                        Endpoint::Client
                    };
                    net.forward(stream, from, to, upstream).await;
                });
            }
        });
        Ok(addr)
    }

    /// Which node opened the connection from `remote` to `local`.
    async fn identify(&self, remote: SocketAddr, local: SocketAddr) -> Endpoint {
        let pids: Vec<(u32, u64)> = self
            .inner
            .pids
            .lock()
            .expect("pids lock")
            .iter()
            .map(|(p, n)| (*p, *n))
            .collect();
        tokio::task::spawn_blocking(move || owner_of(remote, local, &pids))
            .await
            .ok()
            .flatten()
            .map(Endpoint::Node)
            .unwrap_or(Endpoint::Client)
    }

    async fn forward(&self, mut inbound: TcpStream, from: Endpoint, to: u64, upstream: SocketAddr) {
        let mut generation = self.inner.generation.subscribe();
        match self.mode(from, to) {
            Mode::Drop => return,
            Mode::BlackHole => {
                self.black_hole(&mut inbound, None, from, to, &mut generation)
                    .await;
                return;
            }
            Mode::Pass | Mode::Delay(_) => {}
        }
        let Ok(mut outbound) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = outbound.set_nodelay(true);
        let _counted = (from == Endpoint::Client).then(|| ClientCount::open(&self.inner, to));
        let mut a = vec![0u8; 64 * 1024];
        let mut b = vec![0u8; 64 * 1024];
        // With `Delay`: what `from` sent, and when it is due.
        let mut late: std::collections::VecDeque<(tokio::time::Instant, Vec<u8>)> =
            std::collections::VecDeque::new();
        let mut delay = match self.mode(from, to) {
            Mode::Delay(ms) => Some(std::time::Duration::from_millis(ms)),
            _ => None,
        };
        loop {
            let due = late.front().map(|(at, _)| *at);
            tokio::select! {
                _ = self.inner.stop.cancelled() => return,
                changed = generation.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    match self.mode(from, to) {
                        Mode::Pass => delay = None,
                        Mode::Delay(ms) => delay = Some(std::time::Duration::from_millis(ms)),
                        Mode::Drop => return,
                        Mode::BlackHole => {
                            // What was still on its way is lost.
                            self.black_hole(&mut inbound, Some(&mut outbound), from, to, &mut generation).await;
                            return;
                        }
                    }
                    if delay.is_none() {
                        while let Some((_, bytes)) = late.pop_front() {
                            if outbound.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                _ = async {
                    match due {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let now = tokio::time::Instant::now();
                    while late.front().is_some_and(|(at, _)| *at <= now) {
                        let (_, bytes) = late.pop_front().expect("front");
                        if outbound.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                }
                n = inbound.read(&mut a) => {
                    match n {
                        Ok(0) | Err(_) => {
                            // What was sent before the close still arrives.
                            for (_, bytes) in late.drain(..) {
                                if outbound.write_all(&bytes).await.is_err() {
                                    break;
                                }
                            }
                            return;
                        }
                        Ok(n) => match delay {
                            Some(d) => late.push_back((tokio::time::Instant::now() + d, a[..n].to_vec())),
                            None => if outbound.write_all(&a[..n]).await.is_err() { return },
                        },
                    }
                }
                n = outbound.read(&mut b) => {
                    match n {
                        Ok(0) | Err(_) => return,
                        Ok(n) => if inbound.write_all(&b[..n]).await.is_err() { return },
                    }
                }
            }
        }
    }

    /// Swallows everything both ends send until the link leaves
    /// `BlackHole` mode (then the caller closes both: bytes were lost).
    async fn black_hole(
        &self,
        inbound: &mut TcpStream,
        mut outbound: Option<&mut TcpStream>,
        from: Endpoint,
        to: u64,
        generation: &mut watch::Receiver<u64>,
    ) {
        let mut a = vec![0u8; 64 * 1024];
        let mut b = vec![0u8; 64 * 1024];
        let mut out_open = outbound.is_some();
        loop {
            tokio::select! {
                _ = self.inner.stop.cancelled() => return,
                changed = generation.changed() => {
                    if changed.is_err() || self.mode(from, to) != Mode::BlackHole {
                        return;
                    }
                }
                n = inbound.read(&mut a) => {
                    if matches!(n, Ok(0) | Err(_)) {
                        return;
                    }
                }
                n = async {
                    match outbound.as_deref_mut() {
                        Some(o) if out_open => o.read(&mut b).await,
                        _ => std::future::pending().await,
                    }
                } => {
                    if matches!(n, Ok(0) | Err(_)) {
                        out_open = false;
                    }
                }
            }
        }
    }

    /// Stops every proxy and closes every connection.
    pub fn shutdown(&self) {
        self.inner.stop.cancel();
    }
}

/// One open client connection to a node, counted while it lives.
struct ClientCount<'a> {
    inner: &'a Inner,
    to: u64,
}

impl<'a> ClientCount<'a> {
    fn open(inner: &'a Inner, to: u64) -> Self {
        *inner
            .clients
            .lock()
            .expect("clients lock")
            .entry(to)
            .or_default() += 1;
        ClientCount { inner, to }
    }
}

impl Drop for ClientCount<'_> {
    fn drop(&mut self) {
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = clients.get_mut(&self.to) {
            *n = n.saturating_sub(1);
        }
    }
}

/// The node among `pids` whose process owns the socket `remote` (which is
/// connected to `local`), found through /proc.
fn owner_of(remote: SocketAddr, local: SocketAddr, pids: &[(u32, u64)]) -> Option<u64> {
    let inode = socket_inode(remote, local)?;
    let wanted = format!("socket:[{inode}]");
    for &(pid, node) in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if target.as_os_str() == wanted.as_str() {
                    return Some(node);
                }
            }
        }
    }
    None
}

/// The inode of the TCP socket whose local address is `remote` and whose
/// peer is `local` (IPv4 loopback), from /proc/net/tcp.
fn socket_inode(remote: SocketAddr, local: SocketAddr) -> Option<u64> {
    let (SocketAddr::V4(r), SocketAddr::V4(l)) = (remote, local) else {
        return None;
    };
    let hex = |a: std::net::SocketAddrV4| {
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        )
    };
    let (want_local, want_remote) = (hex(r), hex(l));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() > 9 && cols[1] == want_local && cols[2] == want_remote {
            return cols[9].parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"))??;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn links_pass_drop_black_hole_and_heal() {
        let upstream = echo_server().await;
        let net = Net::new();
        let addr = net
            .listen(1, false, upstream, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(roundtrip(addr).await.unwrap(), b"ping");

        net.set(&[(Endpoint::Client, 1)], Mode::Drop);
        assert!(roundtrip(addr).await.is_err());

        net.set(&[(Endpoint::Client, 1)], Mode::BlackHole);
        let e = roundtrip(addr).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

        // A connection open across a cut is closed by it.
        net.heal();
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        net.set(&[(Endpoint::Client, 1)], Mode::Drop);
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)));

        net.heal();
        assert_eq!(roundtrip(addr).await.unwrap(), b"ping");
        // An open client connection is counted for its node.
        let mut open = TcpStream::connect(addr).await.unwrap();
        open.write_all(b"ping").await.unwrap();
        open.read_exact(&mut buf).await.unwrap();
        assert!(net.client_connections().get(&1).copied().unwrap_or(0) >= 1);
        drop(open);
        // Faults on other links leave this one alone.
        net.cut(&[1], &[2, 3], Mode::Drop);
        assert_eq!(roundtrip(addr).await.unwrap(), b"ping");
        assert_eq!(net.faults().len(), 4);
    }

    #[tokio::test]
    async fn peer_proxy_tells_which_process_connected() {
        let upstream = echo_server().await;
        let net = Net::new();
        // This test process plays node 7.
        net.set_pid(7, std::process::id());
        let addr = net
            .listen(1, true, upstream, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(roundtrip(addr).await.unwrap(), b"ping");
        net.set(&[(Endpoint::Node(7), 1)], Mode::Drop);
        assert!(roundtrip(addr).await.is_err());
        // A client's cut does not touch node 7's link.
        net.set(&[(Endpoint::Node(7), 1)], Mode::Pass);
        net.set(&[(Endpoint::Client, 1)], Mode::Drop);
        assert_eq!(roundtrip(addr).await.unwrap(), b"ping");
    }

    #[tokio::test]
    async fn a_delayed_link_holds_bytes_until_it_passes_and_loses_them_to_a_black_hole() {
        let upstream = echo_server().await;
        let net = Net::new();
        let addr = net
            .listen(1, false, upstream, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let link = [(Endpoint::Client, 1)];
        // Held (far longer than the read waits), then let go by `Pass`.
        net.set(&link, Mode::Delay(600_000));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        let early = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(early.is_err(), "a delayed byte arrived early");
        net.set(&link, Mode::Pass);
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
            .await
            .expect("released by Pass")
            .unwrap();
        assert_eq!(&buf, b"ping");
        // Held, then the link fails: what was on its way is gone. (Each
        // read that must come back empty also lets the proxy's task run:
        // this test's runtime has one thread.)
        net.set(&link, Mode::Delay(600_000));
        s.write_all(b"pong").await.unwrap();
        let held = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(held.is_err(), "a delayed byte arrived early");
        net.set(&link, Mode::BlackHole);
        let lost = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(lost.is_err(), "a byte came out of the black hole");
        net.set(&link, Mode::Pass);
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("closed after the black hole");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
}
