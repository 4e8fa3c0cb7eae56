//! Group commit for call admissions: one writer task drains every admission waiting at the
//! moment into one transaction, so the commit's fsync is shared, and answers each caller
//! only after that commit is durable.

use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use toolgate_domain::{Admission, Micros};
use toolgate_store::{CallCharge, StoreError, now_millis};

use crate::rows::map_error;

/// Most admissions decided in one transaction.
const MAX_BATCH: usize = 512;
/// Admissions that may wait for the writer before senders feel back-pressure.
const QUEUE_DEPTH: usize = 4096;

/// One call waiting to be admitted, with the channel its answer goes back on.
pub(crate) struct AdmitJob {
    account: String,
    month: String,
    tool: String,
    free_monthly_calls: i64,
    paid_call_cost: i64,
    reply: oneshot::Sender<Result<Admission, StoreError>>,
}

impl AdmitJob {
    pub(crate) fn new(
        charge: &CallCharge<'_>,
        reply: oneshot::Sender<Result<Admission, StoreError>>,
    ) -> Self {
        Self {
            account: charge.account.as_str().to_owned(),
            month: charge.month.as_str().to_owned(),
            tool: charge.tool.to_owned(),
            free_monthly_calls: charge.free_monthly_calls,
            paid_call_cost: charge.paid_call_cost.0,
            reply,
        }
    }
}

/// Starts the writer task; it ends when every sender is dropped.
pub(crate) fn spawn_writer(pool: SqlitePool) -> mpsc::Sender<AdmitJob> {
    let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
    tokio::spawn(run_writer(pool, receiver));
    sender
}

async fn run_writer(pool: SqlitePool, mut receiver: mpsc::Receiver<AdmitJob>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let decided = decide_batch(&pool, &batch).await;
        for (job, outcome) in batch.drain(..).zip(decided) {
            // A caller that went away no longer needs its answer; its ledger row stands.
            let _ = job.reply.send(outcome);
        }
    }
}

/// Decides every job in one transaction; if the commit fails, every job fails with it.
async fn decide_batch(pool: &SqlitePool, batch: &[AdmitJob]) -> Vec<Result<Admission, StoreError>> {
    let fail_all = |error: StoreError| {
        let text = error.to_string();
        batch
            .iter()
            .map(|_| Err(StoreError::Unavailable(text.clone())))
            .collect()
    };
    let mut tx = match pool.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(error) => return fail_all(map_error(error)),
    };
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        outcomes.push(decide_one(&mut tx, job).await);
    }
    match tx.commit().await {
        Ok(()) => outcomes,
        Err(error) => {
            tracing::error!(%error, calls = batch.len(), "metering commit failed");
            fail_all(map_error(error))
        }
    }
}

/// The allowance first, then the wallet, then refusal; an admitted call gets its ledger row.
async fn decide_one(conn: &mut SqliteConnection, job: &AdmitJob) -> Result<Admission, StoreError> {
    if job.free_monthly_calls > 0 {
        let free_used: Option<i64> = sqlx::query_scalar(
            "INSERT INTO monthly_usage (account_id, month, free_used) VALUES (?1, ?2, 1)
             ON CONFLICT (account_id, month) DO UPDATE SET free_used = free_used + 1
             WHERE monthly_usage.free_used < ?3
             RETURNING free_used",
        )
        .bind(&job.account)
        .bind(&job.month)
        .bind(job.free_monthly_calls)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_error)?;
        if let Some(free_used) = free_used {
            record(conn, job, "free", 0).await?;
            return Ok(Admission::Free { free_used });
        }
    }
    let balance: Option<i64> = sqlx::query_scalar(
        "UPDATE accounts SET wallet_micros = wallet_micros - ?1
         WHERE id = ?2 AND wallet_micros >= ?1 RETURNING wallet_micros",
    )
    .bind(job.paid_call_cost)
    .bind(&job.account)
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_error)?;
    match balance {
        Some(balance) => {
            record(conn, job, "wallet", job.paid_call_cost).await?;
            Ok(Admission::Paid {
                balance_after: Micros(balance),
            })
        }
        None => Ok(Admission::Refused),
    }
}

async fn record(
    conn: &mut SqliteConnection,
    job: &AdmitJob,
    paid_from: &str,
    cost: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .bind(&job.account)
    .bind(&job.month)
    .bind(&job.tool)
    .bind(paid_from)
    .bind(cost)
    .bind(now_millis())
    .execute(conn)
    .await
    .map_err(map_error)?;
    Ok(())
}
