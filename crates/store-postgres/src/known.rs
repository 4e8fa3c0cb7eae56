//! The fast way through a batch: an account this batcher admitted for lately is decided on the
//! standing its last committed batch left, and written in one statement that is its own
//! transaction: one round trip, commit included, where the locked way takes four (BEGIN, a
//! locking read, the write, COMMIT) and holds the account's row across them.
//!
//! The write is guarded as every admission's is: each count the decision read is compared and
//! set in the same statement, so a standing that changed meanwhile (another front end, a credit,
//! a refund) writes nothing, and that account's calls go the locked way, whose read is exact.
//! Each guard stands alone only because a fast run never needs two of them at once. The locked
//! way takes, besides:
//! - an account first seen, or in a month other than the one remembered;
//! - a run with a refusal: a credit may have come since, so a call is refused only on an exact read;
//! - a run from free to paid calls: it guards two rows, and a statement cannot take back the
//!   half that held, as a transaction's rollback does;
//! - an account whose standing was found changed lately, so that two front ends on one account
//!   do not each pay a round trip that fails on most batches.
//!
//! Why a paid run need not guard the free count: within a month that count only grows, so the
//! allowance a paid decision found used up stays used up.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use toolgate_domain::{Admission, Decision, Standing, decide};
use toolgate_store::StoreError;

use crate::admit::{Applied, Key, Money, Run, apply};
use crate::job::Job;

/// Accounts remembered; past it, every one is forgotten (each is read again on its next call).
const REMEMBERED: usize = 100_000;
/// How long an account found changed by another writer goes the locked way.
const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// What one batcher remembers of the accounts it admitted for.
#[derive(Default)]
pub(crate) struct Known {
    /// The month and standing each account's last committed batch left.
    standings: HashMap<String, (String, Standing)>,
    /// When each account was last found changed by another writer.
    contended: HashMap<String, Instant>,
}

impl Known {
    /// Remembers that `standing` was committed for `key`.
    pub(crate) fn committed(&mut self, key: &Key, standing: Standing) {
        if self.standings.len() >= REMEMBERED && !self.standings.contains_key(&key.0) {
            self.standings.clear();
        }
        self.standings
            .insert(key.0.clone(), (key.1.clone(), standing));
    }

    /// Forgets `account`: its next calls go the locked way.
    pub(crate) fn forget(&mut self, account: &str) {
        self.standings.remove(account);
    }

    /// Forgets `account` and sends it the locked way for a while: another writer changed it.
    fn changed_elsewhere(&mut self, account: &str) {
        self.forget(account);
        if self.contended.len() >= REMEMBERED {
            self.contended
                .retain(|_, since| since.elapsed() < CONTENDED_FOR);
        }
        self.contended.insert(account.to_owned(), Instant::now());
    }

    /// The standing to decide `key`'s calls on without a read, if there is one.
    fn standing(&self, key: &Key) -> Option<Standing> {
        let contended = self
            .contended
            .get(&key.0)
            .is_some_and(|since| since.elapsed() < CONTENDED_FOR);
        match self.standings.get(&key.0) {
            Some((month, standing)) if !contended && *month == key.1 => Some(*standing),
            _ => None,
        }
    }
}

/// One account's calls decided the fast way: the standing they rest on and each decision.
struct Planned {
    before: Standing,
    calls: Vec<(usize, Decision)>,
}

/// A batch as [`Known::plan`] split it.
pub(crate) struct Plan {
    fast: Vec<Planned>,
    /// The indices of the calls left for the locked way, in the order they came.
    locked: Vec<usize>,
}

impl Known {
    /// Decides the calls of `batch` that can go the fast way.
    pub(crate) fn plan(&self, batch: &[Job]) -> Plan {
        let mut accounts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (index, job) in batch.iter().enumerate() {
            accounts.entry(job.key.0.as_str()).or_default().push(index);
        }
        let mut plan = Plan {
            fast: Vec::new(),
            locked: Vec::new(),
        };
        for calls in accounts.into_values() {
            match self.plan_account(batch, &calls) {
                Some(planned) => plan.fast.push(planned),
                None => plan.locked.extend(calls),
            }
        }
        plan.locked.sort_unstable();
        plan
    }

    /// One account's `calls` decided the fast way, if they can go that way.
    fn plan_account(&self, batch: &[Job], calls: &[usize]) -> Option<Planned> {
        let key = &batch[*calls.first()?].key;
        if calls.iter().any(|&index| batch[index].key != *key) {
            return None;
        }
        let before = self.standing(key)?;
        let mut after = before;
        let mut decided = Vec::with_capacity(calls.len());
        let (mut free, mut paid) = (false, false);
        for &index in calls {
            let decision = decide(after, batch[index].terms);
            match decision.admission {
                Admission::Free { .. } => free = true,
                Admission::Paid { .. } => paid = true,
                Admission::Refused | Admission::Capped(_) => return None,
            }
            after = decision.after;
            decided.push((index, decision));
        }
        (!(free && paid)).then_some(Planned {
            before,
            calls: decided,
        })
    }
}

/// Writes what `plan` decided the fast way and answers those calls (the decision and the
/// record, durable once the statement returns). Returns the indices of the calls left for the
/// locked way, in the order they came.
pub(crate) async fn write(
    pool: &PgPool,
    batch: &mut [Job],
    plan: Plan,
    known: &mut Known,
) -> Vec<usize> {
    let mut locked = plan.locked;
    if plan.fast.is_empty() {
        return locked;
    }
    let written = {
        let runs: Vec<Run<'_>> = plan
            .fast
            .iter()
            .map(|planned| {
                let key = &batch[planned.calls[0].0].key;
                let mut run = Run::new(key, planned.before);
                for (index, decision) in &planned.calls {
                    run.push(
                        &batch[*index].tool,
                        batch[*index].key_id.as_deref(),
                        decision,
                    );
                }
                run
            })
            .collect();
        apply_alone(pool, &runs).await
    };
    let written = match written {
        Ok(all) => Some(all),
        // PostgreSQL failed the statement, so its implicit transaction wrote nothing: the
        // locked way reads again
        Err(sqlx::Error::Database(_)) => None,
        // The answer was lost on the way (the connection broke): the statement may have
        // committed, and running the calls again could count them twice. They fail instead.
        Err(error) => {
            let error = crate::rows::map_error(error);
            for planned in plan.fast {
                known.forget(&batch[planned.calls[0].0].key.0);
                for (index, _) in planned.calls {
                    let lost = || StoreError::Unavailable(error.to_string());
                    batch[index].answer(Err(lost()), Err(lost()));
                }
            }
            return locked;
        }
    };
    for (at, planned) in plan.fast.into_iter().enumerate() {
        let found = written.as_ref().and_then(|all| all.get(at).cloned());
        let key = batch[planned.calls[0].0].key.clone();
        let account = key.0.clone();
        match found {
            Some((Applied::Written, money)) => {
                // A paid run's guards cover the wallet it leaves. A free run does not rest on
                // the wallet, so it shows the one its statement found (which it did not change).
                // What the last call leaves is what the batcher decides on next time.
                let free = planned
                    .calls
                    .iter()
                    .all(|(_, decision)| matches!(decision.admission, Admission::Free { .. }));
                let mut left = planned.before;
                for (index, decision) in planned.calls {
                    let exact = match (free, money) {
                        (false, _) => Some(decision.after),
                        (true, Some((wallet, owed))) => Some(Standing {
                            wallet,
                            owed,
                            ..decision.after
                        }),
                        (true, None) => None,
                    };
                    left = exact.unwrap_or(decision.after);
                    let usage = exact.map(|after| after.usage());
                    batch[index].answer(Ok((decision.admission, usage)), Ok(()));
                }
                known.committed(&key, left);
            }
            Some((Applied::Stale, _)) => {
                known.changed_elsewhere(&account);
                locked.extend(planned.calls.iter().map(|(index, _)| *index));
            }
            // Against the guards' design, part of it held: running the calls again could count
            // them twice, so they fail, as a torn batch's do.
            Some((Applied::Torn, _)) => {
                known.forget(&account);
                for (index, _) in planned.calls {
                    let torn = || {
                        StoreError::Unavailable(
                            "an admission's compare-and-set held in part".to_owned(),
                        )
                    };
                    batch[index].answer(Err(torn()), Err(torn()));
                }
            }
            None => {
                known.forget(&account);
                locked.extend(planned.calls.iter().map(|(index, _)| *index));
            }
        }
    }
    locked.sort_unstable();
    locked
}

/// Writes `runs` in one statement outside any transaction block: PostgreSQL commits it alone.
async fn apply_alone(
    pool: &PgPool,
    runs: &[Run<'_>],
) -> Result<Vec<(Applied, Option<Money>)>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    apply(&mut conn, runs).await
}

#[cfg(test)]
#[path = "known_tests.rs"]
mod tests;
