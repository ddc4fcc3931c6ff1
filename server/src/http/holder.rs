//! Who holds a lease, as the lock service keeps it, checks it and shows
//! it: the one place that decides what proves holding and what others
//! see of a holder.
//!
//! A lease's `client_id` is a secret its holder chose: whoever presents it
//! (with the same identity, see below) acquires the same grant again,
//! renews or releases. So:
//!
//! - **what proves holding** is the caller's `client_id` *and*, when the
//!   caller authenticated (Basic or a Bearer token), its digest identity:
//!   another identity presenting the same `client_id` is someone else
//!   (it queues behind the holder, and its renewals and releases are
//!   refused as a stale token's). An anonymous caller's proof is its
//!   `client_id` alone.
//! - **what is stored** in the lease node (the recipe's client id) is not
//!   that secret but a *proof*: [`proof`], `h1:` and the SHA-256 of the
//!   identity and the `client_id`. A reader of the tree (any door, a
//!   backup) learns nothing it could present.
//! - **what is shown** to anyone but the caller that presented the secret
//!   (a 409's holder, a state read, the listing, a watch, gRPC's holder
//!   metadata) is a *label*: [`label`], `h-` and 12 hex digits of the
//!   SHA-256 of what the node stores. The label names the holder stably
//!   (same holder, same label, on every server) and proves nothing. A
//!   caller's own answers (its grant, renewal, release, push messages)
//!   echo the `client_id` it sent.
//!
//! The gateway hands each caller a [`HolderLock`]: the recipe's lease lock
//! seen through that caller's proof. A retry after a lost answer and a
//! holder's re-entry present the same `client_id` with the same identity,
//! hence the same proof, and find the same grant.
//!
//! The proof is a hash of what the caller sends: a `client_id` an attacker
//! can guess (`worker-7`) is a weak secret; pick a random one (a UUID).

use std::time::Duration;

use warden_recipes::{Lease, LeaseLock, LeaseState, LeaseWatch, Result};

/// The version tag of [`proof`]'s form.
const PROOF_PREFIX: &str = "h1:";
/// The prefix of a [`label`].
const LABEL_PREFIX: &str = "h-";
/// Hex digits of a label: 48 bits, enough that two holders of one lock
/// practically never share one, short enough to read.
const LABEL_HEX_DIGITS: usize = 12;

/// What the lease node of `client_id`, presented by `identity` (the
/// caller's digest id, `None` for an anonymous caller), stores as its
/// holder: never the `client_id` itself.
pub(crate) fn proof(identity: Option<&str>, client_id: &str) -> String {
    let mut input = Vec::with_capacity(client_id.len() + 64);
    input.extend_from_slice(b"warden-lease-holder\0");
    match identity {
        None => input.extend_from_slice(b"anonymous"),
        Some(id) => {
            input.extend_from_slice(b"digest:");
            input.extend_from_slice(id.as_bytes());
        }
    }
    input.push(0);
    input.extend_from_slice(client_id.as_bytes());
    format!("{PROOF_PREFIX}{}", sha256_hex(&input))
}

/// What others are shown of a holder whose node stores `stored` (a
/// [`proof`], or whatever a recipe client stored as its client id).
pub fn label(stored: &str) -> String {
    let mut hex = sha256_hex(stored.as_bytes());
    hex.truncate(LABEL_HEX_DIGITS);
    format!("{LABEL_PREFIX}{hex}")
}

/// The label others are shown of the lease of `client_id` taken by
/// `identity` (a digest id `user:BASE64HASH`; `None`: anonymous) through
/// the lock API: a holder can find itself in a listing or a watch.
pub fn label_of(identity: Option<&str>, client_id: &str) -> String {
    label(&proof(identity, client_id))
}

fn sha256_hex(input: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, input);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The recipe's lease lock as one caller uses it: every `client_id` the
/// caller presents becomes its [`proof`], and the caller's own leases come
/// back with the `client_id` it sent. Leases of others (state reads,
/// watches) come back as the node stores them: render them with
/// [`label`], never as they are.
#[derive(Clone, Debug)]
pub(crate) struct HolderLock {
    lock: LeaseLock,
    identity: Option<String>,
}

impl HolderLock {
    pub(crate) fn new(lock: LeaseLock, identity: Option<String>) -> Self {
        HolderLock { lock, identity }
    }

    fn proof(&self, client_id: &str) -> String {
        proof(self.identity.as_deref(), client_id)
    }

    /// The caller's own lease, as it knows it.
    fn own(mut lease: Lease, client_id: &str) -> Lease {
        lease.client_id = client_id.to_string();
        lease
    }

    /// The session under the lock.
    pub(crate) fn client(&self) -> &warden_client::Client {
        self.lock.client()
    }

    /// [`LeaseLock::acquire_notified`] for the caller's `client_id`.
    pub(crate) async fn acquire_notified(
        &self,
        name: &str,
        client_id: &str,
        ttl: Duration,
        wait: Duration,
        queued: impl FnOnce() + Send,
    ) -> Result<Option<Lease>> {
        let proof = self.proof(client_id);
        let lease = self
            .lock
            .acquire_notified(name, &proof, ttl, wait, queued)
            .await?;
        Ok(lease.map(|l| Self::own(l, client_id)))
    }

    /// [`LeaseLock::acquire`] for the caller's `client_id`.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        client_id: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Option<Lease>> {
        self.acquire_notified(name, client_id, ttl, wait, || {})
            .await
    }

    /// [`LeaseLock::renew`]: only the caller that proves holding.
    pub(crate) async fn renew(
        &self,
        name: &str,
        client_id: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease> {
        let proof = self.proof(client_id);
        let renewed = self.lock.renew(name, &proof, token, ttl).await;
        let lease = renewed.map_err(|e| Self::as_sent(e, &proof, client_id))?;
        Ok(Self::own(lease, client_id))
    }

    /// [`LeaseLock::release`]: only the caller that proves holding.
    pub(crate) async fn release(&self, name: &str, client_id: &str, token: u64) -> Result<()> {
        let proof = self.proof(client_id);
        let released = self.lock.release(name, &proof, token).await;
        released.map_err(|e| Self::as_sent(e, &proof, client_id))
    }

    /// A refusal naming the caller's `client_id`, as it sent it, where the
    /// recipe names the proof it was given.
    fn as_sent(e: warden_recipes::Error, proof: &str, client_id: &str) -> warden_recipes::Error {
        match e {
            warden_recipes::Error::NotHolder(m) => warden_recipes::Error::NotHolder(
                m.replace(&format!("{proof:?}"), &format!("{client_id:?}")),
            ),
            other => other,
        }
    }

    /// [`LeaseLock::state`]: the holder as stored (show its [`label`]).
    pub(crate) async fn state(&self, name: &str) -> Result<Option<LeaseState>> {
        self.lock.state(name).await
    }

    /// [`LeaseLock::state_synced`]: the holder as stored (show its
    /// [`label`]).
    pub(crate) async fn state_synced(&self, name: &str) -> Result<Option<LeaseState>> {
        self.lock.state_synced(name).await
    }

    /// [`LeaseLock::watch`]: holders as stored (show their [`label`]).
    pub(crate) async fn watch(&self, name: &str) -> Result<LeaseWatch> {
        self.lock.watch(name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_the_identity_and_reveal_nothing() {
        let anon = proof(None, "worker-7");
        assert!(anon.starts_with(PROOF_PREFIX) && anon.len() == PROOF_PREFIX.len() + 64);
        assert!(!anon.contains("worker-7"));
        // Stable: a retry, through any server, finds its grant.
        assert_eq!(anon, proof(None, "worker-7"));
        assert_ne!(anon, proof(None, "worker-8"));
        let alice = proof(Some("alice:HASH"), "worker-7");
        assert_ne!(anon, alice);
        assert_ne!(alice, proof(Some("bob:HASH"), "worker-7"));
        // No identity that could be confused with anonymous.
        assert_ne!(anon, proof(Some(""), "worker-7"));
        // Presenting a stored proof as a client id proves nothing.
        assert_ne!(proof(None, &anon), anon);
    }

    #[test]
    fn labels_are_short_stable_and_opaque() {
        let stored = proof(None, "worker-7");
        let l = label(&stored);
        assert_eq!(l.len(), LABEL_PREFIX.len() + LABEL_HEX_DIGITS);
        assert!(l.starts_with(LABEL_PREFIX));
        assert_eq!(l, label(&stored));
        assert!(!stored.contains(&l[LABEL_PREFIX.len()..]));
        assert_ne!(l, label(&proof(None, "worker-8")));
        assert!(!label("worker-7").contains("worker-7"));
    }
}
