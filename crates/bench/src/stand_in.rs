//! The floor server's stand-ins for `--ai`: an OpenAI chat-completions endpoint (a whole answer
//! at once, or streamed as five SSE events 2 ms apart, so that the first piece comes well before
//! the last) and the upstream a SearXNG `json_engine` asks.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

/// Pieces of a streamed answer, and the pause before each after the first.
const PIECES: [&str; 5] = ["The ", "answer ", "is ", "forty-", "two."];
const PAUSE: Duration = Duration::from_millis(2);

/// `POST /v1/chat/completions`.
pub async fn chat(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].clone();
    let header = ("content-type", "application/json");
    if request["stream"] != true {
        let answer = json!({"id": "bench", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": PIECES.concat()},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5}});
        return Response::builder()
            .header(header.0, header.1)
            .body(Body::from(answer.to_string()))
            .unwrap_or_default();
    }
    let mut events: Vec<String> = PIECES
        .iter()
        .map(|piece| {
            let chunk = json!({"model": model, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    let last = json!({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": 5}});
    events.push(format!("data: {last}\n\ndata: [DONE]\n\n"));
    let paced =
        futures::stream::iter(events.into_iter().enumerate()).then(|(i, event)| async move {
            if i > 0 {
                tokio::time::sleep(PAUSE).await;
            }
            Ok::<_, Infallible>(event)
        });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(paced))
        .unwrap_or_default()
}

/// `GET /search`: what a SearXNG json_engine reads.
pub async fn search() -> axum::Json<Value> {
    axum::Json(json!({"results": [
        {"url": "https://bench.example/1", "title": "First", "content": "the first result"},
        {"url": "https://bench.example/2", "title": "Second", "content": "the second result"}]}))
}
