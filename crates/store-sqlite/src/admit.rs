//! Group commit for call admissions: one writer task drains every admission waiting at the
//! moment into one transaction, so the commit's fsync is shared. Each caller hears its decision
//! as soon as its statements have run, and separately when the commit is durable: the call's
//! work overlaps the fsync, and the caller answers its client only after both.
//!
//! Each admission is one multi-statement SQL text, so it costs one round trip to the
//! connection's worker thread; a call that finds the writer idle sends its transaction's
//! `BEGIN` and `COMMIT` in that same text. Thread hops, not SQL, dominated the metered path.

use futures::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Arguments, Row, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use toolgate_domain::{Admission, Micros};
use toolgate_store::{CallCharge, Decided, Recorded, StoreError, now_millis};

use std::sync::Arc;

use crate::allowance::{Key, Mirror, Standing};
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
/// a bump could turn 'free' into 'wallet'). The statement that pays returns what it left; the
/// last one reports the standing after the call, for the mirror (see `allowance`).
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
             RETURNING 'free', free_used;
             SELECT 'after', coalesce((SELECT free_used FROM monthly_usage
                                       WHERE account_id = ?1 AND month = ?2), 0),
                    (SELECT wallet_micros FROM accounts WHERE id = ?1);"
        )
    };
}

/// A call that finds the writer idle: its own transaction, in one round trip.
const ALONE: &str = concat!("BEGIN IMMEDIATE;", admission!(), "COMMIT;");
/// A call among others: a savepoint, so that its failure undoes only its own rows.
const IN_BATCH: &str = concat!("SAVEPOINT admission;", admission!(), "RELEASE admission;");

/// One call waiting to be admitted, with the channels its two answers go back on.
pub(crate) struct AdmitJob {
    account: String,
    month: String,
    tool: String,
    free_monthly_calls: i64,
    paid_call_cost: i64,
    decided: Option<oneshot::Sender<Result<Admission, StoreError>>>,
    recorded: oneshot::Sender<Result<(), StoreError>>,
    /// What the mirror predicted when it queued the job.
    pub(crate) predicted: Option<Admission>,
    /// What the database decided, once it has.
    decision: Option<Admission>,
    /// The standing the database reported right after the job.
    after: Option<Standing>,
    /// Its statements failed and were rolled back to its savepoint.
    undone: bool,
}

/// What the caller of [`AdmitJob::new`] waits on.
pub(crate) struct Answers {
    decided: oneshot::Receiver<Result<Admission, StoreError>>,
    recorded: oneshot::Receiver<Result<(), StoreError>>,
}

impl Answers {
    /// Durability alone, for a job whose admission was predicted.
    pub(crate) fn recorded(self) -> Recorded {
        let recorded = self.recorded;
        Recorded::when(async move {
            recorded.await.map_err(|_| {
                StoreError::Unavailable("the metering writer dropped a call".to_owned())
            })?
        })
    }

    /// The decision, and the durability still to come.
    pub(crate) async fn decided(self) -> Result<Decided, StoreError> {
        let stopped = || StoreError::Unavailable("the metering writer dropped a call".to_owned());
        let admission = self.decided.await.map_err(|_| stopped())??;
        let recorded = self.recorded;
        Ok(Decided {
            admission,
            recorded: Recorded::when(async move { recorded.await.map_err(|_| stopped())? }),
        })
    }
}

impl AdmitJob {
    pub(crate) fn new(charge: &CallCharge<'_>) -> (Self, Answers) {
        let (decided, decided_rx) = oneshot::channel();
        let (recorded, recorded_rx) = oneshot::channel();
        let job = Self {
            account: charge.account.as_str().to_owned(),
            month: charge.month.as_str().to_owned(),
            tool: charge.tool.to_owned(),
            free_monthly_calls: charge.free_monthly_calls,
            paid_call_cost: charge.paid_call_cost.0,
            decided: Some(decided),
            recorded,
            predicted: None,
            decision: None,
            after: None,
            undone: false,
        };
        let answers = Answers {
            decided: decided_rx,
            recorded: recorded_rx,
        };
        (job, answers)
    }

    pub(crate) fn key(&self) -> Key {
        (self.account.clone(), self.month.clone())
    }

    pub(crate) fn free_limit(&self) -> i64 {
        self.free_monthly_calls
    }

    pub(crate) fn price(&self) -> i64 {
        self.paid_call_cost
    }

    fn arguments(&self) -> Result<SqliteArguments, sqlx::Error> {
        let mut args = SqliteArguments::default();
        args.add(self.account.clone())
            .map_err(sqlx::Error::Encode)?;
        args.add(self.month.clone()).map_err(sqlx::Error::Encode)?;
        args.add(self.tool.clone()).map_err(sqlx::Error::Encode)?;
        args.add(self.free_monthly_calls)
            .map_err(sqlx::Error::Encode)?;
        args.add(self.paid_call_cost).map_err(sqlx::Error::Encode)?;
        args.add(now_millis()).map_err(sqlx::Error::Encode)?;
        Ok(args)
    }

    /// Passes the decision on (once; later calls are ignored).
    fn decide(&mut self, outcome: Result<Admission, StoreError>) {
        if let Ok(admission) = &outcome {
            self.decision.get_or_insert(*admission);
        }
        if let Some(decided) = self.decided.take() {
            // A caller that went away no longer needs its answer; its ledger row stands.
            let _ = decided.send(outcome);
        }
    }

    /// Passes on whether the decision is durable, deciding "refused" if nothing paid, after
    /// settling the job in the mirror (so a caller's next call sees it settled).
    fn record(mut self, outcome: Result<(), StoreError>, mirror: &Mirror) {
        let outcome = match outcome {
            Ok(()) if self.undone => Err(StoreError::Unavailable(
                "the call's charge was rolled back".to_owned(),
            )),
            other => other,
        };
        match &outcome {
            Ok(()) => self.decide(Ok(Admission::Refused)),
            Err(error) => self.decide(Err(StoreError::Unavailable(error.to_string()))),
        }
        let settled = match (&outcome, &self.decision) {
            (Ok(()), Some(decision)) => Some((decision, self.after)),
            _ => None,
        };
        mirror.settle(&self.key(), self.predicted.as_ref(), settled);
        let unpaid = self.predicted.is_some() && self.decision == Some(Admission::Refused);
        let outcome = match outcome {
            // the call started on the prediction; the books must not pretend it was charged
            Ok(()) if unpaid => Err(StoreError::Unavailable(
                "the database refused a call predicted to be admitted".to_owned(),
            )),
            other => other,
        };
        let _ = self.recorded.send(outcome);
    }

    /// Runs the job's statements in `sql`, passing on the decision as soon as its row arrives;
    /// the text may go on (with a `COMMIT`) after that row.
    async fn run(&mut self, conn: &mut SqliteConnection, sql: &'static str) -> sqlx::Result<()> {
        let arguments = self.arguments()?;
        let mut rows = sqlx::query_with(sql, arguments).fetch(conn);
        while let Some(row) = rows.try_next().await? {
            let label: String = row.try_get(0)?;
            if label == "after" {
                self.after = standing_from_row(&row)?;
            } else {
                let value: i64 = row.try_get(1)?;
                self.decide(Ok(if label == "free" {
                    Admission::Free { free_used: value }
                } else {
                    Admission::Paid {
                        balance_after: Micros(value),
                    }
                }));
            }
        }
        Ok(())
    }
}

/// The standing after a job; `None` when the account is gone.
fn standing_from_row(row: &SqliteRow) -> sqlx::Result<Option<Standing>> {
    let free_used: i64 = row.try_get(1)?;
    let wallet: Option<i64> = row.try_get(2)?;
    Ok(wallet.map(|wallet| Standing { free_used, wallet }))
}

/// Starts the writer task; it ends when every sender is dropped.
pub(crate) fn spawn_writer(pool: SqlitePool, mirror: Arc<Mirror>) -> mpsc::Sender<AdmitJob> {
    let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
    tokio::spawn(run_writer(pool, receiver, mirror));
    sender
}

async fn run_writer(pool: SqlitePool, mut receiver: mpsc::Receiver<AdmitJob>, mirror: Arc<Mirror>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
        match pool.acquire().await {
            Ok(mut conn) => decide(&mut conn, &mut batch, &mirror).await,
            Err(error) => record_all(&mut batch, &Err(map_error(error)), &mirror),
        }
    }
}

/// Decides and records every job of `batch`, emptying it.
async fn decide(conn: &mut PoolConnection<Sqlite>, batch: &mut Vec<AdmitJob>, mirror: &Mirror) {
    if batch.len() == 1
        && let Some(mut job) = batch.pop()
    {
        let outcome = job.run(conn, ALONE).await;
        if outcome.is_err() {
            // Whatever failed may have left the transaction open; it must not stay so.
            let _ = sqlx::query("ROLLBACK").execute(&mut **conn).await;
        }
        job.record(outcome.map_err(map_error), mirror);
        return;
    }
    decide_batch(conn, batch, mirror).await;
}

/// Decides every job in one transaction; if the commit fails, every job fails with it.
async fn decide_batch(conn: &mut SqliteConnection, batch: &mut Vec<AdmitJob>, mirror: &Mirror) {
    if let Err(error) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
        return record_all(batch, &Err(map_error(error)), mirror);
    }
    for job in batch.iter_mut() {
        if let Err(error) = job.run(conn, IN_BATCH).await {
            let _ = sqlx::query("ROLLBACK TO admission; RELEASE admission")
                .execute(&mut *conn)
                .await;
            // its decision may be out already; its record must now say it was undone
            job.decide(Err(map_error(error)));
            job.undone = true;
        }
    }
    match sqlx::query("COMMIT").execute(&mut *conn).await {
        Ok(_) => record_all(batch, &Ok(()), mirror),
        Err(error) => {
            tracing::error!(%error, calls = batch.len(), "metering commit failed");
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            record_all(batch, &Err(map_error(error)), mirror);
        }
    }
}

fn record_all(batch: &mut Vec<AdmitJob>, outcome: &Result<(), StoreError>, mirror: &Mirror) {
    for job in batch.drain(..) {
        let outcome = match outcome {
            Ok(()) => Ok(()),
            Err(error) => Err(StoreError::Unavailable(error.to_string())),
        };
        job.record(outcome, mirror);
    }
}
