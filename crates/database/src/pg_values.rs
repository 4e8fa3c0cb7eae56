//! PostgreSQL values as JSON, from either wire format: binary (a read's single statement goes
//! through the extended protocol) or text (a write's script through the simple one). Numbers
//! and booleans become JSON numbers and booleans, JSON stays JSON, exact numerics, dates and
//! times are written as PostgreSQL writes them, binary data as base64, and any other type as
//! its text (or, where its binary form is not text, as `\x` and hex).

use base64::Engine;
use serde_json::{Number, Value};
use sqlx::postgres::{PgValueFormat, PgValueRef};
use sqlx::{TypeInfo, ValueRef};

/// The value as JSON.
pub fn json_of(value: PgValueRef<'_>) -> Value {
    if value.is_null() {
        return Value::Null;
    }
    let type_name = value.type_info().name().to_owned();
    let Ok(bytes) = value.as_bytes() else {
        return Value::Null;
    };
    match value.format() {
        PgValueFormat::Text => from_text(&type_name, bytes),
        PgValueFormat::Binary => from_binary(&type_name, bytes).unwrap_or_else(|| fallback(bytes)),
    }
}

fn from_text(type_name: &str, bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    match type_name {
        "BOOL" => Value::Bool(text == "t"),
        "INT2" | "INT4" | "INT8" | "OID" => text
            .parse::<i64>()
            .map_or_else(|_| Value::String(text.into_owned()), Value::from),
        "FLOAT4" | "FLOAT8" => float(text.parse::<f64>().ok(), &text),
        "JSON" | "JSONB" => json_or_text(text.as_bytes()),
        "BYTEA" => Value::String(text.into_owned()),
        _ => Value::String(text.into_owned()),
    }
}

fn from_binary(type_name: &str, bytes: &[u8]) -> Option<Value> {
    Some(match type_name {
        "BOOL" => Value::Bool(*bytes.first()? != 0),
        "INT2" => Value::from(i16::from_be_bytes(bytes.try_into().ok()?)),
        "INT4" => Value::from(i32::from_be_bytes(bytes.try_into().ok()?)),
        "INT8" => Value::from(i64::from_be_bytes(bytes.try_into().ok()?)),
        "OID" => Value::from(u32::from_be_bytes(bytes.try_into().ok()?)),
        "FLOAT4" => {
            let v = f32::from_be_bytes(bytes.try_into().ok()?);
            float(Some(f64::from(v)), &v.to_string())
        }
        "FLOAT8" => {
            let v = f64::from_be_bytes(bytes.try_into().ok()?);
            float(Some(v), &v.to_string())
        }
        "NUMERIC" => Value::String(numeric(bytes)?),
        "JSON" => json_or_text(bytes),
        "JSONB" => match bytes.split_first()? {
            (1, rest) => json_or_text(rest),
            _ => return None,
        },
        "BYTEA" => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        "UUID" => Value::String(uuid(bytes)?),
        "DATE" => Value::String(date(i32::from_be_bytes(bytes.try_into().ok()?))?),
        "TIMESTAMP" => Value::String(timestamp(i64::from_be_bytes(bytes.try_into().ok()?), "")?),
        "TIMESTAMPTZ" => Value::String(timestamp(
            i64::from_be_bytes(bytes.try_into().ok()?),
            "+00",
        )?),
        "TIME" => Value::String(clock(i64::from_be_bytes(bytes.try_into().ok()?))),
        _ => return None,
    })
}

/// A `json` value as JSON; one serde_json does not read (nested deeper than its 128 levels, which
/// PostgreSQL allows) as its text, so nothing recursive ever walks it.
fn json_or_text(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A type whose binary form is not known here: its text if it is text (enums, `citext`,
/// `xml`, `name` and many more send their text), else `\x` and hex.
fn fallback(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Value::String(text.to_owned()),
        _ => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            Value::String(format!("\\x{hex}"))
        }
    }
}

fn float(value: Option<f64>, text: &str) -> Value {
    value
        .and_then(Number::from_f64)
        .map_or_else(|| Value::String(text.to_owned()), Value::Number)
}

/// NUMERIC's binary form (base-10000 digits, a weight, a sign, a display scale) as its text.
fn numeric(bytes: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> {
        Some(u16::from_be_bytes(
            bytes.get(2 * i..2 * i + 2)?.try_into().ok()?,
        ))
    };
    let (ndigits, weight) = (usize::from(word(0)?), i32::from(word(1)? as i16));
    let (sign, scale) = (word(2)?, usize::from(word(3)?));
    match sign {
        0xC000 => return Some("NaN".to_owned()),
        0xD000 => return Some("Infinity".to_owned()),
        0xF000 => return Some("-Infinity".to_owned()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| word(4 + i)).collect::<Option<_>>()?;
    // the digit group of 10000^power, zero where none is sent
    let group = |power: i32| -> u16 {
        usize::try_from(weight - power)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        text.push_str(&group(weight).to_string());
        for power in (0..weight).rev() {
            text.push_str(&format!("{:04}", group(power)));
        }
    }
    if scale > 0 {
        let mut fraction = String::new();
        let mut power = -1;
        while fraction.len() < scale {
            fraction.push_str(&format!("{:04}", group(power)));
            power -= 1;
        }
        fraction.truncate(scale);
        text.push('.');
        text.push_str(&fraction);
    }
    Some(text)
}

fn uuid(bytes: &[u8]) -> Option<String> {
    if bytes.len() != 16 {
        return None;
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// Julian day number of 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_JULIAN: i64 = 2_451_545;
const MICROS_PER_DAY: i64 = 86_400_000_000;

fn date(days: i32) -> Option<String> {
    match days {
        i32::MAX => return Some("infinity".to_owned()),
        i32::MIN => return Some("-infinity".to_owned()),
        _ => {}
    }
    let julian = i32::try_from(PG_EPOCH_JULIAN + i64::from(days)).ok()?;
    let d = time::Date::from_julian_day(julian).ok()?;
    Some(format!(
        "{:04}-{:02}-{:02}",
        d.year(),
        u8::from(d.month()),
        d.day()
    ))
}

fn timestamp(micros: i64, zone: &str) -> Option<String> {
    match micros {
        i64::MAX => return Some("infinity".to_owned()),
        i64::MIN => return Some("-infinity".to_owned()),
        _ => {}
    }
    let days = micros.div_euclid(MICROS_PER_DAY);
    let day = date(i32::try_from(days).ok()?)?;
    Some(format!(
        "{day} {}{zone}",
        clock(micros.rem_euclid(MICROS_PER_DAY))
    ))
}

/// Microseconds since midnight as `HH:MM:SS[.ffffff]`, trailing zeros of the fraction dropped.
fn clock(micros: i64) -> String {
    let seconds = micros / 1_000_000;
    let mut text = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    let fraction = micros % 1_000_000;
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, scale: u16, digits: &[u16]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for word in [digits.len() as u16, weight as u16, sign, scale]
            .into_iter()
            .chain(digits.iter().copied())
        {
            bytes.extend(word.to_be_bytes());
        }
        bytes
    }

    #[test]
    fn numerics_are_written_exactly() {
        let n = |w, s, sc, d: &[u16]| numeric(&numeric_bytes(w, s, sc, d));
        assert_eq!(n(0, 0, 0, &[]).as_deref(), Some("0"));
        assert_eq!(n(1, 0, 2, &[12, 3456, 7800]).as_deref(), Some("123456.78"));
        assert_eq!(n(-1, 0x4000, 5, &[5]).as_deref(), Some("-0.00050"));
        assert_eq!(n(-2, 0, 6, &[1200]).as_deref(), Some("0.000012"));
        assert_eq!(n(-2, 0, 8, &[12]).as_deref(), Some("0.00000012"));
        assert_eq!(n(2, 0, 0, &[1]).as_deref(), Some("100000000"));
        assert_eq!(n(0, 0xC000, 0, &[]).as_deref(), Some("NaN"));
        assert_eq!(numeric(&[0, 5]), None);
    }

    #[test]
    fn dates_and_times_are_written_as_postgres_writes_them() {
        assert_eq!(date(0).as_deref(), Some("2000-01-01"));
        assert_eq!(date(-1).as_deref(), Some("1999-12-31"));
        assert_eq!(
            timestamp(86_400_000_000 + 3_723_500_000, "+00").as_deref(),
            Some("2000-01-02 01:02:03.5+00")
        );
        assert_eq!(
            timestamp(-1, "").as_deref(),
            Some("1999-12-31 23:59:59.999999")
        );
        assert_eq!(clock(0), "00:00:00");
        assert_eq!(
            uuid(&[0xab; 16]).as_deref(),
            Some("abababab-abab-abab-abab-abababababab")
        );
    }

    #[test]
    fn unknown_binary_forms_fall_back_to_text_or_hex() {
        assert_eq!(fallback(b"happy"), Value::String("happy".into()));
        assert_eq!(fallback(&[0, 255]), Value::String("\\x00ff".into()));
        assert_eq!(from_text("BOOL", b"t"), Value::Bool(true));
        assert_eq!(from_text("INT8", b"-42"), Value::from(-42));
        assert_eq!(from_text("FLOAT8", b"NaN"), Value::String("NaN".into()));
        assert_eq!(
            from_text("JSONB", br#"{"a": 1}"#),
            serde_json::json!({"a": 1})
        );
    }
}

#[cfg(test)]
#[path = "pg_values_hostile_tests.rs"]
mod hostile_tests;
