//! What PostgreSQL and MySQL share: a statement's answer read within its caps, and the guard
//! around one use of a pooled connection (a time limit past the database's own, and a
//! connection closed rather than pooled when it is not fit for reuse).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Database, Either, Pool};
use toolgate_ports::database::{Access, Column, DatabaseError, DbParam, Table};

/// Time to connect (or wait for a free connection).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time beyond the statement's own limit before the client gives up on the server.
const SLACK: Duration = Duration::from_secs(5);

/// What a statement may return.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_rows: u64,
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// How one engine's results are read.
pub struct Reader<DB: Database> {
    /// rows a result changed
    pub changes: fn(&DB::QueryResult) -> u64,
    /// a row's columns
    pub columns: fn(&DB::Row) -> Vec<Column>,
    /// a row's values as JSON
    pub values: fn(&DB::Row) -> Vec<Value>,
}

/// One use of a connection: its result, and whether the connection is fit for reuse.
pub type Work<'c> = BoxFuture<'c, (Result<Table, DatabaseError>, bool)>;

/// How an engine begins a statement's transaction: its time limit and access mode.
pub type SetUp<DB> =
    for<'c> fn(&'c mut PoolConnection<DB>, Access, Caps) -> BoxFuture<'c, Result<(), sqlx::Error>>;

/// Connections of one pool at once: a tenant's pool serves one account's calls.
const POOL_CONNECTIONS: u32 = 2;
/// A connection unused this long is closed.
const CONNECTION_IDLE: Duration = Duration::from_secs(60);

/// The options of every tenant's pool: small, closing idle connections, connecting lazily.
pub fn pool_options<DB: Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .min_connections(0)
        .idle_timeout(CONNECTION_IDLE)
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

/// Runs `statement` on a connection of `pool`: the engine's `set_up`, then
/// [`run_statement`], all within the time limit.
pub async fn run<DB>(
    pool: &Pool<DB>,
    (statement, params): (&str, &[DbParam]),
    access: Access,
    caps: Caps,
    (set_up, reader): (SetUp<DB>, &'static Reader<DB>),
) -> Result<Table, DatabaseError>
where
    DB: Database + sqlx::database::HasStatementCache + Bindable,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let statement = statement.to_owned();
    let params = params.to_vec();
    with_connection(pool, caps, move |conn| {
        Box::pin(async move {
            if let Err(e) = set_up(conn, access, caps).await {
                return (Err(failed("cannot start a transaction", &e)), false);
            }
            run_statement(conn, (statement, params), access, caps, reader).await
        })
    })
    .await
}

/// A connection of `pool`, given to `work`, which answers with its result and whether the
/// connection is still fit for reuse; after `caps.timeout` and some slack it is given up.
async fn with_connection<DB: Database>(
    pool: &Pool<DB>,
    caps: Caps,
    work: impl for<'c> FnOnce(&'c mut PoolConnection<DB>) -> Work<'c>,
) -> Result<Table, DatabaseError> {
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| failed("cannot connect", &e))?;
    let limit = caps.timeout + SLACK;
    let (result, clean) = match tokio::time::timeout(limit, work(&mut conn)).await {
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

/// The items of a statement's answer.
pub type Items<'c, DB> = BoxStream<
    'c,
    Result<Either<<DB as Database>::QueryResult, <DB as Database>::Row>, sqlx::Error>,
>;

/// Reads results until the end or a cap: the rows of the last statement that returned any,
/// the changes of all; `false` when it stopped at a cap.
pub async fn collect<DB: Database>(
    mut items: Items<'_, DB>,
    caps: Caps,
    reader: &Reader<DB>,
) -> Result<(Table, bool), DatabaseError> {
    let mut table = Table::default();
    let mut bytes = 0u64;
    let mut fresh_result = true;
    while let Some(item) = items.try_next().await.map_err(statement_error)? {
        match item {
            Either::Left(done) => {
                table.changes += (reader.changes)(&done);
                fresh_result = true;
            }
            Either::Right(row) => {
                if fresh_result {
                    // a later statement's rows replace an earlier one's
                    table.columns = (reader.columns)(&row);
                    table.rows.clear();
                    table.truncated = false;
                    bytes = 0;
                    fresh_result = false;
                }
                if table.rows.len() as u64 >= caps.max_rows {
                    table.truncated = true;
                    return Ok((table, false));
                }
                let values = (reader.values)(&row);
                bytes += values
                    .iter()
                    .map(|v| v.to_string().len() as u64)
                    .sum::<u64>();
                // the first row too: one row of 100 MiB is not "about 1 MiB of values"
                if bytes > caps.max_bytes {
                    table.truncated = true;
                    return Ok((table, false));
                }
                table.rows.push(values);
            }
        }
    }
    Ok((table, true))
}

/// A row's columns: names, and type names in lower case.
pub fn columns<R: sqlx::Row>(row: &R) -> Vec<Column> {
    use sqlx::{Column as _, TypeInfo as _};
    row.columns()
        .iter()
        .map(|c| Column {
            name: c.name().to_owned(),
            type_name: c.type_info().name().to_ascii_lowercase(),
        })
        .collect()
}

/// An engine whose statements take the values of [`DbParam`] (both do).
pub trait Bindable: Database + Sized {
    /// `query` with `param` bound to its next placeholder.
    fn bind_param<'q>(
        query: sqlx::query::Query<'q, Self, <Self as Database>::Arguments>,
        param: DbParam,
    ) -> sqlx::query::Query<'q, Self, <Self as Database>::Arguments>;
}

impl<DB> Bindable for DB
where
    DB: Database,
    for<'t> bool: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> f64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> String: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<String>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    fn bind_param<'q>(
        query: sqlx::query::Query<'q, Self, <Self as Database>::Arguments>,
        param: DbParam,
    ) -> sqlx::query::Query<'q, Self, <Self as Database>::Arguments> {
        match param {
            DbParam::Null => query.bind(None::<String>),
            DbParam::Bool(b) => query.bind(b),
            DbParam::Int(n) => query.bind(n),
            DbParam::Float(x) => query.bind(x),
            DbParam::Text(text) => query.bind(text),
        }
    }
}

/// A write whose rows were cut short: nothing is committed.
fn cut_write() -> DatabaseError {
    DatabaseError::Failed(
        "the statements returned more rows than max_rows or 1 MiB; nothing was committed: \
         raise max_rows, or return fewer rows"
            .to_owned(),
    )
}

/// The database's own words for a statement it refused or that failed.
pub fn statement_error(e: sqlx::Error) -> DatabaseError {
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
pub fn failed(what: &str, e: &sqlx::Error) -> DatabaseError {
    match e {
        sqlx::Error::Database(db) => DatabaseError::Failed(format!("{what}: {}", db.message())),
        sqlx::Error::PoolTimedOut => DatabaseError::Failed(format!(
            "{what}: no connection within {} s",
            ACQUIRE_TIMEOUT.as_secs()
        )),
        other => DatabaseError::Failed(format!("{what}: {other}")),
    }
}

/// Runs `statement` in the transaction the engine has begun on `conn` (a read, or anything with
/// `params`, as one prepared statement with them bound; a write without as a script), reads
/// its answer within `caps` and ends the transaction: the result, and whether the connection
/// is fit for reuse.
async fn run_statement<DB>(
    conn: &mut PoolConnection<DB>,
    (statement, params): (String, Vec<DbParam>),
    access: Access,
    caps: Caps,
    reader: &Reader<DB>,
) -> (Result<Table, DatabaseError>, bool)
where
    DB: Database + sqlx::database::HasStatementCache + Bindable,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let result = match access {
        _ if !params.is_empty() => {
            let query = params.into_iter().fold(
                sqlx::query::<DB>(AssertSqlSafe(statement)).persistent(false),
                DB::bind_param,
            );
            let items = sqlx::Executor::fetch_many(&mut **conn, query);
            collect(items, caps, reader).await
        }
        Access::Read => {
            let items = sqlx::query::<DB>(AssertSqlSafe(statement))
                .persistent(false)
                .fetch(&mut **conn)
                .map_ok(Either::Right)
                .boxed();
            collect(items, caps, reader).await
        }
        Access::Write => {
            let items = sqlx::raw_sql(AssertSqlSafe(statement)).fetch_many(&mut **conn);
            collect(items, caps, reader).await
        }
    };
    let (table, drained) = match result {
        Ok(done) => done,
        Err(e) => {
            let fit = sqlx::raw_sql("ROLLBACK").execute(&mut **conn).await.is_ok();
            return (Err(e), fit);
        }
    };
    if !drained {
        // the rest of the answer is still on its way: the connection goes, and with it the
        // transaction (a write with rows cut short is not committed)
        return match access {
            Access::Read => (Ok(table), false),
            Access::Write => (Err(cut_write()), false),
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
