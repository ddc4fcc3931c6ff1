//! [`FencedSql`]: fenced updates of SQL rows (SQLite here; the same
//! statement works on PostgreSQL, see `docs/fencing.md`).
//!
//! Every fenced row carries the highest fencing token that updated it
//! (`last_fencing_token BIGINT NOT NULL DEFAULT 0`). An update sets the
//! row's columns *and* that token in one statement whose `WHERE` accepts
//! only a token at least as high as the row's:
//!
//! ```sql
//! UPDATE accounts
//!    SET balance = :balance, last_fencing_token = :token
//!  WHERE id = :key AND last_fencing_token <= :token
//! ```
//!
//! The database evaluates the condition and writes the row atomically, so
//! no check-then-write race is left to the caller. The comparison is `<=`,
//! as in the key-value store ([`crate::store`]): an equal token is the same
//! grant writing again. Seed-style `<` makes a token single-use instead
//! (one write per grant); either way an older grant is refused.
//!
//! When no row changed, [`FencedSql::update`] reads the row's token to say
//! why: [`FencedSqlError::Stale`] (with the highest token seen) or
//! [`FencedSqlError::NoRow`]. That read is informational: the refusal
//! itself was decided by the `UPDATE`. The helper opens no transaction of
//! its own, so it may run inside the caller's (pass a `Transaction`, which
//! dereferences to a `Connection`).
//!
//! SQLite integers are signed 64-bit: tokens above `i64::MAX` are refused
//! with [`FencedSqlError::TokenOutOfRange`] (Warden's tokens are zxids,
//! which never get there).

use rusqlite::types::ToSql;
use rusqlite::{Connection, OptionalExtension as _};

/// Why a fenced update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FencedSqlError {
    /// The row was last updated with a higher token: the writer's grant
    /// is older than one that already wrote.
    #[error(
        "stale fencing token for {table} row {key}: {offered} offered, {highest} already seen"
    )]
    Stale {
        table: String,
        key: String,
        offered: u64,
        highest: u64,
    },
    /// No row has that key (fenced updates do not insert: create the row
    /// first, with `last_fencing_token` 0).
    #[error("{table} has no row {key}")]
    NoRow { table: String, key: String },
    #[error("fencing token {0} is beyond SQL's BIGINT (at most {max})", max = i64::MAX)]
    TokenOutOfRange(u64),
    #[error("{0:?} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")]
    BadIdentifier(String),
    #[error("the SET clause must not be empty")]
    EmptySet,
    #[error("{table} row {key}: last_fencing_token holds {value}, not a token")]
    Corrupt {
        table: String,
        key: String,
        value: i64,
    },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Fenced updates of one table (see the module docs).
#[derive(Debug, Clone)]
pub struct FencedSql {
    table: String,
    key_column: String,
    token_column: String,
}

impl FencedSql {
    /// Updates of `table`'s rows, found by `key_column`, fenced by the
    /// column `last_fencing_token`.
    pub fn new(table: &str, key_column: &str) -> Result<FencedSql, FencedSqlError> {
        FencedSql::with_token_column(table, key_column, "last_fencing_token")
    }

    /// Like [`new`](Self::new) with another name for the token column.
    pub fn with_token_column(
        table: &str,
        key_column: &str,
        token_column: &str,
    ) -> Result<FencedSql, FencedSqlError> {
        for name in [table, key_column, token_column] {
            check_identifier(name)?;
        }
        Ok(FencedSql {
            table: table.to_string(),
            key_column: key_column.to_string(),
            token_column: token_column.to_string(),
        })
    }

    /// The statement [`update`](Self::update) runs for the assignments
    /// `set` (e.g. `"balance = balance - :amount"`): it binds `:key` and
    /// `:token`, which `set` may use too.
    pub fn statement(&self, set: &str) -> String {
        format!(
            "UPDATE {table} SET {set}, {token} = :token \
             WHERE {key} = :key AND {token} <= :token",
            table = self.table,
            token = self.token_column,
            key = self.key_column,
        )
    }

    /// Runs [`statement`](Self::statement) for row `key` with `token` and
    /// the caller's named `params` (`(":amount", &5)`). `Ok(())` if the row
    /// was updated; otherwise says why.
    ///
    /// `set` is SQL from the program, never from its input: values go in
    /// `params`.
    pub fn update<K>(
        &self,
        conn: &Connection,
        key: K,
        token: u64,
        set: &str,
        params: &[(&str, &dyn ToSql)],
    ) -> Result<(), FencedSqlError>
    where
        K: ToSql + std::fmt::Display,
    {
        if set.trim().is_empty() {
            return Err(FencedSqlError::EmptySet);
        }
        let token_sql = i64::try_from(token).map_err(|_| FencedSqlError::TokenOutOfRange(token))?;
        let mut all: Vec<(&str, &dyn ToSql)> = vec![(":key", &key), (":token", &token_sql)];
        all.extend_from_slice(params);
        let changed = conn.execute(&self.statement(set), all.as_slice())?;
        if changed > 0 {
            return Ok(());
        }
        match self.highest(conn, &key)? {
            None => Err(FencedSqlError::NoRow {
                table: self.table.clone(),
                key: key.to_string(),
            }),
            Some(highest) => Err(FencedSqlError::Stale {
                table: self.table.clone(),
                key: key.to_string(),
                offered: token,
                highest,
            }),
        }
    }

    /// The highest token that updated row `key`; `None` if there is no
    /// such row.
    pub fn highest<K>(&self, conn: &Connection, key: &K) -> Result<Option<u64>, FencedSqlError>
    where
        K: ToSql + std::fmt::Display,
    {
        let sql = format!(
            "SELECT {token} FROM {table} WHERE {key} = :key",
            token = self.token_column,
            table = self.table,
            key = self.key_column,
        );
        let found: Option<i64> = conn
            .query_row(&sql, &[(":key", key as &dyn ToSql)], |row| row.get(0))
            .optional()?;
        found
            .map(|value| {
                u64::try_from(value).map_err(|_| FencedSqlError::Corrupt {
                    table: self.table.clone(),
                    key: key.to_string(),
                    value,
                })
            })
            .transpose()
    }
}

fn check_identifier(name: &str) -> Result<(), FencedSqlError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(FencedSqlError::BadIdentifier(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 004's table, in SQLite.
    fn inventory() -> (Connection, FencedSql) {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE inventory_items (
                 item_id VARCHAR(64) PRIMARY KEY,
                 quantity INTEGER NOT NULL,
                 last_fencing_token BIGINT NOT NULL DEFAULT 0
             );
             INSERT INTO inventory_items (item_id, quantity, last_fencing_token)
             VALUES ('inventory_item_98210', 10, 100);",
        )
        .unwrap();
        (conn, FencedSql::new("inventory_items", "item_id").unwrap())
    }

    fn row(conn: &Connection) -> (i64, i64) {
        conn.query_row(
            "SELECT quantity, last_fencing_token FROM inventory_items",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    const ITEM: &str = "inventory_item_98210";
    const DECREMENT: &str = "quantity = quantity - 1";

    /// Seed 004's trace: A holds 101 and pauses, B takes 102 and writes,
    /// A's late write is refused.
    #[test]
    fn seed_004s_trace() {
        let (conn, fenced) = inventory();
        fenced.update(&conn, ITEM, 102, DECREMENT, &[]).unwrap();
        assert_eq!(row(&conn), (9, 102));
        match fenced.update(&conn, ITEM, 101, DECREMENT, &[]) {
            Err(FencedSqlError::Stale {
                table,
                key,
                offered,
                highest,
            }) => {
                assert_eq!((table.as_str(), key.as_str()), ("inventory_items", ITEM));
                assert_eq!((offered, highest), (101, 102));
            }
            other => panic!("expected Stale, got {other:?}"),
        }
        assert_eq!(row(&conn), (9, 102));
    }

    #[test]
    fn an_equal_token_is_the_same_holder_writing_again() {
        let (conn, fenced) = inventory();
        fenced.update(&conn, ITEM, 100, DECREMENT, &[]).unwrap();
        fenced.update(&conn, ITEM, 100, DECREMENT, &[]).unwrap();
        assert_eq!(row(&conn), (8, 100));
    }

    #[test]
    fn params_and_missing_rows() {
        let (conn, fenced) = inventory();
        fenced
            .update(&conn, ITEM, 200, "quantity = :q", &[(":q", &42)])
            .unwrap();
        assert_eq!(row(&conn), (42, 200));
        assert!(matches!(
            fenced.update(&conn, "nope", 300, DECREMENT, &[]),
            Err(FencedSqlError::NoRow { .. })
        ));
        assert!(matches!(
            fenced.update(&conn, ITEM, u64::MAX, DECREMENT, &[]),
            Err(FencedSqlError::TokenOutOfRange(_))
        ));
        assert!(matches!(
            fenced.update(&conn, ITEM, 300, " ", &[]),
            Err(FencedSqlError::EmptySet)
        ));
        assert_eq!(fenced.highest(&conn, &ITEM).unwrap(), Some(200));
    }

    #[test]
    fn runs_inside_the_callers_transaction() {
        let (mut conn, fenced) = inventory();
        let tx = conn.transaction().unwrap();
        fenced.update(&tx, ITEM, 150, DECREMENT, &[]).unwrap();
        tx.rollback().unwrap();
        assert_eq!(row(&conn), (10, 100));
    }

    #[test]
    fn identifiers_are_checked() {
        for bad in ["", "1t", "t; DROP TABLE x", "a-b", "t\""] {
            assert!(matches!(
                FencedSql::new(bad, "id"),
                Err(FencedSqlError::BadIdentifier(_))
            ));
        }
        let f = FencedSql::with_token_column("t", "id", "fence").unwrap();
        assert_eq!(
            f.statement("v = :v"),
            "UPDATE t SET v = :v, fence = :token WHERE id = :key AND fence <= :token"
        );
    }
}
