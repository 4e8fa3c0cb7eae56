//! Refunds and disputes taken back from a wallet, applied by the admissions thread.
//!
//! A take-back lowers a wallet outside admission, so the admission mirror (see `allowance`) must
//! never predict a paid call from the wallet it had before. Queued behind every admission
//! submitted before it, on the one thread that decides admissions, it is ordered exactly
//! against them: the mirror forgets the account while it is queued and learns it again from the
//! first admission decided after it.

use rusqlite::{Connection, OptionalExtension, params};
use toolgate_domain::{AccountId, Micros};
use toolgate_store::{Reversal, StoreError, TakenBack, now_millis, reversal_amounts};

use crate::allowance::Mirror;
use crate::jobs::{Asked, TakeBackJob};

const PAYMENT: &str = "SELECT account_id, credited_micros, refunded_micros, taken_micros
     FROM wallet_payments WHERE payment = ?1";
/// Once per event id and per dispute id: any unique value already present skips the insert.
const RECORD: &str = "INSERT INTO wallet_takebacks
         (reference, dispute, payment, account_id, amount_micros, created_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING";
const PAYMENT_TAKEN: &str = "UPDATE wallet_payments
     SET refunded_micros = ?1, taken_micros = taken_micros + ?2 WHERE payment = ?3";
/// The wallet first, the rest owed (the right-hand sides read the row as it was).
const TAKE: &str = "UPDATE accounts SET wallet_micros = max(wallet_micros - ?1, 0),
         owed_micros = owed_micros + max(?1 - wallet_micros, 0)
     WHERE id = ?2 RETURNING wallet_micros - owed_micros";

impl TakeBackJob {
    /// Applies it inside the writer's open transaction.
    pub(crate) fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let row = conn
            .prepare_cached(PAYMENT)?
            .query_row(params![self.payment], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })
            .optional()?;
        // a payment belongs to one account for good; only the fenced one may be changed
        let Some((account, credited, refunded, taken)) =
            row.filter(|(account, ..)| *account == self.account)
        else {
            self.outcome = Some(TakenBack::UnknownPayment);
            return Ok(());
        };
        let (reversal, dispute) = match &self.asked {
            Asked::Refunded(total) => (Reversal::Refunded { total: *total }, None),
            Asked::Disputed(dispute, amount) => (
                Reversal::Disputed {
                    dispute,
                    amount: *amount,
                },
                Some(dispute.as_str()),
            ),
        };
        let (refunded, take) =
            reversal_amounts(reversal, Micros(credited), Micros(refunded), Micros(taken));
        let recorded = conn.prepare_cached(RECORD)?.execute(params![
            self.reference,
            dispute,
            self.payment,
            account,
            take.0,
            now_millis()
        ])?;
        if recorded == 0 {
            self.outcome = Some(TakenBack::AlreadyApplied);
            return Ok(());
        }
        conn.prepare_cached(PAYMENT_TAKEN)?
            .execute(params![refunded.0, take.0, self.payment])?;
        let balance: i64 = conn
            .prepare_cached(TAKE)?
            .query_row(params![take.0, account], |row| row.get(0))?;
        self.outcome = Some(TakenBack::Taken {
            account: AccountId::from_stored(account),
            amount: take,
            balance: Micros(balance),
        });
        Ok(())
    }

    /// Answers once the transaction's fate is known, and gives the fenced entries back.
    pub(crate) fn record(self, outcome: Result<(), StoreError>, mirror: &Mirror) {
        mirror.unfence(&self.fenced);
        let answer = match outcome {
            Ok(()) if self.undone => Err(StoreError::Unavailable(
                "the take-back was rolled back".to_owned(),
            )),
            Ok(()) => self
                .outcome
                .ok_or_else(|| StoreError::Unavailable("the take-back was not applied".to_owned())),
            Err(error) => Err(error),
        };
        // a caller that went away no longer needs the answer; the take-back stands
        let _ = self.answer.send(answer);
    }
}
