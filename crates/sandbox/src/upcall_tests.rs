#![allow(clippy::unwrap_used)]

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
