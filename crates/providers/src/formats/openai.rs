//! OpenAI chat completions: `POST {base}/chat/completions`, `Authorization: Bearer`; streamed
//! as `data:` chunks ending with `data: [DONE]` (usage in the last chunk, asked for with
//! `stream_options.include_usage`).

use serde_json::{Value, json};
use toolgate_ports::ai::{ModelRequest, Part, Role};

use super::{Answer, Prepared, json_of, str_at, text_of, u64_at};
use crate::sse::Event;

pub fn prepare(base: &str, key: Option<&str>, request: &ModelRequest, stream: bool) -> Prepared {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let plain = message.parts.iter().all(|p| matches!(p, Part::Text(_)));
        let content = if plain {
            json!(text_of(&message.parts))
        } else {
            Value::Array(message.parts.iter().map(part).collect())
        };
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = json!({"model": request.model, "messages": messages});
    if let Some(max) = request.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    match &request.json {
        Some(Value::Null) => body["response_format"] = json!({"type": "json_object"}),
        Some(schema) => {
            body["response_format"] = json!({"type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": true}});
        }
        None => {}
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    let mut headers = vec![("content-type", "application/json".to_owned())];
    if let Some(key) = key {
        headers.push(("authorization", format!("Bearer {key}")));
    }
    Prepared {
        url: format!("{base}/chat/completions"),
        headers,
        body,
    }
}

fn part(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image { mime_type, data } => json!({"type": "image_url",
            "image_url": {"url": format!("data:{mime_type};base64,{data}")}}),
    }
}

pub fn parse(body: &Value) -> Option<Answer> {
    let choice = body.pointer("/choices/0")?;
    Some(Answer {
        text: choice
            .pointer("/message/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        model: str_at(body, "/model").unwrap_or_default(),
        finish_reason: str_at(choice, "/finish_reason").unwrap_or_default(),
        usage: usage(body),
        done: true,
    })
}

fn usage(body: &Value) -> toolgate_ports::ai::Usage {
    toolgate_ports::ai::Usage {
        input_tokens: u64_at(body, "/usage/prompt_tokens"),
        output_tokens: u64_at(body, "/usage/completion_tokens"),
    }
}

pub fn on_event(event: &Event, answer: &mut Answer) -> Result<String, String> {
    if event.data.trim() == "[DONE]" {
        answer.done = true;
        return Ok(String::new());
    }
    let chunk = json_of(event)?;
    if let Some(message) = chunk.pointer("/error/message").and_then(Value::as_str) {
        return Err(message.to_owned());
    }
    if let Some(model) = str_at(&chunk, "/model") {
        answer.model = model;
    }
    if chunk.get("usage").is_some_and(Value::is_object) {
        answer.usage = usage(&chunk);
    }
    if let Some(reason) = str_at(&chunk, "/choices/0/finish_reason") {
        answer.finish_reason = reason;
    }
    let delta = str_at(&chunk, "/choices/0/delta/content").unwrap_or_default();
    answer.text.push_str(&delta);
    Ok(delta)
}
