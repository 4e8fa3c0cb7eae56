//! Call admission: one transaction per call, made exact under concurrency by guarded
//! single-statement updates whose row locks serialise the calls of one account.

use sqlx::{PgConnection, PgPool};
use toolgate_domain::{Admission, Micros};
use toolgate_store::{CallCharge, StoreError, now_millis};

use crate::rows::map_error;

/// READ COMMITTED is named rather than inherited: a guarded `UPDATE` that waited for a row
/// lock re-checks its guard against the committed row, whereas a server defaulting to
/// REPEATABLE READ or SERIALIZABLE would fail such calls with serialisation errors instead.
pub(crate) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Decides one call and, when admitted, commits its ledger row before answering.
pub(crate) async fn admit(pool: &PgPool, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
    let mut tx = pool.begin_with(BEGIN).await.map_err(map_error)?;
    let admission = decide(&mut tx, charge).await?;
    if admission.admitted() {
        tx.commit().await.map_err(map_error)?;
    } else {
        // A refused call may still hold the usage row's lock from its upsert; rolling back
        // releases it without waiting for a commit flush, and guarantees a refusal changes nothing.
        tx.rollback().await.map_err(map_error)?;
    }
    Ok(admission)
}

/// The allowance first, then the wallet, then refusal; an admitted call gets its ledger row.
async fn decide(conn: &mut PgConnection, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
    if charge.free_monthly_calls > 0 {
        // ON CONFLICT DO UPDATE locks the existing row and evaluates the guard on its latest
        // committed version, so concurrent calls can never push free_used past the limit.
        let free_used: Option<i64> = sqlx::query_scalar(
            "INSERT INTO monthly_usage (account_id, month, free_used) VALUES ($1, $2, 1)
             ON CONFLICT (account_id, month) DO UPDATE SET free_used = monthly_usage.free_used + 1
             WHERE monthly_usage.free_used < $3
             RETURNING free_used",
        )
        .bind(charge.account.as_str())
        .bind(charge.month.as_str())
        .bind(charge.free_monthly_calls)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_error)?;
        if let Some(free_used) = free_used {
            record(conn, charge, "free", 0).await?;
            return Ok(Admission::Free { free_used });
        }
    }
    // A concurrent charge that committed first is seen here: the waiting UPDATE re-reads the
    // row and re-checks the guard, so the wallet is never overdrawn.
    let balance: Option<i64> = sqlx::query_scalar(
        "UPDATE accounts SET wallet_micros = wallet_micros - $1
         WHERE id = $2 AND wallet_micros >= $1 RETURNING wallet_micros",
    )
    .bind(charge.paid_call_cost.0)
    .bind(charge.account.as_str())
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_error)?;
    match balance {
        Some(balance) => {
            record(conn, charge, "wallet", charge.paid_call_cost.0).await?;
            Ok(Admission::Paid {
                balance_after: Micros(balance),
            })
        }
        None => Ok(Admission::Refused),
    }
}

async fn record(
    conn: &mut PgConnection,
    charge: &CallCharge<'_>,
    paid_from: &str,
    cost: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(charge.account.as_str())
    .bind(charge.month.as_str())
    .bind(charge.tool)
    .bind(paid_from)
    .bind(cost)
    .bind(now_millis())
    .execute(conn)
    .await
    .map_err(map_error)?;
    Ok(())
}
