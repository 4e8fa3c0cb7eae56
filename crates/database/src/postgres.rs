//! Statements on a tenant's PostgreSQL server.
//!
//! A read is one statement in a `READ ONLY` transaction with `statement_timeout`, sent through
//! the extended protocol, whose Parse refuses a string of several statements: so no `COMMIT;
//! DELETE …` can leave the read-only transaction, and any write is refused by PostgreSQL
//! itself. A write is a script (simple protocol) inside one transaction, committed only when
//! every statement succeeded. A connection whose answer was not read to its end, or whose
//! transaction could not be ended, is closed rather than returned to its pool.

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgSslMode};
use sqlx::{AssertSqlSafe, ConnectOptions, Postgres, Row};
use toolgate_ports::database::Access;

use crate::endpoint::{Endpoint, Tls};
use crate::pg_values::json_of;
use crate::rows::{self, Caps, Reader};

pub const READER: Reader<Postgres> = Reader {
    changes: |done| done.rows_affected(),
    columns: rows::columns,
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
    rows::pool_options().connect_lazy_with(options)
}

/// The transaction, read-only for a read, with the statement's time limit.
pub fn set_up(
    conn: &mut PoolConnection<Postgres>,
    access: Access,
    caps: Caps,
) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    let ms = caps.timeout.as_millis().max(1);
    let begin = match access {
        Access::Read => "BEGIN READ ONLY",
        Access::Write => "BEGIN",
    };
    let setup = format!("{begin}; SET LOCAL statement_timeout = {ms}");
    Box::pin(async move {
        sqlx::raw_sql(AssertSqlSafe(setup))
            .execute(&mut **conn)
            .await
            .map(drop)
    })
}
