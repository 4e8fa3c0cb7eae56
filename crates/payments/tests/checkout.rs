//! `create_checkout` against a loopback stand-in for Stripe's API that checks what Stripe
//! checks (the bearer key, the form) and answers as Stripe does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::{Json, Router};
use serde_json::json;
use toolgate_domain::{AccountId, Email};
use toolgate_payments::{Stripe, StripeSettings};
use toolgate_ports::payments::{CheckoutRequest, PaymentError, Payments};

const KEY: &str = "sk_test_51Hx9TopSecretKeyValue";

/// What the stand-in saw, and how it answers.
#[derive(Default)]
struct Seen {
    forms: Mutex<Vec<HashMap<String, String>>>,
    idempotency_keys: Mutex<Vec<String>>,
    content_types: Mutex<Vec<String>>,
    elsewhere: AtomicUsize,
}

#[derive(Clone)]
struct Stand {
    seen: Arc<Seen>,
    port: u16,
    mode: Mode,
}

#[derive(Clone, Copy)]
enum Mode {
    Stripe,
    Refuse,
    EchoKey,
    Redirect,
    Slow,
}

async fn sessions(
    State(stand): State<Stand>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    if header("authorization") != format!("Bearer {KEY}") {
        let error = json!({"error": {"message": "Invalid API Key provided: sk_test_****alue",
            "type": "invalid_request_error"}});
        return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
    }
    stand
        .seen
        .idempotency_keys
        .lock()
        .unwrap()
        .push(header("idempotency-key"));
    stand
        .seen
        .content_types
        .lock()
        .unwrap()
        .push(header("content-type"));
    stand.seen.forms.lock().unwrap().push(form.clone());
    match stand.mode {
        Mode::Stripe => {}
        Mode::Refuse => {
            let error = json!({"error": {
                "message": "Invalid URL: An explicit scheme (such as https) must be provided.",
                "param": "success_url", "type": "invalid_request_error"}});
            return (StatusCode::BAD_REQUEST, Json(error)).into_response();
        }
        Mode::EchoKey => {
            let error = json!({"error": {"message": format!("key {KEY} is restricted"),
                "type": "invalid_request_error"}});
            return (StatusCode::FORBIDDEN, Json(error)).into_response();
        }
        Mode::Redirect => {
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [(
                    "location",
                    format!("http://127.0.0.1:{}/elsewhere", stand.port),
                )],
            )
                .into_response();
        }
        Mode::Slow => tokio::time::sleep(Duration::from_secs(30)).await,
    }
    let id = "cs_test_a1B2c3D4e5F6g7H8i9J0";
    Json(json!({
        "id": id,
        "object": "checkout.session",
        "amount_total": form["line_items[0][price_data][unit_amount]"].parse::<i64>().unwrap(),
        "client_reference_id": form["client_reference_id"],
        "currency": "usd",
        "mode": "payment",
        "payment_status": "unpaid",
        "status": "open",
        "url": format!("http://127.0.0.1:{}/pay/{id}", stand.port),
    }))
    .into_response()
}

async fn elsewhere(State(stand): State<Stand>) -> StatusCode {
    stand.seen.elsewhere.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

/// Starts a stand-in in `mode`; returns what it sees and its base URL.
async fn stand_in(mode: Mode) -> (Arc<Seen>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let stand = Stand {
        seen: seen.clone(),
        port,
        mode,
    };
    let app = Router::new()
        .route("/v1/checkout/sessions", post(sessions))
        .route("/elsewhere", any(elsewhere))
        .with_state(stand);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (seen, format!("http://127.0.0.1:{port}"))
}

fn stripe(api_base: &str, key: Option<&str>, timeout: Duration) -> Stripe {
    Stripe::new(StripeSettings {
        api_base: api_base.to_owned(),
        secret_key: key.map(str::to_owned),
        webhook_secret: None,
        timeout,
    })
    .unwrap()
}

fn request() -> CheckoutRequest {
    CheckoutRequest {
        account: AccountId::from_stored("acc_01J9Z8Y7X6W5V4".to_owned()),
        email: Email::parse("Owner@Example.com").unwrap(),
        amount_cents: 2500,
        success_url: "https://toolgate.example/dashboard?topup=done&s={CHECKOUT_SESSION_ID}"
            .to_owned(),
        cancel_url: "https://toolgate.example/dashboard?topup=cancelled".to_owned(),
    }
}

#[tokio::test]
async fn a_checkout_is_opened_with_the_form_stripe_expects() {
    let (seen, base) = stand_in(Mode::Stripe).await;
    // A trailing slash on the base is the operator's habit, not a path.
    let stripe = stripe(&format!("{base}/"), Some(KEY), Duration::from_secs(20));
    let checkout = stripe.create_checkout(&request()).await.unwrap();
    assert_eq!(checkout.id, "cs_test_a1B2c3D4e5F6g7H8i9J0");
    assert_eq!(
        checkout.url,
        format!("{base}/pay/cs_test_a1B2c3D4e5F6g7H8i9J0")
    );
    stripe.create_checkout(&request()).await.unwrap();

    let forms = seen.forms.lock().unwrap().clone();
    assert_eq!(forms.len(), 2);
    let expected: HashMap<String, String> = [
        ("mode", "payment"),
        ("client_reference_id", "acc_01J9Z8Y7X6W5V4"),
        ("customer_email", "owner@example.com"),
        (
            "success_url",
            "https://toolgate.example/dashboard?topup=done&s={CHECKOUT_SESSION_ID}",
        ),
        (
            "cancel_url",
            "https://toolgate.example/dashboard?topup=cancelled",
        ),
        ("line_items[0][quantity]", "1"),
        ("line_items[0][price_data][currency]", "usd"),
        ("line_items[0][price_data][unit_amount]", "2500"),
        (
            "line_items[0][price_data][product_data][name]",
            "Wallet top-up",
        ),
        ("metadata[account_id]", "acc_01J9Z8Y7X6W5V4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(forms[0], expected);
    assert_eq!(
        seen.content_types.lock().unwrap()[0],
        "application/x-www-form-urlencoded"
    );
    let keys = seen.idempotency_keys.lock().unwrap().clone();
    assert_eq!(keys[0].len(), 32, "{keys:?}");
    assert_ne!(
        keys[0], keys[1],
        "each checkout has its own idempotency key"
    );
}

#[tokio::test]
async fn stripes_refusal_is_passed_on_without_the_key() {
    let (_, base) = stand_in(Mode::Refuse).await;
    let err = stripe(&base, Some(KEY), Duration::from_secs(20))
        .create_checkout(&request())
        .await
        .unwrap_err();
    let PaymentError::Unavailable(detail) = &err else {
        panic!("{err:?}")
    };
    assert!(detail.contains("400"), "{detail}");
    assert!(
        detail.contains("Invalid URL: An explicit scheme (such as https) must be provided."),
        "{detail}"
    );

    // A wrong key: Stripe's 401, and not a character of either key in the detail.
    let err = stripe(&base, Some("sk_test_wrong"), Duration::from_secs(20))
        .create_checkout(&request())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("401") && err.contains("Invalid API Key"),
        "{err}"
    );
    assert!(
        !err.contains(KEY) && !err.contains("sk_test_wrong"),
        "{err}"
    );

    // Were Stripe (or a proxy) ever to echo the key, it is scrubbed.
    let (_, base) = stand_in(Mode::EchoKey).await;
    let err = stripe(&base, Some(KEY), Duration::from_secs(20))
        .create_checkout(&request())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("403") && err.contains("key [REDACTED:STRIPE_SECRET_KEY] is restricted"),
        "{err}"
    );
    assert!(!err.contains(KEY), "{err}");
}

#[tokio::test]
async fn no_secret_key_means_not_configured() {
    let (seen, base) = stand_in(Mode::Stripe).await;
    for key in [None, Some("")] {
        let err = stripe(&base, key, Duration::from_secs(20))
            .create_checkout(&request())
            .await
            .unwrap_err();
        assert!(matches!(err, PaymentError::NotConfigured), "{err:?}");
    }
    assert!(seen.forms.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let (seen, base) = stand_in(Mode::Redirect).await;
    let err = stripe(&base, Some(KEY), Duration::from_secs(20))
        .create_checkout(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PaymentError::Unavailable(d) if d.contains("307")),
        "{err:?}"
    );
    assert_eq!(seen.elsewhere.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_slow_or_absent_api_is_unavailable_within_the_timeout() {
    let (_, base) = stand_in(Mode::Slow).await;
    let started = Instant::now();
    let err = stripe(&base, Some(KEY), Duration::from_millis(500))
        .create_checkout(&request())
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{err:?}");
    assert!(
        matches!(&err, PaymentError::Unavailable(d) if d.contains("timed out")),
        "{err:?}"
    );

    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = stripe(
        &format!("http://127.0.0.1:{port}"),
        Some(KEY),
        Duration::from_secs(20),
    )
    .create_checkout(&request())
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("could not connect"), "{err}");
    assert!(!err.contains(KEY), "{err}");
}

#[test]
fn a_bad_api_base_is_refused_and_debug_hides_the_keys() {
    for base in ["", "api.stripe.com", "ftp://api.stripe.com", "https://"] {
        let settings = StripeSettings {
            api_base: base.to_owned(),
            ..StripeSettings::default()
        };
        assert!(Stripe::new(settings).is_err(), "{base:?}");
    }
    let settings = StripeSettings {
        secret_key: Some(KEY.to_owned()),
        webhook_secret: Some("whsec_abc".to_owned()),
        ..StripeSettings::default()
    };
    let debug = format!("{settings:?}");
    assert!(
        !debug.contains(KEY) && !debug.contains("whsec_abc"),
        "{debug}"
    );
    assert!(debug.contains("https://api.stripe.com"), "{debug}");
    let debug = format!("{:?}", Stripe::new(settings).unwrap());
    assert!(
        !debug.contains(KEY) && !debug.contains("whsec_abc"),
        "{debug}"
    );
}
