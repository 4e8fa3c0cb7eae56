//! The typed answers of the upcalls that reach the web and databases: an HTTP answer and a
//! statement's table. Plain data, as the rest of the seam; a cell of a table is a
//! [`SqlValue`], not a JSON value, so that what crosses the seam says what it can hold.

use serde::{Deserialize, Serialize};

/// What a page or an HTTP request answered, as the service's fetcher read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpAnswer {
    /// The final answer's status (a 404 is an answer, not an error).
    pub status: u16,
    /// The URL after redirects.
    pub url: String,
    /// Its `Content-Type`, or empty.
    pub content_type: String,
    /// How `text` was made: `markdown` (from HTML), `json` (pretty-printed), `text`, `image`
    /// (`text` is the image's base64) or `binary` (`text` summarises the bytes).
    pub format: String,
    /// The body as the tool renders it.
    pub text: String,
    /// Body bytes read (decompressed).
    pub bytes: u64,
    /// The body was longer than the bytes asked for and was cut.
    pub truncated: bool,
    /// The answer's headers, name (lower case) and value, in the order they came.
    pub headers: Vec<(String, String)>,
}

/// What a statement returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlAnswer {
    /// `postgres` or `mysql`.
    pub database: String,
    /// The columns of the last statement that returned rows.
    pub columns: Vec<SqlColumn>,
    /// The rows, each as long as `columns`.
    pub rows: Vec<Vec<SqlValue>>,
    /// How many rows came back.
    pub row_count: u64,
    /// Rows were left out (by `max_rows` or the size limit).
    pub truncated: bool,
    /// Rows the statements inserted, updated or deleted.
    pub changes: u64,
}

/// A result column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlColumn {
    /// Its name.
    pub name: String,
    /// The database's name of its type.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// One value of a row, written on the wire as the JSON value it is: the database seam gives
/// numbers and booleans as such, exact numerics, dates and binary (base64) as text, and JSON
/// columns as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "serde_json::Value", into = "serde_json::Value")]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A whole number that fits in 64 bits, signed.
    Integer(i64),
    /// A whole number above `i64::MAX`.
    Unsigned(u64),
    /// Any other number.
    Float(f64),
    /// Text.
    Text(String),
    /// A JSON array or object (a `json` column), as its text: the seam never reads it, it
    /// hands it on whole, as [`crate::upcall::JsonSchema`] does with a schema.
    Json(String),
}

impl SqlValue {
    /// The value of one cell as the database seam gives it.
    pub fn of(value: &serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => n
                .as_i64()
                .map(Self::Integer)
                .or_else(|| n.as_u64().map(Self::Unsigned))
                .unwrap_or_else(|| Self::Float(n.as_f64().unwrap_or_default())),
            Value::String(text) => Self::Text(text.clone()),
            Value::Array(_) | Value::Object(_) => Self::Json(value.to_string()),
        }
    }
}

impl From<serde_json::Value> for SqlValue {
    fn from(value: serde_json::Value) -> Self {
        Self::of(&value)
    }
}

impl From<SqlValue> for serde_json::Value {
    fn from(value: SqlValue) -> Self {
        match value {
            SqlValue::Null => Self::Null,
            SqlValue::Bool(b) => Self::Bool(b),
            SqlValue::Integer(n) => Self::from(n),
            SqlValue::Unsigned(n) => Self::from(n),
            // a float that is not finite has no JSON form: null, as serde_json writes it
            SqlValue::Float(x) => serde_json::Number::from_f64(x).map_or(Self::Null, Self::Number),
            SqlValue::Text(text) => Self::String(text),
            // made from a parsed value; null should the text ever not parse
            SqlValue::Json(text) => serde_json::from_str(&text).unwrap_or(Self::Null),
        }
    }
}
