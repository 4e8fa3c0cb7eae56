//! The two primitives an admission needs of SQLite, and nothing of the rule: read an account's
//! standing, and apply a decision made on it only if the standing is still the one read. The
//! rule itself is `toolgate_domain::decide`.
//!
//! Both run on the admissions thread's connection inside its open transaction (`BEGIN IMMEDIATE`,
//! so no other connection writes until it commits): nothing is durable before that commit, and a
//! standing read in it cannot change under the thread. The compare-and-set is kept all the same,
//! so the primitives stay right for a caller that reads and applies apart.

use rusqlite::{Connection, OptionalExtension, params};
use toolgate_domain::{Admission, CapRoom, DayKey, Decision, Micros, Standing};
use toolgate_store::{CapColumns, cap_rooms, now_millis, spend_rows};

/// The standing of an account in a month; no usage row yet means no free call used.
const READ: &str = "SELECT coalesce((SELECT free_used FROM monthly_usage
                                 WHERE account_id = ?1 AND month = ?2), 0),
            wallet_micros, owed_micros
     FROM accounts WHERE id = ?1";
/// The month's count, set only if it is still the one read. Usage rows are never deleted, so a
/// missing row is the count 0 that was read.
const COUNT_IF_UNCHANGED: &str =
    "INSERT INTO monthly_usage (account_id, month, free_used) VALUES (?1, ?2, ?3)
     ON CONFLICT (account_id, month) DO UPDATE SET free_used = excluded.free_used
     WHERE monthly_usage.free_used = ?4
     RETURNING free_used";
/// The wallet, set only if it and what is owed are still what was read.
const CHARGE_IF_UNCHANGED: &str = "UPDATE accounts SET wallet_micros = ?2
     WHERE id = ?1 AND wallet_micros = ?3 AND owed_micros = ?4 RETURNING wallet_micros";
const LEDGER: &str = "INSERT INTO call_ledger
         (account_id, month, tool, paid_from, cost_micros, created_at, key_id)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/// The caps that apply to a call and the wallet's spend in their periods (see `CapColumns`),
/// the month `?2` and the day `?4`, of the account and of its key `?3`.
const CAPS: &str = "SELECT a.cap_month_micros, a.cap_day_micros, k.cap_month_micros,
            k.cap_day_micros,
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = ?1 AND key_id = '' AND period = ?2), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = ?1 AND key_id = '' AND period = ?4), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = ?1 AND key_id = ?3 AND period = ?2), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = ?1 AND key_id = ?3 AND period = ?4), 0)
     FROM accounts a
     LEFT JOIN api_keys k ON k.id = ?3 AND k.account_id = a.id
     WHERE a.id = ?1";
/// Adds a paid call's cost to one of its `spend` rows.
const SPEND: &str = "INSERT INTO spend (account_id, key_id, period, spent_micros)
     VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (account_id, key_id, period)
     DO UPDATE SET spent_micros = spent_micros + excluded.spent_micros";

/// One call as the ledger records it.
pub(crate) struct Call<'a> {
    pub account: &'a str,
    pub month: &'a str,
    pub tool: &'a str,
    /// The named key that made it, if one did.
    pub key: Option<&'a str>,
}

/// The spend caps that apply to `call`, each with what the wallet paid in its period, as the
/// open transaction sees them (its own earlier admissions included). Makes nothing durable.
pub(crate) fn cap_rooms_of(conn: &Connection, call: &Call<'_>) -> rusqlite::Result<Vec<CapRoom>> {
    let columns: Option<CapColumns> = conn
        .prepare_cached(CAPS)?
        .query_row(
            params![call.account, call.month, call.key, DayKey::now().as_str()],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            },
        )
        .optional()?;
    Ok(columns.map(cap_rooms).unwrap_or_default())
}

/// The standing of `call`'s account in its month; `None` when there is no such account.
/// Makes nothing durable.
pub(crate) fn read(conn: &Connection, call: &Call<'_>) -> rusqlite::Result<Option<Standing>> {
    conn.prepare_cached(READ)?
        .query_row(params![call.account, call.month], |row| {
            Ok(Standing {
                free_used: row.get(0)?,
                wallet: Micros(row.get(1)?),
                owed: Micros(row.get(2)?),
            })
        })
        .optional()
}

/// Applies `decision`, made on `before`, with the call's ledger row, if the part of the standing
/// it rests on is unchanged: the month's count for a free call; the wallet and what is owed for a
/// paid one (its count, at or past the limit, can only have grown). `false`: it changed, nothing
/// was written; decide again on a fresh read. A refusal writes nothing. Durable with the
/// transaction it runs in.
pub(crate) fn apply(
    conn: &Connection,
    call: &Call<'_>,
    before: Standing,
    decision: &Decision,
) -> rusqlite::Result<bool> {
    let (paid_from, cost) = match decision.admission {
        Admission::Refused | Admission::Capped(_) => return Ok(true),
        Admission::Free { free_used } => {
            let counted = conn
                .prepare_cached(COUNT_IF_UNCHANGED)?
                .query_row(
                    params![call.account, call.month, free_used, before.free_used],
                    |row| row.get::<_, i64>(0),
                )
                .optional()?;
            if counted.is_none() {
                return Ok(false);
            }
            ("free", 0)
        }
        Admission::Paid { balance_after } => {
            let charged = conn
                .prepare_cached(CHARGE_IF_UNCHANGED)?
                .query_row(
                    params![
                        call.account,
                        balance_after.0,
                        before.wallet.0,
                        before.owed.0
                    ],
                    |row| row.get::<_, i64>(0),
                )
                .optional()?;
            if charged.is_none() {
                return Ok(false);
            }
            ("wallet", before.wallet.0 - balance_after.0)
        }
    };
    conn.prepare_cached(LEDGER)?.execute(params![
        call.account,
        call.month,
        call.tool,
        paid_from,
        cost,
        now_millis(),
        call.key
    ])?;
    if cost > 0 {
        let day = DayKey::now();
        let mut spend = conn.prepare_cached(SPEND)?;
        for (key, period) in spend_rows(call.month, day.as_str(), call.key) {
            spend.execute(params![call.account, key, period, cost])?;
        }
    }
    Ok(true)
}

#[cfg(test)]
#[path = "standing_tests.rs"]
mod tests;
