//! For tests only (feature `testkit`): a fresh database per test on the server that
//! `TOOLGATE_TEST_POSTGRES_URL` names, dropped afterwards even when the test panicked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The environment variable naming the PostgreSQL server the tests use.
pub const URL_VAR: &str = "TOOLGATE_TEST_POSTGRES_URL";

/// Runs `test` with the URL of a database created for it, then drops the database and only
/// then reports a panic of the test. Panics (fails, never skips) when the variable is unset.
pub async fn with_fresh_database<F, Fut>(test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let server_url = std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: this test needs a PostgreSQL server. Start one with \
             `scripts/pg-up.sh /tmp/pg-tests` and run the tests as \
             `{URL_VAR}=$(scripts/pg-up.sh /tmp/pg-tests) cargo test` (scripts/test.sh does this)."
        )
    });
    let name = format!("toolgate_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&server_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the server named by {URL_VAR}: {e}"));
    // The name is generated above from hex digits only, so it is safe to splice into DDL.
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();

    let outcome = tokio::spawn(test(with_database(&server_url, &name))).await;

    // FORCE ends connections a panicking test or a killed server left open.
    sqlx::query(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// `url` with its database path replaced by `database`, keeping credentials and parameters.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Waits until `waiting` sessions of this database wait for a lock (each admission blocked on
/// an account row), or until `done` says the awaited work finished.
pub async fn until_waiting(conn: &mut PgConnection, waiting: i64, done: impl Fn() -> bool) {
    until_lock_waiters(
        conn,
        |now| now >= waiting,
        done,
        "no session came to wait for the lock",
    )
    .await;
}

/// Waits until no session waits for a lock (the one that waited has it), or `done`.
pub async fn until_lock_taken(conn: &mut PgConnection, done: impl Fn() -> bool) {
    until_lock_waiters(
        conn,
        |now| now == 0,
        done,
        "the waiting session did not get the lock",
    )
    .await;
}

/// Polls the count of sessions waiting for a lock until `enough` holds of it, or `done`
/// (failing with `what` after 30 s).
async fn until_lock_waiters(
    conn: &mut PgConnection,
    enough: impl Fn(i64) -> bool,
    done: impl Fn() -> bool,
    what: &str,
) {
    for _ in 0..3_000 {
        let now: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        if enough(now) || done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what} within 30 s");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_and_the_rest_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:1/old?sslmode=disable", "new"),
            "postgres://u:p@h:1/new?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1", "new"),
            "postgres://u:p@h:1/new"
        );
    }
}
