//! `verify_webhook`: the signature first (every way it can be wrong), then the event (every way
//! it can be other than a paid checkout in dollars).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use toolgate_domain::AccountId;
use toolgate_payments::webhook::TOLERANCE_SECONDS;
use toolgate_payments::{Stripe, StripeSettings, sign};
use toolgate_ports::payments::{PaymentError, PaymentEvent, Payments};

const SECRET: &str = "whsec_test_5f1d8c0a9b7e6d4c3b2a1f0e";
const NOW: i64 = 1_767_225_600;

fn stripe(webhook_secret: Option<&str>) -> Stripe {
    Stripe::new(StripeSettings {
        api_base: "https://api.stripe.com".to_owned(),
        secret_key: Some("sk_test_x".to_owned()),
        webhook_secret: webhook_secret.map(str::to_owned),
        timeout: Duration::from_secs(20),
    })
    .unwrap()
}

fn event(kind: &str, object: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "evt_1QxYz2AbCdEf",
        "object": "event",
        "api_version": "2024-06-20",
        "created": NOW,
        "livemode": false,
        "type": kind,
        "data": {"object": object},
    }))
    .unwrap()
}

fn session(payment_status: &str, currency: &str, amount_total: i64) -> serde_json::Value {
    json!({
        "id": "cs_test_a1B2c3",
        "object": "checkout.session",
        "client_reference_id": "acc_01J9Z8Y7X6W5V4",
        "amount_total": amount_total,
        "currency": currency,
        "payment_status": payment_status,
        "status": "complete",
        "mode": "payment",
        "payment_intent": "pi_3QxAbCdEfGh0123",
        "metadata": {"account_id": "acc_01J9Z8Y7X6W5V4"},
    })
}

fn paid() -> Vec<u8> {
    event("checkout.session.completed", session("paid", "usd", 2500))
}

fn credit() -> PaymentEvent {
    PaymentEvent::Paid {
        event_id: "evt_1QxYz2AbCdEf".to_owned(),
        account: AccountId::from_stored("acc_01J9Z8Y7X6W5V4".to_owned()),
        amount_cents: 2500,
        payment: Some("pi_3QxAbCdEfGh0123".to_owned()),
    }
}

fn verify(header: Option<&str>, body: &[u8]) -> Result<PaymentEvent, PaymentError> {
    stripe(Some(SECRET)).verify_webhook(header, body, NOW)
}

fn bad_signature(result: Result<PaymentEvent, PaymentError>) -> &'static str {
    match result {
        Err(PaymentError::BadSignature(reason)) => reason,
        other => panic!("expected BadSignature, got {other:?}"),
    }
}

fn bad_event(result: Result<PaymentEvent, PaymentError>) -> String {
    match result {
        Err(PaymentError::BadEvent(reason)) => reason,
        other => panic!("expected BadEvent, got {other:?}"),
    }
}

#[test]
fn a_valid_signature_credits_the_account() {
    let body = paid();
    let header = sign(SECRET, NOW, &body);
    assert!(header.starts_with(&format!("t={NOW},v1=")), "{header}");
    assert_eq!(verify(Some(&header), &body).unwrap(), credit());
    // Stripe's test mode adds a v0 scheme, and the order of the items is not fixed.
    let v1 = header.split_once(",v1=").unwrap().1;
    let shuffled = format!("v0=6ffbb59b2300aae63f2723, v1={v1}, t={NOW}");
    assert_eq!(verify(Some(&shuffled), &body).unwrap(), credit());
}

#[test]
fn while_rotating_any_v1_may_match() {
    let body = paid();
    let old = sign("whsec_old_secret", NOW, &body);
    let new = sign(SECRET, NOW, &body);
    let v1 = |h: &str| h.split_once(",v1=").unwrap().1.to_owned();
    for header in [
        format!("t={NOW},v1={},v1={}", v1(&old), v1(&new)),
        format!("t={NOW},v1={},v1={}", v1(&new), v1(&old)),
        format!("t={NOW},v1=not-hex,v1={}", v1(&new)),
    ] {
        assert_eq!(verify(Some(&header), &body).unwrap(), credit(), "{header}");
    }
}

#[test]
fn a_wrong_secret_or_a_changed_body_is_refused() {
    let body = paid();
    let wrong = sign("whsec_someone_else", NOW, &body);
    assert_eq!(
        bad_signature(verify(Some(&wrong), &body)),
        "no v1 signature matches"
    );
    let header = sign(SECRET, NOW, &body);
    let mut changed = body.clone();
    let at = changed.len() / 2;
    changed[at] ^= 1;
    assert_eq!(
        bad_signature(verify(Some(&header), &changed)),
        "no v1 signature matches"
    );
    // The timestamp is signed too: moving it breaks the signature.
    let moved = header.replace(&format!("t={NOW}"), &format!("t={}", NOW + 1));
    assert_eq!(
        bad_signature(verify(Some(&moved), &body)),
        "no v1 signature matches"
    );
}

#[test]
fn a_stale_or_future_timestamp_is_refused() {
    let body = paid();
    for t in [NOW - TOLERANCE_SECONDS, NOW + TOLERANCE_SECONDS] {
        assert_eq!(
            verify(Some(&sign(SECRET, t, &body)), &body).unwrap(),
            credit()
        );
    }
    for t in [
        NOW - TOLERANCE_SECONDS - 1,
        NOW + TOLERANCE_SECONDS + 1,
        i64::MIN,
        0,
    ] {
        let reason = bad_signature(verify(Some(&sign(SECRET, t, &body)), &body));
        assert!(reason.contains("timestamp"), "{t}: {reason}");
    }
}

#[test]
fn a_missing_or_garbled_header_is_refused() {
    let body = paid();
    assert_eq!(
        bad_signature(verify(None, &body)),
        "no Stripe-Signature header"
    );
    let v1 = sign(SECRET, NOW, &body)
        .split_once(",v1=")
        .unwrap()
        .1
        .to_owned();
    for garbage in [
        "",
        "garbage",
        "t=,v1=00",
        "t=yesterday,v1=00",
        &format!("t={NOW},t={NOW},v1={v1}"),
        &format!("t={NOW};v1={v1}"),
        "\u{0}\u{1}=,,",
    ] {
        let reason = bad_signature(verify(Some(garbage), &body));
        assert!(reason.contains("malformed"), "{garbage:?}: {reason}");
    }
    assert!(bad_signature(verify(Some(&format!("v1={v1}")), &body)).contains("no timestamp"));
    assert!(bad_signature(verify(Some(&format!("t={NOW},v0={v1}")), &body)).contains("no v1"));
}

#[test]
fn no_webhook_secret_means_not_configured() {
    let body = paid();
    let header = sign(SECRET, NOW, &body);
    for secret in [None, Some("")] {
        let err = stripe(secret)
            .verify_webhook(Some(&header), &body, NOW)
            .unwrap_err();
        assert!(matches!(err, PaymentError::NotConfigured), "{err:?}");
    }
}

#[test]
fn a_signed_body_that_is_not_an_event_is_a_bad_event() {
    for body in [
        &b"not json at all"[..],
        b"{\"id\": \"evt_1\"}",
        b"[]",
        b"{\"id\": \"\", \"type\": \"checkout.session.completed\"}",
        b"{\"id\": \"evt_1\", \"type\": \"checkout.session.completed\"}",
        b"{\"id\": \"evt_1\", \"type\": \"checkout.session.completed\", \
           \"data\": {\"object\": {\"amount_total\": \"lots\"}}}",
    ] {
        let header = sign(SECRET, NOW, body);
        let reason = bad_event(verify(Some(&header), body));
        assert!(!reason.contains(&header), "{reason}");
    }
}

#[test]
fn unpaid_and_other_events_are_ignored() {
    for (kind, object) in [
        ("checkout.session.completed", session("unpaid", "usd", 2500)),
        (
            "checkout.session.completed",
            session("no_payment_required", "usd", 0),
        ),
        ("checkout.session.expired", session("unpaid", "usd", 2500)),
        (
            "checkout.session.async_payment_failed",
            session("unpaid", "usd", 2500),
        ),
        (
            "payment_intent.succeeded",
            json!({"id": "pi_1", "amount": 2500, "currency": "usd"}),
        ),
        ("customer.created", json!({"id": "cus_1"})),
    ] {
        let body = event(kind, object);
        let header = sign(SECRET, NOW, &body);
        assert_eq!(
            verify(Some(&header), &body).unwrap(),
            PaymentEvent::Ignored {
                event_id: "evt_1QxYz2AbCdEf".to_owned(),
                kind: kind.to_owned(),
            },
            "{kind}"
        );
    }
}

#[test]
fn an_async_payment_that_succeeds_credits() {
    let body = event(
        "checkout.session.async_payment_succeeded",
        session("paid", "USD", 2500),
    );
    let header = sign(SECRET, NOW, &body);
    assert_eq!(verify(Some(&header), &body).unwrap(), credit());
}

#[test]
fn a_paid_session_that_cannot_be_credited_is_a_bad_event() {
    let mut no_account = session("paid", "usd", 2500);
    no_account["client_reference_id"] = serde_json::Value::Null;
    let mut empty_account = session("paid", "usd", 2500);
    empty_account["client_reference_id"] = json!("");
    let mut long_account = session("paid", "usd", 2500);
    long_account["client_reference_id"] = json!("a".repeat(101));
    let mut no_currency = session("paid", "usd", 2500);
    no_currency.as_object_mut().unwrap().remove("currency");
    for (object, expected) in [
        (session("paid", "eur", 2500), "currency is eur, not usd"),
        (no_currency, "currency is missing"),
        (session("paid", "usd", 0), "amount_total"),
        (session("paid", "usd", -5), "amount_total"),
        (no_account, "client_reference_id"),
        (empty_account, "client_reference_id"),
        (long_account, "client_reference_id"),
    ] {
        let body = event("checkout.session.completed", object);
        let header = sign(SECRET, NOW, &body);
        let reason = bad_event(verify(Some(&header), &body));
        assert!(reason.contains(expected), "{reason}");
    }
    let mut longest = session("paid", "usd", 2500);
    longest["client_reference_id"] = json!("a".repeat(100));
    let body = event("checkout.session.completed", longest);
    let header = sign(SECRET, NOW, &body);
    assert!(matches!(
        verify(Some(&header), &body).unwrap(),
        PaymentEvent::Paid { account, .. } if account.as_str().len() == 100
    ));
}

#[test]
fn refusals_name_no_secret_or_signature() {
    let body = event("checkout.session.completed", session("paid", "eur", 2500));
    let header = sign(SECRET, NOW, &body);
    let v1 = header.split_once(",v1=").unwrap().1;
    let errors = [
        verify(Some(&header), &body).unwrap_err(),
        verify(Some(&sign("whsec_x", NOW, &body)), &body).unwrap_err(),
        verify(Some(&sign(SECRET, NOW - 1000, &body)), &body).unwrap_err(),
    ];
    for err in errors {
        let text = format!("{err} {err:?}");
        assert!(!text.contains(SECRET) && !text.contains(v1), "{text}");
    }
}

/// A Charge as `charge.refunded` carries it (Stripe's documented shape, trimmed of the
/// payment method's details): `amount_refunded` is the refunds' total so far.
fn charge(amount_refunded: i64, currency: &str) -> serde_json::Value {
    json!({
        "id": "ch_3QxAbCdEfGh0123",
        "object": "charge",
        "amount": 2500,
        "amount_captured": 2500,
        "amount_refunded": amount_refunded,
        "balance_transaction": "txn_3QxAbCdEfGh0123",
        "captured": true,
        "created": NOW - 3600,
        "currency": currency,
        "customer": null,
        "disputed": false,
        "livemode": false,
        "metadata": {},
        "paid": true,
        "payment_intent": "pi_3QxAbCdEfGh0123",
        "payment_method": "pm_1QxAbCdEfGh",
        "refunded": amount_refunded == 2500,
        "status": "succeeded",
    })
}

/// A Dispute as `charge.dispute.created` carries it (Stripe's documented shape).
fn dispute(amount: i64, currency: &str) -> serde_json::Value {
    json!({
        "id": "du_1QxAbCdEfGh0123",
        "object": "dispute",
        "amount": amount,
        "balance_transactions": [],
        "charge": "ch_3QxAbCdEfGh0123",
        "created": NOW,
        "currency": currency,
        "evidence": {"customer_name": null, "uncategorized_text": null},
        "evidence_details": {"due_by": NOW + 864_000, "has_evidence": false, "past_due": false, "submission_count": 0},
        "is_charge_refundable": false,
        "livemode": false,
        "metadata": {},
        "payment_intent": "pi_3QxAbCdEfGh0123",
        "reason": "fraudulent",
        "status": "needs_response",
    })
}

fn signed_verify(kind: &str, object: serde_json::Value) -> Result<PaymentEvent, PaymentError> {
    let body = event(kind, object);
    verify(Some(&sign(SECRET, NOW, &body)), &body)
}

#[test]
fn a_refund_names_its_payment_and_the_refunds_total() {
    assert_eq!(
        signed_verify("charge.refunded", charge(1000, "usd")).unwrap(),
        PaymentEvent::Refunded {
            event_id: "evt_1QxYz2AbCdEf".to_owned(),
            payment: Some("pi_3QxAbCdEfGh0123".to_owned()),
            refunded_cents: 1000,
        }
    );
    // a charge of a legacy flow has no payment intent: nothing to find it by
    let mut legacy = charge(2500, "usd");
    legacy["payment_intent"] = serde_json::Value::Null;
    assert!(matches!(
        signed_verify("charge.refunded", legacy).unwrap(),
        PaymentEvent::Refunded { payment: None, .. }
    ));
}

#[test]
fn a_dispute_names_its_id_payment_and_amount() {
    assert_eq!(
        signed_verify("charge.dispute.created", dispute(2500, "usd")).unwrap(),
        PaymentEvent::Disputed {
            event_id: "evt_1QxYz2AbCdEf".to_owned(),
            dispute: "du_1QxAbCdEfGh0123".to_owned(),
            payment: Some("pi_3QxAbCdEfGh0123".to_owned()),
            amount_cents: 2500,
        }
    );
}

#[test]
fn refunds_and_disputes_in_other_currencies_are_not_ours() {
    for (kind, object) in [
        ("charge.refunded", charge(1000, "eur")),
        ("charge.dispute.created", dispute(2500, "gbp")),
    ] {
        assert!(
            matches!(
                signed_verify(kind, object).unwrap(),
                PaymentEvent::Ignored { .. }
            ),
            "{kind}"
        );
    }
    // other events about charges change nothing
    assert!(matches!(
        signed_verify("charge.dispute.closed", dispute(2500, "usd")).unwrap(),
        PaymentEvent::Ignored { .. }
    ));
}

#[test]
fn malformed_refunds_and_disputes_are_bad_events() {
    let mut no_amount = charge(1000, "usd");
    no_amount.as_object_mut().unwrap().remove("amount_refunded");
    let mut no_dispute_id = dispute(2500, "usd");
    no_dispute_id["id"] = json!("");
    for (kind, object) in [
        ("charge.refunded", no_amount),
        ("charge.refunded", charge(-1, "usd")),
        ("charge.dispute.created", dispute(-5, "usd")),
        ("charge.dispute.created", no_dispute_id),
        ("charge.dispute.created", json!("du_1")),
    ] {
        let reason = bad_event(signed_verify(kind, object));
        assert!(!reason.is_empty(), "{kind}");
    }
    // a refund signed with another secret is refused before it is read
    let body = event("charge.refunded", charge(1000, "usd"));
    assert_eq!(
        bad_signature(verify(Some(&sign("whsec_other", NOW, &body)), &body)),
        "no v1 signature matches"
    );
}
