//! Wallet credits (repaying what is owed first), payments and their take-backs, and the tokens
//! accounts used of the operator's model keys. Exact under concurrency by row locks: the
//! account's row for credits and take-backs (admissions' guarded updates wait on it and
//! re-check), the payment's row for take-backs of one payment.

use async_trait::async_trait;
use sqlx::PgPool;
use toolgate_domain::{AccountId, DayKey, Micros};
use toolgate_store::{
    OperatorTokens, PaymentCredit, Reversal, StoreError, TakeBack, TakeBacks, TakenBack,
    now_millis, reversal_amounts,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

/// Credits `amount` under `reference`, and under `payment` when given, in one transaction:
/// at most once per reference and per payment, what is owed repaid first. Returns the balance
/// (wallet less owed) and whether the credit was applied.
pub(crate) async fn credit(
    pool: &PgPool,
    account: &AccountId,
    amount: Micros,
    reference: &str,
    payment: Option<&str>,
) -> Result<(Micros, bool), StoreError> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    // Locking the account first serialises credits to it, so the balance reported for an
    // already-applied reference is current, not a read from before a concurrent credit.
    let balance: Option<i64> = sqlx::query_scalar(
        "SELECT wallet_micros - owed_micros FROM accounts WHERE id = $1 FOR NO KEY UPDATE",
    )
    .bind(account.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(map_error)?;
    let Some(balance) = balance else {
        return Err(StoreError::NotFound);
    };
    let inserted = sqlx::query(
        "INSERT INTO wallet_credits (reference, account_id, amount_micros, created_at)
         VALUES ($1, $2, $3, $4) ON CONFLICT (reference) DO NOTHING",
    )
    .bind(reference)
    .bind(account.as_str())
    .bind(amount.0)
    .bind(now_millis())
    .execute(&mut *tx)
    .await
    .map_err(map_error)?;
    if inserted.rows_affected() == 0 {
        tx.rollback().await.map_err(map_error)?;
        return Ok((Micros(balance), false));
    }
    if let Some(payment) = payment {
        // a payment credits once, whichever of its events comes first
        let remembered = sqlx::query(
            "INSERT INTO wallet_payments (payment, account_id, reference, credited_micros, created_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (payment) DO NOTHING",
        )
        .bind(payment)
        .bind(account.as_str())
        .bind(reference)
        .bind(amount.0)
        .bind(now_millis())
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        if remembered.rows_affected() == 0 {
            tx.rollback().await.map_err(map_error)?;
            return Ok((Micros(balance), false));
        }
    }
    // the right-hand sides read the row as it was: owed is repaid first, the rest is the wallet's
    let balance: i64 = sqlx::query_scalar(
        "UPDATE accounts SET wallet_micros = wallet_micros + GREATEST($1 - owed_micros, 0),
             owed_micros = GREATEST(owed_micros - $1, 0)
         WHERE id = $2 RETURNING wallet_micros - owed_micros",
    )
    .bind(amount.0)
    .bind(account.as_str())
    .fetch_one(&mut *tx)
    .await
    .map_err(map_error)?;
    tx.commit().await.map_err(map_error)?;
    Ok((Micros(balance), true))
}

#[async_trait]
impl TakeBacks for PgStore {
    async fn credit_payment(
        &self,
        credit: &PaymentCredit<'_>,
    ) -> Result<(Micros, bool), StoreError> {
        self::credit(
            &self.pool,
            credit.account,
            credit.amount,
            credit.reference,
            Some(credit.payment),
        )
        .await
    }

    async fn take_back(&self, take: &TakeBack<'_>) -> Result<TakenBack, StoreError> {
        let mut tx = self
            .pool
            .begin_with(crate::admit::BEGIN)
            .await
            .map_err(map_error)?;
        // The payment's row lock serialises take-backs of one payment, so each reads what the
        // one before it took.
        let row: Option<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT account_id, credited_micros, refunded_micros, taken_micros
             FROM wallet_payments WHERE payment = $1 FOR UPDATE",
        )
        .bind(take.payment)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_error)?;
        let Some((account, credited, refunded, taken)) = row else {
            tx.rollback().await.map_err(map_error)?;
            return Ok(TakenBack::UnknownPayment);
        };
        let (refunded, amount) = reversal_amounts(
            take.reversal,
            Micros(credited),
            Micros(refunded),
            Micros(taken),
        );
        let dispute = match take.reversal {
            Reversal::Disputed { dispute, .. } => Some(dispute),
            Reversal::Refunded { .. } => None,
        };
        // once per event id and per dispute id: any unique value already present skips it
        let recorded = sqlx::query(
            "INSERT INTO wallet_takebacks
                 (reference, dispute, payment, account_id, amount_micros, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(take.reference)
        .bind(dispute)
        .bind(take.payment)
        .bind(&account)
        .bind(amount.0)
        .bind(now_millis())
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        if recorded.rows_affected() == 0 {
            tx.rollback().await.map_err(map_error)?;
            return Ok(TakenBack::AlreadyApplied);
        }
        sqlx::query(
            "UPDATE wallet_payments SET refunded_micros = $1, taken_micros = taken_micros + $2
             WHERE payment = $3",
        )
        .bind(refunded.0)
        .bind(amount.0)
        .bind(take.payment)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        // the wallet first, the rest owed (the right-hand sides read the row as it was)
        let balance: i64 = sqlx::query_scalar(
            "UPDATE accounts SET wallet_micros = GREATEST(wallet_micros - $1, 0),
                 owed_micros = owed_micros + GREATEST($1 - wallet_micros, 0)
             WHERE id = $2 RETURNING wallet_micros - owed_micros",
        )
        .bind(amount.0)
        .bind(&account)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_error)?;
        tx.commit().await.map_err(map_error)?;
        Ok(TakenBack::Taken {
            account: AccountId::from_stored(account),
            amount,
            balance: Micros(balance),
        })
    }
}

#[async_trait]
impl OperatorTokens for PgStore {
    async fn operator_tokens(&self, account: &AccountId, day: &DayKey) -> Result<i64, StoreError> {
        let tokens: Option<i64> = sqlx::query_scalar(
            "SELECT tokens FROM operator_tokens WHERE account_id = $1 AND day = $2",
        )
        .bind(account.as_str())
        .bind(day.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(tokens.unwrap_or(0))
    }

    async fn add_operator_tokens(
        &self,
        account: &AccountId,
        day: &DayKey,
        tokens: i64,
    ) -> Result<i64, StoreError> {
        // ON CONFLICT DO UPDATE locks the row and adds to its latest committed count
        sqlx::query_scalar(
            "INSERT INTO operator_tokens (account_id, day, tokens) VALUES ($1, $2, $3)
             ON CONFLICT (account_id, day)
             DO UPDATE SET tokens = operator_tokens.tokens + EXCLUDED.tokens
             RETURNING tokens",
        )
        .bind(account.as_str())
        .bind(day.as_str())
        .bind(tokens.max(0))
        .fetch_one(&self.pool)
        .await
        .map_err(map_write_error)
    }
}
