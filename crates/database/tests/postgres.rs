//! The database client against a real PostgreSQL server (the suite's, `TOOLGATE_TEST_POSTGRES_URL`,
//! started by `scripts/test.sh`): reads that the server itself keeps read-only, time limits, row
//! and byte caps, scripts that commit all or nothing, values of many types, the egress guard
//! and the pools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_database::DatabaseServers;
use toolgate_egress::EgressPolicy;
use toolgate_ports::database::{Access, DatabaseError, Databases};
use toolgate_vault::Zeroizing;

mod common;

use common::{Db, unique};

fn db() -> Db {
    Db::from_env("TOOLGATE_TEST_POSTGRES_URL")
}

#[tokio::test]
async fn values_of_many_types_come_back_typed() {
    let db = db();
    let t = db.read("SELECT 1::int4 AS i, 9007199254740993::int8 AS big, 'a|b'::text AS t, 12345.678::numeric(10,3) AS n, \
         true AS b, '{\"k\": [1, null]}'::jsonb AS j, '2024-02-29 13:14:15.5+00'::timestamptz AS ts, \
         '\\x00ff'::bytea AS raw, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, NULL::text AS nothing, \
         'NaN'::float8 AS nan, 2.5::float8 AS f, '1999-12-31'::date AS d, 'happy'::name AS nm",
    )
    .await
    .unwrap();
    let types: Vec<&str> = t.columns.iter().map(|c| c.type_name.as_str()).collect();
    assert_eq!(
        types,
        [
            "int4",
            "int8",
            "text",
            "numeric",
            "bool",
            "jsonb",
            "timestamptz",
            "bytea",
            "uuid",
            "text",
            "float8",
            "float8",
            "date",
            "name"
        ]
    );
    assert_eq!(
        t.rows,
        vec![vec![
            json!(1),
            json!(9007199254740993_i64),
            json!("a|b"),
            json!("12345.678"),
            json!(true),
            json!({"k": [1, null]}),
            json!("2024-02-29 13:14:15.5+00"),
            json!("AP8="),
            json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Value::Null,
            json!("NaN"),
            json!(2.5),
            json!("1999-12-31"),
            json!("happy"),
        ]]
    );
    assert!(!t.truncated);
}

#[tokio::test]
async fn a_read_cannot_write_and_the_server_is_what_refuses() {
    let db = db();
    let name = unique("ro");
    db.write(&format!(
        "CREATE TABLE {name}(x int); INSERT INTO {name} VALUES (1)"
    ))
    .await
    .unwrap();
    for statement in [
        format!("INSERT INTO {name} VALUES (2)"),
        format!("DELETE FROM {name}"),
        format!("DROP TABLE {name}"),
        format!("CREATE TABLE {name}_b(y int)"),
        format!("WITH gone AS (DELETE FROM {name} RETURNING x) SELECT * FROM gone"),
    ] {
        let refused = db.read(&statement).await.unwrap_err().to_string();
        assert!(
            refused.contains("(25006)") && refused.contains("read-only transaction"),
            "{statement}: {refused}"
        );
    }
    // two statements are never one: the COMMIT cannot end the read-only transaction
    let refused = db
        .read(&format!("COMMIT; DELETE FROM {name}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("multiple commands"), "{refused}");
    // nor can the session's defaults be turned against a later read
    db.read("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        .await
        .unwrap();
    let refused = db
        .read(&format!("DELETE FROM {name}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("read-only"), "{refused}");
    let t = db
        .read(&format!("SELECT count(*) AS n FROM {name}"))
        .await
        .unwrap();
    assert_eq!(t.rows, vec![vec![json!(1)]]);
    db.write(&format!("DROP TABLE {name}")).await.unwrap();
}

#[tokio::test]
async fn a_slow_statement_is_stopped_by_its_time_limit_and_the_pool_goes_on() {
    let db = db();
    let mut slow = db.query("SELECT pg_sleep(5)", Access::Read);
    slow.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let refused = db.servers.query(slow).await.unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        refused.contains("57014") && refused.contains("statement timeout"),
        "{refused}"
    );
    assert!(took >= Duration::from_millis(300), "{took:?}");
    println!("a 300 ms statement_timeout stopped pg_sleep(5) after {took:?}");
    assert_eq!(
        db.read("SELECT 2 AS two").await.unwrap().rows,
        vec![vec![json!(2)]]
    );
}

#[tokio::test]
async fn rows_are_capped_by_count_and_bytes_and_the_pool_survives_a_cut() {
    let db = db();
    let mut many = db.query("SELECT g FROM generate_series(1, 1000000) g", Access::Read);
    many.max_rows = 10;
    let t = db.servers.query(many).await.unwrap();
    assert_eq!(t.rows.len(), 10);
    assert!(t.truncated);
    let mut wide = db.query(
        "SELECT repeat('x', 100000) FROM generate_series(1, 100)",
        Access::Read,
    );
    wide.max_bytes = 350_000;
    let t = db.servers.query(wide).await.unwrap();
    assert!(
        t.truncated && (3..=4).contains(&t.rows.len()),
        "{}",
        t.rows.len()
    );
    // the connections cut short were closed, not reused mid-answer
    for _ in 0..3 {
        assert_eq!(
            db.read("SELECT 3").await.unwrap().rows,
            vec![vec![json!(3)]]
        );
    }
}

#[tokio::test]
async fn a_script_commits_all_or_nothing() {
    let db = db();
    let name = unique("script");
    let t = db
        .write(&format!(
            "CREATE TABLE {name}(id int PRIMARY KEY, note text); \
             INSERT INTO {name} VALUES (1, 'a'), (2, 'b'); \
             UPDATE {name} SET note = 'c' WHERE id = 2 RETURNING id, note"
        ))
        .await
        .unwrap();
    assert_eq!(t.changes, 3);
    assert_eq!(t.rows, vec![vec![json!(2), json!("c")]]);
    assert_eq!(t.columns[1].type_name, "text");
    let failed = db
        .write(&format!(
            "INSERT INTO {name} VALUES (3, 'd'); INSERT INTO {name} VALUES (1, 'dup')"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(failed.contains("23505"), "{failed}");
    let t = db
        .read(&format!("SELECT id FROM {name} ORDER BY id"))
        .await
        .unwrap();
    assert_eq!(
        t.rows,
        vec![vec![json!(1)], vec![json!(2)]],
        "the failed script left nothing"
    );
    db.write(&format!("DROP TABLE {name}")).await.unwrap();
}

#[tokio::test]
async fn the_egress_guard_and_the_connection_string_rules_come_first() {
    let db = db();
    let closed = DatabaseServers::new(EgressPolicy::default()).unwrap();
    let refused = closed
        .query(db.query("SELECT 1", Access::Read))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, DatabaseError::Refused(m) if m.contains("loopback")),
        "{refused}"
    );
    assert_eq!(
        closed.pool_count(),
        0,
        "nothing was pooled for a refused host"
    );
    let mut bad = db.query("SELECT 1", Access::Read);
    let wrong_password = {
        let mut u = url::Url::parse(db.url()).unwrap();
        u.set_password(Some("not-the-password-xyz")).unwrap();
        u.to_string()
    };
    bad.connection = Zeroizing::new(wrong_password);
    let failed = db.servers.query(bad).await.unwrap_err().to_string();
    assert!(
        failed.contains("cannot connect") && failed.contains("password authentication failed"),
        "{failed}"
    );
    assert!(!failed.contains("not-the-password-xyz"), "{failed}");
}

#[tokio::test]
async fn pools_are_per_account_and_connection_string_and_bounded() {
    let db = db();
    for account in ["a", "b"] {
        let mut q = db.query("SELECT 1", Access::Read);
        q.account = account.into();
        db.servers.query(q).await.unwrap();
    }
    assert_eq!(db.servers.pool_count(), 2, "one pool per account");
    // one account naming many secrets keeps at most POOLS_PER_ACCOUNT pools
    for i in 0..toolgate_database::POOLS_PER_ACCOUNT + 3 {
        let mut q = db.query("SELECT 1", Access::Read);
        q.account = "c".into();
        q.secret = format!("DB_{i}");
        db.servers.query(q).await.unwrap();
    }
    assert_eq!(
        db.servers.pool_count(),
        2 + toolgate_database::POOLS_PER_ACCOUNT
    );
    // many calls at once share a pool of two connections
    let calls = (0..12).map(|i| {
        let db = &db;
        async move { db.read(&format!("SELECT {i} AS n, pg_sleep(0.05)")).await }
    });
    let results = futures::future::join_all(calls).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap().rows[0][0], json!(i));
    }
}

/// Values bound to `$1`, `$2`, … are data, never SQL: typed as given, a quote or a `;` in text
/// stays text; a read with them is still read-only; a write with them is one statement.
#[tokio::test]
async fn params_are_bound_never_spliced() {
    use toolgate_ports::database::DbParam;
    let db = db();
    let table = unique("params");
    db.write(&format!(
        "CREATE TABLE {table}(id int8, ok bool, x float8, note text, n int)"
    ))
    .await
    .unwrap();
    let with = |statement: &str, access: Access, params: Vec<DbParam>| {
        let mut query = db.query(statement, access);
        query.params = params;
        db.servers.query(query)
    };
    let hostile = format!("x'); DROP TABLE {table}; --");
    let inserted = with(
        &format!("INSERT INTO {table} VALUES ($1, $2, $3, $4, $5::int)"),
        Access::Write,
        vec![
            DbParam::Int(7),
            DbParam::Bool(true),
            DbParam::Float(0.5),
            DbParam::Text(hostile.clone()),
            DbParam::Null,
        ],
    )
    .await
    .unwrap();
    assert_eq!(inserted.changes, 1);
    let read = with(
        &format!("SELECT id, ok, x, note, n FROM {table} WHERE id = $1 AND note = $2"),
        Access::Read,
        vec![DbParam::Int(7), DbParam::Text(hostile.clone())],
    )
    .await
    .unwrap();
    assert_eq!(
        read.rows,
        vec![vec![
            json!(7),
            json!(true),
            json!(0.5),
            json!(hostile),
            Value::Null
        ]]
    );
    let refused = with(
        &format!("DELETE FROM {table} WHERE id = $1"),
        Access::Read,
        vec![DbParam::Int(7)],
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("read-only"), "{refused}");
    let two = with(
        &format!("DELETE FROM {table} WHERE id = $1; DROP TABLE {table}"),
        Access::Write,
        vec![DbParam::Int(7)],
    )
    .await
    .unwrap_err();
    assert!(two.to_string().contains("multiple commands"), "{two}");
    let kept = db
        .read(&format!("SELECT count(*) FROM {table}"))
        .await
        .unwrap();
    assert_eq!(kept.rows, vec![vec![json!(1)]]);
    db.write(&format!("DROP TABLE {table}")).await.unwrap();
}
