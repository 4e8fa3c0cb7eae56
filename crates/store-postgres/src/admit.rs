//! Call admission: one short transaction per call that reads the account's standing, decides on
//! it with the one rule (`toolgate_domain::decide`) and applies the decision with a
//! compare-and-set, reading and deciding again should the standing have changed.
//!
//! The two primitives are kept narrow for group commit (many calls in one transaction):
//! [`read_standing`] locks the account's row, so nothing else changes the standing until the
//! transaction ends (every admission, credit and take-back writes that row, or locks it first);
//! [`apply`] writes the decision and its ledger row in one statement, only if the standing is
//! still the one read. Neither makes anything durable: the transaction's commit does.
//!
//! A read that had to wait for the lock sees the account's row as committed meanwhile
//! (PostgreSQL re-reads a locked row that changed) but the month's count as of the statement's
//! start, which may be lower: a decision on it may be more generous than the truth, never less.
//! So a refusal stands, anything else is refused by the compare-and-set, and the next read, made
//! with the lock held, is exact.

use sqlx::{PgConnection, PgPool};
use toolgate_domain::{AccountId, Admission, Decision, Micros, MonthKey, Standing, Terms, decide};
use toolgate_store::{CallCharge, StoreError, now_millis};

use crate::rows::map_error;

/// READ COMMITTED is named rather than inherited: each statement reads what is committed when it
/// starts (so an admission's second read, made with the lock held, is exact), and a guarded
/// `UPDATE` that waited for a row lock re-checks its guard against the committed row, whereas a
/// server defaulting to REPEATABLE READ or SERIALIZABLE would fail such calls with serialisation
/// errors instead.
pub(crate) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Reads one call may decide on before it gives up: the second, made with the lock held,
/// always holds unless something wrote the standing without taking the lock.
const MAX_ATTEMPTS: usize = 3;

/// Decides one call and, when admitted, commits its ledger row before answering.
pub(crate) async fn admit(pool: &PgPool, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
    let terms = Terms {
        free_monthly_calls: charge.free_monthly_calls,
        paid_call_cost: charge.paid_call_cost,
    };
    let mut tx = pool.begin_with(BEGIN).await.map_err(map_error)?;
    for _ in 0..MAX_ATTEMPTS {
        let before = read_standing(&mut tx, charge.account, charge.month)
            .await?
            .ok_or(StoreError::NotFound)?;
        let decision = decide(before, terms);
        if decision.admission == Admission::Refused {
            // rolling back releases the row lock without waiting for a commit flush
            tx.rollback().await.map_err(map_error)?;
            return Ok(Admission::Refused);
        }
        if apply(&mut tx, charge, before, &decision).await? {
            tx.commit().await.map_err(map_error)?;
            return Ok(decision.admission);
        }
    }
    tx.rollback().await.map_err(map_error)?;
    Err(StoreError::Unavailable(
        "the account's standing kept changing during its admission".to_owned(),
    ))
}

/// The standing of `account` in `month` (no usage row yet: nothing used), its account row
/// locked until the transaction ends; `None` when there is no such account.
async fn read_standing(
    conn: &mut PgConnection,
    account: &AccountId,
    month: &MonthKey,
) -> Result<Option<Standing>, StoreError> {
    let row: Option<(i64, i64, i64)> = sqlx::query_as(
        "SELECT coalesce((SELECT free_used FROM monthly_usage
                          WHERE account_id = $1 AND month = $2), 0),
                wallet_micros, owed_micros
         FROM accounts WHERE id = $1 FOR NO KEY UPDATE",
    )
    .bind(account.as_str())
    .bind(month.as_str())
    .fetch_optional(conn)
    .await
    .map_err(map_error)?;
    Ok(row.map(|(free_used, wallet, owed)| Standing {
        free_used,
        wallet: Micros(wallet),
        owed: Micros(owed),
    }))
}

/// Applies `decision`, made on `before`, with the call's ledger row in one statement, if the part
/// of the standing it rests on is unchanged: the month's count for a free call (usage rows are
/// never deleted, so a missing one is the 0 read); the wallet and what is owed for a paid one
/// (its count, at or past the limit, can only have grown). `false`: it changed and nothing was
/// written. A refusal writes nothing. Durable when the transaction commits.
async fn apply(
    conn: &mut PgConnection,
    charge: &CallCharge<'_>,
    before: Standing,
    decision: &Decision,
) -> Result<bool, StoreError> {
    let written = match decision.admission {
        Admission::Refused => return Ok(true),
        Admission::Free { free_used } => sqlx::query(
            "WITH counted AS (
                 INSERT INTO monthly_usage (account_id, month, free_used) VALUES ($1, $2, $3)
                 ON CONFLICT (account_id, month) DO UPDATE SET free_used = EXCLUDED.free_used
                 WHERE monthly_usage.free_used = $4
                 RETURNING 1)
             INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
             SELECT $1, $2, $5, 'free', 0, $6 FROM counted",
        )
        .bind(charge.account.as_str())
        .bind(charge.month.as_str())
        .bind(free_used)
        .bind(before.free_used)
        .bind(charge.tool)
        .bind(now_millis()),
        Admission::Paid { balance_after } => sqlx::query(
            "WITH charged AS (
                 UPDATE accounts SET wallet_micros = $3
                 WHERE id = $1 AND wallet_micros = $4 AND owed_micros = $5
                 RETURNING 1)
             INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
             SELECT $1, $2, $6, 'wallet', $7, $8 FROM charged",
        )
        .bind(charge.account.as_str())
        .bind(charge.month.as_str())
        .bind(balance_after.0)
        .bind(before.wallet.0)
        .bind(before.owed.0)
        .bind(charge.tool)
        .bind(before.wallet.0 - balance_after.0)
        .bind(now_millis()),
    }
    .execute(conn)
    .await
    .map_err(map_error)?;
    Ok(written.rows_affected() == 1)
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
