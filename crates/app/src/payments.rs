//! The payments seam: what wallet top-ups need from a payment provider, as values. The binary
//! wires in the real one (crate `payments`: Stripe Checkout and its signed webhooks); `app`
//! never speaks to Stripe itself.

use async_trait::async_trait;
use toolgate_domain::{AccountId, Email};

/// A top-up the owner asked to pay.
#[derive(Debug, Clone)]
pub struct CheckoutRequest {
    /// Whose wallet it funds (Stripe's `client_reference_id`).
    pub account: AccountId,
    /// The owner's address, prefilled on the payment page.
    pub email: Email,
    /// The amount in US cents, already within the operator's bounds.
    pub amount_cents: i64,
    /// Where the provider sends the payer after paying.
    pub success_url: String,
    /// Where the provider sends the payer who gives up.
    pub cancel_url: String,
}

/// A payment page the provider opened for a [`CheckoutRequest`].
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The provider's id of the checkout session.
    pub id: String,
    /// The page to send the payer to.
    pub url: String,
}

/// A verified webhook event that may credit a wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentEvent {
    /// A checkout was paid (`checkout.session.completed` with `payment_status: paid`).
    Paid {
        /// The event's id: a wallet is credited at most once per event id.
        event_id: String,
        /// `client_reference_id`: the account to credit.
        account: AccountId,
        /// `amount_total` in US cents.
        amount_cents: i64,
    },
    /// Any other verified event (acknowledged, changes nothing); names its type for the log.
    Ignored {
        /// The event's id.
        event_id: String,
        /// The event's type.
        kind: String,
    },
}

/// Why a payment step failed. Messages never hold a key or a signature.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// the provider is not configured (no secret key, or no webhook secret)
    #[error("payments are not set up on this service")]
    NotConfigured,
    /// the provider refused or could not be reached; the detail is for logs
    #[error("the payment provider could not be reached, please retry: {0}")]
    Unavailable(String),
    /// the webhook's signature header is missing, malformed, wrong or outside the time tolerance
    #[error("bad webhook signature: {0}")]
    BadSignature(&'static str),
    /// the webhook's body is not an event this service understands
    #[error("malformed webhook event: {0}")]
    BadEvent(String),
}

/// Opens payment pages and checks the provider's callbacks.
#[async_trait]
pub trait Payments: Send + Sync {
    /// Asks the provider for a payment page for `request`.
    async fn create_checkout(&self, request: &CheckoutRequest) -> Result<Checkout, PaymentError>;

    /// Verifies a webhook's signature header against its raw body at `now` (Unix seconds) and
    /// reads the event. Nothing is trusted before the signature is checked.
    fn verify_webhook(
        &self,
        signature_header: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<PaymentEvent, PaymentError>;
}
