//! `params` of `sql`: values bound to the statement's placeholders by the database server, so
//! that code never builds SQL text out of data.

use serde_json::{Value, json};
use toolgate_ports::database::DbParam;

/// Values bound at most.
const MAX_PARAMS: usize = 1000;
/// Bytes of text in all of them at most (as a statement).
const MAX_PARAM_BYTES: usize = 1024 * 1024;

/// The field's JSON Schema.
pub(super) fn schema(description: &str) -> Value {
    json!({"type": "array", "maxItems": MAX_PARAMS, "description": description,
           "items": {"type": ["null", "boolean", "number", "string"]}})
}

/// Refuses anything but a list of at most [`MAX_PARAMS`] nulls, booleans, numbers (whole ones
/// within 64 bits) and strings, of at most [`MAX_PARAM_BYTES`] of text.
pub(super) fn check(field: &str, value: &Value) -> Result<(), String> {
    let Some(items) = value.as_array() else {
        return Err(format!(
            "field `{field}` must be a list of values for the statement's placeholders"
        ));
    };
    if items.len() > MAX_PARAMS {
        return Err(format!(
            "field `{field}` has {} values; the limit is {MAX_PARAMS}",
            items.len()
        ));
    }
    let mut bytes = 0;
    for (n, item) in items.iter().enumerate() {
        match item {
            Value::Null | Value::Bool(_) => {}
            Value::Number(number) if number.is_i64() || number.is_f64() => {}
            Value::Number(_) => {
                return Err(format!(
                    "`{field}[{n}]` is a whole number beyond 64 bits; pass it as a string"
                ));
            }
            Value::String(text) => bytes += text.len(),
            Value::Array(_) | Value::Object(_) => {
                return Err(format!(
                    "`{field}[{n}]` must be null, a boolean, a number or a string (pass JSON as \
                     a string)"
                ));
            }
        }
    }
    if bytes > MAX_PARAM_BYTES {
        return Err(format!(
            "`{field}` holds {bytes} bytes of text; the limit is {MAX_PARAM_BYTES}"
        ));
    }
    Ok(())
}

/// The values of a checked `params`, in order.
pub(super) fn of(args: &serde_json::Map<String, Value>) -> Vec<DbParam> {
    let Some(Value::Array(items)) = args.get("params") else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| match item {
            Value::Bool(b) => DbParam::Bool(*b),
            Value::Number(n) => n.as_i64().map_or_else(
                || DbParam::Float(n.as_f64().unwrap_or_default()),
                DbParam::Int,
            ),
            Value::String(text) => DbParam::Text(text.clone()),
            Value::Null | Value::Array(_) | Value::Object(_) => DbParam::Null,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn params_are_scalars_bound_in_order_and_anything_else_is_refused() {
        let good = json!([null, true, 7, -1.5, "x'; DROP TABLE t; --"]);
        check("params", &good).unwrap();
        let args = json!({"params": good});
        assert_eq!(
            of(args.as_object().unwrap()),
            vec![
                DbParam::Null,
                DbParam::Bool(true),
                DbParam::Int(7),
                DbParam::Float(-1.5),
                DbParam::Text("x'; DROP TABLE t; --".into()),
            ]
        );
        for bad in [
            json!("1"),
            json!({"a": 1}),
            json!([[1]]),
            json!([{"a": 1}]),
            json!([u64::MAX]),
            json!(vec![0; MAX_PARAMS + 1]),
            json!(["x".repeat(MAX_PARAM_BYTES + 1)]),
        ] {
            assert!(check("params", &bad).is_err(), "{bad}");
        }
    }
}
