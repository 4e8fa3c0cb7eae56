//! The client against stand-ins on loopback that speak each wire format exactly as the
//! providers document it (plain and streamed), and fail the ways providers fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use toolgate_ports::ai::{Message, ModelError, ModelRequest, Models, Part, Role};

use super::*;

const KEY: &str = "sk-test-0123456789abcdef";

/// What the stand-in saw: each request's path, headers of interest and body.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, HeaderMap, Value)>>>);

fn sse(events: Vec<String>) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(events.concat()))
        .unwrap()
}

fn json_response(status: u16, body: Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// How the stand-in behaves, chosen by the model's name.
async fn misbehaviour(model: &str, calls: usize) -> Option<Response> {
    match model {
        "fail-401" => Some(json_response(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "invalid_request_error"}}),
        )),
        "flaky-429" if calls == 1 => Some(
            Response::builder()
                .status(429)
                .header("retry-after", "0.2")
                .body(Body::from(r#"{"error":{"message":"slow down"}}"#))
                .unwrap(),
        ),
        "fail-500" => Some(json_response(
            500,
            json!({"error": {"message": "upstream broke"}}),
        )),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            None
        }
        "malformed" => Some(
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from("{not json"))
                .unwrap(),
        ),
        "huge" => Some(
            Response::builder()
                .body(Body::from(vec![b' '; MAX_ANSWER_BYTES + 10]))
                .unwrap(),
        ),
        _ => None,
    }
}

async fn openai(State(seen): State<Seen>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let calls = record(&seen, "/v1/chat/completions", headers, &body);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if let Some(response) = misbehaviour(&model, calls).await {
        return response;
    }
    if model == "endless" {
        return endless();
    }
    if body["stream"] == true {
        let mut events: Vec<String> = ["Hel", "lo", "!"]
            .iter()
            .map(|t| format!("data: {}\n\n", json!({"model": model, "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]})))
            .collect();
        if model == "cut" {
            return sse(events);
        }
        events.push(format!(
            "data: {}\n\n",
            json!({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        ));
        events.push(format!("data: {}\n\n", json!({"model": model, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})));
        events.push("data: [DONE]\n\n".to_owned());
        return sse(events);
    }
    json_response(
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}),
    )
}

async fn anthropic(
    State(seen): State<Seen>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let calls = record(&seen, "/v1/messages", headers, &body);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if let Some(response) = misbehaviour(&model, calls).await {
        return response;
    }
    if body["stream"] == true {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let mut events = vec![
            event(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "usage": {"input_tokens": 9, "output_tokens": 1}}}),
            ),
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            event("ping", json!({"type": "ping"})),
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            ),
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo!"}}),
            ),
        ];
        if model == "cut" {
            return sse(events);
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        events.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 4}})));
        events.push(event("message_stop", json!({"type": "message_stop"})));
        return sse(events);
    }
    json_response(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 9, "output_tokens": 4}}),
    )
}

async fn gemini(
    State(seen): State<Seen>,
    Path(rest): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let calls = record(&seen, &format!("/v1beta/models/{rest}"), headers, &body);
    let (model, action) = rest.split_once(':').unwrap();
    if let Some(response) = misbehaviour(model, calls).await {
        return response;
    }
    let piece = |text: &str, finish: Option<&str>| {
        let mut candidate =
            json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        json!({"candidates": [candidate], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}, "modelVersion": model})
    };
    if action == "streamGenerateContent" {
        let mut events = vec![format!("data: {}\r\n\r\n", piece("Hel", None))];
        if model == "cut" {
            return sse(events);
        }
        events.push(format!("data: {}\r\n\r\n", piece("lo!", Some("STOP"))));
        return sse(events);
    }
    json_response(200, piece("Hello!", Some("STOP")))
}

/// Set when the endless stream is dropped: the client went away.
static ENDLESS_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks [`ENDLESS_DROPPED`] when the stream holding it is dropped.
struct DropMark;

impl Drop for DropMark {
    fn drop(&mut self) {
        ENDLESS_DROPPED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A streamed answer that never ends: a piece every 10 ms.
fn endless() -> Response {
    let mark = DropMark;
    let pieces = futures::stream::unfold(mark, |mark| async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let chunk = json!({"model": "endless", "choices": [{"index": 0, "delta": {"content": "la "}, "finish_reason": null}]});
        Some((
            Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n")),
            mark,
        ))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(pieces))
        .unwrap()
}

fn record(seen: &Seen, path: &str, headers: HeaderMap, body: &Value) -> usize {
    let mut all = seen.0.lock().unwrap();
    all.push((path.to_owned(), headers, body.clone()));
    all.iter()
        .filter(|(p, _, b)| p == path && b.get("model") == body.get("model"))
        .count()
}

/// A stand-in for all three formats on loopback, and a client whose providers point at it.
async fn rig() -> (ModelClients, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(openai))
        .route("/v1/messages", post(anthropic))
        .route("/v1beta/models/{*rest}", post(gemini))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut settings = ProviderSettings {
        timeout: Some(Duration::from_secs(2)),
        ..ProviderSettings::default()
    };
    settings
        .base_urls
        .insert("openai".into(), format!("{base}/v1"));
    settings.base_urls.insert("anthropic".into(), base.clone());
    settings
        .base_urls
        .insert("gemini".into(), format!("{base}/v1beta"));
    settings
        .api_keys
        .insert("anthropic".into(), Zeroizing::new(KEY.to_owned()));
    settings
        .compatible
        .push(("local-llm".into(), format!("{base}/v1"), None));
    let policy = EgressPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap();
    (ModelClients::new(policy, settings).unwrap(), seen)
}

fn request(provider: &str, model: &str) -> ModelRequest {
    ModelRequest {
        provider: provider.into(),
        model: model.into(),
        system: Some("Be brief.".into()),
        messages: vec![Message {
            role: Role::User,
            parts: vec![
                Part::Text("Say hello".into()),
                Part::Image {
                    mime_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            ],
        }],
        max_tokens: Some(50),
        temperature: Some(0.2),
        json: None,
        api_key: Some(Zeroizing::new(KEY.to_owned())),
    }
}

#[tokio::test]
async fn each_format_is_written_as_its_provider_documents_it() {
    let (clients, seen) = rig().await;
    for (provider, model) in [
        ("openai", "gpt-x"),
        ("anthropic", "claude-x"),
        ("google", "gemini-x"),
    ] {
        let answer = clients
            .complete(request(provider, model), None)
            .await
            .unwrap();
        assert_eq!(answer.text, "Hello!", "{provider}");
        assert_eq!(answer.model, model);
        assert_eq!(answer.attempts, 1);
        assert!(
            answer.usage.input_tokens > 0 && answer.usage.output_tokens > 0,
            "{provider}"
        );
    }
    let seen = seen.0.lock().unwrap();
    let (_, headers, body) = &seen[0];
    assert_eq!(headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        body["messages"][1]["content"][1]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
    assert_eq!(
        (body["max_tokens"].clone(), body["temperature"].clone()),
        (json!(50), json!(0.2))
    );
    let (_, headers, body) = &seen[1];
    assert_eq!(headers["x-api-key"], KEY);
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["messages"][0]["content"][1]["source"]["media_type"],
        "image/png"
    );
    let (path, headers, body) = &seen[2];
    assert_eq!(path, "/v1beta/models/gemini-x:generateContent");
    assert_eq!(headers["x-goog-api-key"], KEY);
    assert_eq!(body["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 50);
    assert_eq!(
        body["contents"][0]["parts"][1]["inline_data"]["mime_type"],
        "image/png"
    );
}

#[tokio::test]
async fn streamed_answers_arrive_piece_by_piece_in_each_format() {
    let (clients, _) = rig().await;
    for (provider, model) in [
        ("openai", "gpt-x"),
        ("anthropic", "claude-x"),
        ("google", "gemini-x"),
    ] {
        let (tx, mut rx) = mpsc::channel(64);
        let answer = clients
            .complete(request(provider, model), Some(tx))
            .await
            .unwrap();
        let mut pieces = Vec::new();
        while let Ok(piece) = rx.try_recv() {
            pieces.push(piece);
        }
        assert!(pieces.len() >= 2, "{provider}: {pieces:?}");
        assert_eq!(pieces.concat(), "Hello!", "{provider}");
        assert_eq!(answer.text, "Hello!");
        assert!(!answer.finish_reason.is_empty(), "{provider}");
        assert!(answer.usage.output_tokens > 0, "{provider}");
        // a stream cut before its end is an error, not a short answer
        let (tx, _rx) = mpsc::channel(64);
        let cut = clients
            .complete(request(provider, "cut"), Some(tx))
            .await
            .unwrap_err();
        assert!(matches!(cut, ModelError::Failed(_)), "{provider}: {cut}");
        assert!(
            cut.to_string()
                .contains("ended before the answer was complete"),
            "{provider}: {cut}"
        );
    }
}

#[tokio::test]
async fn failures_are_retried_or_passed_on_in_the_providers_words_without_the_key() {
    let (clients, seen) = rig().await;
    let answer = clients
        .complete(request("openai", "flaky-429"), None)
        .await
        .unwrap();
    assert_eq!((answer.text.as_str(), answer.attempts), ("Hello!", 2));
    let refused = clients
        .complete(request("openai", "fail-401"), None)
        .await
        .unwrap_err();
    // an error status: the provider generated nothing (operator-key tokens count none)
    assert!(matches!(refused, ModelError::Rejected(_)), "{refused}");
    let message = refused.to_string();
    assert!(
        message.contains("openai answered 401: Incorrect API key provided"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
    let broke = clients
        .complete(request("anthropic", "fail-500"), None)
        .await
        .unwrap_err();
    assert!(matches!(broke, ModelError::Rejected(_)), "{broke}");
    assert!(
        broke.to_string().contains("answered 500: upstream broke"),
        "{broke}"
    );
    let tries = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, b)| b["model"] == "fail-500")
        .count();
    assert_eq!(
        tries,
        retry::MAX_ATTEMPTS as usize,
        "5xx retried, then given up"
    );
    let malformed = clients
        .complete(request("google", "malformed"), None)
        .await
        .unwrap_err();
    assert!(malformed.to_string().contains("not JSON"), "{malformed}");
    let huge = clients
        .complete(request("openai", "huge"), None)
        .await
        .unwrap_err();
    assert!(huge.to_string().contains("longer than"), "{huge}");
    let started = std::time::Instant::now();
    let slow = clients
        .complete(request("openai", "slow"), None)
        .await
        .unwrap_err();
    assert!(matches!(slow, ModelError::Failed(_)), "{slow}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn keys_come_from_the_call_or_the_operator_and_providers_must_be_known() {
    let (clients, seen) = rig().await;
    let mut keyless = request("openai", "gpt-x");
    keyless.api_key = None;
    let refused = clients.complete(keyless, None).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("store yours as the secret OPENAI_API_KEY"),
        "{refused}"
    );
    // the operator's key for anthropic
    let mut operator = request("anthropic", "claude-x");
    operator.api_key = None;
    clients.complete(operator, None).await.unwrap();
    assert_eq!(seen.0.lock().unwrap().last().unwrap().1["x-api-key"], KEY);
    // an operator's OpenAI-compatible endpoint without a key
    let mut local = request("local-llm", "tiny");
    local.api_key = None;
    assert_eq!(clients.complete(local, None).await.unwrap().text, "Hello!");
    assert!(
        seen.0
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .1
            .get("authorization")
            .is_none()
    );
    let unknown = clients
        .complete(request("nope", "m"), None)
        .await
        .unwrap_err();
    assert!(
        unknown
            .to_string()
            .contains("unknown provider \"nope\": known are anthropic"),
        "{unknown}"
    );
    assert_eq!(
        clients.provider("google").unwrap().key_secret,
        "GEMINI_API_KEY"
    );
}

#[tokio::test]
async fn only_the_private_endpoints_the_operator_configured_are_reached() {
    let mut settings = ProviderSettings::default();
    settings
        .base_urls
        .insert("openai".into(), "http://127.0.0.1:9/v1".into());
    let clients = ModelClients::new(EgressPolicy::default(), settings).unwrap();
    // configured: the guard lets the call through (nothing listens on port 9)
    let failed = clients
        .complete(request("openai", "gpt-x"), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        !failed.contains("loopback") && failed.contains("could not be reached"),
        "{failed}"
    );
    // ollama's own base URL is on loopback too, but the operator did not configure it
    let refused = clients
        .complete(request("ollama", "llama3"), None)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("loopback"), "{refused}");
}

#[tokio::test]
async fn json_output_is_asked_for_in_each_formats_way() {
    let (clients, seen) = rig().await;
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    for provider in ["openai", "anthropic", "google"] {
        let mut asked = request(provider, "m");
        asked.json = Some(schema.clone());
        clients.complete(asked, None).await.unwrap();
    }
    let seen = seen.0.lock().unwrap();
    assert_eq!(
        seen[0].2["response_format"]["json_schema"]["schema"],
        schema
    );
    assert!(
        seen[1].2["system"]
            .as_str()
            .unwrap()
            .contains("JSON Schema")
    );
    assert_eq!(
        seen[2].2["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert_eq!(seen[2].2["generationConfig"]["responseJsonSchema"], schema);
}

#[tokio::test]
async fn a_dropped_call_stops_the_request_upstream() {
    let (clients, _) = rig().await;
    let (tx, mut rx) = mpsc::channel(64);
    let call = tokio::spawn(async move {
        clients
            .complete(request("openai", "endless"), Some(tx))
            .await
    });
    assert_eq!(rx.recv().await.unwrap(), "la ", "the stream began");
    assert!(!ENDLESS_DROPPED.load(std::sync::atomic::Ordering::SeqCst));
    // what a cancelled tool call does: the future is dropped; the upstream stream ends well
    // before the call's own 2 s limit would have ended it
    call.abort();
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while !ENDLESS_DROPPED.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the provider's stream went on after the call was dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
