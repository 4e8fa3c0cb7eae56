//! The vault through HTTP: secrets stored, listed (names and dates only), used by code as
//! environment variables of one run, and never shown again: not in a result, streamed output,
//! traceback, log line, or the database files; and a lost key file stops `serve` rather than
//! being replaced by a key that opens nothing.

use crate::common::*;
use serde_json::{Value, json};

const VALUE: &str = "sk-live-4f9c2b7e81d3a6f0";

/// A value with every character URL encoding treats specially, and its encodings as Python's
/// `urllib.parse` writes them: `quote(v, safe='')` (`%20`), `quote_plus(v)` (`+`) and
/// `quote(v)` (which keeps `/`).
const RESERVED: &str = "pa ss/w+rd%20&k=v é✓~";
const RESERVED_ENCODED: [&str; 3] = [
    "pa%20ss%2Fw%2Brd%2520%26k%3Dv%20%C3%A9%E2%9C%93~",
    "pa+ss%2Fw%2Brd%2520%26k%3Dv+%C3%A9%E2%9C%93~",
    "pa%20ss/w%2Brd%2520%26k%3Dv%20%C3%A9%E2%9C%93~",
];

fn text_of(result: &Value) -> String {
    result.to_string()
}

async fn store(f: &Fixture, who: &Account, name: &str, value: &str) -> Value {
    f.call(
        who,
        "svc_write",
        json!({"secret_set": {"name": name, "value": value}}),
    )
    .await
}

#[tokio::test]
async fn a_secret_is_stored_listed_and_never_shown() {
    let f = fixture().await;
    let first = store(&f, &f.alice, "TOKEN", "old-value-123").await;
    assert_eq!(first["isError"], false, "{first}");
    assert_eq!(first["structuredContent"]["secret_set"]["created"], true);
    let again = store(&f, &f.alice, "TOKEN", VALUE).await;
    assert_eq!(
        again["structuredContent"]["secret_set"]["created"], false,
        "{again}"
    );
    assert!(!text_of(&again).contains(VALUE));

    let listed = f
        .call(&f.alice, "svc_read", json!({"list_secrets": true}))
        .await;
    let rows = listed["structuredContent"]["list_secrets"]["secrets"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["name"], "TOKEN");
    assert!(rows[0]["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(rows[0]["updated_at"].as_str().unwrap() >= rows[0]["created_at"].as_str().unwrap());
    assert!(!text_of(&listed).contains(VALUE) && !text_of(&listed).contains("old-value"));

    // another account sees none of it, and cannot use it
    let theirs = f
        .call(&f.bob, "svc_read", json!({"list_secrets": true}))
        .await;
    assert_eq!(
        theirs["structuredContent"]["list_secrets"]["secrets"],
        json!([]),
        "{theirs}"
    );
    let used = f
        .call(
            &f.bob,
            "svc_write",
            json!({"code": "1", "secrets": ["TOKEN"]}),
        )
        .await;
    assert_eq!(used["isError"], true);
    assert!(text_of(&used).contains("no secret named TOKEN"), "{used}");

    let deleted = f
        .call(&f.alice, "svc_write", json!({"secret_delete": "TOKEN"}))
        .await;
    assert_eq!(
        deleted["structuredContent"]["secret_delete"]["deleted"], true,
        "{deleted}"
    );
    let gone = f
        .call(&f.alice, "svc_write", json!({"secret_delete": "TOKEN"}))
        .await;
    assert_eq!(gone["isError"], true);
    assert!(text_of(&gone).contains("no secret named TOKEN"), "{gone}");
}

#[tokio::test]
async fn code_uses_a_secret_by_name_and_every_form_of_it_is_redacted() {
    let mut f = fixture().await;
    store(&f, &f.alice, "TOKEN", VALUE).await;
    let code = "import os, sys, base64, urllib.parse\n\
                v = os.environ['TOKEN']\n\
                print('plain', v)\n\
                print('b64', base64.b64encode(v.encode()).decode())\n\
                print('hex', v.encode().hex())\n\
                print('url', urllib.parse.quote(v + ' x', safe=''))\n\
                sys.stdout.write(v[:7]); sys.stdout.flush(); sys.stdout.write(v[7:] + '\\n')\n\
                print('err', v, file=sys.stderr)\n\
                v";
    let result = f
        .write(json!({"code": code, "secrets": ["TOKEN"], "session_id": "s"}))
        .await;
    let shown = text_of(&result);
    assert_eq!(result["isError"], false, "{shown}");
    assert!(!shown.contains(VALUE), "the value leaked: {shown}");
    assert!(!shown.contains(&hex_of(VALUE)), "its hex leaked: {shown}");
    assert!(shown.matches("[REDACTED:TOKEN]").count() >= 7, "{shown}");

    // a value with the characters URL encoding treats specially, in Python's usual encodings
    store(&f, &f.alice, "ODD", RESERVED).await;
    let code = "import os, urllib.parse as u\nv = os.environ['ODD']\n\
                print('q', u.quote(v, safe=''))\nprint('p', u.quote_plus(v))\n\
                print('s', u.quote(v))\nprint('f', u.urlencode({'k': v}))";
    let result = f.write(json!({"code": code, "secrets": ["ODD"]})).await;
    let shown = text_of(&result);
    for form in RESERVED_ENCODED {
        assert!(!shown.contains(form), "{form} leaked: {shown}");
    }
    assert_eq!(
        result["structuredContent"]["python"]["stdout"],
        "q [REDACTED:ODD]\np [REDACTED:ODD]\ns [REDACTED:ODD]\nf k=[REDACTED:ODD]\n",
        "{shown}"
    );

    // the variable belonged to that run only
    let later = f
        .write(json!({"code": "import os\nprint('seen:', repr(os.environ.get('TOKEN')))", "session_id": "s"}))
        .await;
    assert!(text_of(&later).contains("seen: None"), "{later}");

    // a traceback and bash output
    let raised = f
        .write(json!({"code": "import os\nraise ValueError(os.environ['TOKEN'])", "secrets": ["TOKEN"]}))
        .await;
    assert_eq!(raised["isError"], true);
    assert!(
        !text_of(&raised).contains(VALUE) && text_of(&raised).contains("[REDACTED:TOKEN]"),
        "{raised}"
    );
    let bash = f
        .write(
            json!({"bash": "echo \"$TOKEN\"; printf %s \"$TOKEN\" | base64", "secrets": ["TOKEN"]}),
        )
        .await;
    assert!(!text_of(&bash).contains(VALUE), "{bash}");
    let stdout = bash["structuredContent"]["bash"]["stdout"]
        .as_str()
        .unwrap();
    assert_eq!(
        stdout,
        "[REDACTED:TOKEN]
[REDACTED:TOKEN]
",
        "{bash}"
    );

    let log = f.server.stop_and_read_log();
    assert!(!log.contains(VALUE), "the value is in the server's log");
}

fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn streamed_output_is_redacted_even_when_a_value_is_split_across_writes() {
    let f = fixture().await;
    store(&f, &f.alice, "TOKEN", VALUE).await;
    let url = f.server.personal(&f.alice.key);
    let session = open_session(&f.http, &url).await.unwrap();
    let code = "import os, sys, time\nv = os.environ['TOKEN']\n\
                for piece in (v[:5], v[5:12], v[12:]):\n    \
                    sys.stdout.write(piece); sys.stdout.flush(); time.sleep(0.05)\n\
                print(flush=True)\nprint('done')";
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "svc_write", "arguments": {"code": code, "secrets": ["TOKEN"]},
        "_meta": {"progressToken": "t"}}});
    let reply = send(in_session(&f.http, &url, &session, &call)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.body.contains("notifications/progress"), "{reply:?}");
    for piece in [&VALUE[..5], &VALUE[5..12], &VALUE[12..]] {
        assert!(
            !reply.body.contains(piece),
            "a piece of the value leaked: {reply:?}"
        );
    }
    assert!(reply.body.contains("[REDACTED:TOKEN]"), "{reply:?}");
}

#[tokio::test]
async fn bad_vault_input_gets_a_clear_error_and_stores_nothing() {
    let f = fixture().await;
    let big = "x".repeat(64 * 1024 + 1);
    for (args, says) in [
        (
            json!({"secret_set": {"name": "1BAD", "value": "v"}}),
            "starts with a letter",
        ),
        (
            json!({"secret_set": {"name": "A-B", "value": "v"}}),
            "starts with a letter",
        ),
        (
            json!({"secret_set": {"name": "OK", "value": big}}),
            "at most 65536",
        ),
        (
            json!({"secret_set": {"name": "OK", "value": 5}}),
            "must be a string",
        ),
        (json!({"secret_set": {"name": "OK"}}), "must be a string"),
        (
            json!({"secret_set": {"name": "OK", "value": "v", "extra": 1}}),
            "unknown key",
        ),
        (json!({"secret_set": "OK=v"}), "must be an object"),
        (json!({"secret_delete": "no such!"}), "starts with a letter"),
        (json!({"code": "1", "secrets": ["A", "A"]}), "twice"),
        (
            json!({"code": "1", "secrets": "A"}),
            "array of secret names",
        ),
        (
            json!({"code": "1", "secrets": ["NOPE_1", "NOPE_2"]}),
            "no secret named NOPE_1, NOPE_2",
        ),
    ] {
        let result = f.write(args.clone()).await;
        assert_eq!(result["isError"], true, "{args}: {result}");
        assert!(text_of(&result).contains(says), "{args}: {result}");
        assert!(
            !text_of(&result).contains(&big[..100]),
            "the value was echoed"
        );
    }
    let listed = f
        .call(&f.alice, "svc_read", json!({"list_secrets": true}))
        .await;
    assert_eq!(
        listed["structuredContent"]["list_secrets"]["secrets"],
        json!([]),
        "{listed}"
    );
}

#[tokio::test]
async fn values_are_encrypted_at_rest_and_survive_a_master_key_rotation() {
    let f = fixture().await;
    let dir = f._dir.path();
    let key_file = dir.join("vault.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the key file is private");
    for n in 0..20 {
        let stored = store(
            &f,
            &f.alice,
            &format!("AT_REST_{n}"),
            &format!("{VALUE}-{n}"),
        )
        .await;
        assert_eq!(stored["isError"], false, "{stored}");
    }
    // every database file, the WAL included, holds no value in plaintext
    let database_files = |needle: &str| -> (Vec<String>, Vec<String>) {
        let (mut scanned, mut found) = (Vec::new(), Vec::new());
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_file() && name.starts_with("toolgate.db") {
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(name.clone());
                }
                scanned.push(name);
            }
        }
        (scanned, found)
    };
    let (scanned, found) = database_files(VALUE);
    assert!(
        scanned.iter().any(|name| name == "toolgate.db"),
        "the scan did not read the database: {scanned:?}"
    );
    assert!(found.is_empty(), "a value in plaintext in {found:?}");
    // the same scan finds what is stored in plaintext (the names, the address): it would have
    // found a value
    for needle in ["AT_REST_19", "alice@example.org"] {
        let (_, found) = database_files(needle);
        assert!(
            !found.is_empty(),
            "the scan of {scanned:?} cannot see {needle:?}, which is stored in plaintext"
        );
    }
    // rotation while the server runs: every data key re-wrapped, every secret still usable
    let storage = Storage::sqlite(dir);
    let rotated = cli_json(&storage, &["vault", "rotate-master-key"]);
    assert_eq!(rotated["key_version"], 2, "{rotated}");
    assert_eq!(rotated["rewrapped"], 20, "{rotated}");
    let keys = std::fs::read_to_string(&key_file).unwrap();
    assert!(keys.contains("\nv1 ") && keys.contains("\nv2 "));
    let used = f
        .write(json!({"code": "import os\nprint(os.environ['AT_REST_7'] == 'sk-live-4f9c2b7e81d3a6f0-7')", "secrets": ["AT_REST_7"]}))
        .await;
    assert!(text_of(&used).contains("True"), "{used}");
    // written after the rotation: sealed under the new version, opened by the running server
    store(&f, &f.alice, "AFTER", "after-value").await;
    let again = cli_json(&storage, &["vault", "rotate-master-key"]);
    assert_eq!(again["key_version"], 3, "{again}");
    assert_eq!(again["rewrapped"], 21, "{again}");
    let used = f
        .write(json!({"code": "import os\nos.environ['AFTER'] == 'after-value'", "secrets": ["AFTER"]}))
        .await;
    assert!(text_of(&used).contains("True"), "{used}");
}

#[tokio::test]
async fn a_file_read_back_from_a_session_that_had_a_secret_is_redacted() {
    let f = fixture().await;
    store(&f, &f.alice, "TOKEN", VALUE).await;
    let wrote = f
        .write(json!({"session_id": "files", "secrets": ["TOKEN"],
                      "code": "import os\nopen('leak.txt', 'w').write('key=' + os.environ['TOKEN'])\nsaved = os.environ['TOKEN']"}))
        .await;
    assert_eq!(wrote["isError"], false, "{wrote}");
    // a later run without `secrets` writes what it kept: the session had it, so it is redacted
    f.write(
        json!({"session_id": "files", "code": "open('later.txt', 'w').write(saved[::-1][::-1])"}),
    )
    .await;
    for path in ["leak.txt", "later.txt"] {
        let read = f
            .call(
                &f.alice,
                "svc_read",
                json!({"session_id": "files", "path": path}),
            )
            .await;
        let shown = read.to_string();
        assert!(!shown.contains(VALUE), "{path}: {shown}");
        assert!(shown.contains("[REDACTED:TOKEN]"), "{path}: {shown}");
    }
    // later runs that name no secret show what the session kept, redacted the same way
    for later in [
        json!({"session_id": "files", "bash": "cat leak.txt"}),
        json!({"session_id": "files", "code": "print(saved)\nsaved"}),
    ] {
        let shown = f.write(later).await.to_string();
        assert!(!shown.contains(VALUE), "{shown}");
        assert!(shown.contains("[REDACTED:TOKEN]"), "{shown}");
    }
}

/// Every file under `root` (recursively) that holds `needle`.
fn files_holding(root: &std::path::Path, needle: &[u8]) -> (usize, Vec<std::path::PathBuf>) {
    let (mut scanned, mut found) = (0, Vec::new());
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                scanned += 1;
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path);
                }
            }
        }
    }
    (scanned, found)
}

#[tokio::test]
async fn values_are_encrypted_at_rest_on_postgresql_too() {
    use sqlx::{Connection, Row};
    let url = std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it");
    // a database of its own: the suite's outlives this test, and a server given a new key file
    // refuses a database that holds secrets sealed by another
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let name = format!("at_rest_{}", std::process::id());
    for statement in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let (base, _) = url.rsplit_once('/').unwrap();
    let own_url = format!("{base}/{name}");
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::postgres(dir.path(), &own_url);
    let carol = create_account(&storage, "carol@example.org");
    let mut server = Server::start(&storage, &[]).await;
    let needle = "pg-at-rest-5e1d7c9a3b";
    for n in 0..10 {
        let args = json!({"secret_set": {"name": format!("AT_REST_{n}"), "value": format!("{needle}-{n}")}});
        let stored = post_personal(
            &client(),
            &server,
            &carol.key,
            &tool_call("svc_write", args),
        )
        .await
        .result();
        assert_eq!(stored["isError"], false, "{stored}");
    }
    server.stop();
    // a checkpoint writes the tables out; the WAL holds every change
    sqlx::raw_sql("CHECKPOINT")
        .execute(&mut admin)
        .await
        .unwrap();
    let data: String = sqlx::query("SHOW data_directory")
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get(0);
    let data = std::path::PathBuf::from(data);
    let (scanned, found) = files_holding(&data, needle.as_bytes());
    // the same scan sees a value stored in plaintext: it would have found one
    let plain = format!("plain-{needle}");
    let mut own = sqlx::PgConnection::connect(&own_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE probe(v text); INSERT INTO probe VALUES ('{plain}'); CHECKPOINT"
    )))
    .execute(&mut own)
    .await
    .unwrap();
    own.close().await.unwrap();
    let (_, seen) = files_holding(&data, plain.as_bytes());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    assert!(
        scanned > 100,
        "only {scanned} files under {data:?} could be read"
    );
    assert!(found.is_empty(), "plaintext in {found:?}");
    assert!(
        !seen.is_empty(),
        "the scan cannot see plaintext in the data directory"
    );
}

#[tokio::test]
async fn serve_refuses_to_start_when_the_key_file_is_lost_while_secrets_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let dana = create_account(&storage, "dana@example.org");
    let mut server = Server::start(&storage, &[]).await;
    let args = json!({"secret_set": {"name": "KEPT", "value": VALUE}});
    let stored = post_personal(&client(), &server, &dana.key, &tool_call("svc_write", args))
        .await
        .result();
    assert_eq!(stored["isError"], false, "{stored}");
    assert!(server.stop(), "the server stops on SIGTERM");
    let key_file = dir.path().join("vault.key");
    let kept = std::fs::read(&key_file).unwrap();
    std::fs::remove_file(&key_file).unwrap();

    let out = cli(Some(&storage), &["serve", "--listen", "127.0.0.1:0"], &[]);
    assert!(
        out.code.is_some() && !out.success(),
        "serve must stop by itself: {out:?}"
    );
    assert!(
        out.stderr.contains(&format!(
            "the vault key file {} is missing, but the database holds secrets sealed by it",
            key_file.display()
        )),
        "{out:?}"
    );
    assert!(out.stdout.trim().is_empty(), "it never listened: {out:?}");
    assert!(!key_file.exists(), "no new key was made in its place");

    // the file restored from its backup: the service starts, and the secret still opens
    std::fs::write(&key_file, &kept).unwrap();
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let server = Server::start(&storage, &[]).await;
    let listed = post_personal(
        &client(),
        &server,
        &dana.key,
        &tool_call("svc_read", json!({"list_secrets": true})),
    )
    .await
    .result();
    assert_eq!(
        listed["structuredContent"]["list_secrets"]["secrets"][0]["name"], "KEPT",
        "{listed}"
    );
}
