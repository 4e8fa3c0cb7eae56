//! `sql` through HTTP: on a SQLite file of a session's workspace (served by the session, so
//! no path reaches the host) and on the suite's PostgreSQL server through a connection string
//! kept in the vault (behind the egress guard); reads that the database keeps read-only, rows
//! as a Markdown table and typed rows, and bad input refused before anything runs.

use serde_json::{Value, json};

use crate::common::*;

const TOKEN: &str = "sk-live-7a6b5c4d3e2f1a0b";

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn postgres_url() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it")
}

/// A table of this test alone on the suite's shared database servers.
fn unique_table() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("sql_suite_{nanos}")
}

async fn read(f: &Fixture, who: &Account, args: Value) -> Value {
    f.call(who, "svc_read", args).await
}

/// The one row of [`host_database`].
const OUTSIDE_ROW: &str = "outside-row-7f3a91";

/// A real SQLite database on the host beside the fixture's data, outside every workspace,
/// readable by anybody (0644 in a 0755 folder), holding [`OUTSIDE_ROW`]; its path.
fn host_database(f: &Fixture) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = f._dir.path().join("outside");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("known.db");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch(&format!(
        "CREATE TABLE notes(v TEXT); INSERT INTO notes VALUES ('{OUTSIDE_ROW}');"
    ))
    .unwrap();
    let row: String = db
        .query_row("SELECT v FROM notes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(row, OUTSIDE_ROW, "the host's database holds the row");
    drop(db);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

#[tokio::test]
async fn a_sqlite_file_of_a_session_is_written_then_read_read_only() {
    let f = fixture().await;
    let made = f
        .write(json!({"session_id": "db", "database": "sqlite:data/shop.db",
                      "code": "import os\nos.makedirs('data', exist_ok=True)",
                      "sql": "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL);\
                              INSERT INTO items(name, price) VALUES ('pen', 1.5), ('ink|pot', 4);"}))
        .await;
    assert_eq!(made["isError"], false, "{made}");
    assert_eq!(made["structuredContent"]["sql"]["changes"], 2, "{made}");
    let rows = read(
        &f,
        &f.alice,
        json!({"session_id": "db", "database": "sqlite:data/shop.db",
               "sql": "SELECT id, name, price FROM items ORDER BY id"}),
    )
    .await;
    assert_eq!(rows["isError"], false, "{rows}");
    assert_eq!(
        text(&rows),
        "| id | name | price |\n| --- | --- | --- |\n| 1 | pen | 1.5 |\n| 2 | ink\\|pot | 4.0 |\n\n(2 rows)"
    );
    let sql = &rows["structuredContent"]["sql"];
    assert_eq!(sql["database"], "sqlite");
    assert_eq!(sql["rows"], json!([[1, "pen", 1.5], [2, "ink|pot", 4.0]]));
    assert_eq!(
        sql["columns"],
        json!([{"name": "id", "type": "integer"}, {"name": "name", "type": "text"},
               {"name": "price", "type": "real"}])
    );
    // the read tool cannot write: SQLite, which opened the file read-only, refuses
    let refused = read(
        &f,
        &f.alice,
        json!({"session_id": "db", "database": "sqlite:data/shop.db",
               "sql": "DELETE FROM items"}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text(&refused).contains("readonly"), "{refused}");
    let count = read(
        &f,
        &f.alice,
        json!({"session_id": "db", "database": "sqlite:data/shop.db",
               "sql": "SELECT count(*) AS n FROM items", "max_rows": 1}),
    )
    .await;
    assert_eq!(count["structuredContent"]["sql"]["rows"], json!([[2]]));
    // the variables of the session were not touched by the statements
    let count = f.write(json!({"session_id": "db", "code": "sorted(k for k in globals() if not k.startswith('_'))"})).await;
    assert!(text(&count).contains("['os']"), "{count}");
}

#[tokio::test]
async fn sqlite_paths_stay_in_the_workspace_and_sessions_in_their_account() {
    let f = fixture().await;
    f.write(json!({"session_id": "own", "code": "import os, sqlite3\n\
                    sqlite3.connect('mine.db').execute('CREATE TABLE t(x)')\n\
                    os.symlink('/etc/passwd', 'passwd.db')\nos.symlink('/proc/self/environ', 'env.db')"}))
        .await;
    for (database, says) in [
        ("sqlite:../other/x.db", "'..'"),
        ("sqlite:/etc/passwd", "relative to the workspace"),
        ("sqlite:", "names no file"),
    ] {
        let refused = read(
            &f,
            &f.alice,
            json!({"session_id": "own", "database": database, "sql": "SELECT 1"}),
        )
        .await;
        assert_eq!(refused["isError"], true, "{database}: {refused}");
        assert!(text(&refused).contains(says), "{database}: {refused}");
    }
    // a link is followed only inside the session's own confinement: nothing of the host (its
    // /etc has no passwd; its /proc is its own, and an empty file is an empty database)
    for link in ["passwd.db", "env.db"] {
        let opened = read(
            &f,
            &f.alice,
            json!({"session_id": "own", "database": format!("sqlite:{link}"),
                   "sql": "SELECT * FROM sqlite_master"}),
        )
        .await;
        let shown = opened.to_string();
        assert!(
            !shown.contains("root:") && !shown.contains("PATH="),
            "{link}: {shown}"
        );
    }
    // real SQLite databases of the host, outside the workspace, with a known row: one anybody
    // may read (so only the confinement keeps the session out), and the server's own
    let outside = host_database(&f);
    let server_db = f._dir.path().join("toolgate.db");
    let linked = f
        .write(json!({"session_id": "own", "code": format!(
            "import os\nos.symlink({outside:?}, 'outside.db')\nos.symlink({server_db:?}, 'server.db')"
        )}))
        .await;
    assert_eq!(linked["isError"], false, "{linked}");
    for (link, sql, row) in [
        ("outside.db", "SELECT v FROM notes", OUTSIDE_ROW),
        (
            "server.db",
            "SELECT email FROM accounts",
            f.alice.email.as_str(),
        ),
    ] {
        let refused = read(
            &f,
            &f.alice,
            json!({"session_id": "own", "database": format!("sqlite:{link}"), "sql": sql}),
        )
        .await;
        let shown = refused.to_string();
        assert_eq!(refused["isError"], true, "{link}: {shown}");
        assert!(
            text(&refused).contains("unable to open database file"),
            "{link}: {shown}"
        );
        assert!(!shown.contains(row), "{link}: {shown}");
    }
    // bob's "own" is another session: alice's file is not his
    let theirs = read(
        &f,
        &f.bob,
        json!({"session_id": "own", "database": "sqlite:mine.db", "sql": "SELECT * FROM t"}),
    )
    .await;
    assert_eq!(theirs["isError"], true, "{theirs}");
    assert!(text(&theirs).contains("no such session"), "{theirs}");
    // a read never starts a session
    let sessions = read(&f, &f.bob, json!({"sessions": true})).await;
    assert_eq!(
        sessions["structuredContent"]["sessions"]["sessions"],
        json!([]),
        "{sessions}"
    );
}

#[tokio::test]
async fn a_secret_written_into_a_sqlite_file_by_code_comes_back_redacted() {
    let f = fixture().await;
    let stored = f
        .write(json!({"secret_set": {"name": "TOKEN", "value": TOKEN}}))
        .await;
    assert_eq!(stored["isError"], false, "{stored}");
    let wrote = f
        .write(json!({"session_id": "leaky", "secrets": ["TOKEN"],
                      "code": "import os, sqlite3\nc = sqlite3.connect('k.db')\n\
                               c.execute('CREATE TABLE k(v)')\n\
                               c.execute('INSERT INTO k VALUES (?)', ('key=' + os.environ['TOKEN'],))\nc.commit()"}))
        .await;
    assert_eq!(wrote["isError"], false, "{wrote}");
    let rows = read(
        &f,
        &f.alice,
        json!({"session_id": "leaky", "database": "sqlite:k.db", "sql": "SELECT v FROM k"}),
    )
    .await;
    let shown = rows.to_string();
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains("key=[REDACTED:TOKEN]"), "{shown}");
}

#[tokio::test]
async fn postgres_through_a_connection_string_in_the_vault() {
    let mut f = fixture_with(&["--egress-allow-private", "127.0.0.1/32"]).await;
    let url = postgres_url();
    // postgres://USER:PASSWORD@HOST:PORT/DB
    let userinfo = url.split("://").nth(1).unwrap().split('@').next().unwrap();
    let password = userinfo.split(':').nth(1).unwrap().to_owned();
    f.write(json!({"secret_set": {"name": "PG", "value": url}}))
        .await;
    let table = unique_table();
    let made = f
        .write(json!({"database": "PG",
                      "sql": format!("CREATE TABLE {table}(id int, total numeric(8,2), at date);\
                                      INSERT INTO {table} VALUES (1, 10.50, '2026-01-02'), (2, NULL, NULL)")}))
        .await;
    assert_eq!(made["isError"], false, "{made}");
    assert_eq!(text(&made), "2 rows changed.");
    let rows = read(
        &f,
        &f.alice,
        json!({"database": "PG", "sql": format!("SELECT * FROM {table} ORDER BY id")}),
    )
    .await;
    assert_eq!(rows["isError"], false, "{rows}");
    assert_eq!(
        rows["structuredContent"]["sql"]["rows"],
        json!([[1, "10.50", "2026-01-02"], [2, null, null]])
    );
    assert_eq!(rows["structuredContent"]["sql"]["database"], "postgres");
    assert!(text(&rows).contains("| 2 | NULL | NULL |"), "{rows}");
    let refused = read(
        &f,
        &f.alice,
        json!({"database": "PG", "sql": format!("DELETE FROM {table}")}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        text(&refused).contains("read-only transaction"),
        "{refused}"
    );
    // another account has no secret PG
    let theirs = read(&f, &f.bob, json!({"database": "PG", "sql": "SELECT 1"})).await;
    assert_eq!(theirs["isError"], true, "{theirs}");
    assert!(text(&theirs).contains("no secret named PG"), "{theirs}");
    // many at once, on one account's pool of two connections
    let calls = (0..8).map(|i| {
        read(
            &f,
            &f.alice,
            json!({"database": "PG", "sql": format!("SELECT {i} AS n, pg_sleep(0.05)")}),
        )
    });
    for (i, result) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            result["structuredContent"]["sql"]["rows"][0][0],
            json!(i),
            "{result}"
        );
    }
    f.write(json!({"database": "PG", "sql": format!("DROP TABLE {table}")}))
        .await;
    let log = f.server.stop_and_read_log();
    assert!(!log.contains(&password), "the password reached the log");
}

#[tokio::test]
async fn a_database_on_a_private_address_is_refused_unless_allowed() {
    let f = fixture().await;
    f.write(json!({"secret_set": {"name": "PG", "value": postgres_url()}}))
        .await;
    f.write(json!({"secret_set": {"name": "SOCKET", "value": "postgres://u:pw@%2Frun%2Fpostgresql/db"}}))
        .await;
    f.write(json!({"secret_set": {"name": "REDIS", "value": "redis://u:pw@example.org"}}))
        .await;
    for (database, says) in [
        ("PG", "loopback"),
        ("SOCKET", "socket path"),
        ("REDIS", "does not hold a connection string"),
    ] {
        let refused = read(
            &f,
            &f.alice,
            json!({"database": database, "sql": "SELECT 1"}),
        )
        .await;
        assert_eq!(refused["isError"], true, "{database}: {refused}");
        assert!(text(&refused).contains(says), "{database}: {refused}");
        assert!(!refused.to_string().contains("pw@"), "{refused}");
    }
}

#[tokio::test]
async fn bad_sql_input_gets_a_clear_error_before_anything_runs() {
    let f = fixture().await;
    let before = f.server.free_remaining(&f.alice.key).await;
    for (args, says) in [
        (json!({"sql": "SELECT 1"}), "needs `database`"),
        (
            json!({"sql": "SELECT 1", "database": "no such!"}),
            "starts with a letter",
        ),
        (
            json!({"sql": 5, "database": "sqlite:x.db"}),
            "must be a string",
        ),
        (
            json!({"sql": "SELECT 1", "database": "sqlite:x.db", "max_rows": 0}),
            "max_rows",
        ),
        (
            json!({"sql": "x".repeat(1024 * 1024 + 1), "database": "sqlite:x.db"}),
            "the limit is 1048576",
        ),
        (
            json!({"sql": "SELECT ?", "database": "sqlite:x.db", "params": [1], "session_id": "s"}),
            "a sqlite: file takes none",
        ),
        (
            json!({"sql": "SELECT $1", "database": "PG", "params": [{"a": 1}]}),
            "pass JSON as a string",
        ),
        (
            json!({"sql": "SELECT $1", "database": "PG", "params": "1"}),
            "must be a list",
        ),
    ] {
        let refused = read(&f, &f.alice, args.clone()).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert!(refused.to_string().contains(says), "{says}: {refused}");
    }
    assert_eq!(
        f.server.free_remaining(&f.alice.key).await,
        before,
        "refused calls are free"
    );
    for (args, says) in [
        (
            json!({"sql": "SELECT 1", "database": "sqlite:x.db"}),
            "give that session_id",
        ),
        (
            json!({"sql": "SELECT 1", "database": "NOPE"}),
            "no secret named NOPE",
        ),
        (
            json!({"sql": "SELECT 1", "database": "sqlite:x.db", "session_id": "none"}),
            "no such session",
        ),
    ] {
        let refused = read(&f, &f.alice, args.clone()).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert!(text(&refused).contains(says), "{says}: {refused}");
    }
}

#[tokio::test]
async fn mysql_through_a_connection_string_in_the_vault() {
    let f = fixture_with(&["--egress-allow-private", "127.0.0.1/32"]).await;
    let url = std::env::var("TOOLGATE_TEST_MYSQL_URL")
        .expect("TOOLGATE_TEST_MYSQL_URL: scripts/test.sh starts a server and sets it");
    f.write(json!({"secret_set": {"name": "MY", "value": url}}))
        .await;
    let table = unique_table();
    let made = f
        .write(json!({"database": "MY",
                      "sql": format!("CREATE TABLE {table}(id INT, price DECIMAL(6,2));\
                                      INSERT INTO {table} VALUES (1, 9.99), (2, 0.50)")}))
        .await;
    assert_eq!(made["isError"], false, "{made}");
    let rows = read(
        &f,
        &f.alice,
        json!({"database": "MY", "sql": format!("SELECT id, price FROM {table} ORDER BY id")}),
    )
    .await;
    assert_eq!(rows["isError"], false, "{rows}");
    assert_eq!(rows["structuredContent"]["sql"]["database"], "mysql");
    assert_eq!(
        rows["structuredContent"]["sql"]["rows"],
        json!([[1, "9.99"], [2, "0.50"]])
    );
    let refused = read(
        &f,
        &f.alice,
        json!({"database": "MY", "sql": format!("UPDATE {table} SET price = 0")}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text(&refused).contains("READ ONLY"), "{refused}");
    f.write(json!({"database": "MY", "sql": format!("DROP TABLE {table}")}))
        .await;
}

#[tokio::test]
async fn serve_refuses_to_start_while_the_postgres_client_would_add_the_operators_settings() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    for name in [
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGSSLKEYPASSWORD",
        "PGOPTIONS",
    ] {
        let out = cli(
            Some(&storage),
            &["serve", "--listen", "127.0.0.1:0"],
            &[(name, "/etc/ssl/operator.pem")],
        );
        assert!(
            out.code.is_some() && !out.success(),
            "{name}: serve must stop by itself: {out:?}"
        );
        assert!(
            out.stderr.contains(&format!("unset {name} before serving")),
            "{name}: {out:?}"
        );
        assert!(out.stdout.trim().is_empty(), "{name}: it listened: {out:?}");
    }
}
