//! Wallet credits (repaying what is owed first), payments and their take-backs, and the tokens
//! accounts used of the operator's model keys.

use async_trait::async_trait;
use sqlx::SqlitePool;
use toolgate_domain::{AccountId, DayKey, Micros};
use toolgate_store::{
    OperatorTokens, PaymentCredit, StoreError, TakeBack, TakeBacks, TakenBack, now_millis,
};

use crate::SqliteStore;
use crate::jobs::TakeBackJob;
use crate::rows::{map_error, map_write_error};

/// Credits `amount` under `reference`, and under `payment` when given, in one transaction:
/// at most once per reference and per payment, what is owed repaid first. Returns the balance
/// (wallet less owed) and whether the credit was applied.
pub(crate) async fn credit(
    writer: &SqlitePool,
    account: &AccountId,
    amount: Micros,
    reference: &str,
    payment: Option<&str>,
) -> Result<(Micros, bool), StoreError> {
    // IMMEDIATE: the admissions thread writes through its own connection, and a deferred
    // transaction that read before it wrote would fail at once (no busy wait) on its commits.
    let mut tx = writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(map_error)?;
    let balance: Option<i64> =
        sqlx::query_scalar("SELECT wallet_micros - owed_micros FROM accounts WHERE id = ?1")
            .bind(account.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_error)?;
    let Some(balance) = balance else {
        return Err(StoreError::NotFound);
    };
    let inserted = sqlx::query(
        "INSERT INTO wallet_credits (reference, account_id, amount_micros, created_at)
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (reference) DO NOTHING",
    )
    .bind(reference)
    .bind(account.as_str())
    .bind(amount.0)
    .bind(now_millis())
    .execute(&mut *tx)
    .await
    .map_err(map_error)?;
    if inserted.rows_affected() == 0 {
        return Ok((Micros(balance), false));
    }
    if let Some(payment) = payment {
        // a payment credits once, whichever of its events comes first
        let remembered = sqlx::query(
            "INSERT INTO wallet_payments (payment, account_id, reference, credited_micros, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (payment) DO NOTHING",
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
            return Ok((Micros(balance), false));
        }
    }
    // the right-hand sides read the row as it was: owed is repaid first, the rest is the wallet's
    let balance: i64 = sqlx::query_scalar(
        "UPDATE accounts SET wallet_micros = wallet_micros + max(?1 - owed_micros, 0),
             owed_micros = max(owed_micros - ?1, 0)
         WHERE id = ?2 RETURNING wallet_micros - owed_micros",
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
impl TakeBacks for SqliteStore {
    async fn credit_payment(
        &self,
        credit: &PaymentCredit<'_>,
    ) -> Result<(Micros, bool), StoreError> {
        self::credit(
            &self.writer,
            credit.account,
            credit.amount,
            credit.reference,
            Some(credit.payment),
        )
        .await
    }

    async fn take_back(&self, take: &TakeBack<'_>) -> Result<TakenBack, StoreError> {
        // A payment's account never changes once stored, so it can be read before queueing:
        // the job fences that account in the mirror and changes no other.
        let account: Option<String> =
            sqlx::query_scalar("SELECT account_id FROM wallet_payments WHERE payment = ?1")
                .bind(take.payment)
                .fetch_optional(&self.reader)
                .await
                .map_err(map_error)?;
        let Some(account) = account else {
            return Ok(TakenBack::UnknownPayment);
        };
        let (job, answer) = TakeBackJob::new(take, account);
        if let Some(job) = self.mirror.submit_take_back(job, &self.admissions) {
            self.admissions.send(job).await.map_err(|_| {
                StoreError::Unavailable("the metering writer has stopped".to_owned())
            })?;
        }
        answer.await.map_err(|_| {
            StoreError::Unavailable("the metering writer dropped a take-back".to_owned())
        })?
    }
}

#[async_trait]
impl OperatorTokens for SqliteStore {
    async fn operator_tokens(&self, account: &AccountId, day: &DayKey) -> Result<i64, StoreError> {
        let tokens: Option<i64> = sqlx::query_scalar(
            "SELECT tokens FROM operator_tokens WHERE account_id = ?1 AND day = ?2",
        )
        .bind(account.as_str())
        .bind(day.as_str())
        .fetch_optional(&self.reader)
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
        sqlx::query_scalar(
            "INSERT INTO operator_tokens (account_id, day, tokens) VALUES (?1, ?2, ?3)
             ON CONFLICT (account_id, day) DO UPDATE SET tokens = tokens + excluded.tokens
             RETURNING tokens",
        )
        .bind(account.as_str())
        .bind(day.as_str())
        .bind(tokens.max(0))
        .fetch_one(&self.writer)
        .await
        .map_err(map_write_error)
    }
}
