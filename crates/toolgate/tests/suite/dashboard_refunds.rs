//! Refunds and disputes through the signed payment webhook of the real binary, in Stripe's
//! documented event shapes: money taken back once per event (and a dispute once per dispute),
//! partial refunds by their cumulative total, the wallet below zero with paid calls refused
//! (-32002) until a top-up repays it, forged and stale events and unknown payments changing
//! nothing.

use serde_json::{Value, json};

use crate::common::*;
use crate::dashboard_wallet::{WEBHOOK_SECRET, deliver, deliver_signed, now, outcome};

/// A Stripe event of `kind` about `object`, as Stripe sends it.
fn event(id: &str, kind: &str, object: Value) -> String {
    json!({
        "id": id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": now(),
        "livemode": false,
        "pending_webhooks": 1,
        "type": kind,
        "data": {"object": object},
    })
    .to_string()
}

/// `checkout.session.completed` of a paid session of `cents` for `account`, paid by `payment`.
fn paid(id: &str, account: &str, cents: i64, payment: &str) -> String {
    let session = json!({
        "id": format!("cs_test_{payment}"),
        "object": "checkout.session",
        "amount_subtotal": cents,
        "amount_total": cents,
        "client_reference_id": account,
        "currency": "usd",
        "customer_details": {"email": "payer@example.org"},
        "livemode": false,
        "mode": "payment",
        "payment_intent": payment,
        "payment_status": "paid",
        "status": "complete",
    });
    event(id, "checkout.session.completed", session)
}

/// `charge.refunded`: the Charge of `payment`, with the refunds' total so far.
fn refunded(id: &str, payment: &str, charged: i64, amount_refunded: i64) -> String {
    let charge = json!({
        "id": format!("ch_{payment}"),
        "object": "charge",
        "amount": charged,
        "amount_captured": charged,
        "amount_refunded": amount_refunded,
        "balance_transaction": format!("txn_{payment}"),
        "captured": true,
        "created": now() - 60,
        "currency": "usd",
        "disputed": false,
        "livemode": false,
        "metadata": {},
        "paid": true,
        "payment_intent": payment,
        "refunded": amount_refunded == charged,
        "status": "succeeded",
    });
    event(id, "charge.refunded", charge)
}

/// `charge.dispute.created`: a Dispute `dispute` of `amount` of the charge of `payment`.
fn disputed(id: &str, dispute: &str, payment: &str, amount: i64) -> String {
    let object = json!({
        "id": dispute,
        "object": "dispute",
        "amount": amount,
        "balance_transactions": [],
        "charge": format!("ch_{payment}"),
        "created": now(),
        "currency": "usd",
        "evidence": {"uncategorized_text": null},
        "evidence_details": {"due_by": now() + 864_000, "has_evidence": false, "past_due": false, "submission_count": 0},
        "is_charge_refundable": false,
        "livemode": false,
        "metadata": {},
        "payment_intent": payment,
        "reason": "fraudulent",
        "status": "needs_response",
    });
    event(id, "charge.dispute.created", object)
}

async fn balance_shown(d: &Dash, s: &SignInSession) -> (String, String) {
    let wallet = d.page("/dashboard/wallet", s).await;
    (
        text_of_id(&wallet, "balance").unwrap_or_default(),
        text_of_id(&wallet, "paid-calls-available").unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_refund_takes_money_back_once_and_partial_refunds_add_up() {
    let d = Dash::start(&[("TOOLGATE_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET)]).await;
    let owner = create_account(&d.storage, "refunded@example.org");
    let s = d.sign_in("refunded@example.org").await;
    let topped = paid("evt_r_paid", &owner.id, 2500, "pi_r1");
    assert_eq!(outcome(&deliver_signed(&d, &topped).await), "credited");
    assert_eq!(
        d.server.billing(&owner.key).await["wallet_balance_usd"],
        "25.00"
    );

    let first = refunded("evt_r_1", "pi_r1", 2500, 1000);
    assert_eq!(outcome(&deliver_signed(&d, &first).await), "taken_back");
    assert_eq!(
        d.server.billing(&owner.key).await["wallet_balance_usd"],
        "15.00"
    );
    assert_eq!(
        outcome(&deliver_signed(&d, &first).await),
        "already_applied",
        "a replayed event takes nothing more"
    );
    // a second partial refund: Stripe's amount_refunded is the total, 15.00 now
    let second = refunded("evt_r_2", "pi_r1", 2500, 1500);
    assert_eq!(outcome(&deliver_signed(&d, &second).await), "taken_back");
    let record = d.server.billing(&owner.key).await;
    assert_eq!(record["wallet_balance_usd"], "10.00", "{record}");
    assert_billing_record(&record);
    // the payment's own checkout event again (a replay) credits nothing
    assert_eq!(
        outcome(&deliver_signed(&d, &topped).await),
        "already_applied"
    );

    let wallet = d.page("/dashboard/wallet", &s).await;
    assert_eq!(text_of_id(&wallet, "balance").as_deref(), Some("10.00 USD"));
    let history = &wallet[wallet.find(r#"id="wallet-history""#).unwrap()..];
    for event in ["evt_r_paid", "evt_r_1", "evt_r_2"] {
        assert_eq!(history.matches(event).count(), 1, "{event}: {history}");
    }
    assert_eq!(
        history.matches(r#"class="take-back""#).count(),
        2,
        "{history}"
    );
    assert_eq!(history.matches("Refund taken back").count(), 2, "{history}");
    assert!(!history.contains("Dispute"), "{history}");
    assert!(
        history.contains("−10.00") && history.contains("−5.00"),
        "{history}"
    );
}

#[tokio::test]
async fn a_dispute_below_zero_refuses_paid_calls_until_a_top_up() {
    let d = Dash::start(&[
        ("TOOLGATE_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET),
        ("TOOLGATE_FREE_MONTHLY_CALLS", "1"),
    ])
    .await;
    let owner = create_account(&d.storage, "disputed@example.org");
    let s = d.sign_in("disputed@example.org").await;
    let http = client();
    let topped = paid("evt_d_paid", &owner.id, 1000, "pi_d1");
    assert_eq!(outcome(&deliver_signed(&d, &topped).await), "credited");
    // the free call, then a paid one: 9.992 left of the 10.00
    billing_of(&post_personal(&http, &d.server, &owner.key, &billing_call()).await);
    let record = billing_of(&post_personal(&http, &d.server, &owner.key, &billing_call()).await);
    assert_eq!(record["wallet_balance_usd"], "9.99", "{record}");

    // ten deliveries of the dispute at once: the 10.00 is taken back once, 0.008 of it owed
    let dispute = disputed("evt_d_1", "du_d1", "pi_d1", 1000);
    let deliveries = (0..10).map(|_| deliver_signed(&d, &dispute));
    let mut outcomes: Vec<String> = futures::future::join_all(deliveries)
        .await
        .iter()
        .map(outcome)
        .collect();
    outcomes.sort();
    let mut expected = vec!["already_applied".to_owned(); 9];
    expected.push("taken_back".to_owned());
    assert_eq!(outcomes, expected);
    // Stripe sending the same dispute under another event id takes nothing more
    let again = disputed("evt_d_2", "du_d1", "pi_d1", 1000);
    assert_eq!(
        outcome(&deliver_signed(&d, &again).await),
        "already_applied"
    );
    assert_eq!(
        balance_shown(&d, &s).await,
        ("-0.01 USD".to_owned(), "0".to_owned())
    );
    let wallet = d.page("/dashboard/wallet", &s).await;
    assert!(has_id(&wallet, "owed"));
    assert_eq!(
        wallet.matches("Dispute taken back").count(),
        1,
        "the dispute, once and named: {wallet}"
    );
    let refused = post_personal(&http, &d.server, &owner.key, &billing_call()).await;
    refused.assert_error(200, -32002);
    // a refund of the disputed payment takes nothing more than it credited
    let refund = refunded("evt_d_3", "pi_d1", 1000, 1000);
    assert_eq!(outcome(&deliver_signed(&d, &refund).await), "taken_back");
    assert_eq!(balance_shown(&d, &s).await.0, "-0.01 USD");

    // a top-up repays what is owed first, then paid calls run again
    let again_paid = paid("evt_d_paid2", &owner.id, 500, "pi_d2");
    assert_eq!(outcome(&deliver_signed(&d, &again_paid).await), "credited");
    assert_eq!(balance_shown(&d, &s).await.0, "4.99 USD");
    let record = billing_of(&post_personal(&http, &d.server, &owner.key, &billing_call()).await);
    assert_eq!(record["wallet_balance_usd"], "4.98", "{record}");
    assert_eq!(record["paid_calls_available"], 623, "{record}");
    assert_eq!(d.storage.ledger_counts(&owner.id).await, (1, 2));
}

#[tokio::test]
async fn refunds_and_disputes_are_verified_and_unknown_payments_change_nothing() {
    let d = Dash::start(&[("TOOLGATE_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET)]).await;
    let owner = create_account(&d.storage, "guarded@example.org");
    let topped = paid("evt_g_paid", &owner.id, 2000, "pi_g1");
    assert_eq!(outcome(&deliver_signed(&d, &topped).await), "credited");
    let refund = refunded("evt_g_1", "pi_g1", 2000, 2000);
    let dispute = disputed("evt_g_2", "du_g1", "pi_g1", 2000);
    let t = now();
    for body in [&refund, &dispute] {
        let sign = |secret: &str, at: i64| toolgate_payments::sign(secret, at, body.as_bytes());
        for (what, signature) in [
            ("another secret", Some(sign("whsec_other", t))),
            ("301 s old", Some(sign(WEBHOOK_SECRET, t - 301))),
            ("301 s ahead", Some(sign(WEBHOOK_SECRET, t + 301))),
            ("no header", None),
        ] {
            let refused = deliver(&d, body, signature).await;
            assert_eq!(refused.status, 400, "{what}: {refused:?}");
        }
        let changed = body.replace("2000", "1999");
        let refused = deliver(&d, &changed, Some(sign(WEBHOOK_SECRET, t))).await;
        assert_eq!(refused.status, 400, "changed after signing: {refused:?}");
    }
    assert_eq!(
        d.server.billing(&owner.key).await["wallet_balance_usd"],
        "20.00"
    );

    // genuine, but of a payment that credited no wallet here: acknowledged, nothing changes
    for body in [
        refunded("evt_g_3", "pi_elsewhere", 5000, 5000),
        disputed("evt_g_4", "du_elsewhere", "pi_elsewhere", 5000),
    ] {
        let reply = deliver_signed(&d, &body).await;
        assert_eq!(outcome(&reply), "unknown_payment", "{reply:?}");
    }
    assert_eq!(
        d.server.billing(&owner.key).await["wallet_balance_usd"],
        "20.00"
    );
    let log = d.server.log_text();
    assert!(log.contains("pi_elsewhere"), "an unknown payment is logged");

    // the refused deliveries used no event id: the genuine ones still apply, once
    assert_eq!(outcome(&deliver_signed(&d, &refund).await), "taken_back");
    assert_eq!(outcome(&deliver_signed(&d, &dispute).await), "taken_back");
    assert_eq!(
        d.server.billing(&owner.key).await["wallet_balance_usd"],
        "0.00"
    );
}
