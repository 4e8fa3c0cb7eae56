//! A statement's answer as the caller reads it: a Markdown table for the eye, typed rows in
//! `structuredContent` for code.

use std::fmt::Write as _;

use serde_json::{Value, json};
use toolgate_vault::Redactor;

use crate::capability::{ContentItem, Output, TypedOutput};
use toolgate_ports::database::Table;

/// `postgres`, `mysql` for a connection string of theirs; `None` for anything else.
pub(super) fn kind_of(connection: &str) -> Option<&'static str> {
    let scheme = connection.split_once("://")?.0.to_ascii_lowercase();
    match scheme.as_str() {
        "postgres" | "postgresql" => Some("postgres"),
        "mysql" | "mariadb" => Some("mysql"),
        _ => None,
    }
}

pub(super) fn output_schema() -> Value {
    json!({"type": "object", "properties": {
        "database": {"type": "string", "enum": ["postgres", "mysql", "sqlite"]},
        "columns": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "type": {"type": "string"}},
            "required": ["name", "type"]}},
        "rows": {"type": "array", "items": {"type": "array"}},
        "row_count": {"type": "integer"},
        "truncated": {"type": "boolean"},
        "changes": {"type": "integer"}},
        "required": ["database", "columns", "rows", "row_count", "truncated", "changes"]})
}

/// The answer: the table as Markdown (or what the statement changed), and the typed rows.
pub(super) fn output(owned: Table, database: &'static str, write: bool) -> Output {
    let table = &owned;
    let mut text = String::new();
    if !table.columns.is_empty() {
        markdown(table, &mut text);
    }
    let count = table.rows.len();
    let rows_word = if count == 1 { "row" } else { "rows" };
    if table.truncated && count == 0 && !table.columns.is_empty() {
        text.push_str(
            "\n(no rows shown: the first row alone holds more than 1 MiB of values; select \
             fewer or shorter columns)",
        );
    } else if table.truncated {
        let _ = write!(
            text,
            "\n(the first {count} {rows_word}; more were left out: raise max_rows, or narrow \
             the statement)"
        );
    } else if !table.columns.is_empty() {
        let _ = write!(text, "\n({count} {rows_word})");
    }
    if write || table.columns.is_empty() {
        let changes = table.changes;
        let noun = if changes == 1 { "row" } else { "rows" };
        let _ = write!(text, "\n{changes} {noun} changed.");
    }
    let columns: Vec<Value> = table
        .columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_name}))
        .collect();
    Output {
        content: vec![ContentItem::Text(text.trim_start().to_owned())],
        structured: json!({
            "database": database, "columns": columns, "rows": table.rows, "row_count": count,
            "truncated": table.truncated, "changes": table.changes,
        }),
        is_error: false,
        typed: Some(TypedOutput::Table(database, owned)),
        ..Output::default()
    }
}

fn markdown(table: &Table, text: &mut String) {
    text.push('|');
    for column in &table.columns {
        let _ = write!(
            text,
            " {} |",
            cell_text(&Value::String(column.name.clone()))
        );
    }
    text.push_str("\n|");
    for _ in &table.columns {
        text.push_str(" --- |");
    }
    for row in &table.rows {
        text.push_str("\n|");
        for value in row {
            let _ = write!(text, " {} |", cell_text(value));
        }
    }
    text.push('\n');
}

/// One value as a Markdown cell: `|` escaped, line breaks as `<br>`, NULL spelled out.
fn cell_text(value: &Value) -> String {
    let raw = match value {
        Value::Null => return "NULL".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    raw.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace(['\n', '\r'], "<br>")
}

/// Replaces every secret value in the table's text.
pub(super) fn redact(table: &mut Table, redactor: &Redactor) {
    if redactor.is_empty() {
        return;
    }
    for value in table.rows.iter_mut().flatten() {
        if let Value::String(text) = value {
            redactor.redact_in_place(text);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use toolgate_ports::database::Column;

    fn table(rows: Vec<Vec<Value>>, truncated: bool) -> Table {
        Table {
            columns: vec![
                Column {
                    name: "id".into(),
                    type_name: "int4".into(),
                },
                Column {
                    name: "note".into(),
                    type_name: "text".into(),
                },
            ],
            rows,
            truncated,
            changes: 0,
        }
    }

    #[test]
    fn rows_become_a_markdown_table_that_cannot_be_broken_by_a_value() {
        let out = output(
            table(
                vec![
                    vec![json!(1), json!("a | b\nc")],
                    vec![json!(2), Value::Null],
                ],
                false,
            ),
            "postgres",
            false,
        );
        let ContentItem::Text(text) = &out.content[0] else {
            panic!("not text")
        };
        assert_eq!(
            text,
            "| id | note |\n| --- | --- |\n| 1 | a \\| b<br>c |\n| 2 | NULL |\n\n(2 rows)"
        );
        assert_eq!(out.structured["rows"][1], json!([2, null]));
        assert_eq!(
            out.structured["columns"][0],
            json!({"name": "id", "type": "int4"})
        );
        assert_eq!(out.structured["row_count"], 2);
    }

    #[test]
    fn a_cut_table_and_a_write_say_so() {
        let out = output(
            table(vec![vec![json!(1), json!("x")]], true),
            "sqlite",
            false,
        );
        let ContentItem::Text(text) = &out.content[0] else {
            panic!("not text")
        };
        assert!(text.ends_with("more were left out: raise max_rows, or narrow the statement)"));
        let write = Table {
            changes: 3,
            ..Table::default()
        };
        let out = output(write, "mysql", true);
        assert_eq!(
            out.content,
            vec![ContentItem::Text("3 rows changed.".into())]
        );
    }

    #[test]
    fn connection_strings_are_told_apart_by_their_scheme() {
        assert_eq!(kind_of("postgres://u:p@h/db"), Some("postgres"));
        assert_eq!(kind_of("PostgreSQL://h"), Some("postgres"));
        assert_eq!(kind_of("mysql://h/db"), Some("mysql"));
        assert_eq!(kind_of("redis://h"), None);
        assert_eq!(kind_of("just text"), None);
    }
}
