#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::json;
use toolgate_domain::{OperatorLoan, Usage};

use super::*;

/// `value` written as JSON and read back.
fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
}

fn llm_answer() -> LlmAnswer {
    LlmAnswer {
        text: "Hello!".into(),
        model: "gpt-4o-mini-2024-07-18".into(),
        provider: "openai".into(),
        finish_reason: "stop".into(),
        usage: Usage {
            input_tokens: 9,
            output_tokens: 3,
        },
        latency_ms: 412.125,
        attempts: 1,
        operator_key: Some(OperatorLoan {
            max_tokens: 1024,
            capped: true,
            tokens_today: 12,
            tokens_per_day: 100_000,
        }),
    }
}

/// Every request and answer crosses a wire unchanged: what one host writes, another reads
/// back as the same value.
#[test]
fn requests_and_answers_round_trip_through_serde() {
    let schema =
        JsonSchema::parse(r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#).unwrap();
    let requests = [
        Upcall::Billing {},
        Upcall::InvokeLlm {
            model: "openai/gpt-4o-mini".into(),
            prompt: "Say hello".into(),
            system: Some("Be brief".into()),
            max_tokens: Some(50),
            temperature: Some(0.25),
            response_format: Some(ResponseFormat::Schema(schema)),
            api_key_secret: Some("MY_KEY".into()),
            stream: true,
        },
        Upcall::InvokeLlm {
            model: "anthropic/claude".into(),
            prompt: "{}".into(),
            system: None,
            max_tokens: None,
            temperature: None,
            response_format: Some(ResponseFormat::Json),
            api_key_secret: None,
            stream: false,
        },
        Upcall::WebSearch {
            query: "rust".into(),
            max_results: Some(3),
        },
    ];
    for request in requests {
        assert_eq!(round_trip(&request), request);
    }
    let answers = [
        UpcallAnswer::Value(UpcallValue::Llm(llm_answer())),
        UpcallAnswer::Value(UpcallValue::Llm(LlmAnswer {
            operator_key: None,
            ..llm_answer()
        })),
        UpcallAnswer::Value(UpcallValue::WebSearch(vec![
            SearchResult {
                title: "Tokio".into(),
                url: "https://tokio.rs/".into(),
                snippet: "An asynchronous runtime".into(),
                date: Some("2026-01-02".into()),
            },
            SearchResult {
                title: "t".into(),
                url: "u".into(),
                snippet: String::new(),
                date: None,
            },
        ])),
        UpcallAnswer::Error(UpcallError::new(UpcallErrorCode::Busy, "later")),
    ];
    for answer in answers {
        assert_eq!(round_trip(&answer), answer);
    }
}

/// The typed values are written with the keys runtime/PROTOCOL.md gives the Python side.
#[test]
fn typed_values_keep_the_protocols_keys() {
    let llm = serde_json::to_value(UpcallValue::Llm(llm_answer())).unwrap();
    assert_eq!(
        llm,
        json!({"llm": {"text": "Hello!", "model": "gpt-4o-mini-2024-07-18", "provider": "openai",
            "finish_reason": "stop", "usage": {"input_tokens": 9, "output_tokens": 3},
            "latency_ms": 412.125, "attempts": 1,
            "operator_key": {"max_tokens": 1024, "capped": true, "tokens_today": 12,
                             "tokens_per_day": 100_000}}})
    );
    let own_key = LlmAnswer {
        operator_key: None,
        ..llm_answer()
    };
    let written = serde_json::to_value(UpcallValue::Llm(own_key)).unwrap();
    assert!(written["llm"].get("operator_key").is_none(), "{written}");
    let results = serde_json::to_value(UpcallValue::WebSearch(vec![SearchResult {
        title: "t".into(),
        url: "u".into(),
        snippet: "s".into(),
        date: None,
    }]))
    .unwrap();
    assert_eq!(
        results,
        json!({"web_search": [{"title": "t", "url": "u", "snippet": "s", "date": null}]})
    );
}

/// `response_format` is `"json"` or a schema object, read as the Python side writes it and
/// written back the same; anything else is refused when the frame is read.
#[test]
fn a_response_format_is_the_word_json_or_a_schema_object() {
    let read = |format: serde_json::Value| {
        serde_json::from_value::<Upcall>(
            json!({"kind": "invoke_llm", "model": "a/b", "prompt": "p", "response_format": format}),
        )
    };
    let Upcall::InvokeLlm {
        response_format, ..
    } = read(json!("json")).unwrap()
    else {
        panic!("not a model call")
    };
    assert_eq!(response_format, Some(ResponseFormat::Json));
    let schema = json!({"type": "object", "required": ["a"], "x-vendor": {"deep": [1, 2.5, null]}});
    let Upcall::InvokeLlm {
        response_format: Some(ResponseFormat::Schema(read_back)),
        ..
    } = read(schema.clone()).unwrap()
    else {
        panic!("no schema")
    };
    // the document is kept whole, keywords the service does not know included
    let kept: serde_json::Value = serde_json::from_str(read_back.as_json()).unwrap();
    assert_eq!(kept, schema);
    assert_eq!(
        serde_json::to_value(ResponseFormat::Schema(read_back)).unwrap(),
        schema
    );
    assert_eq!(
        serde_json::to_value(ResponseFormat::Json).unwrap(),
        json!("json")
    );
    // (null is an absent field, as for every optional one)
    for bad in [json!("yaml"), json!(5), json!(["json"])] {
        assert!(read(bad.clone()).is_err(), "{bad}");
    }
    assert!(JsonSchema::parse("[1]").is_err());
}

fn page() -> HttpAnswer {
    HttpAnswer {
        status: 404,
        url: "https://example.com/missing".into(),
        content_type: "application/json".into(),
        format: "json".into(),
        text: "{\n  \"error\": \"gone\"\n}".into(),
        bytes: 17,
        truncated: false,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("set-cookie".into(), "a=1".into()),
            ("set-cookie".into(), "b=2".into()),
        ],
    }
}

/// The upcalls that reach the web, databases and the vault cross a wire unchanged, and are
/// written with the keys runtime/PROTOCOL.md gives the Python side.
#[test]
fn fetch_http_sql_and_secrets_round_trip_with_the_protocols_keys() {
    let headers = BTreeMap::from([("Authorization".to_owned(), "Bearer {{secret:K}}".to_owned())]);
    let requests = [
        Upcall::Fetch {
            url: "https://example.com/".into(),
            headers: headers.clone(),
            max_bytes: Some(1024),
        },
        Upcall::Fetch {
            url: "https://example.com/".into(),
            headers: BTreeMap::new(),
            max_bytes: None,
        },
        Upcall::Http {
            method: "POST".into(),
            url: "https://example.com/hook".into(),
            headers,
            body: Some("{\"a\": 1}".into()),
            max_bytes: None,
        },
        Upcall::Sql {
            database: "PG_URL".into(),
            query: "select $1, $2".into(),
            params: vec![SqlValue::Float(0.5), SqlValue::Bool(false)],
            write: true,
            max_rows: Some(5),
        },
        Upcall::Secrets {},
    ];
    for request in requests {
        assert_eq!(round_trip(&request), request);
        // the name a log line shows is the one on the wire
        let written = serde_json::to_value(&request).unwrap();
        assert_eq!(written["kind"], request.kind());
    }
    // optional fields left out are not written
    assert_eq!(
        serde_json::to_value(Upcall::Sql {
            database: "PG_URL".into(),
            query: "select 1".into(),
            params: Vec::new(),
            write: false,
            max_rows: None,
        })
        .unwrap(),
        json!({"kind": "sql", "database": "PG_URL", "query": "select 1"})
    );
    assert_eq!(
        serde_json::from_value::<Upcall>(json!({"kind": "secrets"})).unwrap(),
        Upcall::Secrets {}
    );
    let table = SqlAnswer {
        database: "postgres".into(),
        columns: vec![
            SqlColumn {
                name: "id".into(),
                type_name: "int8".into(),
            },
            SqlColumn {
                name: "doc".into(),
                type_name: "jsonb".into(),
            },
        ],
        rows: vec![
            vec![
                SqlValue::Integer(-1),
                SqlValue::Json(r#"{"a":[1,2.5,null]}"#.into()),
            ],
            vec![SqlValue::Unsigned(u64::MAX), SqlValue::Null],
            vec![SqlValue::Float(0.5), SqlValue::Text("x".into())],
            vec![SqlValue::Bool(true), SqlValue::Json("[]".into())],
        ],
        row_count: 4,
        truncated: false,
        changes: 0,
    };
    let answers = [
        UpcallValue::Fetch(page()),
        UpcallValue::Http(page()),
        UpcallValue::Sql(table.clone()),
        UpcallValue::Secrets(vec!["GITHUB_TOKEN".into(), "PG_URL".into()]),
    ];
    for answer in answers {
        assert_eq!(round_trip(&answer), answer);
    }
    assert_eq!(
        serde_json::to_value(UpcallValue::Sql(table)).unwrap(),
        json!({"sql": {"database": "postgres",
            "columns": [{"name": "id", "type": "int8"}, {"name": "doc", "type": "jsonb"}],
            "rows": [[-1, {"a": [1, 2.5, null]}], [u64::MAX, null], [0.5, "x"], [true, []]],
            "row_count": 4, "truncated": false, "changes": 0}})
    );
    let written = serde_json::to_value(UpcallValue::Http(page())).unwrap();
    assert_eq!(written["http"]["status"], 404);
    assert_eq!(written["http"]["url"], "https://example.com/missing");
    assert_eq!(written["http"]["headers"][2], json!(["set-cookie", "b=2"]));
    assert_eq!(
        serde_json::to_value(UpcallValue::Secrets(vec!["A".into()])).unwrap(),
        json!({"secrets": ["A"]})
    );
    // a number that is not finite has no JSON form: it is written as null
    assert_eq!(
        serde_json::to_value(SqlValue::Float(f64::NAN)).unwrap(),
        serde_json::Value::Null
    );
}

/// What code sends is read strictly: an unknown field, a wrong type or a missing field is
/// refused when the frame is read (the session gets `bad_request`, nothing is charged); a
/// huge string is read as it is (the tool's own limits refuse it, before metering).
#[test]
fn hostile_fetch_http_sql_and_secrets_requests_are_refused_when_read() {
    let bad = [
        json!({"kind": "fetch"}),
        json!({"kind": "fetch", "url": 5}),
        json!({"kind": "fetch", "url": "u", "headers": "Authorization: x"}),
        json!({"kind": "fetch", "url": "u", "headers": ["a", "b"]}),
        json!({"kind": "fetch", "url": "u", "headers": {"a": 1}}),
        json!({"kind": "fetch", "url": "u", "headers": {"a": null}}),
        json!({"kind": "fetch", "url": "u", "max_bytes": -1}),
        json!({"kind": "fetch", "url": "u", "max_bytes": "10"}),
        json!({"kind": "fetch", "url": "u", "follow": false}),
        json!({"kind": "http", "url": "u"}),
        json!({"kind": "http", "method": "POST", "url": "u", "body": {"a": 1}}),
        json!({"kind": "http", "method": "POST", "url": "u", "json": {"a": 1}}),
        json!({"kind": "sql", "database": "PG"}),
        json!({"kind": "sql", "database": "PG", "query": "select 1", "params": 1}),
        json!({"kind": "sql", "database": "PG", "query": "select 1", "params": {"a": 1}}),
        json!({"kind": "sql", "database": "PG", "query": "select 1", "write": "yes"}),
        json!({"kind": "sql", "database": ["PG"], "query": "select 1"}),
        json!({"kind": "sql", "database": "PG", "query": "select 1", "session_id": "s"}),
        json!({"kind": "secrets", "values": true}),
        json!({"kind": "secret_values"}),
    ];
    for frame in bad {
        assert!(
            serde_json::from_value::<Upcall>(frame.clone()).is_err(),
            "{frame}"
        );
    }
    let huge = "x".repeat(10 << 20);
    let Upcall::Fetch { url, .. } =
        serde_json::from_value(json!({"kind": "fetch", "url": huge})).unwrap()
    else {
        panic!("not a fetch")
    };
    assert_eq!(url.len(), 10 << 20);
}
