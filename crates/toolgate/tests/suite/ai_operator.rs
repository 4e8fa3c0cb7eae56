//! Model calls on the operator's key through the real binary, against the OpenAI-format
//! stand-in of `ai.rs`: `max_tokens` capped (and defaulted) to `operator_max_tokens`, the
//! account's tokens counted per day and a call refused before it is sent once they reach
//! `operator_tokens_per_day`, also after a restart; another account and a caller's own key are
//! not limited.

use serde_json::json;

use crate::ai::{ai, stand_in, write};
use crate::common::*;

const OPERATOR_KEY: &str = "sk-operator-5a4b3c2d1e0f9a8b";
const OWN_KEY: &str = "sk-own-0f1e2d3c4b5a6978";

fn text(answer: &serde_json::Value) -> &str {
    answer["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn the_operators_key_is_capped_and_limited_per_day_and_an_own_key_is_not() {
    let (addr, seen) = stand_in().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "lent-alice@example.org");
    let bob = create_account(&storage, "lent-bob@example.org");
    let base = format!("http://{addr}/v1");
    let flags = [
        "--egress-allow-private",
        "127.0.0.1/32",
        "--openai-base-url",
        &base,
        "--openai-api-key",
        OPERATOR_KEY,
        "--operator-max-tokens",
        "100",
        "--operator-tokens-per-day",
        "1000",
    ];
    let mut server = Server::start(&storage, &flags).await;
    let capped = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "echo max_tokens", "max_tokens": 5000}),
    )
    .await;
    assert_eq!(text(&capped), "max_tokens=100", "{capped}");
    assert_eq!(
        capped["structuredContent"]["llm"]["operator_key"],
        json!({"max_tokens": 100, "capped": true, "tokens_today": 9, "tokens_per_day": 1000})
    );
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &format!("Bearer {OPERATOR_KEY}")
    );
    let defaulted = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "echo max_tokens"}),
    )
    .await;
    assert_eq!(text(&defaulted), "max_tokens=100", "{defaulted}");
    assert_eq!(
        defaulted["structuredContent"]["llm"]["operator_key"]["capped"],
        false
    );
    // 18 used; a heavy call (700) is still admitted below the limit, and so is the next
    for expected in [718, 1418] {
        let heavy = ai(
            &server,
            &alice.key,
            json!({"model": "openai/gpt-x", "prompt": "heavy", "max_tokens": 100}),
        )
        .await;
        assert_eq!(
            heavy["structuredContent"]["llm"]["operator_key"]["tokens_today"], expected,
            "{heavy}"
        );
    }
    let requests = seen.lock().unwrap().len();
    let refused = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "hi"}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text(&refused).contains("daily limit"), "{refused}");
    assert!(text(&refused).contains("1418 of 1000"), "{refused}");
    assert!(text(&refused).contains("OPENAI_API_KEY"), "{refused}");
    assert_eq!(seen.lock().unwrap().len(), requests, "nothing was sent");
    // another account has its own day
    let bobs = ai(
        &server,
        &bob.key,
        json!({"model": "openai/gpt-x", "prompt": "hi"}),
    )
    .await;
    assert_eq!(bobs["isError"], false, "{bobs}");

    // the count is the database's: a new process refuses as the old one did
    server.stop();
    let server = Server::start(&storage, &flags).await;
    let still = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "hi"}),
    )
    .await;
    assert!(text(&still).contains("daily limit"), "{still}");
    assert_eq!(
        seen.lock().unwrap().len(),
        requests + 1,
        "only bob's was sent"
    );

    // with a key of her own, alice is not limited, and asks what she likes
    let stored = write(
        &server,
        &alice.key,
        json!({"secret_set": {"name": "OPENAI_API_KEY", "value": OWN_KEY}}),
    )
    .await;
    assert_eq!(stored["isError"], false, "{stored}");
    let own = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "echo max_tokens", "max_tokens": 5000}),
    )
    .await;
    assert_eq!(text(&own), "max_tokens=5000", "{own}");
    assert!(
        own["structuredContent"]["llm"]
            .get("operator_key")
            .is_none(),
        "{own}"
    );
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &format!("Bearer {OWN_KEY}")
    );
    let log = server.log_text();
    assert!(
        !log.contains(OPERATOR_KEY) && !log.contains(OWN_KEY),
        "a key reached the log"
    );
}

#[tokio::test]
async fn a_daily_limit_of_zero_lends_no_key_and_a_bad_cap_is_refused_at_start() {
    let (addr, seen) = stand_in().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "unlent@example.org");
    let base = format!("http://{addr}/v1");
    let server = Server::start(
        &storage,
        &[
            "--egress-allow-private",
            "127.0.0.1/32",
            "--openai-base-url",
            &base,
            "--openai-api-key",
            OPERATOR_KEY,
            "--operator-tokens-per-day",
            "0",
        ],
    )
    .await;
    let refused = ai(
        &server,
        &alice.key,
        json!({"model": "openai/gpt-x", "prompt": "hi"}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        text(&refused).contains("does not lend its model keys"),
        "{refused}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
    let bad = cli(
        Some(&storage),
        &["serve", "--operator-max-tokens", "0", "--sandbox", "off"],
        &[],
    );
    assert!(!bad.success(), "a cap of 0 is refused");
    assert!(bad.stderr.contains("operator_max_tokens"), "{}", bad.stderr);
}
