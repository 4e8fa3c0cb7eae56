//! Refunds and disputes, read from verified events: `charge.refunded` carries a Charge whose
//! `amount_refunded` is the total refunded so far (it grows with each partial refund), and
//! `charge.dispute.created` a Dispute with its `amount`. Both name the `payment_intent` that
//! the Checkout Session which credited the wallet named, which is how the wallet is found.

use serde::Deserialize;
use serde_json::Value;
use toolgate_ports::payments::{PaymentError, PaymentEvent};

/// Reads one kind of event's object into a payment event.
pub(crate) type Reader = fn(String, Value) -> Result<PaymentEvent, PaymentError>;

/// The reader of an event of `kind`, if it is a refund or a dispute.
pub(crate) fn reader(kind: &str) -> Option<Reader> {
    match kind {
        "charge.refunded" => Some(refunded),
        "charge.dispute.created" => Some(disputed),
        _ => None,
    }
}

/// The longest id taken from an event (Stripe's are far shorter).
const MAX_ID: usize = 255;

/// An object's id, whether the field holds it or (expanded) the object itself.
pub(crate) fn id_of(field: &Value) -> Option<String> {
    let id = match field {
        Value::String(id) => id.as_str(),
        Value::Object(object) => object.get("id")?.as_str()?,
        _ => return None,
    };
    (!id.is_empty() && id.len() <= MAX_ID).then(|| id.to_owned())
}

/// The fields of a Charge this service reads.
#[derive(Deserialize)]
struct Charge {
    amount_refunded: i64,
    currency: String,
    #[serde(default)]
    payment_intent: Value,
}

/// The fields of a Dispute this service reads.
#[derive(Deserialize)]
struct Dispute {
    id: String,
    amount: i64,
    currency: String,
    #[serde(default)]
    payment_intent: Value,
}

fn refunded(event_id: String, object: Value) -> Result<PaymentEvent, PaymentError> {
    let charge: Charge = serde_json::from_value(object)
        .map_err(|e| PaymentError::BadEvent(format!("not a charge: {e}")))?;
    if !charge.currency.eq_ignore_ascii_case("usd") {
        // wallets are credited in dollars only: not one of this service's payments
        return Ok(other_currency(event_id, "charge.refunded"));
    }
    if charge.amount_refunded < 0 {
        return Err(PaymentError::BadEvent(
            "the charge's amount_refunded is negative".to_owned(),
        ));
    }
    Ok(PaymentEvent::Refunded {
        event_id,
        payment: id_of(&charge.payment_intent),
        refunded_cents: charge.amount_refunded,
    })
}

fn disputed(event_id: String, object: Value) -> Result<PaymentEvent, PaymentError> {
    let dispute: Dispute = serde_json::from_value(object)
        .map_err(|e| PaymentError::BadEvent(format!("not a dispute: {e}")))?;
    if !dispute.currency.eq_ignore_ascii_case("usd") {
        return Ok(other_currency(event_id, "charge.dispute.created"));
    }
    if dispute.amount < 0 || dispute.id.is_empty() || dispute.id.len() > MAX_ID {
        return Err(PaymentError::BadEvent(
            "the dispute's amount is negative or its id malformed".to_owned(),
        ));
    }
    Ok(PaymentEvent::Disputed {
        event_id,
        dispute: dispute.id,
        payment: id_of(&dispute.payment_intent),
        amount_cents: dispute.amount,
    })
}

fn other_currency(event_id: String, kind: &str) -> PaymentEvent {
    PaymentEvent::Ignored {
        event_id,
        kind: format!("{kind} (not in usd)"),
    }
}
