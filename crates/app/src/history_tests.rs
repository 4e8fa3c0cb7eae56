#![allow(clippy::unwrap_used)]

use serde_json::json;
use toolgate_domain::SecretName;
use toolgate_vault::Redactor;

use super::{CUT_BYTES, SECRET_VALUE, fields_text, host_of};
use crate::capability::JsonObject;

fn object(value: serde_json::Value) -> Option<JsonObject> {
    value.as_object().cloned()
}

#[test]
fn secret_set_value_is_always_replaced() {
    let args = object(json!({"secret_set": {"name": "TOKEN", "value": "hunter2-secret"}}));
    let text = fields_text(args, None);
    assert!(!text.contains("hunter2-secret"), "{text}");
    assert!(text.contains(SECRET_VALUE));
    assert!(text.contains("TOKEN"), "the name is kept: {text}");
}

#[test]
fn opened_values_are_redacted_and_placeholders_kept() {
    let name = SecretName::parse("API_KEY").unwrap();
    let redactor = Redactor::new([(&name, b"sk-live-0123456789".as_slice())]);
    let args = object(json!({
        "code": "key = 'sk-live-0123456789'",
        "http": {"headers": {"auth": "{{secret:API_KEY}}"}},
    }));
    let text = fields_text(args, Some(&redactor));
    assert!(!text.contains("sk-live-0123456789"), "{text}");
    assert!(text.contains("{{secret:API_KEY}}"), "{text}");
}

#[test]
fn long_strings_are_cut_with_a_marker() {
    let code = "é".repeat(CUT_BYTES);
    let text = fields_text(
        object(json!({"code": code, "nested": [{"body": "x".repeat(5000)}]})),
        None,
    );
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cut = value["code"].as_str().unwrap();
    assert!(
        cut.ends_with(&format!("…[cut: {} bytes]", CUT_BYTES * 2)),
        "{cut}"
    );
    assert!(cut.len() < CUT_BYTES + 40);
    assert!(
        value["nested"][0]["body"]
            .as_str()
            .unwrap()
            .contains("[cut: 5000 bytes]")
    );
}

#[test]
fn hosts_of_urls() {
    assert_eq!(
        host_of("https://User@Example.org:8443/x?y").as_deref(),
        Some("example.org:8443")
    );
    assert_eq!(
        host_of("http://example.com").as_deref(),
        Some("example.com")
    );
    assert_eq!(host_of("example.com/x"), None);
}
