//! Redaction where a call finishes: structured output of any depth is walked without recursion;
//! a capability that opened a secret and shows it is redacted by the call, not by itself.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use toolgate_domain::SecretName;
use toolgate_vault::Redactor;

use super::redact_value;

/// `[` nested `depth` deep around `inner`, built without recursion.
fn nested(depth: usize, inner: Value) -> Value {
    (0..depth).fold(inner, |value, _| Value::Array(vec![value]))
}

/// Takes `value` apart without recursion (serde_json's own drop recurses).
fn dismantle(value: Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(fields) => pending.extend(fields.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn a_value_nested_a_million_deep_is_redacted_without_recursion() {
    let name = SecretName::parse("TOKEN").unwrap();
    let redactor = Redactor::new([(&name, "hunter2-secret".as_bytes())]);
    // built by hand: json! would copy the value through serde, recursively
    let mut fields = serde_json::Map::new();
    fields.insert(
        "deep".into(),
        nested(1_000_000, json!("the hunter2-secret")),
    );
    let mut value = Value::Object(fields);
    redact_value(&mut value, &redactor);
    let mut bottom = &value["deep"];
    while let Value::Array(items) = bottom {
        bottom = &items[0];
    }
    assert_eq!(bottom, "the [REDACTED:TOKEN]");
    dismantle(value);
}
