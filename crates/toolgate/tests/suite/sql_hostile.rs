//! `sql` answers at their limits, on the suite's PostgreSQL: JSON nested 10^6 deep (which
//! PostgreSQL refuses) and 10^4 deep (which it keeps, past serde_json's 128 levels), and a row at
//! and one byte over the 1 MiB cap of values. Each is a clean answer, and the server goes on.

use serde_json::{Value, json};

use crate::common::*;

fn postgres_url() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it")
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn sql(f: &Fixture, tool: &str, statement: &str) -> Value {
    f.call(&f.alice, tool, json!({"database": "PG", "sql": statement}))
        .await
}

#[tokio::test]
async fn postgres_json_nested_deep_and_rows_at_the_byte_cap_get_clean_answers() {
    let f = fixture_with(&["--egress-allow-private", "127.0.0.1/32"]).await;
    f.write(json!({"secret_set": {"name": "PG", "value": postgres_url()}}))
        .await;
    let deep = |depth: usize, kind: &str| {
        format!("SELECT (repeat('[', {depth}) || repeat(']', {depth}))::{kind} AS j")
    };
    let refused = sql(&f, "svc_read", &deep(1_000_000, "json")).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text(&refused).contains("stack depth"), "{refused}");
    // 10,000 levels come back as their text, read in the binary format (a read) and the text
    // format (a write's script)
    let expected = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for tool in ["svc_read", "svc_write"] {
        for kind in ["json", "jsonb"] {
            let kept = sql(&f, tool, &deep(10_000, kind)).await;
            assert_eq!(kept["isError"], false, "{tool} {kind}: {}", text(&kept));
            assert_eq!(
                kept["structuredContent"]["sql"]["rows"][0][0],
                Value::String(expected.clone()),
                "{tool} {kind}"
            );
        }
    }
    // a value is counted as JSON writes it: its characters and two quotes
    let cap = 1024 * 1024;
    let exactly = sql(
        &f,
        "svc_read",
        &format!("SELECT repeat('x', {}) AS v", cap - 2),
    )
    .await;
    assert_eq!(
        exactly["structuredContent"]["sql"]["row_count"],
        1,
        "{}",
        text(&exactly)
    );
    assert_eq!(exactly["structuredContent"]["sql"]["truncated"], false);
    for over in [cap - 1, 8 * cap] {
        let left_out = sql(&f, "svc_read", &format!("SELECT repeat('x', {over}) AS v")).await;
        assert_eq!(left_out["isError"], false, "{}", text(&left_out));
        assert_eq!(left_out["structuredContent"]["sql"]["row_count"], 0);
        assert_eq!(left_out["structuredContent"]["sql"]["truncated"], true);
        assert!(text(&left_out).contains("the first row alone holds more than 1 MiB"));
        assert!(
            text(&left_out).len() < 1000,
            "{} bytes",
            text(&left_out).len()
        );
    }
    let one = sql(&f, "svc_read", "SELECT 1 AS one").await;
    assert_eq!(one["structuredContent"]["sql"]["rows"], json!([[1]]));
}
