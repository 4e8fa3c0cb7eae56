//! Field types: the JSON Schema that `tools/list` shows and the check that enforces it, from one
//! definition so that they cannot disagree.

use serde_json::{Value, json};

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
}

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
        }
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
}
