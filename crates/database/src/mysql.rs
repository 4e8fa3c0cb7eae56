//! Statements on a tenant's MySQL or MariaDB server, by the rules of [`crate::postgres`]: a
//! read is one prepared statement (the server refuses a string of several) in a `READ ONLY`
//! transaction of a session whose transactions are all read-only, so that not even a statement
//! that commits implicitly can write; a write is a script in one transaction (MySQL commits DDL
//! implicitly, which no client can prevent). The time limit is the server's own:
//! `max_statement_time` on MariaDB, `max_execution_time` (which bounds `SELECT` only) on MySQL.

use futures::future::BoxFuture;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlPool, MySqlSslMode};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, ConnectOptions, Row};
use toolgate_ports::database::Access;

use crate::endpoint::{Endpoint, Tls};
use crate::my_values::json_of;
use crate::rows::{self, Caps, Reader};

pub const READER: Reader<MySql> = Reader {
    changes: |done| done.rows_affected(),
    columns: rows::columns,
    values: |row| (0..row.len()).map(|i| json_of(row, i)).collect(),
};

/// A lazy pool for `endpoint` at `address`: nothing connects until the first statement.
pub fn pool(endpoint: &Endpoint, address: std::net::SocketAddr) -> MySqlPool {
    let mut options = MySqlConnectOptions::new()
        .host(&address.ip().to_string())
        .port(address.port())
        .username(&endpoint.user)
        .password(&endpoint.password)
        .ssl_mode(match endpoint.tls {
            Tls::Disable => MySqlSslMode::Disabled,
            Tls::Prefer => MySqlSslMode::Preferred,
            Tls::Require => MySqlSslMode::Required,
        })
        .statement_cache_capacity(0)
        .disable_statement_logging();
    if !endpoint.database.is_empty() {
        options = options.database(&endpoint.database);
    }
    rows::pool_options().connect_lazy_with(options)
}

pub fn set_up(
    conn: &mut PoolConnection<MySql>,
    access: Access,
    caps: Caps,
) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(begin(conn, access, caps))
}

/// The session's time limit and transaction mode, then the transaction.
async fn begin(
    conn: &mut PoolConnection<MySql>,
    access: Access,
    caps: Caps,
) -> Result<(), sqlx::Error> {
    let seconds = caps.timeout.as_secs_f64().max(0.001);
    let mariadb = format!("SET SESSION max_statement_time = {seconds:.3}");
    if sqlx::raw_sql(AssertSqlSafe(mariadb))
        .execute(&mut **conn)
        .await
        .is_err()
    {
        let ms = caps.timeout.as_millis().max(1);
        let mysql = format!("SET SESSION max_execution_time = {ms}");
        sqlx::raw_sql(AssertSqlSafe(mysql))
            .execute(&mut **conn)
            .await?;
    }
    let begin = match access {
        Access::Read => "SET SESSION TRANSACTION READ ONLY; START TRANSACTION READ ONLY",
        Access::Write => "SET SESSION TRANSACTION READ WRITE; START TRANSACTION",
    };
    sqlx::raw_sql(begin).execute(&mut **conn).await?;
    Ok(())
}
