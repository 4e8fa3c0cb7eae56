//! The wallet seen by its owner: balance, history, top-ups through the payment provider, and
//! the provider's signed callback that credits a wallet exactly once per event, and takes back
//! what a refund or a dispute takes (once per event, at most what the payment credited).

use std::sync::Arc;

use toolgate_domain::{Account, BillingStatus, Micros, MonthKey, Pricing};
use toolgate_store::{
    DailyCalls, PaymentCredit, Reversal, Store, StoreError, TakeBack, TakenBack, WalletCredit,
};

use toolgate_ports::payments::{Checkout, CheckoutRequest, PaymentError, PaymentEvent, Payments};

/// Credits shown in the history.
const HISTORY_CREDITS: u32 = 50;
/// Micro-dollars per US cent.
const MICROS_PER_CENT: i64 = 10_000;

/// The wallet page's figures.
#[derive(Debug, Clone)]
pub struct WalletReport {
    /// The billing status record (balance, paid calls available, bounds).
    pub status: BillingStatus,
    /// The newest credits, newest first.
    pub credits: Vec<WalletCredit>,
    /// This month's days with paid calls: what the wallet was charged.
    pub charges: Vec<DailyCalls>,
    /// `YYYY-MM` of `charges`.
    pub month: String,
}

/// Why a top-up was not started or a callback not applied; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TopUpError {
    /// the amount is not a dollar amount within the operator's bounds
    #[error("{0}")]
    BadAmount(String),
    /// the provider refused, is unreachable or not set up, or the callback is not genuine
    #[error(transparent)]
    Payment(#[from] PaymentError),
    /// a genuine callback names an account that does not exist
    #[error("the event names no account of this service")]
    UnknownAccount,
    /// storage failed; the detail is for logs
    #[error("the wallet is temporarily unavailable, please retry")]
    Unavailable(String),
}

/// What a verified callback did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The wallet was credited now.
    Credited,
    /// A refund or dispute was taken back from the wallet now (the balance may be negative).
    TakenBack,
    /// This event id was applied before; nothing changed.
    AlreadyApplied,
    /// A refund or dispute of a payment that credited no wallet here; nothing changed.
    UnknownPayment,
    /// The event is not a payment; nothing changed.
    Ignored,
}

/// The wallet use cases.
pub struct Wallets {
    store: Arc<dyn Store>,
    payments: Option<Arc<dyn Payments>>,
    pricing: Pricing,
    public_url: String,
}

impl Wallets {
    /// Wallets over `store`, paid through `payments` (absent: top-ups are refused).
    pub fn new(
        store: Arc<dyn Store>,
        payments: Option<Arc<dyn Payments>>,
        pricing: Pricing,
        public_url: &str,
    ) -> Self {
        Self {
            store,
            payments,
            pricing,
            public_url: public_url.trim_end_matches('/').to_owned(),
        }
    }

    /// Whether top-ups can be offered at all.
    pub fn payments_enabled(&self) -> bool {
        self.payments.is_some()
    }

    /// The operator's prices (bounds of a top-up).
    pub fn pricing(&self) -> &Pricing {
        &self.pricing
    }

    /// Balance, credits and this month's charges.
    pub async fn report(&self, account: &Account) -> Result<WalletReport, TopUpError> {
        let month = MonthKey::now();
        let usage = self
            .store
            .usage(&account.id, &month)
            .await
            .map_err(unavailable)?;
        let credits = self
            .store
            .wallet_credits(&account.id, HISTORY_CREDITS)
            .await
            .map_err(unavailable)?;
        let mut charges = self
            .store
            .daily_calls(&account.id, &month)
            .await
            .map_err(unavailable)?;
        charges.retain(|day| day.paid > 0);
        Ok(WalletReport {
            status: BillingStatus::new(&account.tier, usage, &self.pricing),
            credits,
            charges,
            month: month.as_str().to_owned(),
        })
    }

    /// Checks `usd` against the bounds and opens a payment page for it.
    pub async fn start_top_up(&self, account: &Account, usd: &str) -> Result<Checkout, TopUpError> {
        let amount = self.checked_amount(usd)?;
        let payments = self.payments.as_ref().ok_or(PaymentError::NotConfigured)?;
        let request = CheckoutRequest {
            account: account.id.clone(),
            email: account.email.clone(),
            amount_cents: amount.0 / MICROS_PER_CENT,
            success_url: format!("{}/dashboard/wallet?paid=1", self.public_url),
            cancel_url: format!("{}/dashboard/wallet", self.public_url),
        };
        Ok(payments.create_checkout(&request).await?)
    }

    /// A top-up amount in whole cents within the operator's bounds.
    pub fn checked_amount(&self, usd: &str) -> Result<Micros, TopUpError> {
        let (min, max) = (self.pricing.min_topup, self.pricing.max_topup);
        let bounds = format!(
            "a top-up is between {} and {} USD",
            min.to_usd_cents_string(),
            max.to_usd_cents_string()
        );
        let amount = Micros::parse_usd(usd.trim())
            .map_err(|_| TopUpError::BadAmount(format!("not an amount in US dollars: {bounds}")))?;
        if amount.0 % MICROS_PER_CENT != 0 {
            return Err(TopUpError::BadAmount(format!("whole cents only: {bounds}")));
        }
        if amount.0 < min.0 || amount.0 > max.0 {
            return Err(TopUpError::BadAmount(bounds));
        }
        Ok(amount)
    }

    /// Applies the provider's callback: verified first, then credited, or taken back for a
    /// refund or dispute, once per event id.
    pub async fn webhook(
        &self,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<WebhookOutcome, TopUpError> {
        let payments = self.payments.as_ref().ok_or(PaymentError::NotConfigured)?;
        let now = toolgate_store::now_millis() / 1000;
        match payments.verify_webhook(signature, body, now)? {
            PaymentEvent::Ignored { event_id, kind } => {
                tracing::info!(event_id, kind, "payment event ignored");
                Ok(WebhookOutcome::Ignored)
            }
            PaymentEvent::Paid {
                event_id,
                account,
                amount_cents,
                payment,
            } => {
                let amount = micros(amount_cents)?;
                let credited = match &payment {
                    Some(payment) => {
                        let credit = PaymentCredit {
                            account: &account,
                            amount,
                            reference: &event_id,
                            payment,
                        };
                        self.store.credit_payment(&credit).await
                    }
                    None => {
                        tracing::warn!(
                            event_id,
                            "a paid checkout without a payment_intent: its refunds cannot be taken back"
                        );
                        self.store.credit_wallet(&account, amount, &event_id).await
                    }
                };
                match credited {
                    Ok((_, true)) => {
                        tracing::info!(event_id, account = %account, amount_cents, "wallet topped up");
                        Ok(WebhookOutcome::Credited)
                    }
                    Ok((_, false)) => Ok(WebhookOutcome::AlreadyApplied),
                    Err(StoreError::NotFound) => Err(TopUpError::UnknownAccount),
                    Err(err) => Err(unavailable(err)),
                }
            }
            PaymentEvent::Refunded {
                event_id,
                payment,
                refunded_cents,
            } => {
                let reversal = Reversal::Refunded {
                    total: micros(refunded_cents)?,
                };
                self.take_back(&event_id, payment.as_deref(), reversal)
                    .await
            }
            PaymentEvent::Disputed {
                event_id,
                dispute,
                payment,
                amount_cents,
            } => {
                let reversal = Reversal::Disputed {
                    dispute: &dispute,
                    amount: micros(amount_cents)?,
                };
                self.take_back(&event_id, payment.as_deref(), reversal)
                    .await
            }
        }
    }

    /// Takes back what a refund or dispute of `payment` asks, once per event id.
    async fn take_back(
        &self,
        event_id: &str,
        payment: Option<&str>,
        reversal: Reversal<'_>,
    ) -> Result<WebhookOutcome, TopUpError> {
        let taken = match payment {
            Some(payment) => {
                let take = TakeBack {
                    reference: event_id,
                    payment,
                    reversal,
                };
                self.store.take_back(&take).await.map_err(unavailable)?
            }
            None => TakenBack::UnknownPayment,
        };
        match taken {
            TakenBack::Taken {
                account,
                amount,
                balance,
            } => {
                tracing::info!(
                    event_id,
                    account = %account,
                    taken_usd = amount.to_usd_price_string(),
                    balance_usd = balance.to_usd_cents_string(),
                    "refund or dispute taken back from a wallet"
                );
                Ok(WebhookOutcome::TakenBack)
            }
            TakenBack::AlreadyApplied => Ok(WebhookOutcome::AlreadyApplied),
            TakenBack::UnknownPayment => {
                // acknowledged: a payment of something else on the same Stripe account, or one
                // that credited no wallet here; retrying would not change that
                tracing::warn!(
                    event_id,
                    payment,
                    "a refund or dispute of a payment that credited no wallet here; nothing taken back"
                );
                Ok(WebhookOutcome::UnknownPayment)
            }
        }
    }
}

/// Cents of an event as micro-dollars, refused when negative or out of range.
fn micros(cents: i64) -> Result<Micros, TopUpError> {
    cents
        .checked_mul(MICROS_PER_CENT)
        .filter(|amount| *amount >= 0)
        .map(Micros)
        .ok_or_else(|| PaymentError::BadEvent("amount out of range".to_owned()).into())
}

fn unavailable(err: StoreError) -> TopUpError {
    TopUpError::Unavailable(err.to_string())
}
