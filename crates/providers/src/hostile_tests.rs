//! Provider answers a hostile endpoint (or whatever answers in a provider's place) can send,
//! through the real client against a stand-in on loopback: JSON nested 10^6 deep, whole or in
//! a field of a valid answer; answers at and over `MAX_ANSWER_BYTES`; an SSE line that never
//! ends; a `data:` line of many MiB; hundreds of thousands of tiny events. Each ends in a clean
//! error (or a correct answer), and the same client answers the next call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use toolgate_ports::ai::{Message, ModelRequest, Models, Part, Role};

use super::*;

const DEEP: usize = 1_000_000;

/// `[` nested `depth` deep around nothing.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// An OpenAI answer with `content`, padded with spaces to exactly `size` bytes.
fn whole_of(size: usize, content: &str) -> Vec<u8> {
    let mut body = json!({"model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
    .to_string()
    .into_bytes();
    assert!(body.len() <= size);
    body.resize(size, b' ');
    body
}

/// One streamed OpenAI chunk carrying `text`.
fn chunk(text: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    )
}

fn stream_of(body: impl Into<Body>) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body.into())
        .unwrap()
}

fn json_of(body: impl Into<Body>) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

/// The answer the stand-in gives for `model`, in any of the three formats.
fn answer(model: &str) -> Response {
    match model {
        "deep-array" => json_of(nested(DEEP)),
        "open-array" => json_of("[".repeat(DEEP)),
        "deep-object" => json_of(format!("{}1{}", "{\"a\":".repeat(DEEP), "}".repeat(DEEP))),
        "deep-field" => json_of(format!(
            r#"{{"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"hi"}},"finish_reason":"stop"}}],"content":[{{"type":"text","text":"hi"}}],"candidates":[{{"content":{{"parts":[{{"text":"hi"}}]}},"finishReason":"STOP"}}],"x":{}}}"#,
            nested(DEEP)
        )),
        "exactly-the-cap" => json_of(whole_of(MAX_ANSWER_BYTES, "fits")),
        "one-byte-over" => json_of(whole_of(MAX_ANSWER_BYTES + 1, "fits")),
        "deep-error" => Response::builder()
            .status(400)
            .body(Body::from(format!(r#"{{"error":{}}}"#, nested(DEEP))))
            .unwrap(),
        // streamed
        "endless-line" => {
            let piece = Bytes::from(vec![b'x'; 64 * 1024]);
            let first = futures::stream::once(async {
                Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: "))
            });
            let rest = futures::stream::repeat(piece).map(Ok::<_, std::convert::Infallible>);
            stream_of(Body::from_stream(first.chain(rest)))
        }
        "huge-data-line" => stream_of(format!("data: {}\n\n", "x".repeat(5 << 20))),
        "big-but-fitting-line" => {
            let text = "y".repeat(3 << 20);
            stream_of(format!("{}data: [DONE]\n\n", chunk(&text)))
        }
        "deep-event" => stream_of(format!("{}data: {}\n\n", chunk("a"), nested(DEEP))),
        "deep-only-event" => stream_of(format!("event: message_start\ndata: {}\n\n", nested(DEEP))),
        "deep-event-field" => stream_of(format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"a\"}}}}],\"x\":{}}}\n\n",
            nested(DEEP)
        )),
        "tiny-events" => {
            let mut body = chunk("a").repeat(80_000);
            body.push_str("data: [DONE]\n\n");
            stream_of(body)
        }
        "empty-events" => stream_of(format!(
            "{}{}",
            ":\n\n\n".repeat(1_500_000),
            "data: [DONE]\n\n"
        )),
        "stream-over-the-cap" => {
            let one = chunk("b");
            let mut body = one.repeat(MAX_ANSWER_BYTES / one.len() + 1);
            body.push_str("data: [DONE]\n\n");
            stream_of(body)
        }
        _ => json_of(whole_of(200, "Hello!")),
    }
}

async fn rig() -> ModelClients {
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(|body: Bytes| async move { answer(model_of(&body).as_str()) }),
        )
        .route(
            "/v1/messages",
            post(|body: Bytes| async move { answer(model_of(&body).as_str()) }),
        )
        .route(
            "/v1beta/models/{*rest}",
            post(|Path(rest): Path<String>| async move {
                answer(rest.split(':').next().unwrap_or_default())
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut settings = ProviderSettings {
        timeout: Some(Duration::from_secs(60)),
        ..ProviderSettings::default()
    };
    settings
        .base_urls
        .insert("openai".into(), format!("{base}/v1"));
    settings.base_urls.insert("anthropic".into(), base.clone());
    settings
        .base_urls
        .insert("gemini".into(), format!("{base}/v1beta"));
    let policy = EgressPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap();
    ModelClients::new(policy, settings).unwrap()
}

fn model_of(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body).unwrap()["model"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn request(provider: &str, model: &str) -> ModelRequest {
    ModelRequest {
        provider: provider.into(),
        model: model.into(),
        system: None,
        messages: vec![Message {
            role: Role::User,
            parts: vec![Part::Text("hi".into())],
        }],
        max_tokens: None,
        temperature: None,
        json: None,
        api_key: Some(Zeroizing::new("sk-hostile-0123456789".into())),
    }
}

async fn failure(clients: &ModelClients, provider: &str, model: &str, stream: bool) -> String {
    let (tx, _rx) = mpsc::channel(1 << 20);
    let outcome = clients
        .complete(request(provider, model), stream.then_some(tx))
        .await;
    match outcome {
        Err(ModelError::Failed(message) | ModelError::Rejected(message)) => message,
        other => panic!("{provider} {model}: expected a failure, got {other:?}"),
    }
}

/// The same client answers an honest call afterwards.
async fn still_answers(clients: &ModelClients, provider: &str) {
    let answer = clients.complete(request(provider, "honest"), None).await;
    assert!(answer.is_ok(), "{provider}: {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_nested_a_million_deep_are_refused_in_every_format() {
    let clients = rig().await;
    for provider in ["openai", "anthropic", "google"] {
        for model in ["deep-array", "open-array", "deep-object", "deep-field"] {
            let message = failure(&clients, provider, model, false).await;
            assert!(
                message.contains("not JSON"),
                "{provider} {model}: {message}"
            );
        }
        // an error body nested as deep is passed on as its start, cut to 1,000 characters
        let message = failure(&clients, provider, "deep-error", false).await;
        assert!(message.contains("answered 400"), "{message}");
        assert!(message.len() < 1200, "{} characters", message.len());
    }
    still_answers(&clients, "openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_of_exactly_the_cap_is_read_and_one_byte_more_is_refused() {
    let clients = rig().await;
    let fits = clients
        .complete(request("openai", "exactly-the-cap"), None)
        .await
        .unwrap();
    assert_eq!(fits.text, "fits");
    let message = failure(&clients, "openai", "one-byte-over", false).await;
    assert!(
        message.contains(&format!("longer than {MAX_ANSWER_BYTES} bytes")),
        "{message}"
    );
    still_answers(&clients, "openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_streams_end_in_a_clean_error() {
    let clients = rig().await;
    for (model, says) in [
        ("endless-line", "an event line is longer than"),
        ("huge-data-line", "an event line is longer than"),
        ("deep-event", "not JSON"),
        ("deep-event-field", "not JSON"),
        ("stream-over-the-cap", "longer than"),
        ("deep-only-event", "not JSON"),
    ] {
        let message = failure(&clients, "openai", model, true).await;
        assert!(message.contains(says), "{model}: {message}");
    }
    for model in ["deep-only-event", "huge-data-line"] {
        let message = failure(&clients, "anthropic", model, true).await;
        assert!(
            message.contains("not JSON") || message.contains("longer than"),
            "{message}"
        );
        let message = failure(&clients, "google", model, true).await;
        assert!(
            message.contains("not JSON") || message.contains("longer than"),
            "{message}"
        );
    }
    still_answers(&clients, "openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tiny_events_and_a_big_line_within_the_caps_are_read_whole() {
    let clients = rig().await;
    let (tx, mut rx) = mpsc::channel(16);
    let tiny = clients
        .complete(request("openai", "tiny-events"), Some(tx))
        .await
        .unwrap();
    assert_eq!(tiny.text.len(), 80_000);
    // a caller that does not keep up loses pieces, never the answer or the server's time
    let mut pieces = 0;
    while rx.try_recv().is_ok() {
        pieces += 1;
    }
    assert!(pieces <= 16, "{pieces}");
    let (tx, _rx) = mpsc::channel(16);
    let empty = clients
        .complete(request("openai", "empty-events"), Some(tx))
        .await
        .unwrap();
    assert_eq!(empty.text, "");
    let (tx, _rx) = mpsc::channel(16);
    let big = clients
        .complete(request("openai", "big-but-fitting-line"), Some(tx))
        .await
        .unwrap();
    assert_eq!(big.text.len(), 3 << 20);
}
