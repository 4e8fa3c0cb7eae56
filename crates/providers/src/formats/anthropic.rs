//! Anthropic Messages: `POST {base}/v1/messages`, `x-api-key` and `anthropic-version`;
//! `max_tokens` is required (1024 when the call gives none); streamed as named events from
//! `message_start` to `message_stop`. There is no JSON mode: JSON is asked for in the system
//! prompt.

use serde_json::{Value, json};
use toolgate_ports::ai::{ModelRequest, Part, Role};

use super::{Answer, Prepared, json_of, str_at, u64_at};
use crate::sse::Event;

/// The API version every request names.
pub const VERSION: &str = "2023-06-01";
/// `max_tokens` when the call gives none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

pub fn prepare(base: &str, key: Option<&str>, request: &ModelRequest, stream: bool) -> Prepared {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            let content: Vec<Value> = m.parts.iter().map(part).collect();
            json!({"role": role, "content": content})
        })
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    let mut system = request.system.clone().unwrap_or_default();
    match &request.json {
        Some(Value::Null) => system.push_str("\n\nAnswer with one JSON object and nothing else."),
        Some(schema) => system.push_str(&format!(
            "\n\nAnswer with one JSON object that follows this JSON Schema, and nothing else: {schema}"
        )),
        None => {}
    }
    if !system.trim().is_empty() {
        body["system"] = json!(system.trim());
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if stream {
        body["stream"] = json!(true);
    }
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("anthropic-version", VERSION.to_owned()),
    ];
    if let Some(key) = key {
        headers.push(("x-api-key", key.to_owned()));
    }
    Prepared {
        url: format!("{base}/v1/messages"),
        headers,
        body,
    }
}

fn part(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image { mime_type, data } => json!({"type": "image",
            "source": {"type": "base64", "media_type": mime_type, "data": data}}),
    }
}

pub fn parse(body: &Value) -> Option<Answer> {
    let blocks = body.get("content")?.as_array()?;
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    Some(Answer {
        text,
        model: str_at(body, "/model").unwrap_or_default(),
        finish_reason: str_at(body, "/stop_reason").unwrap_or_default(),
        usage: toolgate_ports::ai::Usage {
            input_tokens: u64_at(body, "/usage/input_tokens"),
            output_tokens: u64_at(body, "/usage/output_tokens"),
        },
        done: true,
    })
}

pub fn on_event(event: &Event, answer: &mut Answer) -> Result<String, String> {
    let data = json_of(event)?;
    let kind = str_at(&data, "/type").unwrap_or_else(|| event.name.clone());
    match kind.as_str() {
        "message_start" => {
            answer.model = str_at(&data, "/message/model").unwrap_or_default();
            answer.usage.input_tokens = u64_at(&data, "/message/usage/input_tokens");
        }
        "content_block_delta" => {
            let delta = str_at(&data, "/delta/text").unwrap_or_default();
            answer.text.push_str(&delta);
            return Ok(delta);
        }
        "message_delta" => {
            if let Some(reason) = str_at(&data, "/delta/stop_reason") {
                answer.finish_reason = reason;
            }
            answer.usage.output_tokens = u64_at(&data, "/usage/output_tokens");
        }
        "message_stop" => answer.done = true,
        "error" => {
            return Err(str_at(&data, "/error/message")
                .unwrap_or_else(|| "the provider reported an error mid-answer".to_owned()));
        }
        _ => {}
    }
    Ok(String::new())
}
