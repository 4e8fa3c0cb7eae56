//! Statements on a tenant's PostgreSQL server.
//!
//! A read is one statement in a `READ ONLY` transaction with `statement_timeout`, sent through
//! the extended protocol, whose Parse refuses a string of several statements: so no `COMMIT;
//! DELETE …` can leave the read-only transaction, and any write is refused by PostgreSQL
//! itself. A write is a script (simple protocol) inside one transaction, committed only when
//! every statement succeeded. Rows are read until the row or byte cap; a connection whose
//! answer was not read to its end, or whose transaction could not be ended, is closed rather
//! than returned to its pool.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgSslMode};
use sqlx::{AssertSqlSafe, Column, ConnectOptions, Either, Postgres, Row, TypeInfo};
use toolgate_app::database::{Access, Column as TableColumn, DatabaseError, Table};

use crate::endpoint::{Endpoint, Tls};
use crate::pg_values::json_of;

/// Connections of one pool at once: a tenant's pool serves one account's calls.
const POOL_CONNECTIONS: u32 = 2;
/// A connection unused this long is closed.
const CONNECTION_IDLE: Duration = Duration::from_secs(60);
/// Time to connect (or wait for a free connection).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time beyond the statement's own limit before the client gives up on the server.
const SLACK: Duration = Duration::from_secs(5);

/// A lazy pool for `endpoint` at `address`: nothing connects until the first statement.
pub fn pool(endpoint: &Endpoint, address: std::net::SocketAddr) -> PgPool {
    let options = PgConnectOptions::new_without_pgpass()
        .host(&address.ip().to_string())
        .port(address.port())
        .username(&endpoint.user)
        .password(&endpoint.password)
        .database(&endpoint.database)
        .ssl_mode(match endpoint.tls {
            Tls::Disable => PgSslMode::Disable,
            Tls::Prefer => PgSslMode::Prefer,
            Tls::Require => PgSslMode::Require,
        })
        .application_name(endpoint.application_name.as_deref().unwrap_or("toolgate"))
        // only unnamed statements are sent: nothing to cache on either side
        .statement_cache_capacity(0)
        // a tenant's statement may hold anything: it is never logged
        .disable_statement_logging();
    PgPoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .min_connections(0)
        .idle_timeout(CONNECTION_IDLE)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with(options)
}

/// What a statement may return.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_rows: u64,
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// Runs `statement` on a connection of `pool`.
pub async fn run(
    pool: &PgPool,
    statement: &str,
    access: Access,
    caps: Caps,
) -> Result<Table, DatabaseError> {
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| failed("cannot connect", &e))?;
    let limit = caps.timeout + SLACK;
    let (result, clean) =
        match tokio::time::timeout(limit, in_transaction(&mut conn, statement, access, caps)).await
        {
            Ok(done) => done,
            Err(_) => (
                Err(DatabaseError::Failed(format!(
                    "the database did not answer within {} s",
                    limit.as_secs()
                ))),
                false,
            ),
        };
    if !clean {
        conn.close_on_drop();
    }
    result
}

/// Runs the statement in its transaction; `false` when the connection is not fit for reuse.
async fn in_transaction(
    conn: &mut PoolConnection<Postgres>,
    statement: &str,
    access: Access,
    caps: Caps,
) -> (Result<Table, DatabaseError>, bool) {
    let ms = caps.timeout.as_millis().max(1);
    let begin = match access {
        Access::Read => "BEGIN READ ONLY",
        Access::Write => "BEGIN",
    };
    let setup = format!("{begin}; SET LOCAL statement_timeout = {ms}");
    if let Err(e) = sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&mut **conn)
        .await
    {
        return (Err(failed("cannot start a transaction", &e)), false);
    }
    let owned = statement.to_owned();
    let result = match access {
        Access::Read => {
            let rows = sqlx::query(AssertSqlSafe(owned))
                .persistent(false)
                .fetch(&mut **conn)
                .map_ok(Either::Right)
                .boxed();
            collect(rows, caps).await
        }
        Access::Write => {
            collect(
                sqlx::raw_sql(AssertSqlSafe(owned)).fetch_many(&mut **conn),
                caps,
            )
            .await
        }
    };
    let (table, drained) = match result {
        Ok(done) => done,
        Err(e) => return (Err(e), end(conn, "ROLLBACK").await),
    };
    if !drained {
        // the rest of the answer is still on its way: the connection goes, and with it the
        // transaction (a write with rows cut short is not committed)
        return match access {
            Access::Read => (Ok(table), false),
            Access::Write => (
                Err(DatabaseError::Failed(
                    "the statements returned more rows than max_rows or 1 MiB; nothing was \
                     committed: raise max_rows, or return fewer rows"
                        .to_owned(),
                )),
                false,
            ),
        };
    }
    let finish = match access {
        Access::Read => "ROLLBACK",
        Access::Write => "COMMIT",
    };
    match sqlx::raw_sql(finish).execute(&mut **conn).await {
        Ok(_) => (Ok(table), true),
        Err(e) => (
            Err(failed("the transaction could not be committed", &e)),
            false,
        ),
    }
}

/// Ends the transaction after a failure; whether the connection is still fit.
async fn end(conn: &mut PoolConnection<Postgres>, how: &'static str) -> bool {
    sqlx::raw_sql(how).execute(&mut **conn).await.is_ok()
}

type Items<'c> = futures::stream::BoxStream<
    'c,
    Result<Either<sqlx::postgres::PgQueryResult, PgRow>, sqlx::Error>,
>;

/// Reads results until the end or a cap: the rows of the last statement that returned any,
/// the changes of all; `false` when it stopped at a cap.
async fn collect(mut items: Items<'_>, caps: Caps) -> Result<(Table, bool), DatabaseError> {
    let mut table = Table::default();
    let mut bytes = 0u64;
    let mut fresh_result = true;
    while let Some(item) = items.try_next().await.map_err(statement_error)? {
        match item {
            Either::Left(done) => {
                table.changes += done.rows_affected();
                fresh_result = true;
            }
            Either::Right(row) => {
                if fresh_result {
                    // a later statement's rows replace an earlier one's
                    table.columns = columns(&row);
                    table.rows.clear();
                    table.truncated = false;
                    bytes = 0;
                    fresh_result = false;
                }
                if table.rows.len() as u64 >= caps.max_rows {
                    table.truncated = true;
                    return Ok((table, false));
                }
                let values: Vec<serde_json::Value> = (0..row.len())
                    .filter_map(|i| row.try_get_raw(i).ok().map(json_of))
                    .collect();
                bytes += values
                    .iter()
                    .map(|v| v.to_string().len() as u64)
                    .sum::<u64>();
                if bytes > caps.max_bytes && !table.rows.is_empty() {
                    table.truncated = true;
                    return Ok((table, false));
                }
                table.rows.push(values);
            }
        }
    }
    Ok((table, true))
}

fn columns(row: &PgRow) -> Vec<TableColumn> {
    row.columns()
        .iter()
        .map(|c| TableColumn {
            name: c.name().to_owned(),
            type_name: c.type_info().name().to_ascii_lowercase(),
        })
        .collect()
}

/// The database's own words for a statement it refused or that failed.
fn statement_error(e: sqlx::Error) -> DatabaseError {
    match e {
        sqlx::Error::Database(db) => DatabaseError::Failed(match db.code() {
            Some(code) => format!(
                "the database refused the statement ({code}): {}",
                db.message()
            ),
            None => format!("the database refused the statement: {}", db.message()),
        }),
        other => failed("the statement failed", &other),
    }
}

/// A failure in our words, with sqlx's (which name the host at most, never the password).
fn failed(what: &str, e: &sqlx::Error) -> DatabaseError {
    match e {
        sqlx::Error::Database(db) => DatabaseError::Failed(format!("{what}: {}", db.message())),
        sqlx::Error::PoolTimedOut => DatabaseError::Failed(format!(
            "{what}: no connection within {} s",
            ACQUIRE_TIMEOUT.as_secs()
        )),
        other => DatabaseError::Failed(format!("{what}: {other}")),
    }
}
