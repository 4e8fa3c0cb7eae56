//! The two primitives admissions need of PostgreSQL, and nothing of the rule (that is
//! `toolgate_domain::decide`, applied by the batcher in `batch`).
//!
//! [`read_standings`] locks the rows of the accounts it reads (`FOR NO KEY UPDATE`, in the order
//! of their ids, so two batches of two front ends never wait for each other in a cycle), so
//! nothing else changes an account's standing until the transaction ends: every admission,
//! credit and take-back writes that row, or locks it first. [`apply`] writes a run of decisions
//! of one account in one month, with their ledger rows, in one statement, only if the standing
//! is still the one they were decided on. Neither makes anything durable: the commit does.
//!
//! A read that had to wait for a lock sees the account's row as committed meanwhile (PostgreSQL
//! re-reads a locked row that changed) but the month's count as of the statement's start, which
//! may be lower: a decision on it may be more generous than the truth, never less. So a refusal
//! stands, anything else is refused by the compare-and-set, and the next read, made with the lock
//! held, is exact.

use std::collections::HashMap;

use sqlx::PgConnection;
use toolgate_domain::{Admission, Decision, Micros, Standing};
use toolgate_store::now_millis;

/// READ COMMITTED is named rather than inherited: each statement reads what is committed when it
/// starts (so a read made with the lock held is exact), and a guarded `UPDATE` that waited for a
/// row lock re-checks its guard against the committed row, whereas a server defaulting to
/// REPEATABLE READ or SERIALIZABLE would fail such calls with serialisation errors instead.
pub(crate) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// An account in one month: `(account id, month)`, as the tables key them.
pub(crate) type Key = (String, String);

/// The standings of `keys` (no usage row yet: nothing used), each account's row locked until the
/// transaction ends; an account that does not exist is left out.
pub(crate) async fn read_standings(
    conn: &mut PgConnection,
    keys: &[Key],
) -> Result<HashMap<Key, Standing>, sqlx::Error> {
    let (accounts, months): (Vec<&str>, Vec<&str>) = keys
        .iter()
        .map(|(account, month)| (account.as_str(), month.as_str()))
        .unzip();
    // ORDER BY comes before the locking, so the rows are locked in the order of their ids
    let rows: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT a.id, k.month, coalesce(u.free_used, 0), a.wallet_micros, a.owed_micros
         FROM unnest($1::text[], $2::text[]) AS k (account_id, month)
         JOIN accounts a ON a.id = k.account_id
         LEFT JOIN monthly_usage u ON u.account_id = k.account_id AND u.month = k.month
         ORDER BY a.id, k.month
         FOR NO KEY UPDATE OF a",
    )
    .bind(accounts)
    .bind(months)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(account, month, free_used, wallet, owed)| {
            let standing = Standing {
                free_used,
                wallet: Micros(wallet),
                owed: Micros(owed),
            };
            ((account, month), standing)
        })
        .collect())
}

/// Consecutive calls of one account in one month, each decided on the standing the one before
/// it left, the first on `before`.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    /// Whose calls, and the month they are counted in.
    pub key: &'a Key,
    /// The standing the first call was decided on.
    pub before: Standing,
    /// The standing after the last call.
    pub after: Standing,
    /// The admitted calls: (tool, decision), in order; refusals write nothing and are left out.
    pub admitted: Vec<(&'a str, Admission)>,
}

impl<'a> Run<'a> {
    /// An empty run of `key` starting at `before`.
    pub fn new(key: &'a Key, before: Standing) -> Self {
        Self {
            key,
            before,
            after: before,
            admitted: Vec::new(),
        }
    }

    /// Adds the next call's decision, made on `self.after`.
    pub fn push(&mut self, tool: &'a str, decision: &Decision) {
        if decision.admission.admitted() {
            self.admitted.push((tool, decision.admission));
        }
        self.after = decision.after;
    }
}

/// What [`apply`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Every call is recorded.
    Written,
    /// The standing the run rests on changed; nothing was written.
    Stale,
    /// One guard held and the other did not, so part of the run was written: the transaction
    /// must not commit. It cannot happen while the account's row is locked.
    Torn,
}

/// Applies `run` with its ledger rows in one statement, if the part of the standing it rests on
/// is unchanged: the month's count when it has free calls (usage rows are never deleted, so a
/// missing one is the 0 read), the wallet and what is owed when it has paid ones (their count,
/// at or past the limit, can only have grown). Durable when the transaction commits.
pub(crate) async fn apply(conn: &mut PgConnection, run: &Run<'_>) -> Result<Applied, sqlx::Error> {
    if run.admitted.is_empty() {
        return Ok(Applied::Written);
    }
    let mut tools = Vec::with_capacity(run.admitted.len());
    let mut paid_from = Vec::with_capacity(run.admitted.len());
    let mut costs = Vec::with_capacity(run.admitted.len());
    // each paid call's price is what its decision took from the wallet
    let mut wallet = run.before.wallet.0;
    for (tool, admission) in &run.admitted {
        tools.push(*tool);
        match admission {
            Admission::Free { .. } => {
                paid_from.push("free");
                costs.push(0);
            }
            Admission::Paid { balance_after } => {
                paid_from.push("wallet");
                costs.push(wallet - balance_after.0);
                wallet = balance_after.0;
            }
            Admission::Refused => {}
        }
    }
    let has_free = paid_from.contains(&"free");
    let has_paid = paid_from.contains(&"wallet");
    // Data-modifying CTEs all run, so each write is made conditional on the ones before it:
    // a stale count writes nothing at all; only a stale wallet after a fresh count could tear.
    let (counted, charged, recorded): (i64, i64, i64) = sqlx::query_as(
        "WITH counted AS (
             INSERT INTO monthly_usage (account_id, month, free_used)
             SELECT $1, $2, $3 WHERE $4
             ON CONFLICT (account_id, month) DO UPDATE SET free_used = EXCLUDED.free_used
             WHERE monthly_usage.free_used = $5
             RETURNING 1),
         charged AS (
             UPDATE accounts SET wallet_micros = $6
             WHERE $7 AND id = $1 AND wallet_micros = $8 AND owed_micros = $9
                 AND (NOT $4 OR EXISTS (SELECT 1 FROM counted))
             RETURNING 1),
         recorded AS (
             INSERT INTO call_ledger (account_id, month, tool, paid_from, cost_micros, created_at)
             SELECT $1, $2, c.tool, c.paid_from, c.cost, $10
             FROM unnest($11::text[], $12::text[], $13::bigint[]) AS c (tool, paid_from, cost)
             WHERE (NOT $4 OR EXISTS (SELECT 1 FROM counted))
                 AND (NOT $7 OR EXISTS (SELECT 1 FROM charged))
             RETURNING 1)
         SELECT (SELECT count(*) FROM counted), (SELECT count(*) FROM charged),
                (SELECT count(*) FROM recorded)",
    )
    .bind(&run.key.0)
    .bind(&run.key.1)
    .bind(run.after.free_used)
    .bind(has_free)
    .bind(run.before.free_used)
    .bind(run.after.wallet.0)
    .bind(has_paid)
    .bind(run.before.wallet.0)
    .bind(run.before.owed.0)
    .bind(now_millis())
    .bind(&tools)
    .bind(&paid_from)
    .bind(&costs)
    .fetch_one(conn)
    .await?;
    let all = i64::try_from(run.admitted.len()).unwrap_or(i64::MAX);
    Ok(
        match (
            counted == i64::from(has_free),
            charged == i64::from(has_paid),
        ) {
            (true, true) if recorded == all => Applied::Written,
            (false, _) if charged == 0 && recorded == 0 => Applied::Stale,
            (true, false) if !has_free && recorded == 0 => Applied::Stale,
            _ => Applied::Torn,
        },
    )
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
