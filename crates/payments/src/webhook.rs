//! Stripe's signed webhooks: the `Stripe-Signature` header checked against the raw body, then
//! the event read. Nothing in the body is looked at before its signature holds.

use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;
use toolgate_domain::AccountId;
use toolgate_ports::payments::{PaymentError, PaymentEvent};

/// How far a signature's timestamp may be from now, either way, in seconds (Stripe's default
/// tolerance): an old event replayed, or one dated ahead, is refused.
pub const TOLERANCE_SECONDS: i64 = 300;

/// The longest `client_reference_id` taken as an account id (Stripe allows 200; ours are
/// shorter).
const MAX_ACCOUNT_ID: usize = 100;

type HmacSha256 = Hmac<Sha256>;

/// The `Stripe-Signature` header value Stripe would send for `body` at `t` (Unix seconds)
/// under `secret`: `t=<t>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. For tests that sign events.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    let t = t.to_string();
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, &t, body).finalize().into_bytes())
    )
}

/// The MAC of `"<t>.<body>"` under `secret`, not yet finalized; `t` is the timestamp exactly as
/// the header writes it.
fn mac(secret: &str, t: &str, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length, so new_from_slice cannot fail here; the fallback (an
    // all-zero key, which no genuine signature matches) only keeps this free of a panic.
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| <HmacSha256 as KeyInit>::new(&Default::default()));
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Checks `header` against `body` at `now` under `secret`, then reads the event.
pub(crate) fn verify(
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<PaymentEvent, PaymentError> {
    let header = header.ok_or(PaymentError::BadSignature("no Stripe-Signature header"))?;
    let (t_text, t, candidates) = parse_header(header)?;
    let expected = mac(secret, t_text, body);
    // Any v1 may match: while a secret is being rotated Stripe signs with the old and the new.
    // Only Stripe's own spelling counts (64 lower-case hex digits), so that no other byte
    // string passes as the same signature; verify_slice compares in constant time.
    let matches = candidates
        .iter()
        .filter(|candidate| {
            candidate.len() == 64
                && candidate
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .filter_map(|candidate| hex::decode(candidate).ok())
        .any(|tag| expected.clone().verify_slice(&tag).is_ok());
    if !matches {
        return Err(PaymentError::BadSignature("no v1 signature matches"));
    }
    if now.abs_diff(t) > TOLERANCE_SECONDS.unsigned_abs() {
        return Err(PaymentError::BadSignature(
            "the signature's timestamp is outside the tolerance",
        ));
    }
    read_event(body)
}

/// `t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]`: the one timestamp (as written, and its value) and
/// every v1 value; other schemes (v0 is Stripe's test-mode scheme) are ignored. The timestamp is
/// digits (after an optional `-`) and signed as written, so no other spelling of a signed one
/// (`+t`, `0t`) passes.
fn parse_header(header: &str) -> Result<(&str, i64, Vec<&str>), PaymentError> {
    const MALFORMED: PaymentError =
        PaymentError::BadSignature("the Stripe-Signature header is malformed");
    let mut t = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        let (key, value) = item.trim().split_once('=').ok_or(MALFORMED)?;
        match key {
            "t" if t.is_none() => {
                let digits = value.strip_prefix('-').unwrap_or(value);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(MALFORMED);
                }
                t = Some((value, value.parse::<i64>().map_err(|_| MALFORMED)?));
            }
            "t" => return Err(MALFORMED),
            "v1" => v1.push(value),
            _ => {}
        }
    }
    let (t_text, t) = t.ok_or(PaymentError::BadSignature(
        "the Stripe-Signature header has no timestamp",
    ))?;
    if v1.is_empty() {
        return Err(PaymentError::BadSignature(
            "the Stripe-Signature header has no v1 signature",
        ));
    }
    Ok((t_text, t, v1))
}

/// The envelope every Stripe event has.
#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Option<EventData>,
}

#[derive(Deserialize)]
struct EventData {
    object: serde_json::Value,
}

/// The fields of a Checkout Session this service reads.
#[derive(Deserialize)]
struct CheckoutSession {
    client_reference_id: Option<String>,
    amount_total: Option<i64>,
    currency: Option<String>,
    payment_status: Option<String>,
    /// An id, or (expanded) an object with one.
    #[serde(default)]
    payment_intent: serde_json::Value,
}

/// Reads a verified body: a paid checkout becomes [`PaymentEvent::Paid`], a refunded or
/// disputed charge [`PaymentEvent::Refunded`] or [`PaymentEvent::Disputed`] (see `reversals`),
/// anything else [`PaymentEvent::Ignored`].
fn read_event(body: &[u8]) -> Result<PaymentEvent, PaymentError> {
    let event: Event = serde_json::from_slice(body)
        .map_err(|e| PaymentError::BadEvent(format!("not a Stripe event: {e}")))?;
    if event.id.is_empty() {
        return Err(PaymentError::BadEvent("the event has no id".to_owned()));
    }
    if let Some(read) = crate::reversals::reader(&event.kind) {
        let object = event
            .data
            .map(|data| data.object)
            .ok_or_else(|| PaymentError::BadEvent("the event has no data.object".to_owned()))?;
        return read(event.id, object);
    }
    // An asynchronous payment (a bank debit) completes its checkout unpaid, then succeeds
    // later under another event: exactly one of the two is paid, so a session credits once.
    let counts = matches!(
        event.kind.as_str(),
        "checkout.session.completed" | "checkout.session.async_payment_succeeded"
    );
    if !counts {
        return Ok(ignored(event));
    }
    let object = event
        .data
        .as_ref()
        .map(|data| data.object.clone())
        .ok_or_else(|| PaymentError::BadEvent("the event has no data.object".to_owned()))?;
    let session: CheckoutSession = serde_json::from_value(object)
        .map_err(|e| PaymentError::BadEvent(format!("not a checkout session: {e}")))?;
    if session.payment_status.as_deref() != Some("paid") {
        return Ok(ignored(event));
    }
    let account = match session.client_reference_id {
        Some(id) if !id.is_empty() && id.chars().count() <= MAX_ACCOUNT_ID => id,
        Some(_) => {
            return Err(PaymentError::BadEvent(
                "client_reference_id is empty or too long to be an account".to_owned(),
            ));
        }
        None => {
            return Err(PaymentError::BadEvent(
                "the session has no client_reference_id".to_owned(),
            ));
        }
    };
    match session.currency.as_deref() {
        Some(currency) if currency.eq_ignore_ascii_case("usd") => {}
        other => {
            return Err(PaymentError::BadEvent(format!(
                "the session's currency is {}, not usd",
                other
                    .map(|c| c.chars().take(16).collect::<String>())
                    .unwrap_or_else(|| "missing".to_owned())
            )));
        }
    }
    let amount_cents = match session.amount_total {
        Some(amount) if amount > 0 => amount,
        _ => {
            return Err(PaymentError::BadEvent(
                "the session's amount_total is missing or not positive".to_owned(),
            ));
        }
    };
    Ok(PaymentEvent::Paid {
        event_id: event.id,
        account: AccountId::from_stored(account),
        amount_cents,
        payment: crate::reversals::id_of(&session.payment_intent),
    })
}

fn ignored(event: Event) -> PaymentEvent {
    PaymentEvent::Ignored {
        event_id: event.id,
        kind: event.kind,
    }
}

#[cfg(test)]
#[path = "webhook_proptests.rs"]
mod proptests;
