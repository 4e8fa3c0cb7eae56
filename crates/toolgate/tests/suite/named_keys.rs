//! Named keys over the real binary: created by `key create`, they authenticate as their account
//! (metered there), a read-only key sees and calls only the read tool (a refused call is free),
//! `key list` shows each key's last use, a revoked key fails at once and its MCP sessions are
//! closed while the first key's stay open, and bad input to the commands changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_store_postgres::testkit::with_fresh_database;

use crate::common::*;

/// `key create --email E --name N [extra…]`: the JSON it prints.
fn create_key(storage: &Storage, email: &str, name: &str, extra: &[&str]) -> Value {
    let mut args = vec!["key", "create", "--email", email, "--name", name];
    args.extend_from_slice(extra);
    let key = cli_json(storage, &args);
    let api_key = key["api_key"].as_str().unwrap();
    assert_key_shape(api_key);
    assert!(
        key["personal_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/u/{api_key}")),
        "{key}"
    );
    assert!(key["key_id"].as_str().unwrap().starts_with("key_"), "{key}");
    key
}

fn list_keys(storage: &Storage, email: &str) -> Vec<Value> {
    let listed = cli_json(storage, &["key", "list", "--email", email]);
    listed["keys"].as_array().unwrap().clone()
}

fn tool_names(reply: &Reply) -> Vec<String> {
    reply.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn a_read_only_key_reads_only(storage: Storage) {
    let email = "readonly@example.org";
    let owner = create_account(&storage, email);
    let key = create_key(&storage, email, "reader", &["--tools", "read"]);
    let reader = key["api_key"].as_str().unwrap().to_owned();
    assert_eq!(key["tools"], json!(["read"]));
    let server = Server::start(&storage, &[]).await;
    let http = client();

    // tools/list of each generation shows the read tool only; the first key still sees three
    let legacy = post_personal(&http, &server, &reader, &tools_list()).await;
    assert_eq!(tool_names(&legacy), ["svc_read"]);
    let modern = post_modern(
        &http,
        &server,
        &reader,
        modern_request(json!(1), "tools/list", json!({})),
    )
    .await;
    assert_eq!(tool_names(&modern), ["svc_read"]);
    let all = post_personal(&http, &server, &owner.key, &tools_list()).await;
    assert_eq!(tool_names(&all).len(), 3);

    // a call of the write tool is refused before admission: a tool error naming what it may use
    let before = storage.ledger_counts(&owner.id).await;
    let refused = post_personal(
        &http,
        &server,
        &reader,
        &tool_call(
            "svc_write",
            json!({"secret_set": {"name": "K", "value": "v"}}),
        ),
    )
    .await
    .result();
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text_of(&refused).contains("svc_read"), "{refused}");
    let modern_refused = post_modern(
        &http,
        &server,
        &reader,
        modern_tool_call("svc_ai", json!({"prompt": "hi"})),
    )
    .await
    .result();
    assert_eq!(modern_refused["isError"], true, "{modern_refused}");
    assert_eq!(
        storage.ledger_counts(&owner.id).await,
        before,
        "a refused call is free"
    );

    // its read calls are metered on the account, which the first key's billing sees
    let read = post_personal(&http, &server, &reader, &billing_call()).await;
    billing_of(&read);
    assert_eq!(storage.ledger_counts(&owner.id).await, (before.0 + 1, 0));
    assert_eq!(server.free_remaining(&owner.key).await, 1000 - 1);

    // last use shows in `key list` within the flush interval (2 s)
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys = list_keys(&storage, email);
        assert!(
            keys[0].get("api_key").is_none() && keys[0].get("key_hash").is_none(),
            "{keys:?}"
        );
        if keys[0]["last_used_at"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "no last use listed: {keys:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_key_reads_only_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_read_only_key_reads_only(Storage::sqlite(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_key_reads_only_on_postgres() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        a_read_only_key_reads_only(Storage::postgres(dir.path(), &url)).await;
    })
    .await;
}

async fn revoked_by_the_cli_fails_at_once(storage: Storage) {
    let email = "revoke-cli@example.org";
    let owner = create_account(&storage, email);
    let key = create_key(&storage, email, "agent", &[]);
    let agent = key["api_key"].as_str().unwrap().to_owned();
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let agent_session = open_session(&http, &server.personal(&agent)).await.unwrap();
    let owner_session = open_session(&http, &server.personal(&owner.key))
        .await
        .unwrap();
    let in_agent = in_session(
        &http,
        &server.personal(&agent),
        &agent_session,
        &billing_call(),
    );
    billing_of(&send(in_agent).await);

    let revoked = cli_json(
        &storage,
        &["key", "revoke", "--email", email, "--key", "agent"],
    );
    assert_eq!(revoked["revoked"], true, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let again = cli_json(
        &storage,
        &[
            "key",
            "revoke",
            "--email",
            email,
            "--key",
            key["key_id"].as_str().unwrap(),
        ],
    );
    assert_eq!(
        again["revoked"], false,
        "revoking twice changes nothing: {again}"
    );

    let in_agent = in_session(
        &http,
        &server.personal(&agent),
        &agent_session,
        &billing_call(),
    );
    send(in_agent).await.assert_error(401, -32001);
    post_personal(&http, &server, &agent, &tools_list())
        .await
        .assert_error(401, -32001);
    let in_owner = in_session(
        &http,
        &server.personal(&owner.key),
        &owner_session,
        &billing_call(),
    );
    billing_of(&send(in_owner).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_by_the_cli_fails_at_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    revoked_by_the_cli_fails_at_once(Storage::sqlite(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_by_the_cli_fails_at_once_on_postgres() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        revoked_by_the_cli_fails_at_once(Storage::postgres(dir.path(), &url)).await;
    })
    .await;
}

#[tokio::test]
async fn bad_key_commands_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let email = "hostile-keys@example.org";
    create_account(&storage, email);
    create_account(&storage, "other-keys@example.org");
    let theirs = create_key(&storage, "other-keys@example.org", "theirs", &[]);
    create_key(&storage, email, "taken", &[]);
    let long = "n".repeat(201);
    let theirs_id = theirs["key_id"].as_str().unwrap();
    let refused: [&[&str]; 12] = [
        &["key", "create", "--email", email, "--name", ""],
        &["key", "create", "--email", email, "--name", "   "],
        &["key", "create", "--email", email, "--name", &long],
        &["key", "create", "--email", email, "--name", "taken"],
        &[
            "key",
            "create",
            "--email",
            email,
            "--name",
            "x",
            "--month-cap-usd=-1",
        ],
        &[
            "key",
            "create",
            "--email",
            email,
            "--name",
            "x",
            "--day-cap-usd",
            "1e3",
        ],
        &[
            "key",
            "create",
            "--email",
            email,
            "--name",
            "x",
            "--tools",
            "read,root",
        ],
        &[
            "key",
            "create",
            "--email",
            "nobody@example.org",
            "--name",
            "x",
        ],
        &["key", "create", "--email", "not an address", "--name", "x"],
        &["key", "revoke", "--email", email, "--key", theirs_id],
        &["key", "revoke", "--email", email, "--key", "no such key"],
        &["key", "list", "--email", "nobody@example.org"],
    ];
    for args in refused {
        let out = cli(Some(&storage), args, &[]);
        assert!(
            !out.success() && out.stdout.trim().is_empty() && out.stderr.contains("error"),
            "{args:?}: {out:?}"
        );
        assert!(!out.stderr.contains("svck_"), "no key in an error: {out:?}");
    }
    let mine = list_keys(&storage, email);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["name"], "taken");
    let others = list_keys(&storage, "other-keys@example.org");
    assert!(others[0]["revoked_at"].is_null(), "{others:?}");
}

/// Code run by a write-only key's call calls the read tool back as that key: refused, free,
/// while the first key's code reaches it.
#[tokio::test]
async fn a_keys_scope_holds_for_calls_from_its_code() {
    let f = fixture().await;
    let storage = Storage::sqlite(f._dir.path());
    let key = create_key(
        &storage,
        "alice@example.org",
        "writer",
        &["--tools", "write"],
    );
    let writer = key["api_key"].as_str().unwrap();
    let code = "import json, toolgate\ntry:\n    toolgate.billing()\n    print('reached')\n\
                except toolgate.ToolgateError as e:\n    print(e.code, e.message)";
    let before = f.server.free_remaining(&f.alice.key).await;
    let ran = crate::common::write(&f.server, writer, json!({"code": code})).await;
    let printed = ran["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(printed.starts_with("refused"), "{ran}");
    assert!(
        printed.contains("svc_write"),
        "it names what the key may call: {ran}"
    );
    let after = f.server.free_remaining(&f.alice.key).await;
    assert_eq!(before - after, 1, "only the cell was charged");
    let ran = f.write(json!({"code": code})).await;
    let printed = ran["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert!(
        printed.starts_with("reached"),
        "the first key's code reaches it: {ran}"
    );
}
