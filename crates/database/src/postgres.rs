//! Statements on a tenant's PostgreSQL server.
//!
//! A read is one statement in a `READ ONLY` transaction with `statement_timeout`, sent through
//! the extended protocol, whose Parse refuses a string of several statements: so no `COMMIT;
//! DELETE …` can leave the read-only transaction, and any write is refused by PostgreSQL
//! itself. A write is a script (simple protocol) inside one transaction, committed only when
//! every statement succeeded. A connection whose answer was not read to its end, or whose
//! transaction could not be ended, is closed rather than returned to its pool.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgSslMode};
use sqlx::{AssertSqlSafe, Column, ConnectOptions, Either, Postgres, Row, TypeInfo};
use toolgate_app::database::{Access, Column as TableColumn, DatabaseError, Table};

use crate::endpoint::{Endpoint, Tls};
use crate::pg_values::json_of;
use crate::rows::{self, ACQUIRE_TIMEOUT, Caps, Reader};

/// Connections of one pool at once: a tenant's pool serves one account's calls.
pub const POOL_CONNECTIONS: u32 = 2;
/// A connection unused this long is closed.
pub const CONNECTION_IDLE: Duration = Duration::from_secs(60);

const READER: Reader<Postgres> = Reader {
    changes: |done| done.rows_affected(),
    columns,
    values: |row| {
        (0..row.len())
            .filter_map(|i| row.try_get_raw(i).ok().map(json_of))
            .collect()
    },
};

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

/// Runs `statement` on a connection of `pool`.
pub async fn run(
    pool: &PgPool,
    statement: &str,
    access: Access,
    caps: Caps,
) -> Result<Table, DatabaseError> {
    let statement = statement.to_owned();
    rows::with_connection(pool, caps, move |conn| {
        Box::pin(async move { in_transaction(conn, statement, access, caps).await })
    })
    .await
}

/// Runs the statement in its transaction; `false` when the connection is not fit for reuse.
async fn in_transaction(
    conn: &mut PoolConnection<Postgres>,
    statement: String,
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
        return (Err(rows::failed("cannot start a transaction", &e)), false);
    }
    let owned = statement;
    let result = match access {
        Access::Read => {
            let items = sqlx::query(AssertSqlSafe(owned))
                .persistent(false)
                .fetch(&mut **conn)
                .map_ok(Either::Right)
                .boxed();
            rows::collect(items, caps, &READER).await
        }
        Access::Write => {
            let items = sqlx::raw_sql(AssertSqlSafe(owned)).fetch_many(&mut **conn);
            rows::collect(items, caps, &READER).await
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
            Access::Write => (Err(rows::cut_write()), false),
        };
    }
    let finish = match access {
        Access::Read => "ROLLBACK",
        Access::Write => "COMMIT",
    };
    match sqlx::raw_sql(finish).execute(&mut **conn).await {
        Ok(_) => (Ok(table), true),
        Err(e) => (
            Err(rows::failed("the transaction could not be committed", &e)),
            false,
        ),
    }
}

/// Ends the transaction after a failure; whether the connection is still fit.
async fn end(conn: &mut PoolConnection<Postgres>, how: &'static str) -> bool {
    sqlx::raw_sql(how).execute(&mut **conn).await.is_ok()
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
