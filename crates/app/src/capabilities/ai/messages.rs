//! `messages` and `response_format`: their schemas, their checks, and what they become.

use serde_json::{Value, json};

use toolgate_ports::ai::{Message, Part, Role};

/// Messages in one call at most.
const MAX_MESSAGES: usize = 100;
/// Parts of one message at most.
const MAX_PARTS: usize = 32;
/// The image types a message may carry.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
/// A JSON Schema given as `response_format`, serialized, at most.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;

pub fn messages_schema(description: &str) -> Value {
    let text = json!({"type": "object", "properties": {
        "type": {"const": "text"}, "text": {"type": "string"}}, "required": ["type", "text"],
        "additionalProperties": false});
    let image = json!({"type": "object", "properties": {
        "type": {"const": "image"}, "data": {"type": "string", "description": "base64"},
        "mime_type": {"type": "string", "enum": IMAGE_TYPES}},
        "required": ["type", "data", "mime_type"], "additionalProperties": false});
    json!({"type": "array", "maxItems": MAX_MESSAGES, "description": description, "items": {
        "type": "object", "properties": {
            "role": {"type": "string", "enum": ["user", "assistant"]},
            "content": {"anyOf": [{"type": "string"},
                                  {"type": "array", "maxItems": MAX_PARTS, "items": {"anyOf": [text, image]}}]}},
        "required": ["role", "content"], "additionalProperties": false}})
}

pub fn check_messages(field: &str, value: &Value) -> Result<(), String> {
    parse_messages(value)
        .map(drop)
        .map_err(|e| format!("field `{field}`: {e}"))
}

/// The messages, or what is wrong with them.
pub fn parse_messages(value: &Value) -> Result<Vec<Message>, String> {
    let items = value
        .as_array()
        .ok_or("must be an array of {role, content}")?;
    if items.is_empty() || items.len() > MAX_MESSAGES {
        return Err(format!("must hold 1 to {MAX_MESSAGES} messages"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| message(item).map_err(|e| format!("message {i}: {e}")))
        .collect()
}

fn message(item: &Value) -> Result<Message, String> {
    let object = item
        .as_object()
        .ok_or("must be an object {role, content}")?;
    if let Some(extra) = object
        .keys()
        .find(|k| !["role", "content"].contains(&k.as_str()))
    {
        return Err(format!("unknown key `{extra}`"));
    }
    let role = match object.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return Err("`role` must be \"user\" or \"assistant\"".to_owned()),
    };
    let parts = match object.get("content") {
        Some(Value::String(text)) => vec![Part::Text(text.clone())],
        Some(Value::Array(parts)) if !parts.is_empty() && parts.len() <= MAX_PARTS => {
            parts.iter().map(part).collect::<Result<_, _>>()?
        }
        _ => {
            return Err(format!(
                "`content` must be a string or an array of 1 to {MAX_PARTS} parts"
            ));
        }
    };
    Ok(Message { role, parts })
}

fn part(value: &Value) -> Result<Part, String> {
    let text_of = |key: &str| value.get(key).and_then(Value::as_str);
    match text_of("type") {
        Some("text") => Ok(Part::Text(
            text_of("text")
                .ok_or("a text part needs `text`")?
                .to_owned(),
        )),
        Some("image") => {
            let mime_type = text_of("mime_type").unwrap_or_default();
            if !IMAGE_TYPES.contains(&mime_type) {
                return Err(format!(
                    "an image's `mime_type` must be one of {IMAGE_TYPES:?}"
                ));
            }
            let data = text_of("data").ok_or("an image part needs base64 `data`")?;
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|_| "an image's `data` is not base64")?;
            Ok(Part::Image {
                mime_type: mime_type.to_owned(),
                data: data.to_owned(),
            })
        }
        _ => Err("a part's `type` must be \"text\" or \"image\"".to_owned()),
    }
}

pub fn format_schema(description: &str) -> Value {
    json!({"anyOf": [{"type": "string", "const": "json"},
                     {"type": "object", "description": "a JSON Schema the answer follows"}],
           "description": description})
}

pub fn check_format(field: &str, value: &Value) -> Result<(), String> {
    match value {
        Value::String(s) if s == "json" => Ok(()),
        Value::Object(_) if value.to_string().len() <= MAX_SCHEMA_BYTES => Ok(()),
        Value::Object(_) => Err(format!(
            "field `{field}`: the schema is longer than {MAX_SCHEMA_BYTES} bytes"
        )),
        _ => Err(format!(
            "field `{field}` must be \"json\" or a JSON Schema object"
        )),
    }
}

/// `response_format` as the seam takes it: `Null` for any JSON object, else the schema.
pub fn json_request(value: Option<&Value>) -> Option<Value> {
    match value? {
        Value::String(_) => Some(Value::Null),
        schema => Some(schema.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_are_read_and_bad_ones_named() {
        let good = json!([{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": [{"type": "text", "text": "yes"}]},
                          {"role": "user", "content": [{"type": "image", "mime_type": "image/png", "data": "aGk="}]}]);
        let parsed = parse_messages(&good).unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[1].role, Role::Assistant);
        for (bad, says) in [
            (json!([]), "1 to 100"),
            (json!([{"role": "system", "content": "x"}]), "`role`"),
            (json!([{"role": "user"}]), "`content`"),
            (
                json!([{"role": "user", "content": "x", "name": "n"}]),
                "unknown key `name`",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image", "mime_type": "image/tiff", "data": ""}]}]),
                "mime_type",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image", "mime_type": "image/png", "data": "!!"}]}]),
                "not base64",
            ),
            (json!("hi"), "array"),
        ] {
            let error = check_messages("messages", &bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
        assert!(check_format("response_format", &json!("json")).is_ok());
        assert!(check_format("response_format", &json!({"type": "object"})).is_ok());
        assert!(check_format("response_format", &json!("yaml")).is_err());
    }
}
