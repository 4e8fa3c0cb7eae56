//! The `table` object a session answers a SQLite statement with, read into the database seam's
//! [`Table`], so that both kinds of database render alike.

use serde_json::Value;
use toolgate_ports::database::{Column, Table};

/// Reads the `table` object a session answers a SQLite statement with (`{columns: [{name,
/// type}], rows, truncated, changes}`); `None` if it is not one.
pub(super) fn table_from_session(value: Value) -> Option<Table> {
    let Value::Object(mut table) = value else {
        return None;
    };
    let columns = table
        .remove("columns")?
        .as_array()?
        .iter()
        .map(|c| {
            Some(Column {
                name: c.get("name")?.as_str()?.to_owned(),
                type_name: c.get("type")?.as_str()?.to_owned(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let Value::Array(rows) = table.remove("rows")? else {
        return None;
    };
    let rows = rows
        .into_iter()
        .map(|row| match row {
            Value::Array(values) if values.len() == columns.len() => Some(values),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Table {
        columns,
        rows,
        truncated: table.get("truncated")?.as_bool()?,
        changes: table.get("changes")?.as_u64()?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sessions_table_is_read_and_a_malformed_one_refused() {
        let good = json!({"columns": [{"name": "n", "type": "integer"}], "rows": [[1], [2]],
                          "truncated": true, "changes": 0});
        let table = table_from_session(good).unwrap();
        assert_eq!(table.columns[0].type_name, "integer");
        assert_eq!(table.rows, vec![vec![json!(1)], vec![json!(2)]]);
        assert!(table.truncated);
        for bad in [
            json!([]),
            json!({"columns": [{"name": "n"}], "rows": [], "truncated": false, "changes": 0}),
            json!({"columns": [{"name": "n", "type": "t"}], "rows": [[1, 2]], "truncated": false,
                   "changes": 0}),
            json!({"columns": [], "rows": [], "truncated": false, "changes": -1}),
        ] {
            assert!(table_from_session(bad.clone()).is_none(), "{bad}");
        }
    }
}
