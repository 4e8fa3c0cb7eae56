//! Model calls on the operator's provider keys. Those keys cost the operator by the token while
//! a call costs the account one metered call, so such a call asks for at most
//! `operator_max_tokens` (that many when it names none), and an account's calls use at most
//! `operator_tokens_per_day` input and output tokens per UTC day: a call is refused before it is
//! sent once the account's count for today has reached the limit. The count grows by what the
//! provider reported after each call; a call whose usage is unknown (the stream broke, the call
//! was cancelled or dropped, the provider reported none) counts its `max_tokens` and an
//! estimate of its input. The check and the count are apart, so the limit may be passed by the
//! calls in flight at once (the check waits for the call's turn, so a few per account on each
//! server), never more.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_domain::{AccountId, DayKey, OperatorLoan};
use toolgate_store::OperatorTokens;

use crate::capability::Failure;
use toolgate_ports::ai::{Message, ModelAnswer, ModelError, Part};

/// Bytes of text counted as one token in an estimate: fewer than a typical tokenizer's ~4, so
/// the estimate errs on the operator's side.
const BYTES_PER_TOKEN: u64 = 3;
/// Tokens one image is estimated at: about the most a provider bills for one.
const TOKENS_PER_IMAGE: u64 = 1_600;

/// What model calls on the operator's provider keys may use: those keys cost the operator by
/// the token, while a call costs the account one metered call whatever its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperatorKeyLimits {
    /// The most `max_tokens` one call may ask (more is capped to it), and what is asked when
    /// the call names none.
    pub max_tokens: u32,
    /// Input and output tokens one account's calls may use per UTC day; 0: the operator's keys
    /// are not lent at all.
    pub tokens_per_day: u64,
}

impl Default for OperatorKeyLimits {
    fn default() -> Self {
        Self {
            max_tokens: 4096,
            tokens_per_day: 100_000,
        }
    }
}

/// Lends the operator's keys within [`OperatorKeyLimits`].
pub(crate) struct OperatorKeys {
    tokens: Arc<dyn OperatorTokens>,
    limits: OperatorKeyLimits,
}

/// What a call used, as far as is known.
pub(crate) enum Spent {
    /// The provider's count of input and output tokens.
    Reported(u64),
    /// Unknown: it may have generated up to its `max_tokens`.
    Unknown,
    /// Nothing was generated (never sent, or answered with an error status).
    Nothing,
}

impl Spent {
    /// What a finished call used, from its outcome.
    pub(crate) fn of(outcome: &Result<ModelAnswer, ModelError>) -> Self {
        match outcome {
            Ok(answer) => match answer.usage.input_tokens + answer.usage.output_tokens {
                0 => Self::Unknown,
                reported => Self::Reported(reported),
            },
            Err(ModelError::Refused(_) | ModelError::Rejected(_)) => Self::Nothing,
            Err(ModelError::Failed(_)) => Self::Unknown,
        }
    }
}

impl OperatorKeys {
    /// Keys lent within `limits`, counted in `tokens`.
    pub(crate) fn new(tokens: Arc<dyn OperatorTokens>, limits: OperatorKeyLimits) -> Self {
        Self { tokens, limits }
    }

    /// Lends the key for one call of `account` that asked for `asked` tokens at most and sends
    /// `input_estimate` tokens; refused (a tool error naming `own_secret`, where the caller's
    /// own key goes) when the account's tokens today are at or above the limit.
    pub(crate) async fn lend(
        &self,
        account: &AccountId,
        own_secret: &str,
        asked: Option<u32>,
        input_estimate: u64,
    ) -> Result<Lent, Failure> {
        let store_own = format!(
            "store your own key as the secret {own_secret} (svc_write {{\"secret_set\": \
             {{\"name\": \"{own_secret}\", \"value\": \"…\"}}}}) or name one with api_key_secret"
        );
        let limit = self.limits.tokens_per_day;
        if limit == 0 {
            return Err(Failure::new(format!(
                "this service does not lend its model keys: {store_own}"
            )));
        }
        let day = DayKey::now();
        let used = self
            .tokens
            .operator_tokens(account, &day)
            .await
            .map_err(|error| {
                tracing::error!(%error, "cannot read the tokens used on the operator's keys");
                Failure::new(
                    "the service could not check its daily limit of model tokens, so nothing \
                     was sent; please retry",
                )
            })?;
        if u64::try_from(used).unwrap_or(0) >= limit {
            return Err(Failure::new(format!(
                "the daily limit of this service's model keys is reached for this account: \
                 {used} of {limit} tokens (input and output) used today; it starts again at \
                 00:00 UTC. Calls with your own key are not limited: {store_own}"
            )));
        }
        let cap = self.limits.max_tokens;
        let max_tokens = asked.map_or(cap, |asked| asked.min(cap));
        Ok(Lent {
            max_tokens,
            capped: asked.is_some_and(|asked| asked > cap),
            limit,
            pending: Some(Pending {
                tokens: Arc::clone(&self.tokens),
                account: account.clone(),
                day,
                used,
                unknown: u64::from(max_tokens) + input_estimate,
            }),
        })
    }
}

/// One call on the operator's key, lent just before it is sent: what it may ask for, and its
/// count still to add. Dropped before [`Lent::settle`] (the call was abandoned mid-flight), it
/// counts as unknown.
pub(crate) struct Lent {
    max_tokens: u32,
    capped: bool,
    limit: u64,
    pending: Option<Pending>,
}

/// The count a lent call still owes.
struct Pending {
    tokens: Arc<dyn OperatorTokens>,
    account: AccountId,
    day: DayKey,
    /// The account's tokens today when the call was lent the key.
    used: i64,
    /// What the call counts if its usage is unknown.
    unknown: u64,
}

impl Pending {
    /// Adds `spent` to the day's count; returns the count afterwards as well as it is known.
    async fn add(self, spent: u64) -> i64 {
        let spent = i64::try_from(spent).unwrap_or(i64::MAX);
        match self
            .tokens
            .add_operator_tokens(&self.account, &self.day, spent)
            .await
        {
            Ok(total) => total,
            Err(error) => {
                tracing::error!(%error, tokens = spent, "the tokens of a model call on the operator's key could not be counted");
                self.used.saturating_add(spent)
            }
        }
    }
}

impl Lent {
    /// The `max_tokens` to send.
    pub(crate) fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    /// Counts what the call used and describes the loan (`structuredContent.llm.operator_key`).
    pub(crate) async fn settle(mut self, spent: Spent) -> Option<OperatorLoan> {
        let pending = self.pending.take()?;
        let spent = match spent {
            Spent::Reported(tokens) => tokens,
            Spent::Unknown => pending.unknown,
            Spent::Nothing => 0,
        };
        let tokens_today = pending.add(spent).await;
        Some(OperatorLoan {
            max_tokens: self.max_tokens,
            capped: self.capped,
            tokens_today,
            tokens_per_day: self.limit,
        })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        // the call's future was dropped with the request on its way: count it as unknown
        let unknown = pending.unknown;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(pending.add(unknown));
            }
            Err(_) => tracing::error!(
                tokens = unknown,
                "an abandoned model call on the operator's key could not be counted"
            ),
        }
    }
}

/// An estimate of the input tokens of `system` and `messages`, on the generous side.
pub(crate) fn input_estimate(system: Option<&str>, messages: &[Message]) -> u64 {
    let mut bytes = system.map_or(0, str::len) as u64;
    let mut images = 0u64;
    for part in messages.iter().flat_map(|m| &m.parts) {
        match part {
            Part::Text(text) => bytes += text.len() as u64,
            Part::Image { .. } => images += 1,
        }
    }
    bytes.div_ceil(BYTES_PER_TOKEN) + images * TOKENS_PER_IMAGE
}

/// The schema of the loan's description in `structuredContent.llm.operator_key`.
pub(crate) fn schema() -> Value {
    let integer = json!({"type": "integer"});
    json!({"type": "object", "description": "present when the call used the operator's key",
        "properties": {"max_tokens": integer, "capped": {"type": "boolean"},
            "tokens_today": integer, "tokens_per_day": integer}})
}

#[cfg(test)]
#[path = "operator_tests.rs"]
mod tests;
