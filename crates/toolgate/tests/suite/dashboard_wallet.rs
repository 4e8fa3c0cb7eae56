//! The dashboard's wallet and usage pages over real HTTP: top-ups through a loopback stand-in
//! for Stripe's API, the signed payment webhook (once per event, forged or stale events refused)
//! and the month's free and paid calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use serde_json::{Value, json};

const STRIPE_KEY: &str = "sk_test_standin_4242";
pub(crate) const WEBHOOK_SECRET: &str = "whsec_test_standin_1234";

/// One `POST /v1/checkout/sessions` the stand-in received.
#[derive(Clone, Debug)]
struct CheckoutCall {
    authorization: Option<String>,
    form: HashMap<String, String>,
}

/// Stripe's API on loopback: answers every checkout with one session and keeps the requests.
struct StripeStandIn {
    base: String,
    calls: Arc<Mutex<Vec<CheckoutCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StripeStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StripeStandIn {
    async fn start() -> Self {
        use axum::extract::State;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        type Shared = (Arc<Mutex<Vec<CheckoutCall>>>, String);
        async fn create(
            State((calls, base)): State<Shared>,
            headers: axum::http::HeaderMap,
            axum::Form(form): axum::Form<HashMap<String, String>>,
        ) -> axum::Json<Value> {
            let authorization = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            calls.lock().unwrap().push(CheckoutCall {
                authorization,
                form,
            });
            axum::Json(json!({
                "id": "cs_test_1",
                "object": "checkout.session",
                "url": format!("{base}/pay/cs_test_1"),
            }))
        }
        let router = axum::Router::new()
            .route("/v1/checkout/sessions", axum::routing::post(create))
            .with_state((calls.clone(), base.clone()));
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self { base, calls, task }
    }

    fn calls(&self) -> Vec<CheckoutCall> {
        self.calls.lock().unwrap().clone()
    }
}

/// Seconds since the epoch, as a signature's `t`.
pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

/// A `checkout.session.completed` event's body.
fn completed(event: &str, account: &str, cents: i64, payment_status: &str) -> String {
    json!({
        "id": event,
        "object": "event",
        "type": "checkout.session.completed",
        "data": {"object": {
            "id": "cs_test_1",
            "object": "checkout.session",
            "client_reference_id": account,
            "amount_total": cents,
            "currency": "usd",
            "payment_status": payment_status,
        }},
    })
    .to_string()
}

/// `POST /billing/stripe/webhook` with `signature` in `Stripe-Signature` (none: no header).
pub(crate) async fn deliver(d: &Dash, body: &str, signature: Option<String>) -> Reply {
    let mut request = d
        .http
        .post(d.server.url("/billing/stripe/webhook"))
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    if let Some(signature) = signature {
        request = request.header("Stripe-Signature", signature);
    }
    send(request).await
}

/// Delivers `body` signed now with the server's secret.
pub(crate) async fn deliver_signed(d: &Dash, body: &str) -> Reply {
    let signature = toolgate_payments::sign(WEBHOOK_SECRET, now(), body.as_bytes());
    deliver(d, body, Some(signature)).await
}

/// The `outcome` of a 200 answer.
pub(crate) fn outcome(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["received"], true, "{reply:?}");
    body["outcome"].as_str().unwrap().to_owned()
}

async fn balance(d: &Dash, key: &str) -> String {
    d.server.billing(key).await["wallet_balance_usd"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_up_checks_the_amount_before_it_opens_a_checkout() {
    let stripe = StripeStandIn::start().await;
    let d = Dash::start(&[
        ("TOOLGATE_STRIPE_SECRET_KEY", STRIPE_KEY),
        ("TOOLGATE_STRIPE_API_BASE", &stripe.base),
    ])
    .await;
    let owner = create_account(&d.storage, "payer@example.org");
    let s = d.sign_in("payer@example.org").await;
    let wallet = d.page("/dashboard/wallet", &s).await;
    assert!(has_id(&wallet, "top-up") && !has_id(&wallet, "no-payments"));
    assert_eq!(text_of_id(&wallet, "balance").as_deref(), Some("0.00 USD"));

    for amount in ["4.99", "500.01", "abc", "10.001", "", "-10.00", "1e3"] {
        let refused = d
            .post(
                "/dashboard/wallet/top-up",
                &s,
                &[("csrf", &s.csrf), ("amount", amount)],
            )
            .await;
        assert_eq!(refused.status, 400, "{amount:?}: {refused:?}");
        assert!(has_id(&refused.body, "error"), "{amount:?}: {refused:?}");
        assert!(has_id(&refused.body, "top-up"), "the form is shown again");
    }
    let forged = d
        .post(
            "/dashboard/wallet/top-up",
            &s,
            &[("csrf", "0"), ("amount", "10.00")],
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");
    assert!(
        stripe.calls().is_empty(),
        "Stripe was called: {:?}",
        stripe.calls()
    );

    let started = d
        .post(
            "/dashboard/wallet/top-up",
            &s,
            &[("csrf", &s.csrf), ("amount", "10.00")],
        )
        .await;
    assert_see_other(&started, &format!("{}/pay/cs_test_1", stripe.base));
    let calls = stripe.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(
        call.authorization.as_deref(),
        Some(format!("Bearer {STRIPE_KEY}").as_str())
    );
    let field = |name: &str| call.form.get(name).map(String::as_str);
    assert_eq!(field("client_reference_id"), Some(owner.id.as_str()));
    assert_eq!(
        field("line_items[0][price_data][unit_amount]"),
        Some("1000")
    );
    assert_eq!(field("line_items[0][price_data][currency]"), Some("usd"));
    assert_eq!(field("mode"), Some("payment"));
    assert_eq!(
        field("success_url"),
        Some(d.server.url("/dashboard/wallet?paid=1").as_str())
    );
    assert_eq!(
        field("cancel_url"),
        Some(d.server.url("/dashboard/wallet").as_str())
    );
    // the bounds themselves are fine
    for amount in ["5", "500.00"] {
        let ok = d
            .post(
                "/dashboard/wallet/top-up",
                &s,
                &[("csrf", &s.csrf), ("amount", amount)],
            )
            .await;
        assert_eq!(ok.status, 303, "{amount}: {ok:?}");
    }
    let amounts: Vec<String> = stripe
        .calls()
        .iter()
        .map(|c| c.form["line_items[0][price_data][unit_amount]"].clone())
        .collect();
    assert_eq!(amounts, ["1000", "500", "50000"]);
    // back from Stripe's page: a notice, and the balance as it is until the callback
    let back = d.page("/dashboard/wallet?paid=1", &s).await;
    assert!(has_id(&back, "notice"), "{back}");
    assert_eq!(text_of_id(&back, "balance").as_deref(), Some("0.00 USD"));
    // no webhook secret: callbacks are refused, nothing credited
    let body = completed("evt_nohook", &owner.id, 1000, "paid");
    assert_eq!(deliver_signed(&d, &body).await.status, 503);
    assert_eq!(balance(&d, &owner.key).await, "0.00");
}

#[tokio::test]
async fn without_stripe_there_is_no_top_up() {
    let d = Dash::start(&[]).await;
    let owner = create_account(&d.storage, "cash@example.org");
    let s = d.sign_in("cash@example.org").await;
    let wallet = d.page("/dashboard/wallet", &s).await;
    assert!(!has_id(&wallet, "top-up"), "{wallet}");
    assert!(has_id(&wallet, "no-payments"), "{wallet}");
    let refused = d
        .post(
            "/dashboard/wallet/top-up",
            &s,
            &[("csrf", &s.csrf), ("amount", "10.00")],
        )
        .await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(has_id(&refused.body, "error"), "{refused:?}");
    let body = completed("evt_off", &owner.id, 1000, "paid");
    let hook = deliver_signed(&d, &body).await;
    assert_eq!(hook.status, 503, "{hook:?}");
    assert_eq!(balance(&d, &owner.key).await, "0.00");
}

#[tokio::test]
async fn a_signed_payment_credits_the_wallet_once() {
    let d = Dash::start(&[("TOOLGATE_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET)]).await;
    let owner = create_account(&d.storage, "funded@example.org");
    let s = d.sign_in("funded@example.org").await;

    let body = completed("evt_test_first", &owner.id, 1000, "paid");
    assert_eq!(outcome(&deliver_signed(&d, &body).await), "credited");
    assert_eq!(balance(&d, &owner.key).await, "10.00");
    // Stripe delivers again (a retry, a replay): nothing changes
    assert_eq!(outcome(&deliver_signed(&d, &body).await), "already_applied");
    assert_eq!(balance(&d, &owner.key).await, "10.00");

    // ten deliveries of one new event at once: one credit
    let body = completed("evt_test_burst", &owner.id, 2500, "paid");
    let deliveries = (0..10).map(|_| deliver_signed(&d, &body));
    let mut outcomes: Vec<String> = futures::future::join_all(deliveries)
        .await
        .iter()
        .map(outcome)
        .collect();
    outcomes.sort();
    let mut expected = vec!["already_applied".to_owned(); 9];
    expected.push("credited".to_owned());
    assert_eq!(outcomes, expected);
    assert_eq!(balance(&d, &owner.key).await, "35.00");

    // an unpaid checkout and other events change nothing
    let unpaid = completed("evt_test_unpaid", &owner.id, 1000, "unpaid");
    assert_eq!(outcome(&deliver_signed(&d, &unpaid).await), "ignored");
    let other = json!({"id": "evt_test_other", "type": "customer.created", "data": {"object": {}}})
        .to_string();
    assert_eq!(outcome(&deliver_signed(&d, &other).await), "ignored");
    assert_eq!(balance(&d, &owner.key).await, "35.00");

    let wallet = d.page("/dashboard/wallet", &s).await;
    assert_eq!(text_of_id(&wallet, "balance").as_deref(), Some("35.00 USD"));
    let history = &wallet[wallet.find(r#"id="wallet-history""#).unwrap()..];
    for event in ["evt_test_first", "evt_test_burst"] {
        assert_eq!(history.matches(event).count(), 1, "{event}: {history}");
    }
    assert!(!history.contains("evt_test_unpaid") && !history.contains("evt_test_other"));
}

#[tokio::test]
async fn forged_stale_or_changed_events_credit_nothing() {
    let d = Dash::start(&[("TOOLGATE_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET)]).await;
    let owner = create_account(&d.storage, "target@example.org");
    let body = completed("evt_test_forged", &owner.id, 50_000, "paid");
    let t = now();
    let changed = body.replace("50000", "50001");
    assert_ne!(changed, body);
    let cases: Vec<(&str, &str, Option<String>)> = vec![
        (
            "another secret",
            &body,
            Some(toolgate_payments::sign("whsec_other", t, body.as_bytes())),
        ),
        (
            "310 s old",
            &body,
            Some(toolgate_payments::sign(
                WEBHOOK_SECRET,
                t - 310,
                body.as_bytes(),
            )),
        ),
        (
            "310 s ahead",
            &body,
            Some(toolgate_payments::sign(
                WEBHOOK_SECRET,
                t + 310, // past the 300 s tolerance by more than a second's rounding
                body.as_bytes(),
            )),
        ),
        (
            "changed after signing",
            &changed,
            Some(toolgate_payments::sign(WEBHOOK_SECRET, t, body.as_bytes())),
        ),
        ("no header", &body, None),
        ("an empty header", &body, Some(String::new())),
        ("a malformed header", &body, Some("v1=abc".to_owned())),
        (
            "a signature of another time",
            &body,
            Some(
                toolgate_payments::sign(WEBHOOK_SECRET, t, body.as_bytes()).replacen(
                    &format!("t={t}"),
                    &format!("t={}", t - 1),
                    1,
                ),
            ),
        ),
    ];
    for (what, body, signature) in cases {
        let refused = deliver(&d, body, signature).await;
        assert_eq!(refused.status, 400, "{what}: {refused:?}");
        assert!(refused.json()["error"].is_string(), "{what}: {refused:?}");
    }
    assert_eq!(balance(&d, &owner.key).await, "0.00");

    // genuine, but for no account of this service, or not a usable payment
    let unknown = completed("evt_test_unknown", "acct_does_not_exist", 1000, "paid");
    assert_eq!(deliver_signed(&d, &unknown).await.status, 400);
    let mut euros: Value =
        serde_json::from_str(&completed("evt_test_eur", &owner.id, 1000, "paid")).unwrap();
    euros["data"]["object"]["currency"] = json!("eur");
    assert_eq!(deliver_signed(&d, &euros.to_string()).await.status, 400);
    let zero = completed("evt_test_zero", &owner.id, 0, "paid");
    assert_eq!(deliver_signed(&d, &zero).await.status, 400);
    let not_json = "{not json";
    assert_eq!(deliver_signed(&d, not_json).await.status, 400);
    let mut padded: Value = serde_json::from_str(&body).unwrap();
    padded["padding"] = json!("p".repeat(600 * 1024));
    let huge = deliver_signed(&d, &padded.to_string()).await;
    assert_eq!(huge.status, 413, "{:?}", huge.status);
    assert_eq!(balance(&d, &owner.key).await, "0.00");

    // the refusals used no event id: the genuine event still credits
    assert_eq!(outcome(&deliver_signed(&d, &body).await), "credited");
    assert_eq!(balance(&d, &owner.key).await, "500.00");
}

#[tokio::test]
async fn the_usage_page_counts_free_and_paid_calls() {
    let d = Dash::start(&[("TOOLGATE_FREE_MONTHLY_CALLS", "2")]).await;
    let owner = create_account(&d.storage, "user@example.org");
    let idle = create_account(&d.storage, "idle@example.org");
    credit(&d.storage, "user@example.org", "1.00");
    let s = d.sign_in("user@example.org").await;
    let empty = d.page("/dashboard/usage", &s).await;
    assert_eq!(text_of_id(&empty, "calls-free").as_deref(), Some("0"));
    assert_eq!(text_of_id(&empty, "calls-paid").as_deref(), Some("0"));

    let mcp = client();
    const N: i64 = 5;
    for _ in 0..N {
        billing_of(&post_personal(&mcp, &d.server, &owner.key, &billing_call()).await);
    }
    // another account's calls are not this page's
    billing_of(&post_personal(&mcp, &d.server, &idle.key, &billing_call()).await);

    let usage = d.page("/dashboard/usage", &s).await;
    assert_eq!(text_of_id(&usage, "calls-free").as_deref(), Some("2"));
    assert_eq!(
        text_of_id(&usage, "calls-paid").as_deref(),
        Some(&*(N - 2).to_string())
    );
    assert_eq!(text_of_id(&usage, "free-left").as_deref(), Some("0"));
    assert!(has_id(&usage, "usage-chart"));
    let shown: Value = serde_json::from_str(&text_of_id(&usage, "billing-status").unwrap())
        .unwrap_or_else(|e| panic!("pre#billing-status is not JSON ({e}): {usage}"));
    assert_billing_record(&shown);
    assert_eq!(shown, d.server.billing(&owner.key).await);
    assert_eq!(shown["free_remaining_this_month"], 0);
    assert_eq!(shown["free_monthly_limit"], 2);
    assert_eq!(d.storage.ledger_counts(&owner.id).await, (2, N - 2));

    let wallet = d.page("/dashboard/wallet", &s).await;
    assert_eq!(
        text_of_id(&wallet, "balance"),
        Some(format!(
            "{} USD",
            shown["wallet_balance_usd"].as_str().unwrap()
        ))
    );
    assert_eq!(
        text_of_id(&wallet, "paid-calls-available"),
        Some(shown["paid_calls_available"].to_string())
    );
    assert!(
        wallet.contains(r#"class="charge""#),
        "the paid calls are in the history"
    );
}
