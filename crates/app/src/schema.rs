//! Field types: the JSON Schema that `tools/list` shows and the check that enforces it, from one
//! definition so that they cannot disagree.

use serde_json::{Map, Value, json};
use toolgate_domain::{MAX_SECRET_BYTES, SecretName};

/// The type and bounds of one input field.
#[derive(Debug, Clone)]
pub enum FieldKind {
    /// `true` or `false`.
    Boolean,
    /// A string of at most `max_len` bytes.
    String {
        /// upper bound in bytes
        max_len: usize,
    },
    /// An integer within bounds.
    Integer {
        /// smallest accepted value
        min: i64,
        /// largest accepted value
        max: i64,
    },
    /// A number within bounds.
    Number {
        /// smallest accepted value
        min: f64,
        /// largest accepted value
        max: f64,
    },
    /// A structured field whose schema and check its capability owns (`messages`, …).
    Custom {
        /// the property's JSON Schema, given its description
        schema: fn(&str) -> Value,
        /// `Err` with a sentence naming the field when a value does not fit
        check: fn(&str, &Value) -> Result<(), String>,
    },
    /// A caller's name for something (a session): 1 to `max_len` bytes, no control characters.
    Name {
        /// upper bound in bytes
        max_len: usize,
    },
    /// A vault secret's name (`[A-Za-z_][A-Za-z0-9_]{0,127}`).
    SecretName,
    /// An array of distinct secret names.
    SecretNames {
        /// most entries
        max_items: usize,
    },
    /// A `{name, value, hosts?}` object: a secret to store (the value is never echoed by an
    /// error).
    SecretEntry,
    /// `{method, url, headers?, body?, max_bytes?}`: a request that changes something elsewhere.
    HttpCall {
        /// longest body, in bytes
        max_body: usize,
    },
    /// An object of HTTP request headers, name to value.
    Headers {
        /// most entries
        max_items: usize,
    },
    /// An array of `{path, content, encoding?}` objects: files to place in a workspace.
    Files {
        /// most entries
        max_files: usize,
        /// longest `path`, in bytes
        max_path: usize,
    },
}

/// How a `files` entry's `content` is encoded.
pub const FILE_ENCODINGS: [&str; 2] = ["text", "base64"];

impl FieldKind {
    /// The property's JSON Schema.
    pub fn schema(&self, description: &str) -> Value {
        match self {
            FieldKind::Boolean => json!({"type": "boolean", "description": description}),
            FieldKind::String { max_len } => {
                json!({"type": "string", "maxLength": max_len, "description": description})
            }
            FieldKind::Integer { min, max } => {
                json!({"type": "integer", "minimum": min, "maximum": max, "description": description})
            }
            FieldKind::Number { min, max } => {
                json!({"type": "number", "minimum": min, "maximum": max, "description": description})
            }
            FieldKind::Custom { schema, .. } => schema(description),
            FieldKind::Name { max_len } => json!({
                "type": "string", "minLength": 1, "maxLength": max_len,
                "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", "description": description,
            }),
            FieldKind::SecretName => {
                json!({"type": "string", "pattern": SECRET_NAME_PATTERN, "description": description})
            }
            FieldKind::SecretNames { max_items } => json!({
                "type": "array", "maxItems": max_items, "uniqueItems": true,
                "items": {"type": "string", "pattern": SECRET_NAME_PATTERN},
                "description": description,
            }),
            FieldKind::SecretEntry => json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": SECRET_NAME_PATTERN,
                             "description": "the secret's name, e.g. OPENAI_API_KEY"},
                    "value": {"type": "string", "maxLength": MAX_SECRET_BYTES,
                              "description": "the value, stored encrypted; never shown again"},
                    "hosts": {"type": "array", "maxItems": crate::secrets::MAX_SECRET_HOSTS,
                              "items": {"type": "string",
                                        "maxLength": toolgate_egress::MAX_HOST_PATTERN_CHARS},
                              "description": "host patterns (api.github.com, *.openai.com) the \
                                  sessions' network proxy may send it to, in place of \
                                  {{secret:NAME}} in a request's headers; [] unbinds; \
                                  left out, a replaced secret keeps its hosts"},
                },
                "required": ["name", "value"],
                "additionalProperties": false,
                "description": description,
            }),
            FieldKind::HttpCall { max_body } => json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": toolgate_ports::fetch::Method::WRITES},
                    "url": {"type": "string", "maxLength": 8192},
                    "headers": {"type": "object", "maxProperties": 32,
                                "additionalProperties": {"type": "string", "maxLength": MAX_HEADER_VALUE}},
                    "body": {"type": "string", "maxLength": max_body},
                    "max_bytes": {"type": "integer", "minimum": 1, "maximum": max_body},
                },
                "required": ["method", "url"],
                "additionalProperties": false,
                "description": description,
            }),
            FieldKind::Headers { max_items } => json!({
                "type": "object", "maxProperties": max_items,
                "additionalProperties": {"type": "string", "maxLength": MAX_HEADER_VALUE},
                "description": description,
            }),
            FieldKind::Files {
                max_files,
                max_path,
            } => json!({
                "type": "array",
                "maxItems": max_files,
                "description": description,
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "minLength": 1, "maxLength": max_path,
                                 "description": "relative path inside the session's workspace"},
                        "content": {"type": "string", "description": "the file's content"},
                        "encoding": {"type": "string", "enum": FILE_ENCODINGS,
                                     "description": "text (UTF-8, the default) or base64"},
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false,
                },
            }),
        }
    }

    /// `Err` with a sentence naming the field when `value` does not fit.
    pub fn check(&self, name: &str, value: &Value) -> Result<(), String> {
        match self {
            FieldKind::Boolean if value.is_boolean() => Ok(()),
            FieldKind::Boolean => Err(format!(
                "field `{name}` must be true or false, got {}",
                type_of(value)
            )),
            FieldKind::String { max_len } => match value.as_str() {
                Some(text) if text.len() <= *max_len => Ok(()),
                Some(text) => Err(format!(
                    "field `{name}` is {} bytes long; the limit is {max_len}",
                    text.len()
                )),
                None => Err(format!(
                    "field `{name}` must be a string, got {}",
                    type_of(value)
                )),
            },
            FieldKind::Integer { min, max } => match value.as_i64() {
                Some(n) if (*min..=*max).contains(&n) => Ok(()),
                Some(n) => Err(format!(
                    "field `{name}` must be between {min} and {max}, got {n}"
                )),
                None => Err(format!(
                    "field `{name}` must be an integer, got {}",
                    type_of(value)
                )),
            },
            FieldKind::Number { min, max } => match value.as_f64() {
                Some(n) if (*min..=*max).contains(&n) => Ok(()),
                Some(n) => Err(format!(
                    "field `{name}` must be between {min} and {max}, got {n}"
                )),
                None => Err(format!(
                    "field `{name}` must be a number, got {}",
                    type_of(value)
                )),
            },
            FieldKind::Custom { check, .. } => check(name, value),
            FieldKind::Name { max_len } => match value.as_str() {
                Some(text) if text.is_empty() || text.len() > *max_len => Err(format!(
                    "field `{name}` must be 1 to {max_len} bytes long, got {}",
                    text.len()
                )),
                Some(text) if text.chars().any(char::is_control) => Err(format!(
                    "field `{name}` must not contain control characters"
                )),
                Some(_) => Ok(()),
                None => Err(format!(
                    "field `{name}` must be a string, got {}",
                    type_of(value)
                )),
            },
            FieldKind::SecretName => match value.as_str() {
                Some(text) => check_secret_name(name, text),
                None => Err(format!(
                    "field `{name}` must be a secret's name, got {}",
                    type_of(value)
                )),
            },
            FieldKind::SecretNames { max_items } => check_secret_names(name, value, *max_items),
            FieldKind::SecretEntry => check_secret_entry(name, value),
            FieldKind::Headers { max_items } => check_headers(name, value, *max_items),
            FieldKind::HttpCall { max_body } => check_http_call(name, value, *max_body),
            FieldKind::Files {
                max_files,
                max_path,
            } => check_files(name, value, *max_files, *max_path),
        }
    }
}

/// The rule of [`toolgate_domain::SecretName`], as JSON Schema.
const SECRET_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]{0,127}$";

fn check_secret_name(field: &str, text: &str) -> Result<(), String> {
    SecretName::parse(text)
        .map(|_| ())
        .map_err(|err| format!("field `{field}`: {err}"))
}

fn check_secret_names(field: &str, value: &Value, max_items: usize) -> Result<(), String> {
    let Some(items) = value.as_array() else {
        return Err(format!(
            "field `{field}` must be an array of secret names, got {}",
            type_of(value)
        ));
    };
    if items.len() > max_items {
        return Err(format!(
            "field `{field}` names {} secrets; the limit is {max_items}",
            items.len()
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let Some(text) = item.as_str() else {
            return Err(format!(
                "`{field}[{i}]` must be a string, got {}",
                type_of(item)
            ));
        };
        check_secret_name(&format!("{field}[{i}]"), text)?;
        if items[..i].iter().any(|earlier| earlier == item) {
            return Err(format!("`{field}` names {text} twice"));
        }
    }
    Ok(())
}

fn check_secret_entry(field: &str, value: &Value) -> Result<(), String> {
    let Some(object) = value.as_object() else {
        return Err(format!(
            "field `{field}` must be an object {{name, value, hosts?}}, got {}",
            type_of(value)
        ));
    };
    only_keys(
        &format!("field `{field}`"),
        object,
        &["name", "value", "hosts"],
    )?;
    if let Some(hosts) = object.get("hosts") {
        secret_entry_hosts(field, hosts)?;
    }
    match object.get("name").and_then(Value::as_str) {
        Some(text) => check_secret_name(&format!("{field}.name"), text)?,
        None => return Err(format!("`{field}.name` must be a string")),
    }
    // the value's content is never quoted back, only its size
    match object.get("value").and_then(Value::as_str) {
        Some(text) if text.len() <= MAX_SECRET_BYTES => Ok(()),
        Some(text) => Err(format!(
            "`{field}.value` is {} bytes; a secret holds at most {MAX_SECRET_BYTES}",
            text.len()
        )),
        None => Err(format!("`{field}.value` must be a string")),
    }
}

/// `hosts` of a secret entry: an array of host patterns, by the vault's one rule.
fn secret_entry_hosts(field: &str, hosts: &Value) -> Result<Vec<String>, String> {
    let Some(items) = hosts.as_array() else {
        return Err(format!(
            "`{field}.hosts` must be an array of host patterns, got {}",
            type_of(hosts)
        ));
    };
    let mut texts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(text) => texts.push(text),
            None => {
                return Err(format!(
                    "`{field}.hosts[{i}]` must be a string, got {}",
                    type_of(item)
                ));
            }
        }
    }
    crate::secrets::secret_hosts(texts).map_err(|e| format!("`{field}.hosts`: {e}"))
}

/// Headers that frame the request or steer the connection: a caller who set them could make
/// the request mean something else to the server at the other end (smuggling) or to a proxy.
const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
];

/// Longest header value, in bytes.
const MAX_HEADER_VALUE: usize = 8 * 1024;

fn check_headers(field: &str, value: &Value, max_items: usize) -> Result<(), String> {
    let Some(headers) = value.as_object() else {
        return Err(format!(
            "field `{field}` must be an object of header names to values, got {}",
            type_of(value)
        ));
    };
    if headers.len() > max_items {
        return Err(format!(
            "field `{field}` has {} headers; the limit is {max_items}",
            headers.len()
        ));
    }
    for (name, value) in headers {
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        let shown: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        if name.is_empty() || name.len() > 256 || !name.chars().all(token) {
            return Err(format!("`{field}`: {shown:?} is not a header name"));
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            || name.to_ascii_lowercase().starts_with("proxy-")
        {
            return Err(format!(
                "`{field}`: {shown} is set by the service itself (framing and connection headers cannot be given)"
            ));
        }
        // the value may hold a secret's placeholder or a credential: only its size is quoted
        match value.as_str() {
            Some(text) if text.len() > MAX_HEADER_VALUE => {
                return Err(format!(
                    "`{field}.{shown}` is {} bytes; the limit is {MAX_HEADER_VALUE}",
                    text.len()
                ));
            }
            Some(text) if text.chars().any(|c| matches!(c, '\r' | '\n' | '\0')) => {
                return Err(format!(
                    "`{field}.{shown}` must not contain line breaks or NUL"
                ));
            }
            Some(_) => {}
            None => return Err(format!("`{field}.{shown}` must be a string")),
        }
    }
    Ok(())
}

fn check_http_call(field: &str, value: &Value, max_body: usize) -> Result<(), String> {
    let Some(call) = value.as_object() else {
        return Err(format!(
            "field `{field}` must be an object {{method, url, headers?, body?, max_bytes?}}, got {}",
            type_of(value)
        ));
    };
    only_keys(
        &format!("`{field}`"),
        call,
        &["method", "url", "headers", "body", "max_bytes"],
    )?;
    match call.get("method").and_then(Value::as_str) {
        Some(m) if toolgate_ports::fetch::Method::WRITES.contains(&m) => {}
        _ => {
            return Err(format!(
                "`{field}.method` must be one of {} (a GET is the read tool's `url`)",
                toolgate_ports::fetch::Method::WRITES.join(", ")
            ));
        }
    }
    FieldKind::String { max_len: 8192 }.check(
        &format!("{field}.url"),
        call.get("url").unwrap_or(&Value::Null),
    )?;
    if let Some(headers) = call.get("headers") {
        check_headers(&format!("{field}.headers"), headers, 32)?;
    }
    if let Some(body) = call.get("body") {
        FieldKind::String { max_len: max_body }.check(&format!("{field}.body"), body)?;
    }
    if let Some(limit) = call.get("max_bytes") {
        let max = i64::try_from(max_body).unwrap_or(i64::MAX);
        FieldKind::Integer { min: 1, max }.check(&format!("{field}.max_bytes"), limit)?;
    }
    Ok(())
}

fn check_files(name: &str, value: &Value, max_files: usize, max_path: usize) -> Result<(), String> {
    let Some(entries) = value.as_array() else {
        return Err(format!(
            "field `{name}` must be an array of {{path, content}} objects, got {}",
            type_of(value)
        ));
    };
    if entries.len() > max_files {
        return Err(format!(
            "field `{name}` has {} entries; the limit is {max_files}",
            entries.len()
        ));
    }
    for (i, entry) in entries.iter().enumerate() {
        let Some(object) = entry.as_object() else {
            return Err(format!(
                "`{name}[{i}]` must be an object with `path` and `content`, got {}",
                type_of(entry)
            ));
        };
        only_keys(
            &format!("`{name}[{i}]`"),
            object,
            &["path", "content", "encoding"],
        )?;
        match object.get("path").and_then(Value::as_str) {
            Some(path) if !path.is_empty() && path.len() <= max_path => {}
            Some(_) => return Err(format!("`{name}[{i}].path` must be 1 to {max_path} bytes")),
            None => return Err(format!("`{name}[{i}].path` must be a string")),
        }
        if !object.get("content").is_some_and(Value::is_string) {
            return Err(format!("`{name}[{i}].content` must be a string"));
        }
        match object.get("encoding") {
            None => {}
            Some(Value::String(e)) if FILE_ENCODINGS.contains(&e.as_str()) => {}
            Some(_) => {
                return Err(format!(
                    "`{name}[{i}].encoding` must be \"text\" or \"base64\""
                ));
            }
        }
    }
    Ok(())
}

/// Refuses an object with a key outside `keys`, naming it (printable, at most 64 characters).
fn only_keys(what: &str, object: &Map<String, Value>, keys: &[&str]) -> Result<(), String> {
    match object.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(key) => {
            let shown: String = key.chars().filter(|c| !c.is_control()).take(64).collect();
            Err(format!(
                "{what} has an unknown key `{shown}`; the keys are {}",
                keys.join(", ")
            ))
        }
        None => Ok(()),
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_match_the_schema() {
        let flag = FieldKind::Boolean;
        assert!(flag.check("billing", &json!(true)).is_ok());
        assert!(
            flag.check("billing", &json!("yes"))
                .unwrap_err()
                .contains("a string")
        );
        let text = FieldKind::String { max_len: 3 };
        assert!(text.check("s", &json!("abc")).is_ok());
        assert!(
            text.check("s", &json!("abcd"))
                .unwrap_err()
                .contains("limit is 3")
        );
        assert!(text.check("s", &json!(1)).is_err());
        let int = FieldKind::Integer { min: 1, max: 300 };
        assert!(int.check("t", &json!(300)).is_ok());
        assert!(int.check("t", &json!(301)).is_err());
        assert!(int.check("t", &json!(1.5)).unwrap_err().contains("integer"));
        assert_eq!(int.schema("d")["maximum"], json!(300));
    }

    #[test]
    fn files_are_checked_entry_by_entry() {
        let files = FieldKind::Files {
            max_files: 2,
            max_path: 8,
        };
        let ok = json!([{"path": "a.txt", "content": "x"}, {"path": "b", "content": "eA==", "encoding": "base64"}]);
        assert!(files.check("files", &ok).is_ok());
        for (bad, expected) in [
            (json!({"a": "b"}), "must be an array"),
            (json!([1]), "must be an object"),
            (json!([{"path": "a"}]), "content` must be a string"),
            (json!([{"content": "a"}]), "path` must be a string"),
            (json!([{"path": "", "content": "a"}]), "1 to 8 bytes"),
            (
                json!([{"path": "123456789", "content": "a"}]),
                "1 to 8 bytes",
            ),
            (
                json!([{"path": "a", "content": "a", "mode": 7}]),
                "unknown key `mode`",
            ),
            (
                json!([{"path": "a", "content": "a", "encoding": "hex"}]),
                "encoding",
            ),
            (
                json!([{"path": "a", "content": "1"}, {"path": "b", "content": "2"}, {"path": "c", "content": "3"}]),
                "limit is 2",
            ),
        ] {
            let err = files.check("files", &bad).unwrap_err();
            assert!(err.contains(expected), "{bad}: {err}");
        }
        assert_eq!(files.schema("d")["maxItems"], json!(2));
    }

    #[test]
    fn names_are_printable_and_bounded() {
        let name = FieldKind::Name { max_len: 4 };
        assert!(name.check("session_id", &json!("abcd")).is_ok());
        assert!(
            name.check("session_id", &json!(""))
                .unwrap_err()
                .contains("1 to 4")
        );
        assert!(
            name.check("session_id", &json!("abcde"))
                .unwrap_err()
                .contains("1 to 4")
        );
        assert!(
            name.check("session_id", &json!("a\u{1}"))
                .unwrap_err()
                .contains("control")
        );
        assert!(
            name.check("session_id", &json!(3))
                .unwrap_err()
                .contains("a number")
        );
        assert_eq!(
            name.schema("d")["pattern"],
            json!("^[^\\u0000-\\u001f\\u007f-\\u009f]+$")
        );
    }
}
