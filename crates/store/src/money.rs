//! What money needs beyond admission: the tokens each account's model calls used of the
//! operator's provider keys per day, and payments taken back from wallets when the payment
//! provider refunds them or a card holder disputes them.

use async_trait::async_trait;
use toolgate_domain::{AccountId, DayKey, Micros};

use crate::StoreError;

/// Input + output tokens of model calls made on the operator's keys, per account and UTC day.
#[async_trait]
pub trait OperatorTokens: Send + Sync {
    /// Tokens the account used on `day`; 0 when it used none (or does not exist).
    async fn operator_tokens(&self, account: &AccountId, day: &DayKey) -> Result<i64, StoreError>;

    /// Adds `tokens` (≥ 0) to the account's count for `day` in one atomic statement, durable
    /// when this returns, and returns the new count: concurrent adds are never lost or doubled.
    /// `Err(NotFound)` when the account does not exist.
    async fn add_operator_tokens(
        &self,
        account: &AccountId,
        day: &DayKey,
        tokens: i64,
    ) -> Result<i64, StoreError>;
}

/// A wallet credit paid through the payment provider, kept with the payment it came from.
#[derive(Debug, Clone)]
pub struct PaymentCredit<'a> {
    /// Whose wallet.
    pub account: &'a AccountId,
    /// How much (positive).
    pub amount: Micros,
    /// The credit's unique reference (the provider's event id).
    pub reference: &'a str,
    /// The provider's id of the payment (Stripe's payment intent), by which its refunds and
    /// disputes find the credit again.
    pub payment: &'a str,
}

/// What a refund or a dispute of a payment asks to take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reversal<'a> {
    /// The payment's refunds so far, in total (Stripe's `amount_refunded` grows with each
    /// partial refund): what exceeds the refunds taken back before is taken now.
    Refunded {
        /// The refunds' total.
        total: Micros,
    },
    /// A dispute (chargeback) of `amount`, taken back once per dispute id.
    Disputed {
        /// The provider's id of the dispute.
        dispute: &'a str,
        /// The amount disputed.
        amount: Micros,
    },
}

/// One refund or dispute event to apply.
#[derive(Debug, Clone, Copy)]
pub struct TakeBack<'a> {
    /// The event's unique reference (the provider's event id): applied at most once.
    pub reference: &'a str,
    /// The payment refunded or disputed.
    pub payment: &'a str,
    /// How much of it.
    pub reversal: Reversal<'a>,
}

/// What applying a [`TakeBack`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakenBack {
    /// Applied now. `amount` is what was taken (0 when the payment had been taken back in full
    /// already); `balance` is the wallet less what is owed afterwards (negative while owed).
    Taken {
        /// Whose wallet.
        account: AccountId,
        /// What was taken back now.
        amount: Micros,
        /// The balance afterwards.
        balance: Micros,
    },
    /// This reference (or this dispute, under another event id) was applied before; nothing
    /// changed.
    AlreadyApplied,
    /// No wallet was credited from this payment; nothing changed.
    UnknownPayment,
}

/// Payments that credited wallets, and what their refunds and disputes take back.
///
/// A take-back empties the wallet first and records the rest as owed; a credit (this one, or
/// [`crate::Metering::credit_wallet`]) repays what is owed first. So at most one of wallet and
/// owed is non-zero, admission (which pays from the wallet alone) refuses paid calls while
/// anything is owed, and the balance shown is wallet − owed. What is taken back of one payment
/// never exceeds what it credited.
#[async_trait]
pub trait TakeBacks: Send + Sync {
    /// Credits the wallet as [`crate::Metering::credit_wallet`] does, at most once per
    /// reference and at most once per payment, and remembers the payment. Returns the balance
    /// afterwards and whether this call applied the credit. `Err(NotFound)`: no such account.
    async fn credit_payment(
        &self,
        credit: &PaymentCredit<'_>,
    ) -> Result<(Micros, bool), StoreError>;

    /// Takes back what `take` asks of the wallet the payment credited, in one transaction and
    /// at most once per reference (and per dispute id), capped at what the payment credited
    /// less what was taken back of it before. Durable when this returns.
    async fn take_back(&self, take: &TakeBack<'_>) -> Result<TakenBack, StoreError>;
}

/// How much a payment gives up to `reversal`, from its row: the new refunds total to store and
/// the amount to take, which never passes what the payment credited. Both backends use it.
pub fn reversal_amounts(
    reversal: Reversal<'_>,
    credited: Micros,
    refunded_before: Micros,
    taken_before: Micros,
) -> (Micros, Micros) {
    let left = (credited.0 - taken_before.0).max(0);
    let (refunded, asked) = match reversal {
        Reversal::Refunded { total } => {
            let refunded = total.0.max(refunded_before.0);
            (refunded, refunded - refunded_before.0)
        }
        Reversal::Disputed { amount, .. } => (refunded_before.0, amount.0.max(0)),
    };
    (Micros(refunded), Micros(asked.min(left)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refunds_are_cumulative_and_nothing_passes_the_credit() {
        let refund = |total| Reversal::Refunded {
            total: Micros(total),
        };
        // a first partial refund of 10 of 25, then the total grows to 15: 5 more
        assert_eq!(
            reversal_amounts(refund(10), Micros(25), Micros(0), Micros(0)),
            (Micros(10), Micros(10))
        );
        assert_eq!(
            reversal_amounts(refund(15), Micros(25), Micros(10), Micros(10)),
            (Micros(15), Micros(5))
        );
        // an older event arriving late takes nothing and keeps the larger total
        assert_eq!(
            reversal_amounts(refund(10), Micros(25), Micros(15), Micros(15)),
            (Micros(15), Micros(0))
        );
        // a dispute after a refund takes only what is left of the credit
        let dispute = Reversal::Disputed {
            dispute: "du_1",
            amount: Micros(25),
        };
        assert_eq!(
            reversal_amounts(dispute, Micros(25), Micros(15), Micros(15)),
            (Micros(15), Micros(10))
        );
        assert_eq!(
            reversal_amounts(refund(25), Micros(25), Micros(15), Micros(25)),
            (Micros(25), Micros(0))
        );
    }
}
