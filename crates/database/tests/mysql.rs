//! The database client against a real MariaDB server (MySQL's protocol; the suite's,
//! `TOOLGATE_TEST_MYSQL_URL`, started by `scripts/test.sh`): the same rules as on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate_ports::database::{Access, Databases};
use toolgate_vault::Zeroizing;

mod common;

use common::{Db, unique};

fn db() -> Db {
    Db::from_env("TOOLGATE_TEST_MYSQL_URL")
}

#[tokio::test]
async fn values_of_many_types_come_back_typed() {
    let db = db();
    let name = unique("types");
    db.write(&format!(
            "CREATE TABLE {name}(i INT, u BIGINT UNSIGNED, d DECIMAL(10,3), f DOUBLE, b BOOLEAN, \
             t VARCHAR(20), raw VARBINARY(4), day DATE, at DATETIME(6), dur TIME, j JSON, n TEXT);\
             INSERT INTO {name} VALUES (-7, 18446744073709551615, 12345.678, 2.5, TRUE, 'a|b', \
             x'00ff', '1999-12-31', '2024-02-29 13:14:15.5', '-838:59:59', '{{\"k\": [1, null]}}', NULL)"
        ),
    )
    .await
    .unwrap();
    let t = db.read(&format!("SELECT * FROM {name}")).await.unwrap();
    let types: Vec<&str> = t.columns.iter().map(|c| c.type_name.as_str()).collect();
    assert_eq!(
        types,
        [
            "int",
            "bigint unsigned",
            "decimal",
            "double",
            "boolean",
            "varchar",
            "varbinary",
            "date",
            "datetime",
            "time",
            "blob",
            "text"
        ]
    );
    let row = &t.rows[0];
    assert_eq!(
        row[..10],
        [
            json!(-7),
            json!(18446744073709551615_u64),
            json!("12345.678"),
            json!(2.5),
            json!(true),
            json!("a|b"),
            json!("AP8="),
            json!("1999-12-31"),
            json!("2024-02-29 13:14:15.5"),
            json!("-838:59:59"),
        ]
    );
    // MariaDB's JSON is a LONGTEXT it sends as a blob: its text, as written
    assert_eq!(row[10], json!("{\"k\": [1, null]}"));
    assert_eq!(row[11], json!(null));
    db.write(&format!("DROP TABLE {name}")).await.unwrap();
}

#[tokio::test]
async fn a_read_cannot_write_and_the_server_is_what_refuses() {
    let db = db();
    let name = unique("ro");
    db.write(&format!(
        "CREATE TABLE {name}(x INT); INSERT INTO {name} VALUES (1)"
    ))
    .await
    .unwrap();
    for statement in [
        format!("INSERT INTO {name} VALUES (2)"),
        format!("DELETE FROM {name}"),
        format!("DROP TABLE {name}"),
        format!("CREATE TABLE {name}_b(y INT)"),
        format!("TRUNCATE TABLE {name}"),
    ] {
        let refused = db.read(&statement).await.unwrap_err().to_string();
        assert!(
            refused.contains("READ ONLY transaction"),
            "{statement}: {refused}"
        );
    }
    // two statements are never one
    let refused = db
        .read(&format!("COMMIT; DELETE FROM {name}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("SQL syntax"), "{refused}");
    // a statement that ends the transaction leaves the session read-only
    db.read("COMMIT").await.unwrap();
    let refused = db
        .read(&format!("DELETE FROM {name}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("READ ONLY"), "{refused}");
    let t = db
        .read(&format!("SELECT count(*) AS n FROM {name}"))
        .await
        .unwrap();
    assert_eq!(t.rows, vec![vec![json!(1)]]);
    db.write(&format!("DROP TABLE {name}")).await.unwrap();
}

#[tokio::test]
async fn a_slow_statement_is_stopped_by_its_time_limit() {
    let db = db();
    let mut slow = db.query(
        "SELECT sum(a.seq * b.seq) FROM seq_1_to_100000 a, seq_1_to_100000 b",
        Access::Read,
    );
    slow.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let refused = db.servers.query(slow).await.unwrap_err().to_string();
    let took = started.elapsed();
    assert!(refused.contains("max_statement_time"), "{refused}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    println!("a 300 ms max_statement_time stopped a join of 10^10 rows after {took:?}");
    assert_eq!(
        db.read("SELECT 2").await.unwrap().rows,
        vec![vec![json!(2)]]
    );
}

#[tokio::test]
async fn rows_are_capped_and_a_script_commits_all_or_nothing() {
    let db = db();
    let mut many = db.query("SELECT seq FROM seq_1_to_1000000", Access::Read);
    many.max_rows = 10;
    let t = db.servers.query(many).await.unwrap();
    assert_eq!((t.rows.len(), t.truncated), (10, true));
    assert_eq!(
        db.read("SELECT 3").await.unwrap().rows,
        vec![vec![json!(3)]]
    );
    let name = unique("script");
    db.write(&format!(
        "CREATE TABLE {name}(id INT PRIMARY KEY) ENGINE=InnoDB"
    ))
    .await
    .unwrap();
    let t = db
        .write(&format!(
            "INSERT INTO {name} VALUES (1), (2); UPDATE {name} SET id = 3 WHERE id = 2"
        ))
        .await
        .unwrap();
    assert_eq!(t.changes, 3);
    let failed = db
        .write(&format!(
            "INSERT INTO {name} VALUES (4); INSERT INTO {name} VALUES (1)"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(failed.contains("Duplicate entry"), "{failed}");
    let t = db
        .read(&format!("SELECT id FROM {name} ORDER BY id"))
        .await
        .unwrap();
    assert_eq!(
        t.rows,
        vec![vec![json!(1)], vec![json!(3)]],
        "the failed script left nothing"
    );
    db.write(&format!("DROP TABLE {name}")).await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_that_does_not_repeat_it() {
    let db = db();
    let mut bad = db.query("SELECT 1", Access::Read);
    let good = db.url().to_owned();
    let (head, rest) = good.split_once('@').unwrap();
    let user = head.rsplit_once(':').unwrap().0;
    bad.connection = Zeroizing::new(format!("{user}:not-the-password-xyz@{rest}"));
    let failed = db.servers.query(bad).await.unwrap_err().to_string();
    assert!(
        failed.contains("cannot connect") && failed.contains("Access denied"),
        "{failed}"
    );
    assert!(!failed.contains("not-the-password-xyz"), "{failed}");
}

/// Values bound to `?` are data, never SQL, on MySQL's protocol too; a read with them is still
/// read-only.
#[tokio::test]
async fn params_are_bound_never_spliced() {
    use toolgate_ports::database::DbParam;
    let db = db();
    let table = unique("params");
    db.write(&format!(
        "CREATE TABLE {table}(id bigint, ok bool, x double, note text, n int)"
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
        &format!("INSERT INTO {table} VALUES (?, ?, ?, ?, ?)"),
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
        &format!("SELECT id, x, note, n FROM {table} WHERE id = ? AND note = ?"),
        Access::Read,
        vec![DbParam::Int(7), DbParam::Text(hostile.clone())],
    )
    .await
    .unwrap();
    assert_eq!(
        read.rows,
        vec![vec![
            json!(7),
            json!(0.5),
            json!(hostile),
            serde_json::Value::Null
        ]]
    );
    let refused = with(
        &format!("DELETE FROM {table} WHERE id = ?"),
        Access::Read,
        vec![DbParam::Int(7)],
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("READ ONLY"), "{refused}");
    db.write(&format!("DROP TABLE {table}")).await.unwrap();
}
