//! raft-rs logs through `slog`; this drain forwards its records to
//! `tracing` under the `raft` target, with the record's key-values appended.

use std::fmt::{self, Write as _};

use slog::{Drain, Level, Never, OwnedKVList, Record, KV};

struct TracingDrain;

#[derive(Default)]
struct KvLine(String);

impl slog::Serializer for KvLine {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), Never> {
        let mut kv = KvLine::default();
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{msg}{}", kv.0),
            Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            Level::Debug => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// A slog logger for raft-rs that writes into tracing.
pub fn raft_logger() -> slog::Logger {
    // raft-rs adds `raft_id` to its own records.
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}
