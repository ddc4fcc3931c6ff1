//! [`Front`]: a TCP proxy in front of one server's peer port, that a test
//! can cut and heal. A node whose peers reach it only through its front
//! ([`Cluster::start_with_fronts`](crate::Cluster::start_with_fronts)) is
//! cut off **one way** when the front is cut: it hears no member (their
//! links to it go through the front), while its own links to them (it
//! dials their ports directly) still carry what it sends. No root, no
//! iptables.
//!
//! Cut, the front is a black hole: connections stay open and bytes
//! vanish (a silent network failure, which only timeouts tell; a closed
//! connection would tell the node at once). When it heals, every
//! connection that lost bytes is closed, so no stream ever resumes with
//! bytes missing; new ones pass.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How often the accepting thread looks for a new connection or its stop.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    stop: AtomicBool,
    /// Both ends of every connection passing, to close on a cut.
    open: Mutex<Vec<TcpStream>>,
}

/// A cuttable proxy from [`Front::addr`] to a target address.
pub struct Front {
    addr: String,
    shared: Arc<Shared>,
}

impl Front {
    /// A front on a fresh 127.0.0.1 port, passing connections to `target`.
    pub fn start(target: &str) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a front");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("front address").to_string();
        let shared = Arc::new(Shared::default());
        let target = target.to_string();
        let s = shared.clone();
        thread::spawn(move || accept(listener, &target, &s));
        Front { addr, shared }
    }

    /// Where peers dial (in place of the server's own peer port).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// From now on, bytes through the front vanish.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
    }

    /// Bytes pass again; the connections that lost some are closed.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let open = std::mem::take(&mut *self.shared.open.lock().expect("front lock"));
        for s in open {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: TcpListener, target: &str, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let inbound = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(_) => continue,
        };
        let _ = inbound.set_nonblocking(false);
        let Ok(outbound) = TcpStream::connect(target) else {
            continue;
        };
        let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
        let (Ok(in2), Ok(out2), Ok(in3), Ok(out3)) = (
            inbound.try_clone(),
            outbound.try_clone(),
            inbound.try_clone(),
            outbound.try_clone(),
        ) else {
            continue;
        };
        shared.open.lock().expect("front lock").extend([in3, out3]);
        let (s1, s2) = (shared.clone(), shared.clone());
        thread::spawn(move || pipe(inbound, outbound, &s1));
        thread::spawn(move || pipe(out2, in2, &s2));
    }
}

/// Copies `from` to `to` until either end closes, then closes both;
/// while the front is cut the bytes vanish, and the first bytes after it
/// healed close the connection instead.
fn pipe(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    let mut lost = false;
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) if shared.cut.load(Ordering::SeqCst) => lost = true,
            Ok(_) if lost => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
