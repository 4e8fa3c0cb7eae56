//! Admissions of calls a spend cap may refuse. They leave the batcher: each is decided alone in
//! a transaction of its own, with the account's row locked (`admit::read_standings`), so the
//! caps and the wallet's spend it reads (`CAPS`) cannot change until it commits: the `spend`
//! rows are written only by admissions, in the statement that charges the account's row, which
//! waits for that lock. A cap is thus exact across every front end of the database, at one
//! transaction per capped call.
//!
//! The batcher may remember a standing this path changed; its guarded writes then find the
//! standing stale and take the locked way, as after any other writer.

use sqlx::{Connection, PgConnection, PgPool};
use toolgate_domain::{Admission, DayKey, decide_capped};
use toolgate_store::{CallCharge, CapColumns, Decided, Recorded, StoreError, cap_rooms};

use crate::admit::{Applied, BEGIN, Run, apply, read_standings};
use crate::rows::map_error;

/// Decisions a capped call may try: the second read is made with the lock held and holds.
const MAX_ATTEMPTS: usize = 3;

/// The caps that apply to a call and the wallet's spend in their periods (see `CapColumns`)
/// (the month `$2` and the day `$4`, of the account and of its key `$3`).
const CAPS: &str = "SELECT a.cap_month_micros, a.cap_day_micros, k.cap_month_micros,
            k.cap_day_micros,
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = $1 AND key_id = '' AND period = $2), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = $1 AND key_id = '' AND period = $4), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = $1 AND key_id = $3::text AND period = $2), 0),
            coalesce((SELECT spent_micros FROM spend
                      WHERE account_id = $1 AND key_id = $3::text AND period = $4), 0)
     FROM accounts a
     LEFT JOIN api_keys k ON k.id = $3::text AND k.account_id = a.id
     WHERE a.id = $1";

/// Decides and records one capped call; durable when it returns.
pub(crate) async fn decide(pool: &PgPool, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
    let mut conn = pool.acquire().await.map_err(map_error)?;
    for _ in 0..MAX_ATTEMPTS {
        let mut tx = conn.begin_with(BEGIN).await.map_err(map_error)?;
        match decide_in(&mut tx, charge).await {
            Ok(Some(decided)) => {
                tx.commit().await.map_err(map_error)?;
                return Ok(decided);
            }
            Ok(None) => tx.rollback().await.map_err(map_error)?,
            Err(error) => {
                let _ = tx.rollback().await;
                return Err(error);
            }
        }
    }
    Err(StoreError::Unavailable(
        "the account's standing kept changing under a capped admission".to_owned(),
    ))
}

/// One attempt inside the open transaction; `None`: the standing changed, try again.
async fn decide_in(
    conn: &mut PgConnection,
    charge: &CallCharge<'_>,
) -> Result<Option<Decided>, StoreError> {
    let key = charge.account_month();
    let standings = read_standings(conn, std::slice::from_ref(&key))
        .await
        .map_err(map_error)?;
    let before = *standings.get(&key).ok_or(StoreError::NotFound)?;
    let key_id = charge.key.map(|key| key.as_str());
    let columns: CapColumns = sqlx::query_as(CAPS)
        .bind(&key.0)
        .bind(&key.1)
        .bind(key_id)
        .bind(DayKey::now().as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(map_error)?;
    let decision = decide_capped(before, charge.terms(), &cap_rooms(columns));
    let mut run = Run::new(&key, before);
    run.push(charge.tool, key_id, &decision);
    let applied = apply(conn, std::slice::from_ref(&run))
        .await
        .map_err(map_error)?;
    if !matches!(applied.first(), Some((Applied::Written, _))) {
        return Ok(None);
    }
    let usage = match decision.admission {
        Admission::Refused | Admission::Capped(_) => None,
        _ => Some(decision.after.usage()),
    };
    Ok(Some(Decided {
        admission: decision.admission,
        usage,
        recorded: Recorded::already(),
    }))
}
