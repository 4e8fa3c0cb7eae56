//! Group commit for call admissions: one writer task drains every admission waiting at the
//! moment into one transaction, so the commit's fsync is shared, and answers each caller
//! only after that commit is durable.
//!
//! Each admission is one multi-statement SQL text, so it costs one round trip to the
//! connection's worker thread; a call that finds the writer idle sends its transaction's
//! `BEGIN` and `COMMIT` in that same text. Thread hops, not SQL, dominated the metered path.

use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use toolgate_domain::{Admission, Micros};
use toolgate_store::{CallCharge, StoreError, now_millis};

use crate::rows::map_error;

/// Most admissions decided in one transaction.
const MAX_BATCH: usize = 512;
/// Admissions that may wait for the writer before senders feel back-pressure.
const QUEUE_DEPTH: usize = 4096;

/// Who pays for the call, from the rows as they stand: the allowance while it lasts, then the
/// wallet if it covers the price, else nobody (NULL). Parameters: ?1 account, ?2 month,
/// ?4 free calls a month, ?5 price.
macro_rules! payer {
    () => {
        "(SELECT CASE
            WHEN ?4 > 0 AND coalesce((SELECT free_used FROM monthly_usage
                                      WHERE account_id = ?1 AND month = ?2), 0) < ?4 THEN 'free'
            WHEN (SELECT wallet_micros FROM accounts WHERE id = ?1) >= ?5 THEN 'wallet'
         END)"
    };
}

/// One admission; ?3 is the tool and ?6 the time. Each statement derives the payer afresh, so
/// their order matters: the ledger row is written first (it changes no input of the payer), the
/// wallet debit before the allowance bump (a debit cannot turn 'free' into anything else, while
/// a bump could turn 'free' into 'wallet'). The statement that pays returns what it left.
macro_rules! admission {
    () => {
        concat!(
            "INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
             SELECT ?1, ?2, ?3, payer, iif(payer = 'wallet', ?5, 0), ?6
             FROM (SELECT ",
            payer!(),
            " AS payer) WHERE payer IS NOT NULL;
             UPDATE accounts SET wallet_micros = wallet_micros - ?5
             WHERE id = ?1 AND ",
            payer!(),
            " = 'wallet' RETURNING 'wallet', wallet_micros;
             INSERT INTO monthly_usage (account_id, month, free_used)
             SELECT ?1, ?2, 1 WHERE ",
            payer!(),
            " = 'free'
             ON CONFLICT (account_id, month) DO UPDATE SET free_used = free_used + 1
             RETURNING 'free', free_used;"
        )
    };
}

/// A call that finds the writer idle: its own transaction, in one round trip.
const ALONE: &str = concat!("BEGIN IMMEDIATE;", admission!(), "COMMIT;");
/// A call among others: a savepoint, so that its failure undoes only its own rows.
const IN_BATCH: &str = concat!("SAVEPOINT admission;", admission!(), "RELEASE admission;");

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

    async fn run(&self, conn: &mut SqliteConnection, sql: &'static str) -> sqlx::Result<Admission> {
        let rows = sqlx::query(sql)
            .bind(&self.account)
            .bind(&self.month)
            .bind(&self.tool)
            .bind(self.free_monthly_calls)
            .bind(self.paid_call_cost)
            .bind(now_millis())
            .fetch_all(conn)
            .await?;
        rows.first()
            .map_or(Ok(Admission::Refused), admission_from_row)
    }
}

fn admission_from_row(row: &SqliteRow) -> sqlx::Result<Admission> {
    let payer: String = row.try_get(0)?;
    let value: i64 = row.try_get(1)?;
    Ok(if payer == "free" {
        Admission::Free { free_used: value }
    } else {
        Admission::Paid {
            balance_after: Micros(value),
        }
    })
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
        let decided = match pool.acquire().await {
            Ok(mut conn) => decide(&mut conn, &batch).await,
            Err(error) => fail_all(batch.len(), &map_error(error)),
        };
        for (job, outcome) in batch.drain(..).zip(decided) {
            // A caller that went away no longer needs its answer; its ledger row stands.
            let _ = job.reply.send(outcome);
        }
    }
}

async fn decide(
    conn: &mut PoolConnection<Sqlite>,
    batch: &[AdmitJob],
) -> Vec<Result<Admission, StoreError>> {
    if let [job] = batch {
        let outcome = job.run(conn, ALONE).await;
        if outcome.is_err() {
            // Whatever failed may have left the transaction open; it must not stay so.
            let _ = sqlx::query("ROLLBACK").execute(&mut **conn).await;
        }
        return vec![outcome.map_err(map_error)];
    }
    decide_batch(conn, batch).await
}

/// Decides every job in one transaction; if the commit fails, every job fails with it.
async fn decide_batch(
    conn: &mut SqliteConnection,
    batch: &[AdmitJob],
) -> Vec<Result<Admission, StoreError>> {
    if let Err(error) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
        return fail_all(batch.len(), &map_error(error));
    }
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        let outcome = job.run(conn, IN_BATCH).await;
        if outcome.is_err() {
            let _ = sqlx::query("ROLLBACK TO admission; RELEASE admission")
                .execute(&mut *conn)
                .await;
        }
        outcomes.push(outcome.map_err(map_error));
    }
    match sqlx::query("COMMIT").execute(&mut *conn).await {
        Ok(_) => outcomes,
        Err(error) => {
            tracing::error!(%error, calls = batch.len(), "metering commit failed");
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            fail_all(batch.len(), &map_error(error))
        }
    }
}

fn fail_all(count: usize, error: &StoreError) -> Vec<Result<Admission, StoreError>> {
    let text = error.to_string();
    (0..count)
        .map(|_| Err(StoreError::Unavailable(text.clone())))
        .collect()
}
