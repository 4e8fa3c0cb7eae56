//! Wallet top-ups through Stripe Checkout behind app's payments seam: [`Stripe`] opens a
//! Checkout Session for a [`CheckoutRequest`] and verifies Stripe's signed webhooks
//! ([`webhook`]), reading a paid session as a credit to the account named by its
//! `client_reference_id`, and a refunded or disputed charge as money to take back.

mod reversals;
pub mod webhook;

use std::time::Duration;

use async_trait::async_trait;
use reqwest::{StatusCode, redirect};
use serde::Deserialize;
use toolgate_domain::SecretName;
use toolgate_ports::payments::{Checkout, CheckoutRequest, PaymentError, PaymentEvent, Payments};
use toolgate_vault::Redactor;

pub use webhook::sign;

/// Stripe's API, when the operator names no other.
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";

/// The time limit of one API request, when the operator names no other.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);

/// The most of an answer read from Stripe (its answers are a few kilobytes).
const MAX_ANSWER: usize = 1 << 20;

/// The longest part of Stripe's error message passed on, in characters.
const MAX_DETAIL: usize = 300;

/// The operator's Stripe settings.
#[derive(Clone)]
pub struct StripeSettings {
    /// The API's base URL (`https://api.stripe.com`; a stand-in's in tests).
    pub api_base: String,
    /// `stripe_secret_key` (`sk_…`); without it no checkout is opened.
    pub secret_key: Option<String>,
    /// `stripe_webhook_secret` (`whsec_…`); without it no webhook is accepted.
    pub webhook_secret: Option<String>,
    /// The time limit of one API request.
    pub timeout: Duration,
}

impl Default for StripeSettings {
    fn default() -> Self {
        Self {
            api_base: DEFAULT_API_BASE.to_owned(),
            secret_key: None,
            webhook_secret: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl std::fmt::Debug for StripeSettings {
    // The keys are secrets: only whether they are set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeSettings")
            .field("api_base", &self.api_base)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "…"))
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Stripe Checkout and its webhooks.
pub struct Stripe {
    client: reqwest::Client,
    /// `api_base` without a trailing slash.
    api_base: String,
    secret_key: Option<String>,
    webhook_secret: Option<String>,
    /// Redacts the secret key from every error detail.
    key_redactor: Redactor,
}

impl std::fmt::Debug for Stripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stripe")
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

impl Stripe {
    /// A client for `settings`; refuses an `api_base` that is not an http(s) URL.
    pub fn new(settings: StripeSettings) -> Result<Self, String> {
        let api_base = settings.api_base.trim_end_matches('/').to_owned();
        match reqwest::Url::parse(&api_base) {
            Ok(url) if matches!(url.scheme(), "https" | "http") && url.has_host() => {}
            _ => {
                return Err(format!(
                    "stripe api base {api_base:?} is not an http(s) URL"
                ));
            }
        }
        // ring as the process's TLS provider, as crates/fetch installs it: reqwest is built
        // without one of its own (so aws-lc is never compiled); a second install changes nothing.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The API base is an operator setting, never a tenant's input, so these requests do
        // not pass the egress guard. Proxies from the environment are ignored, as by every
        // client of this service, and redirects are not followed: an API answers, it does not
        // send the key elsewhere.
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(redirect::Policy::none())
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .timeout(settings.timeout)
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the Stripe client: {e}"))?;
        let secret_key = settings.secret_key.filter(|k| !k.is_empty());
        let key_redactor = match (&secret_key, SecretName::parse("STRIPE_SECRET_KEY")) {
            (Some(key), Ok(name)) => Redactor::new([(&name, key.as_bytes())]),
            _ => Redactor::new(std::iter::empty()),
        };
        Ok(Self {
            client,
            api_base,
            secret_key,
            webhook_secret: settings.webhook_secret.filter(|k| !k.is_empty()),
            key_redactor,
        })
    }

    /// `detail` with the secret key redacted (the vault's redactor: every form of it), should
    /// Stripe or a proxy ever echo it.
    fn scrubbed(&self, detail: String) -> String {
        self.key_redactor.redact(&detail)
    }
}

/// The fields of a created Checkout Session this service reads.
#[derive(Deserialize)]
struct CreatedSession {
    id: String,
    url: Option<String>,
}

#[async_trait]
impl Payments for Stripe {
    async fn create_checkout(&self, request: &CheckoutRequest) -> Result<Checkout, PaymentError> {
        let key = self
            .secret_key
            .as_ref()
            .ok_or(PaymentError::NotConfigured)?;
        let form = [
            ("mode", "payment".to_owned()),
            ("client_reference_id", request.account.as_str().to_owned()),
            ("customer_email", request.email.as_str().to_owned()),
            ("success_url", request.success_url.clone()),
            ("cancel_url", request.cancel_url.clone()),
            ("line_items[0][quantity]", "1".to_owned()),
            ("line_items[0][price_data][currency]", "usd".to_owned()),
            (
                "line_items[0][price_data][unit_amount]",
                request.amount_cents.to_string(),
            ),
            (
                "line_items[0][price_data][product_data][name]",
                "Wallet top-up".to_owned(),
            ),
            ("metadata[account_id]", request.account.as_str().to_owned()),
        ];
        let response = self
            .client
            .post(format!("{}/v1/checkout/sessions", self.api_base))
            .bearer_auth(key)
            // A retry of this very request (reqwest never retries a POST itself, but a proxy
            // might) opens no second session.
            .header("Idempotency-Key", idempotency_key()?)
            .form(&form)
            .send()
            .await
            .map_err(|e| PaymentError::Unavailable(self.scrubbed(describe(&e))))?;
        let status = response.status();
        let answer = read_bounded(response)
            .await
            .map_err(|e| PaymentError::Unavailable(self.scrubbed(e)))?;
        if !status.is_success() {
            return Err(PaymentError::Unavailable(
                self.scrubbed(refusal(status, &answer)),
            ));
        }
        let session: CreatedSession = serde_json::from_slice(&answer).map_err(|e| {
            PaymentError::Unavailable(format!("Stripe's answer is not a checkout session: {e}"))
        })?;
        let url = session.url.filter(|u| !u.is_empty()).ok_or_else(|| {
            PaymentError::Unavailable("Stripe's checkout session has no url".to_owned())
        })?;
        Ok(Checkout {
            id: session.id,
            url,
        })
    }

    fn verify_webhook(
        &self,
        signature_header: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<PaymentEvent, PaymentError> {
        let secret = self
            .webhook_secret
            .as_ref()
            .ok_or(PaymentError::NotConfigured)?;
        webhook::verify(secret, signature_header, body, now)
    }
}

/// A fresh random key: one per checkout the owner asks for.
fn idempotency_key() -> Result<String, PaymentError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| PaymentError::Unavailable(format!("no randomness: {e}")))?;
    Ok(hex::encode(bytes))
}

/// Why a request did not get an answer, in words for the log (reqwest names the URL, which
/// holds no secret; the key travels in a header it never prints).
fn describe(err: &reqwest::Error) -> String {
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    format!("Stripe {what}: {err}")
}

/// Reads at most [`MAX_ANSWER`] bytes of the answer.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut answer = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading Stripe's answer: {}", describe(&e)))?
    {
        if answer.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("Stripe's answer is longer than {MAX_ANSWER} bytes"));
        }
        answer.extend_from_slice(&chunk);
    }
    Ok(answer)
}

/// A refusal's detail: the status and Stripe's `error.message`, shortened.
fn refusal(status: StatusCode, answer: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(answer)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned));
    match message {
        Some(message) => format!(
            "Stripe answered {status}: {}",
            message.chars().take(MAX_DETAIL).collect::<String>()
        ),
        None => format!("Stripe answered {status}"),
    }
}
