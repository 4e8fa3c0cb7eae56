//! MySQL values as JSON, from either wire format, through sqlx's own decoders (its raw bytes
//! are not public): integers and floats as JSON numbers, `JSON` as JSON, `DECIMAL` as an exact
//! decimal string, dates and times as MySQL writes them, binary strings as their text when it
//! is UTF-8, else as base64.

use base64::Engine;
use serde_json::{Number, Value};
use sqlx::mysql::MySqlRow;
use sqlx::mysql::types::MySqlTime;
use sqlx::{Row, TypeInfo, ValueRef};

/// Column `i` of `row` as JSON.
pub fn json_of(row: &MySqlRow, i: usize) -> Value {
    let Ok(raw) = row.try_get_raw(i) else {
        return Value::Null;
    };
    if raw.is_null() {
        return Value::Null;
    }
    let type_name = raw.type_info().name().to_owned();
    typed(row, i, &type_name).unwrap_or_else(|| fallback(row, i))
}

fn typed(row: &MySqlRow, i: usize, type_name: &str) -> Option<Value> {
    let get_i64 = || row.try_get_unchecked::<i64, _>(i).ok();
    Some(match type_name {
        "BOOLEAN" => match get_i64()? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            n => Value::from(n),
        },
        name if name.ends_with("UNSIGNED") => Value::from(row.try_get_unchecked::<u64, _>(i).ok()?),
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "YEAR" => Value::from(get_i64()?),
        "FLOAT" => float(f64::from(row.try_get_unchecked::<f32, _>(i).ok()?)),
        "DOUBLE" => float(row.try_get_unchecked::<f64, _>(i).ok()?),
        "JSON" => serde_json::from_str(&row.try_get_unchecked::<String, _>(i).ok()?).ok()?,
        "DATE" => Value::String(date(row.try_get_unchecked::<time::Date, _>(i).ok()?)),
        "DATETIME" | "TIMESTAMP" => {
            let at = row
                .try_get_unchecked::<time::PrimitiveDateTime, _>(i)
                .ok()?;
            Value::String(format!("{} {}", date(at.date()), clock(at.time())))
        }
        "TIME" => Value::String(row.try_get_unchecked::<MySqlTime, _>(i).ok()?.to_string()),
        "BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" | "BIT"
        | "GEOMETRY" => bytes(row.try_get_unchecked::<Vec<u8>, _>(i).ok()?),
        _ => Value::String(row.try_get_unchecked::<String, _>(i).ok()?),
    })
}

/// Anything the types above did not read: its text, else its bytes in base64.
fn fallback(row: &MySqlRow, i: usize) -> Value {
    match row.try_get_unchecked::<String, _>(i) {
        Ok(text) => Value::String(text),
        Err(_) => row
            .try_get_unchecked::<Vec<u8>, _>(i)
            .map_or(Value::Null, bytes),
    }
}

/// A binary string: its text when it is UTF-8 without NUL (MariaDB sends `JSON` and some text
/// columns as blobs), else base64.
fn bytes(bytes: Vec<u8>) -> Value {
    match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Value::String(text),
        Ok(text) => base64(text.as_bytes()),
        Err(e) => base64(e.as_bytes()),
    }
}

fn base64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn float(value: f64) -> Value {
    Number::from_f64(value).map_or_else(|| Value::String(value.to_string()), Value::Number)
}

fn date(d: time::Date) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// `HH:MM:SS[.ffffff]`, trailing zeros of the fraction dropped.
fn clock(t: time::Time) -> String {
    let mut text = format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second());
    if t.microsecond() != 0 {
        let digits = format!("{:06}", t.microsecond());
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text
}
