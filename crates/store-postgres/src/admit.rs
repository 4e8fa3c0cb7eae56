//! The two primitives admissions need of PostgreSQL, and nothing of the rule (that is
//! `toolgate_domain::decide`, applied by the batcher in `batch`).
//!
//! [`read_standings`] locks the rows of the accounts it reads (`FOR NO KEY UPDATE`, in the order
//! of their ids, so two batches of two front ends never wait for each other in a cycle), so
//! nothing else changes an account's standing until the transaction ends: every admission,
//! credit and take-back writes that row, or locks it first. [`apply`] writes runs of decisions,
//! each of one account in one month, with their ledger rows, in one statement, each run only if
//! the standing is still the one it was decided on. Neither makes anything durable: the commit does.
//!
//! A read that had to wait for a lock sees the account's row as committed meanwhile (PostgreSQL
//! re-reads a locked row that changed) but the month's count as of the statement's start, which
//! may be lower: a decision on it may be more generous than the truth, never less. So a refusal
//! stands, anything else is refused by the compare-and-set, and the next read, made with the lock
//! held, is exact.

use std::collections::HashMap;

use sqlx::PgConnection;
use toolgate_domain::{Admission, DayKey, Decision, Micros, Standing};
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
#[derive(Debug, Clone)]
pub(crate) struct Run<'a> {
    /// Whose calls, and the month they are counted in.
    pub key: &'a Key,
    /// The standing the first call was decided on.
    pub before: Standing,
    /// The standing after the last call.
    pub after: Standing,
    /// The admitted calls: (tool, named key, decision), in order; refusals write nothing and
    /// are left out.
    pub admitted: Vec<(&'a str, Option<&'a str>, Admission)>,
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
    pub fn push(&mut self, tool: &'a str, key: Option<&'a str>, decision: &Decision) {
        if decision.admission.admitted() {
            self.admitted.push((tool, key, decision.admission));
        }
        self.after = decision.after;
    }
}

/// An account's wallet and what it owes.
pub(crate) type Money = (Micros, Micros);

/// A row [`apply`]'s statement answers: the run, whether its count and its charge held, and the
/// account's wallet and debt as the statement found them.
type FoundRow = (i32, bool, bool, Option<i64>, Option<i64>);

/// What [`apply`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Every call is recorded.
    Written,
    /// The standing the run rests on changed; nothing was written.
    Stale,
    /// One guard held and the other did not, so part of the run was written: the transaction
    /// must not commit. It cannot happen while the account's row is locked.
    Torn,
}

/// The columns [`apply`] binds: one entry per run, and one per ledger row.
#[derive(Default)]
struct Columns<'a> {
    run: Vec<i32>,
    account: Vec<&'a str>,
    month: Vec<&'a str>,
    has_free: Vec<bool>,
    free_before: Vec<i64>,
    free_after: Vec<i64>,
    has_paid: Vec<bool>,
    wallet_before: Vec<i64>,
    owed_before: Vec<i64>,
    wallet_after: Vec<i64>,
    row_run: Vec<i32>,
    row_tool: Vec<&'a str>,
    row_key: Vec<Option<&'a str>>,
    row_paid_from: Vec<&'static str>,
    row_cost: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn add(&mut self, index: i32, run: &'a Run<'a>) {
        // each paid call's price is what its decision took from the wallet
        let mut wallet = run.before.wallet.0;
        let (mut has_free, mut has_paid) = (false, false);
        for (tool, key, admission) in &run.admitted {
            let (paid_from, cost) = match admission {
                Admission::Free { .. } => {
                    has_free = true;
                    ("free", 0)
                }
                Admission::Paid { balance_after } => {
                    has_paid = true;
                    let cost = wallet - balance_after.0;
                    wallet = balance_after.0;
                    ("wallet", cost)
                }
                Admission::Refused | Admission::Capped(_) => continue,
            };
            self.row_run.push(index);
            self.row_tool.push(tool);
            self.row_key.push(*key);
            self.row_paid_from.push(paid_from);
            self.row_cost.push(cost);
        }
        self.run.push(index);
        self.account.push(&run.key.0);
        self.month.push(&run.key.1);
        self.has_free.push(has_free);
        self.free_before.push(run.before.free_used);
        self.free_after.push(run.after.free_used);
        self.has_paid.push(has_paid);
        self.wallet_before.push(run.before.wallet.0);
        self.owed_before.push(run.before.owed.0);
        self.wallet_after.push(run.after.wallet.0);
    }
}

/// Applies `runs` (each of another account) with their ledger rows in one statement; each run
/// only if the part of the standing it rests on is unchanged: the month's count when it has free
/// calls (usage rows are never deleted, so a missing one is the 0 read), the wallet and what is
/// owed when it has paid ones (their count, at or past the limit, can only have grown). Returns
/// what became of each run, in order, with the account's wallet and debt as the statement found
/// them before its own write (`None` for a run with no call to write). Durable when the
/// transaction commits (or the statement, outside one).
pub(crate) async fn apply(
    conn: &mut PgConnection,
    runs: &[Run<'_>],
) -> Result<Vec<(Applied, Option<Money>)>, sqlx::Error> {
    let mut columns = Columns::default();
    for (index, run) in runs.iter().enumerate() {
        if !run.admitted.is_empty() {
            columns.add(i32::try_from(index).unwrap_or(i32::MAX), run);
        }
    }
    if columns.run.is_empty() {
        return Ok(runs.iter().map(|_| (Applied::Written, None)).collect());
    }
    // Data-modifying CTEs all run, so each write is made conditional on the ones before it:
    // a stale count writes nothing at all; only a stale wallet after a fresh count could tear.
    let found: Vec<FoundRow> = sqlx::query_as(
        "WITH runs AS (
             SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::bool[], $5::bigint[],
                                  $6::bigint[], $7::bool[], $8::bigint[], $9::bigint[],
                                  $10::bigint[])
                 AS r (run, account_id, month, has_free, free_before, free_after, has_paid,
                       wallet_before, owed_before, wallet_after)),
         counted AS (
             INSERT INTO monthly_usage AS u (account_id, month, free_used)
             SELECT account_id, month, free_after FROM runs WHERE has_free
             ON CONFLICT (account_id, month) DO UPDATE SET free_used = EXCLUDED.free_used
             WHERE u.free_used = (SELECT r.free_before FROM runs r
                                  WHERE r.account_id = EXCLUDED.account_id
                                      AND r.month = EXCLUDED.month)
             RETURNING account_id, month),
         fresh AS (
             SELECT r.* FROM runs r
             WHERE NOT r.has_free OR EXISTS (SELECT 1 FROM counted c
                                             WHERE c.account_id = r.account_id
                                                 AND c.month = r.month)),
         charged AS (
             UPDATE accounts a SET wallet_micros = f.wallet_after FROM fresh f
             WHERE f.has_paid AND a.id = f.account_id AND a.wallet_micros = f.wallet_before
                 AND a.owed_micros = f.owed_before
             RETURNING f.run),
         written AS (
             SELECT f.run FROM fresh f
             WHERE NOT f.has_paid OR f.run IN (SELECT run FROM charged)),
         recorded AS (
             INSERT INTO call_ledger
                 (account_id, month, tool, paid_from, cost_micros, created_at, key_id)
             SELECT r.account_id, r.month, l.tool, l.paid_from, l.cost, $11, l.key_id
             FROM unnest($12::int[], $13::text[], $14::text[], $15::bigint[], $16::text[])
                 AS l (run, tool, paid_from, cost, key_id)
             JOIN runs r ON r.run = l.run
             WHERE l.run IN (SELECT run FROM written)
             RETURNING 1),
         spent AS (
             INSERT INTO spend AS s (account_id, key_id, period, spent_micros)
             SELECT r.account_id, p.key_id, p.period, sum(l.cost)
             FROM unnest($12::int[], $14::text[], $15::bigint[], $16::text[])
                 AS l (run, paid_from, cost, key_id)
             JOIN runs r ON r.run = l.run
             CROSS JOIN LATERAL (VALUES ('', r.month), ('', $17::text),
                                        (l.key_id, r.month), (l.key_id, $17::text))
                 AS p (key_id, period)
             WHERE l.run IN (SELECT run FROM written) AND l.paid_from = 'wallet'
                 AND l.cost > 0 AND p.key_id IS NOT NULL
             GROUP BY r.account_id, p.key_id, p.period
             ON CONFLICT (account_id, key_id, period)
             DO UPDATE SET spent_micros = s.spent_micros + EXCLUDED.spent_micros
             RETURNING 1)
         SELECT r.run,
                r.run IN (SELECT run FROM fresh) AND r.has_free,
                r.run IN (SELECT run FROM charged),
                a.wallet_micros, a.owed_micros
         FROM runs r LEFT JOIN accounts a ON a.id = r.account_id",
    )
    .bind(&columns.run)
    .bind(&columns.account)
    .bind(&columns.month)
    .bind(&columns.has_free)
    .bind(&columns.free_before)
    .bind(&columns.free_after)
    .bind(&columns.has_paid)
    .bind(&columns.wallet_before)
    .bind(&columns.owed_before)
    .bind(&columns.wallet_after)
    .bind(now_millis())
    .bind(&columns.row_run)
    .bind(&columns.row_tool)
    .bind(&columns.row_paid_from)
    .bind(&columns.row_cost)
    .bind(&columns.row_key)
    .bind(DayKey::now().as_str())
    .fetch_all(conn)
    .await?;
    let mut applied: Vec<(Applied, Option<Money>)> =
        runs.iter().map(|_| (Applied::Written, None)).collect();
    for (index, counted, charged, wallet, owed) in found {
        let Some(position) = usize::try_from(index).ok() else {
            continue;
        };
        let at = columns.run.iter().position(|&run| run == index);
        let (has_free, has_paid) = match at {
            Some(at) => (columns.has_free[at], columns.has_paid[at]),
            None => continue,
        };
        let found = match (counted == has_free, charged == has_paid) {
            (true, true) => Applied::Written,
            // a stale count wrote nothing: the wallet is guarded only behind a fresh count
            (false, _) if !charged => Applied::Stale,
            (true, false) if !has_free => Applied::Stale,
            _ => Applied::Torn,
        };
        let money = wallet
            .zip(owed)
            .map(|(wallet, owed)| (Micros(wallet), Micros(owed)));
        applied[position] = (found, money);
    }
    Ok(applied)
}

/// [`apply`] of one run, for tests.
#[cfg(test)]
pub(crate) async fn apply_one(
    conn: &mut PgConnection,
    run: &Run<'_>,
) -> Result<Applied, sqlx::Error> {
    let applied = apply(conn, std::slice::from_ref(run)).await?;
    Ok(applied
        .into_iter()
        .next()
        .map_or(Applied::Torn, |(applied, _)| applied))
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
