//! Gemini generateContent: `POST {base}/models/{model}:generateContent`, `x-goog-api-key`;
//! streamed by `:streamGenerateContent?alt=sse`, each event a whole response holding the next
//! piece. JSON output by `responseMimeType` (and `responseJsonSchema`).

use serde_json::{Value, json};
use toolgate_ports::ai::{ModelRequest, Part, Role};

use super::{Answer, Prepared, json_of, str_at, u64_at};
use crate::sse::Event;

pub fn prepare(base: &str, key: Option<&str>, request: &ModelRequest, stream: bool) -> Prepared {
    let contents: Vec<Value> = request
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "model",
            };
            let parts: Vec<Value> = m.parts.iter().map(part).collect();
            json!({"role": role, "parts": parts})
        })
        .collect();
    let mut body = json!({"contents": contents});
    if let Some(system) = &request.system {
        body["systemInstruction"] = json!({"parts": [{"text": system}]});
    }
    let mut config = serde_json::Map::new();
    if let Some(max) = request.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(t) = request.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(schema) = &request.json {
        config.insert("responseMimeType".into(), json!("application/json"));
        if !schema.is_null() {
            config.insert("responseJsonSchema".into(), schema.clone());
        }
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    let model = &request.model;
    let url = if stream {
        format!("{base}/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/models/{model}:generateContent")
    };
    let mut headers = vec![("content-type", "application/json".to_owned())];
    if let Some(key) = key {
        headers.push(("x-goog-api-key", key.to_owned()));
    }
    Prepared { url, headers, body }
}

fn part(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({"text": text}),
        Part::Image { mime_type, data } => {
            json!({"inline_data": {"mime_type": mime_type, "data": data}})
        }
    }
}

/// What one response (or one streamed piece) holds; `None` when it is not a response.
fn piece(body: &Value, answer: &mut Answer) -> Option<String> {
    let candidate = body.pointer("/candidates/0");
    if candidate.is_none() && body.get("usageMetadata").is_none() {
        return None;
    }
    let text: String = candidate
        .and_then(|c| c.pointer("/content/parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if let Some(reason) = candidate.and_then(|c| str_at(c, "/finishReason")) {
        answer.finish_reason = reason;
        answer.done = true;
    }
    if let Some(model) = str_at(body, "/modelVersion") {
        answer.model = model;
    }
    if body.get("usageMetadata").is_some() {
        answer.usage.input_tokens = u64_at(body, "/usageMetadata/promptTokenCount");
        answer.usage.output_tokens = u64_at(body, "/usageMetadata/candidatesTokenCount");
    }
    answer.text.push_str(&text);
    Some(text)
}

pub fn parse(body: &Value) -> Option<Answer> {
    let mut answer = Answer::default();
    piece(body, &mut answer)?;
    answer.done = true;
    Some(answer)
}

pub fn on_event(event: &Event, answer: &mut Answer) -> Result<String, String> {
    let data = json_of(event)?;
    if let Some(message) = data.pointer("/error/message").and_then(Value::as_str) {
        return Err(message.to_owned());
    }
    piece(&data, answer).ok_or_else(|| "a streamed event is not a Gemini response".to_owned())
}
