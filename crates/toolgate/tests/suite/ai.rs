//! `svc_ai`'s model call through HTTP, against a loopback stand-in that speaks OpenAI's chat
//! completions (plain and streamed): the key found in the vault (named, or by the provider's
//! usual name) and never shown, the answer streamed as progress, bad input refused for free.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::common::*;

const KEY: &str = "sk-vault-7e6d5c4b3a291807";

/// Requests whose prompt says "slow" in flight at the stand-in now, and at most.
static SLOW_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static SLOW_MOST: AtomicUsize = AtomicUsize::new(0);

/// A stand-in OpenAI endpoint that records each request's Authorization header; it answers
/// with the key it was given when the prompt asks for it (a provider echoing a key), with the
/// `max_tokens` it was sent when asked "echo max_tokens", and reports 700 tokens used for a
/// "heavy" prompt (9 otherwise).
pub(crate) async fn stand_in() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let flaky_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap, body: String| {
            let record = record.clone();
            let flaky_calls = flaky_calls.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                record.lock().unwrap().push(auth.clone());
                let body: Value = serde_json::from_str(&body).unwrap();
                let asked = body["messages"].to_string();
                if asked.contains("slow") {
                    let now = SLOW_IN_FLIGHT.fetch_add(1, SeqCst) + 1;
                    SLOW_MOST.fetch_max(now, SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    SLOW_IN_FLIGHT.fetch_sub(1, SeqCst);
                }
                // the first "flaky" request is throttled, as a provider does under load
                if asked.contains("flaky")
                    && flaky_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
                {
                    return Response::builder()
                        .status(429)
                        .header("retry-after", "0.1")
                        .body(axum::body::Body::from(r#"{"error":{"message":"slow down"}}"#))
                        .unwrap();
                }
                let usage = if asked.contains("heavy") {
                    json!({"prompt_tokens": 600, "completion_tokens": 100})
                } else {
                    json!({"prompt_tokens": 4, "completion_tokens": 5})
                };
                let text = if asked.contains("echo your key") {
                    format!("my key is {}", auth.trim_start_matches("Bearer "))
                } else if asked.contains("echo max_tokens") {
                    format!("max_tokens={}", body["max_tokens"])
                } else if asked.contains("Search results") {
                    "Tokio is an async runtime [1], explained in [2].".to_owned()
                } else {
                    "Hello from the stand-in!".to_owned()
                };
                if body["stream"] == true {
                    let mut events: String = text
                        .split_inclusive(' ')
                        .map(|piece| {
                            format!("data: {}\n\n", json!({"model": body["model"], "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]}))
                        })
                        .collect();
                    events.push_str(&format!("data: {}\n\n", json!({"model": body["model"], "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})));
                    events.push_str("data: [DONE]\n\n");
                    // one event at a time, as a model writes them
                    let pieces: Vec<String> =
                        events.split_inclusive("\n\n").map(str::to_owned).collect();
                    let paced = futures::stream::iter(pieces).then(|piece| async move {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        Ok::<_, std::convert::Infallible>(piece)
                    });
                    return Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(axum::body::Body::from_stream(paced))
                        .unwrap();
                }
                Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(
                        json!({"id": "c1", "object": "chat.completion", "model": body["model"],
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                               "usage": usage})
                        .to_string(),
                    ))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

pub(crate) async fn ai(server: &Server, key: &str, args: Value) -> Value {
    post_personal(&client(), server, key, &tool_call("svc_ai", args))
        .await
        .result()
}

pub(crate) async fn write(server: &Server, key: &str, args: Value) -> Value {
    post_personal(&client(), server, key, &tool_call("svc_write", args))
        .await
        .result()
}

async fn started() -> (
    tempfile::TempDir,
    Server,
    Account,
    Account,
    Arc<Mutex<Vec<String>>>,
) {
    let (addr, seen) = stand_in().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "ai-alice@example.org");
    let bob = create_account(&storage, "ai-bob@example.org");
    let base = format!("http://{addr}/v1");
    let server = Server::start(
        &storage,
        &[
            "--egress-allow-private",
            "127.0.0.1/32",
            "--openai-base-url",
            &base,
            "--ai-endpoints",
            &format!("local={base}"),
        ],
    )
    .await;
    (dir, server, alice, bob, seen)
}

#[tokio::test]
async fn a_model_answers_with_the_key_from_the_vault_which_never_comes_back() {
    let (_dir, mut server, alice, bob, seen) = started().await;
    // no key anywhere: a clear error that says where to put one
    let keyless = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "hi"}),
    )
    .await;
    assert_eq!(keyless["isError"], true, "{keyless}");
    assert!(keyless.to_string().contains("OPENAI_API_KEY"), "{keyless}");
    let stored = write(
        &server,
        &alice.key,
        json!({"secret_set": {"name": "OPENAI_API_KEY", "value": KEY}}),
    )
    .await;
    assert_eq!(stored["isError"], false, "{stored}");
    let answer = ai(&server, &alice.key, json!({"model": "openai/gpt-x", "prompt": "hi", "system": "be kind", "max_tokens": 20, "temperature": 0.5})).await;
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(answer["content"][0]["text"], "Hello from the stand-in!");
    let llm = &answer["structuredContent"]["llm"];
    assert_eq!(
        (
            llm["model"].clone(),
            llm["provider"].clone(),
            llm["finish_reason"].clone()
        ),
        (json!("gpt-x"), json!("openai"), json!("stop"))
    );
    assert_eq!(llm["usage"], json!({"input_tokens": 4, "output_tokens": 5}));
    assert!(llm["latency_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &format!("Bearer {KEY}")
    );
    // a provider that echoes the key: the answer shows the secret's name instead
    let echoed = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "echo your key"}),
    )
    .await;
    assert!(!echoed.to_string().contains(KEY), "{echoed}");
    assert!(
        echoed.to_string().contains("[REDACTED:OPENAI_API_KEY]"),
        "{echoed}"
    );
    // a key named by the call; bob's vault is his own
    write(
        &server,
        &bob.key,
        json!({"secret_set": {"name": "MY_LLM", "value": "sk-bob-1111222233334444"}}),
    )
    .await;
    let named = ai(
        &server,
        &bob.key,
        json!({"model": "openai/gpt-x", "prompt": "hi", "api_key_secret": "MY_LLM"}),
    )
    .await;
    assert_eq!(named["isError"], false, "{named}");
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        "Bearer sk-bob-1111222233334444"
    );
    let missing = ai(
        &server,
        &bob.key,
        json!({"model": "openai/gpt-x", "prompt": "hi", "api_key_secret": "OPENAI_API_KEY"}),
    )
    .await;
    assert!(
        missing
            .to_string()
            .contains("no secret named OPENAI_API_KEY"),
        "{missing}"
    );
    // the operator's keyless endpoint
    let local = ai(
        &server,
        &bob.key,
        json!({"model": "local/tiny", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(
        local["content"][0]["text"], "Hello from the stand-in!",
        "{local}"
    );
    assert_eq!(seen.lock().unwrap().last().unwrap(), "");
    let log = server.stop_and_read_log();
    assert!(!log.contains(KEY), "the key reached the log");
}

#[tokio::test]
async fn one_account_has_at_most_four_provider_calls_in_flight() {
    let (_dir, server, alice, _bob, _seen) = started().await;
    write(
        &server,
        &alice.key,
        json!({"secret_set": {"name": "OPENAI_API_KEY", "value": KEY}}),
    )
    .await;
    let calls = (0..8).map(|_| {
        ai(
            &server,
            &alice.key,
            json!({"model": "openai/gpt-x", "prompt": "slow"}),
        )
    });
    for answer in futures::future::join_all(calls).await {
        assert_eq!(answer["isError"], false, "{answer}");
    }
    assert_eq!(SLOW_MOST.load(SeqCst), 4, "the rest waited their turn");
}

#[tokio::test]
async fn a_retried_model_call_is_charged_once() {
    let (_dir, server, alice, _bob, _seen) = started().await;
    write(
        &server,
        &alice.key,
        json!({"secret_set": {"name": "OPENAI_API_KEY", "value": KEY}}),
    )
    .await;
    let before = server.free_remaining(&alice.key).await;
    let answer = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "flaky"}),
    )
    .await;
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(
        answer["structuredContent"]["llm"]["attempts"], 2,
        "{answer}"
    );
    assert_eq!(
        server.free_remaining(&alice.key).await,
        before - 1,
        "one call, whatever its retries"
    );
}

#[tokio::test]
async fn the_answer_streams_as_progress() {
    let (_dir, server, alice, _bob, _seen) = started().await;
    write(
        &server,
        &alice.key,
        json!({"secret_set": {"name": "OPENAI_API_KEY", "value": KEY}}),
    )
    .await;
    let url = server.personal(&alice.key);
    let http = client();
    let session = open_session(&http, &url).await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "svc_ai", "arguments": {"model": "openai/gpt-x", "prompt": "hi"},
        "_meta": {"progressToken": "t"}}});
    let reply = send(in_session(&http, &url, &session, &call)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let progress = reply.body.matches("notifications/progress").count();
    assert!(
        progress >= 2,
        "{progress} progress notifications: {reply:?}"
    );
    assert!(reply.body.contains("Hello from the stand-in!"), "{reply:?}");
}

#[tokio::test]
async fn bad_model_calls_are_refused_before_metering() {
    let (_dir, server, alice, _bob, _seen) = started().await;
    let before = server.free_remaining(&alice.key).await;
    for (args, says) in [
        (json!({"prompt": "hi"}), "needs `model`"),
        (json!({"model": "gpt-x", "prompt": "hi"}), "provider/model"),
        (
            json!({"model": "nope/x", "prompt": "hi"}),
            "unknown provider \"nope\"",
        ),
        (
            json!({"model": "openai/x", "prompt": "hi", "messages": [{"role": "user", "content": "x"}]}),
            "not both",
        ),
        (json!({"model": "openai/../x", "prompt": "hi"}), "may hold"),
        (
            json!({"model": "openai/x", "messages": [{"role": "tool", "content": "x"}]}),
            "`role`",
        ),
        (
            json!({"model": "openai/x", "prompt": "hi", "temperature": 3}),
            "between 0 and 2",
        ),
        (
            json!({"model": "openai/x", "prompt": "hi", "response_format": "yaml"}),
            "JSON Schema",
        ),
        (
            json!({"model": "openai/x", "prompt": "x".repeat(1024 * 1024 + 1)}),
            "the limit is",
        ),
    ] {
        let refused = ai(&server, &alice.key, args.clone()).await;
        assert_eq!(refused["isError"], true, "{args}: {refused}");
        let text = refused["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(says), "{says}: {refused}");
    }
    assert_eq!(
        server.free_remaining(&alice.key).await,
        before,
        "refused calls are free"
    );
}

/// A real searx (Debian's package, `scripts/searxng-up.sh`) whose one engine asks a loopback
/// stand-in; stopped when dropped.
struct Searx {
    dir: tempfile::TempDir,
    url: String,
}

impl Drop for Searx {
    fn drop(&mut self) {
        let script = checkout().join("scripts/searxng-down.sh");
        let _ = std::process::Command::new(script)
            .arg(self.dir.path())
            .status();
    }
}

async fn searx() -> Searx {
    let upstream = Router::new().route(
        "/search",
        axum::routing::get(|| async {
            axum::Json(json!({"results": [
                {"url": "https://docs.example.org/tokio", "title": "Tokio docs", "content": "An async runtime for Rust."},
                {"url": "https://blog.example.org/async", "title": "Async in depth", "content": "How futures are polled."}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    let dir = tempfile::tempdir().unwrap();
    let script = checkout().join("scripts/searxng-up.sh");
    let out = tokio::process::Command::new(script)
        .arg(dir.path())
        .arg(format!("http://{addr}"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "searx did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    Searx { dir, url }
}

#[tokio::test]
async fn search_through_a_real_searxng_and_an_answer_that_cites_it() {
    let searx = searx().await;
    let (addr, _seen) = stand_in().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "search-alice@example.org");
    let base = format!("http://{addr}/v1");
    let server = Server::start(
        &storage,
        &[
            "--egress-allow-private",
            "127.0.0.1/32",
            "--searxng-url",
            &searx.url,
            "--ai-endpoints",
            &format!("local={base}"),
        ],
    )
    .await;
    let found = ai(
        &server,
        &alice.key,
        json!({"search": "tokio runtime", "max_results": 5}),
    )
    .await;
    assert_eq!(found["isError"], false, "{found}");
    let search = &found["structuredContent"]["search"];
    assert_eq!(search["engine"], "searxng");
    assert_eq!(
        search["results"][0],
        json!({"title": "Tokio docs", "url": "https://docs.example.org/tokio",
                                            "snippet": "An async runtime for Rust.", "date": null})
    );
    assert_eq!(search["results"].as_array().unwrap().len(), 2);
    assert!(
        found["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("1. Tokio docs\n   https://docs.example.org/tokio"),
        "{found}"
    );
    let one = ai(
        &server,
        &alice.key,
        json!({"search": "tokio runtime", "max_results": 1}),
    )
    .await;
    assert_eq!(
        one["structuredContent"]["search"]["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // with a prompt the model answers from the results, and its marks become links
    let answered = ai(
        &server,
        &alice.key,
        json!({"search": "tokio runtime", "prompt": "what is tokio?", "model": "local/tiny"}),
    )
    .await;
    assert_eq!(answered["isError"], false, "{answered}");
    assert_eq!(
        answered["content"][0]["text"],
        "Tokio is an async runtime [1](https://docs.example.org/tokio), explained in [2](https://blog.example.org/async)."
    );
    assert_eq!(
        answered["structuredContent"]["search"]["citations"],
        json!([{"n": 1, "title": "Tokio docs", "url": "https://docs.example.org/tokio"},
               {"n": 2, "title": "Async in depth", "url": "https://blog.example.org/async"}])
    );
    assert_eq!(
        answered["structuredContent"]["search"]["llm"]["provider"],
        "local"
    );
    let bad = ai(
        &server,
        &alice.key,
        json!({"search": "x", "freshness": "hour"}),
    )
    .await;
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`freshness` must be one of"),
        "{bad}"
    );
}

#[tokio::test]
async fn code_in_a_session_calls_models_and_search_without_holding_a_key() {
    let searx = searx().await;
    let (addr, seen) = stand_in().await;
    let base = format!("http://{addr}/v1");
    let f = fixture_with(&[
        "--egress-allow-private",
        "127.0.0.1/32",
        "--openai-base-url",
        &base,
        "--searxng-url",
        &searx.url,
        "--free-monthly-calls",
        "8",
    ])
    .await;
    f.write(json!({"secret_set": {"name": "OPENAI_API_KEY", "value": KEY}}))
        .await;
    let before = f.server.free_remaining(&f.alice.key).await;
    let code = "import os, toolgate\n\
                text = toolgate.invoke_llm('openai/gpt-x', 'hi', system='be brief', max_tokens=10)\n\
                found = toolgate.web_search('tokio', max_results=1)\n\
                print(text)\nprint(found[0]['url'], len(found))\n\
                print('OPENAI_API_KEY' in os.environ)";
    let ran = f.write(json!({"code": code})).await;
    assert_eq!(ran["isError"], false, "{ran}");
    let out = ran["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap();
    assert_eq!(
        out, "Hello from the stand-in!\nhttps://docs.example.org/tokio 1\nFalse\n",
        "{ran}"
    );
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &format!("Bearer {KEY}")
    );
    // the code's call and its two upcalls: three metered calls
    assert_eq!(f.server.free_remaining(&f.alice.key).await, before - 3);
    // a streamed answer comes to the code in pieces
    let streamed = f.write(json!({"code": "import toolgate\npieces = list(toolgate.invoke_llm('openai/gpt-x', 'hi', stream=True))\nprint(len(pieces) > 1, repr(''.join(pieces)))"})).await;
    let out = streamed["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(out, "True 'Hello from the stand-in!'\n", "{streamed}");
    // a model error and bad arguments reach the code as ToolgateError
    let failed = f.write(json!({"code": "import toolgate\ntry:\n    toolgate.invoke_llm('nope/x', 'hi')\nexcept toolgate.ToolgateError as e:\n    print(e.code, '|', e.message)"})).await;
    let out = failed["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap();
    assert!(
        out.starts_with("bad_request | unknown provider \"nope\""),
        "{failed}"
    );
    // the allowance used up and no wallet: the upcall is refused like a tool call
    let refused = f.write(json!({"code": "import toolgate\ntry:\n    toolgate.invoke_llm('openai/gpt-x', 'hi')\nexcept toolgate.ToolgateError as e:\n    print(e.code)"})).await;
    let out = refused["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(out, "refused\n", "{refused}");
}
