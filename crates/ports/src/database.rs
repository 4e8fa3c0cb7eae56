//! The database seam: what `sql` needs from a client of a tenant's own database server, as
//! values. The binary wires in the real one (crate `database`: sqlx behind the egress guard,
//! pools per account and connection); `app` never speaks a database protocol itself. SQLite
//! files are not served here but by the session whose workspace holds them.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

/// Whether a statement may change data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// One statement in a read-only transaction: the database refuses any write.
    Read,
    /// One or more statements in one transaction, committed when all succeed.
    Write,
}

/// One statement on a tenant's database.
#[derive(Clone)]
pub struct DbQuery {
    /// The account, which owns the connection pool.
    pub account: String,
    /// The vault secret the connection string came from (the pool's other key).
    pub secret: String,
    /// `postgres://…` (or `postgresql://…`) or `mysql://…`, credentials included.
    pub connection: zeroize::Zeroizing<String>,
    /// The statement (with [`Access::Write`], possibly several).
    pub statement: String,
    /// Read-only or not.
    pub access: Access,
    /// Rows returned at most; the rest is left out and the answer says so.
    pub max_rows: u64,
    /// About how many bytes of values are returned at most.
    pub max_bytes: u64,
    /// The statement's time limit, enforced by the database.
    pub timeout: Duration,
    /// Values bound to the statement's placeholders (`$1`, `$2`, … in PostgreSQL, `?` in
    /// MySQL), in order; with any, the statement is one prepared statement, write or not.
    pub params: Vec<DbParam>,
}

/// A value bound to a placeholder: never spliced into the statement's text.
#[derive(Debug, Clone, PartialEq)]
pub enum DbParam {
    /// NULL (bound as a text NULL: PostgreSQL may need a cast, `$1::int`)
    Null,
    /// a boolean
    Bool(bool),
    /// a whole number
    Int(i64),
    /// any other number
    Float(f64),
    /// text
    Text(String),
}

impl std::fmt::Debug for DbQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the connection string holds a password
        f.debug_struct("DbQuery")
            .field("account", &self.account)
            .field("secret", &self.secret)
            .field("access", &self.access)
            .field("params", &self.params.len())
            .field("statement_bytes", &self.statement.len())
            .field("max_rows", &self.max_rows)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A result column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// The database's name of its type (`int4`, `text`, `integer`, …).
    pub type_name: String,
}

/// What a statement returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    /// The columns of the last statement that returned rows.
    pub columns: Vec<Column>,
    /// The rows, each value as JSON holds it: numbers and booleans as such, exact numerics,
    /// dates and the like as the database writes them, JSON as JSON, binary as base64.
    pub rows: Vec<Vec<Value>>,
    /// Rows were left out (by `max_rows` or `max_bytes`).
    pub truncated: bool,
    /// Rows the statements inserted, updated or deleted.
    pub changes: u64,
}

/// Why a statement did not run or failed; messages are safe to show the caller (they may name
/// the host, never the password).
#[derive(Debug, Clone, thiserror::Error)]
pub enum DatabaseError {
    /// the connection string, the egress guard or a limit refused it; nothing was sent
    #[error("{0}")]
    Refused(String),
    /// the database refused the statement, or the connection failed or timed out
    #[error("{0}")]
    Failed(String),
}

/// Runs statements on tenants' database servers.
#[async_trait]
pub trait Databases: Send + Sync {
    /// Runs `query`.
    async fn query(&self, query: DbQuery) -> Result<Table, DatabaseError>;
}
