//! `POST /billing/stripe/webhook`: the payment provider's signed callback.

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use toolgate_app::owner::WebhookOutcome;

use crate::{Dash, payment_status};

/// Stripe's events are a few KiB; anything much larger is not one.
const MAX_EVENT_BYTES: usize = 512 * 1024;

/// Verifies, then credits (or takes back a refund or dispute) once per event id. A genuine event
/// that cannot be applied answers 4xx or 5xx so that the provider retries and shows it; a replay,
/// and a refund or dispute of a payment that credited no wallet here, answer 200 and change
/// nothing.
pub async fn stripe(State(state): State<Dash>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_EVENT_BYTES).await else {
        return answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": format!("an event has at most {MAX_EVENT_BYTES} bytes")}),
        );
    };
    let signature = parts
        .headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    match state.app.wallets().webhook(signature, &body).await {
        Ok(outcome) => {
            let outcome = match outcome {
                WebhookOutcome::Credited => "credited",
                WebhookOutcome::TakenBack => "taken_back",
                WebhookOutcome::AlreadyApplied => "already_applied",
                WebhookOutcome::UnknownPayment => "unknown_payment",
                WebhookOutcome::Ignored => "ignored",
            };
            answer(
                StatusCode::OK,
                json!({"received": true, "outcome": outcome}),
            )
        }
        Err(err) => {
            let status = payment_status::status_of(&err);
            tracing::warn!(error = %err, status = status.as_u16(), "payment webhook refused");
            answer(status, json!({"error": err.to_string()}))
        }
    }
}

fn answer(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}
