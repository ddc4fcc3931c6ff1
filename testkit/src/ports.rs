//! Ports for the servers a test starts.

use std::net::TcpListener;

/// How many sets of ports a cluster start tries before giving up.
pub(crate) const PORT_ATTEMPTS_MAX: u32 = 3;

/// `n` distinct ports that were free a moment ago: all are bound at once
/// (so the OS cannot hand out one twice), then released for the servers to
/// take. Another process could grab one in between; for tests on one
/// machine that risk is accepted.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    // Below Linux's ephemeral range (32768..), so that no outgoing
    // connection of a concurrently running test can be handed one of these
    // between our check and the server's bind.
    const LOW: u32 = 20_000;
    const HIGH: u32 = 32_000;
    let mut seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    while listeners.len() < n {
        // xorshift: plenty for spreading picks over the range.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = (LOW + (seed % u64::from(HIGH - LOW)) as u32) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr of a bound socket").port())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(30);
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 30);
        assert!(!ports.contains(&0));
    }
}
