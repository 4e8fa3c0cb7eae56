//! Bodies a hostile tenant sends to the front door of the real binary: nested 10^6 deep (whole,
//! or deep in a field of an otherwise valid request), members given twice, and arguments nested
//! as deep as JSON allows. Each gets its clean error, and the same server answers the next call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use crate::common::*;

const DEEP: usize = 1_000_000;

async fn post_bytes(http: &reqwest::Client, server: &Server, key: &str, body: Vec<u8>) -> Reply {
    send(Carrier::Path.post(http, server, key).body(body)).await
}

/// `[` nested `depth` deep around nothing.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The same server still answers a plain, metered call.
async fn still_answers(http: &reqwest::Client, server: &Server, key: &str) {
    billing_of(&post_personal(http, server, key, &billing_call()).await);
}

#[tokio::test]
async fn bodies_nested_a_million_deep_get_32700_and_the_server_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "deep@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let call_with = |arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"svc_read","arguments":{arguments}}}}}"#
        )
    };
    let bodies = [
        ("an array opened 10^6 times", "[".repeat(DEEP)),
        ("an array nested 10^6 deep", nested(DEEP)),
        ("an object opened 10^6 times", "{\"a\":".repeat(DEEP)),
        (
            "a valid call with an argument nested 10^6 deep",
            call_with(&format!(r#"{{"billing":true,"x":{}}}"#, nested(DEEP))),
        ),
        (
            "a valid call whose params are nested 10^6 deep",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"cursor":{}}}}}"#,
                nested(DEEP)
            ),
        ),
    ];
    for (what, body) in bodies {
        let reply = post_bytes(&http, &server, &account.key, body.into_bytes()).await;
        assert_eq!(reply.error_code(), Some(-32700), "{what}: {reply:?}");
        reply.assert_error(400, -32700);
        still_answers(&http, &server, &account.key).await;
    }
    // 129 levels is one past serde_json's limit; 100 levels is JSON, and the argument check
    // refuses it as a tool error, free of charge
    let over = call_with(&format!(r#"{{"billing":{}}}"#, nested(129)));
    post_bytes(&http, &server, &account.key, over.into_bytes())
        .await
        .assert_error(400, -32700);
    let before = server.free_remaining(&account.key).await;
    for arguments in [
        format!(r#"{{"billing":{}}}"#, nested(100)),
        format!(
            r#"{{"url":"https://example.com/","headers":{}}}"#,
            nested(100)
        ),
        format!(r#"{{"billing":true,"unknown":{}}}"#, nested(100)),
    ] {
        let reply = post_bytes(
            &http,
            &server,
            &account.key,
            call_with(&arguments).into_bytes(),
        )
        .await;
        let result = reply.result();
        assert_eq!(result["isError"], true, "{reply:?}");
    }
    assert_eq!(
        server.free_remaining(&account.key).await,
        before,
        "refusals are free"
    );
    still_answers(&http, &server, &account.key).await;
}

#[tokio::test]
async fn a_member_given_twice_gets_32600() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "twice@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#,
        r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
    ] {
        let reply = post_bytes(&http, &server, &account.key, body.as_bytes().to_vec()).await;
        reply.assert_error(400, -32600);
        assert_eq!(reply.json()["id"], Value::Null, "{reply:?}");
    }
    let listed = post_personal(&http, &server, &account.key, &tools_list()).await;
    assert_eq!(listed.result()["tools"].as_array().map(Vec::len), Some(3));
}
