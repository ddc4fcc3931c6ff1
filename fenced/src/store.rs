//! [`Store`]: the fenced key-value table on disk.
//!
//! Per key it keeps the last accepted value, the fencing token that wrote
//! it (the highest token seen for that key) and the writer's client id, as
//! one JSON record in a fjall keyspace. A write is accepted if its token is
//! at least the highest seen for its key:
//!
//! - **higher**: a newer grant of the lock; it becomes the highest;
//! - **equal**: the same grant writing again (a lock holder may write many
//!   times under one grant; tokens are unique per grant, so an equal token
//!   is the same holder);
//! - **lower**: an older grant, whose holder lost the lock without knowing
//!   it (a pause past its lease, a partition): refused with [`Stale`].
//!
//! Check and write are one step: writes are serialised by one mutex, held
//! from reading the record until the new one is fsync'd. Otherwise a newer
//! holder could check and write between an older holder's check and its
//! write, and be overwritten by it. Every accepted write is on disk
//! (journal fsync'd) before [`Store::write`] returns, so an answered write
//! survives a crash or power loss.
//!
//! One fsync per write bounds the write rate by the disk's fsync rate; the
//! store is the reference resource for fencing, not a database.

use std::path::Path;
use std::sync::Mutex;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The keyspace holding the records.
const KEYSPACE: &str = "fenced";
/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// What the store keeps per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The last accepted value.
    pub value: Value,
    /// The token of the last accepted write: the highest seen for the key.
    pub fencing_token: u64,
    /// Who wrote it, if the writer said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
}

/// A write refused because its token is below the highest seen for its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token for key {key:?}: {offered} offered, {highest} already seen")]
pub struct Stale {
    pub key: String,
    /// The token of the refused write.
    pub offered: u64,
    /// The highest token accepted for the key so far.
    pub highest: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Stale(#[from] Stale),
    #[error("bad key: {0}")]
    BadKey(String),
    #[error("the data dir is in use by another process (only one store may open it)")]
    Locked,
    #[error("storage: {0}")]
    Storage(fjall::Error),
    #[error("key {key:?}: its record on disk is not valid: {why}")]
    Corrupt { key: String, why: String },
}

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Locked => StoreError::Locked,
            e => StoreError::Storage(e),
        }
    }
}

/// The fenced table (see the module docs). Thread-safe.
pub struct Store {
    db: Database,
    records: Keyspace,
    /// Held from a write's check until its record is durable.
    writes: Mutex<()>,
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let db = Database::builder(dir).open()?;
        let records = db.keyspace(KEYSPACE, KeyspaceCreateOptions::default)?;
        Ok(Store {
            db,
            records,
            writes: Mutex::new(()),
        })
    }

    /// Writes `value` to `key` if `token` is at least the highest seen for
    /// it; the record is fsync'd before this returns. Returns the record
    /// replaced, if any.
    pub fn write(
        &self,
        key: &str,
        value: Value,
        token: u64,
        client_id: Option<String>,
    ) -> Result<Option<Record>, StoreError> {
        check_key(key)?;
        let _serial = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let previous = self.read(key)?;
        if let Some(previous) = &previous {
            if token < previous.fencing_token {
                return Err(Stale {
                    key: key.to_string(),
                    offered: token,
                    highest: previous.fencing_token,
                }
                .into());
            }
        }
        let record = Record {
            value,
            fencing_token: token,
            client_id,
        };
        let bytes = serde_json::to_vec(&record).expect("a record serialises");
        self.records.insert(key.as_bytes(), bytes)?;
        self.db.persist(PersistMode::SyncAll)?;
        Ok(previous)
    }

    /// The record of `key`, if it was ever written.
    pub fn read(&self, key: &str) -> Result<Option<Record>, StoreError> {
        check_key(key)?;
        let Some(bytes) = self.records.get(key.as_bytes())? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                key: key.to_string(),
                why: e.to_string(),
            })
    }
}

/// Keys are 1 to [`KEY_BYTES_MAX`] bytes of UTF-8 without control
/// characters.
pub fn check_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::BadKey("the key is empty".into()));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(StoreError::BadKey(format!(
            "the key is {} bytes long, more than {KEY_BYTES_MAX}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(StoreError::BadKey(format!(
            "the key {key:?} has control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stale(e: StoreError) -> Stale {
        match e {
            StoreError::Stale(s) => s,
            other => panic!("expected Stale, got {other:?}"),
        }
    }

    #[test]
    fn lower_tokens_are_refused_equal_and_higher_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.read("k").unwrap(), None);
        store.write("k", json!(1), 5, None).unwrap();
        // Equal: the same grant writing again.
        store.write("k", json!(2), 5, Some("a".into())).unwrap();
        store.write("k", json!(3), 9, None).unwrap();
        let refused = stale(store.write("k", json!(4), 8, None).unwrap_err());
        assert_eq!(
            refused,
            Stale {
                key: "k".into(),
                offered: 8,
                highest: 9
            }
        );
        let record = store.read("k").unwrap().unwrap();
        assert_eq!((record.value, record.fencing_token), (json!(3), 9));
        // Keys are independent.
        store.write("other", json!("x"), 1, None).unwrap();
    }

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store
                .write("k", json!({"n": 1}), 7, Some("c".into()))
                .unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let record = store.read("k").unwrap().unwrap();
        assert_eq!(
            record,
            Record {
                value: json!({"n": 1}),
                fencing_token: 7,
                client_id: Some("c".into())
            }
        );
        assert!(matches!(
            store.write("k", json!(0), 6, None),
            Err(StoreError::Stale(_))
        ));
    }

    /// Racing writers with interleaved tokens: whatever the order, the
    /// key ends with the highest token accepted, and its value. A check
    /// apart from its write would let a lower token overwrite a higher
    /// one accepted in between (a race: this catches it often, not
    /// always).
    #[test]
    fn racing_writers_end_with_the_highest_accepted_token() {
        const THREADS: u64 = 16;
        const WRITES: u64 = 400;
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::open(dir.path()).unwrap());
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let mut accepted = Vec::new();
                    for i in 0..WRITES {
                        // Thread t writes t, t + THREADS, ...: interleaved.
                        let token = i * THREADS + t + 1;
                        match store.write("k", json!(token), token, None) {
                            Ok(_) => accepted.push(token),
                            Err(StoreError::Stale(s)) => assert!(s.highest > token, "{s}"),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    accepted
                })
            })
            .collect();
        let accepted: Vec<u64> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        let max = *accepted.iter().max().unwrap();
        let record = store.read("k").unwrap().unwrap();
        assert_eq!((record.fencing_token, record.value), (max, json!(max)));
    }

    #[test]
    fn a_second_store_on_one_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Store::open(dir.path()).unwrap();
        assert!(matches!(Store::open(dir.path()), Err(StoreError::Locked)));
    }

    #[test]
    fn bad_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let e = store.write("", json!(1), 1, None).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let long = "x".repeat(KEY_BYTES_MAX + 1);
        let e = store.read(&long).unwrap_err();
        assert!(e.to_string().contains("1025 bytes"), "{e}");
    }
}
