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

/// A verified webhook event that may credit a wallet or take money back from one.
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
        /// The session's `payment_intent`: what its refunds and disputes name later. `None`
        /// when the session carries none (the credit then cannot be taken back).
        payment: Option<String>,
    },
    /// A charge was refunded, in part or in full (`charge.refunded`).
    Refunded {
        /// The event's id: applied at most once.
        event_id: String,
        /// The charge's `payment_intent`, `None` when it has none.
        payment: Option<String>,
        /// `amount_refunded` in US cents: the charge's refunds so far, in total.
        refunded_cents: i64,
    },
    /// A charge was disputed by the card holder (`charge.dispute.created`).
    Disputed {
        /// The event's id: applied at most once.
        event_id: String,
        /// The dispute's id: taken back at most once whatever event carries it.
        dispute: String,
        /// The dispute's `payment_intent`, `None` when it has none.
        payment: Option<String>,
        /// `amount` in US cents: the amount disputed.
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
