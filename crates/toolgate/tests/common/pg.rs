//! A fresh PostgreSQL database per test, dropped afterwards even when the test panicked.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::future::Future;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The environment variable naming the PostgreSQL server the PG tests use.
pub const PG_URL_VAR: &str = "TOOLGATE_TEST_POSTGRES_URL";

/// Runs `test` against the URL of a database created for it on the server named by
/// `TOOLGATE_TEST_POSTGRES_URL`, then drops the database, even when the test panicked.
pub async fn with_fresh_database<F, Fut>(test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let server_url = std::env::var(PG_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{PG_URL_VAR} is not set: this test needs a PostgreSQL server. Start one with \
             `scripts/pg-up.sh /tmp/pg-tests` and run the tests as \
             `{PG_URL_VAR}=$(scripts/pg-up.sh /tmp/pg-tests) cargo test -p toolgate`."
        )
    });
    let name = format!("toolgate_bin_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&server_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the server named by {PG_URL_VAR}: {e}"));
    // The name is generated above from hex digits only, so it is safe to splice into DDL.
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();

    let outcome = tokio::spawn(test(with_database(&server_url, &name))).await;

    // FORCE ends the connections of a server process the test left behind.
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
fn with_database(url: &str, database: &str) -> String {
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
