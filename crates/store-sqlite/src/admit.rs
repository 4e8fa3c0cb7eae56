//! Call admissions, decided and recorded by one thread with its own connection.
//!
//! Each admission reads the account's standing, decides on it with the one rule
//! (`toolgate_domain::decide`) and applies the decision with a compare-and-set (see `standing`).
//! Within one transaction the standing after an applied decision is known exactly, so the next
//! call of that account in the batch decides on it without reading; a refusal is only taken
//! from a fresh read, and any other decision is still guarded by the compare-and-set.
//! The thread drains every admission waiting at the moment into one transaction (group commit,
//! so the commit's fsync is shared) with a savepoint per call, so a failing call is undone
//! alone. Each caller hears its decision as soon as its statements have run, and separately when
//! the commit is durable: the call's work overlaps the fsync, and the caller answers its client
//! only after both. A blocking thread, not sqlx's asynchronous driver, because on the metered path
//! every thread wake-up counts: here a call costs one (the thread picking it up) where the driver
//! added a task and a worker-thread round trip per statement. The other writes (accounts,
//! credits, keys) stay on sqlx; SQLite serialises the two connections (`busy_timeout` 10 s).
//! Refunds and disputes taken back from wallets come this way too (`take_back`), so that they
//! are ordered exactly against the admissions the mirror predicted.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::mpsc;
use toolgate_domain::{Admission, Standing, decide, decide_capped};
use toolgate_store::StoreError;

use crate::Durability;
use crate::allowance::Mirror;
use crate::jobs::{AdmitJob, Key, WriterJob};
use crate::standing::{self, Call};
use crate::wal_checkpoints::{Checkpointer, WRITER_CHECKPOINT_PAGES};

/// Most admissions decided in one transaction.
const MAX_BATCH: usize = 512;
/// Admissions that may wait for the writer before senders feel back-pressure.
const QUEUE_DEPTH: usize = 4096;

/// Decisions an admission may try before it gives up, the first on the standing known in the
/// transaction if any, the others on fresh reads: on this thread, inside its exclusive
/// transaction, the first always holds (see `standing`).
const MAX_ATTEMPTS: usize = 3;

/// The standings known exactly inside the writer's open transaction: each one the standing
/// after the last decision applied to it there. Forgotten when the transaction ends (other
/// connections may write between transactions), when a job of the account is undone, and when a
/// take-back changes the account's wallet.
type Known = HashMap<Key, Standing>;

impl WriterJob {
    fn run(&mut self, conn: &Connection, known: &mut Known) -> Result<(), StoreError> {
        match self {
            Self::Admit(job) => job.run(conn, known),
            Self::TakeBack(job) => {
                known.retain(|key, _| key.0 != job.account());
                job.run(conn).map_err(unavailable)
            }
        }
    }

    /// Its statements failed and were rolled back to its savepoint.
    fn undo(&mut self, error: StoreError, known: &mut Known) {
        match self {
            Self::Admit(job) => {
                known.remove(&job.key);
                // its decision may be out already; its record must now say it was undone
                job.decide(Err(error));
                job.undone = true;
            }
            Self::TakeBack(job) => job.undone = true,
        }
    }

    fn record(self, outcome: Result<(), StoreError>, mirror: &Mirror) {
        match self {
            Self::Admit(job) => job.record(outcome, mirror),
            Self::TakeBack(job) => job.record(outcome, mirror),
        }
    }
}

impl AdmitJob {
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
            (Ok(()), Some(decision)) => Some(decision),
            _ => None,
        };
        mirror.settle(&self.key, self.predicted.as_ref(), settled);
        let refused = self
            .decision
            .is_some_and(|decision| decision.admission == Admission::Refused);
        let unpaid = self.predicted.is_some() && refused;
        let outcome = match outcome {
            // the call started on the prediction; the books must not pretend it was charged
            Ok(()) if unpaid => Err(StoreError::Unavailable(
                "the database refused a call predicted to be admitted".to_owned(),
            )),
            other => other,
        };
        let _ = self.recorded.send(outcome);
    }

    /// Decides the job inside the open transaction on its account's standing (known, else
    /// read), and applies the decision (an admitted call gets its ledger row). The decision
    /// goes out at once.
    fn run(&mut self, conn: &Connection, known: &mut Known) -> Result<(), StoreError> {
        let call = Call {
            account: &self.key.0,
            month: &self.key.1,
            tool: &self.tool,
            key: self.key_id.as_deref(),
        };
        let mut remembered = known.get(&self.key).copied();
        for _ in 0..MAX_ATTEMPTS {
            let (before, read) = match remembered.take() {
                Some(standing) => (standing, false),
                None => {
                    let standing = standing::read(conn, &call)
                        .map_err(unavailable)?
                        .ok_or(StoreError::NotFound)?;
                    (standing, true)
                }
            };
            let decision = if self.capped {
                let rooms = standing::cap_rooms_of(conn, &call).map_err(unavailable)?;
                decide_capped(before, self.terms, &rooms)
            } else {
                decide(before, self.terms)
            };
            // a refusal writes nothing to guard, so it must rest on what the database holds
            let trusted = read || decision.admission.admitted();
            if trusted && standing::apply(conn, &call, before, &decision).map_err(unavailable)? {
                match known.get_mut(&self.key) {
                    Some(standing) => *standing = decision.after,
                    None => {
                        known.insert(self.key.clone(), decision.after);
                    }
                }
                self.decision = Some(decision);
                self.decide(Ok(decision.admission));
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(
            "the account's standing kept changing under the metering writer".to_owned(),
        ))
    }
}

/// Opens the writer's connection and starts its thread; the thread ends when every sender is
/// dropped.
pub(crate) fn spawn_writer(
    path: &Path,
    durability: Durability,
    mirror: Arc<Mirror>,
) -> Result<mpsc::Sender<WriterJob>, StoreError> {
    let conn = open_connection(path, durability).map_err(unavailable)?;
    let checkpoints = Checkpointer::spawn(open_connection(path, durability).map_err(unavailable)?)?;
    let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
    std::thread::Builder::new()
        .name("toolgate-admissions".to_owned())
        .spawn(move || run_writer(&conn, receiver, &mirror, checkpoints))
        .map_err(|e| StoreError::Unavailable(format!("cannot start the metering writer: {e}")))?;
    Ok(sender)
}

fn open_connection(path: &Path, durability: Durability) -> rusqlite::Result<Connection> {
    // WAL mode is a property of the file, set by the pool that created it.
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", true)?;
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    // its commits checkpoint rarely: `wal_checkpoints` does most of it, on a thread of its own
    conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
    Ok(conn)
}

fn unavailable(error: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

fn run_writer(
    conn: &Connection,
    mut receiver: mpsc::Receiver<WriterJob>,
    mirror: &Mirror,
    mut checkpoints: Checkpointer,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(job) = receiver.blocking_recv() {
        batch.push(job);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let admissions = batch.len();
        decide_batch(conn, &mut batch, mirror);
        checkpoints.committed(admissions); // after every caller heard its outcome
    }
}

/// Decides every job in one transaction; if the commit fails, every job fails with it.
fn decide_batch(conn: &Connection, batch: &mut Vec<WriterJob>, mirror: &Mirror) {
    if let Err(error) = conn.execute_batch("BEGIN IMMEDIATE") {
        return record_all(batch, &Err(unavailable(error)), mirror);
    }
    let mut known = Known::new();
    for job in batch.iter_mut() {
        let outcome = conn
            .execute_batch("SAVEPOINT admission")
            .map_err(unavailable)
            .and_then(|()| job.run(conn, &mut known))
            .and_then(|()| conn.execute_batch("RELEASE admission").map_err(unavailable));
        if let Err(error) = outcome {
            let _ = conn.execute_batch("ROLLBACK TO admission; RELEASE admission");
            job.undo(error, &mut known);
        }
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => record_all(batch, &Ok(()), mirror),
        Err(error) => {
            tracing::error!(%error, calls = batch.len(), "metering commit failed");
            let _ = conn.execute_batch("ROLLBACK");
            record_all(batch, &Err(unavailable(error)), mirror);
        }
    }
}

fn record_all(batch: &mut Vec<WriterJob>, outcome: &Result<(), StoreError>, mirror: &Mirror) {
    for job in batch.drain(..) {
        let outcome = match outcome {
            Ok(()) => Ok(()),
            Err(error) => Err(StoreError::Unavailable(error.to_string())),
        };
        job.record(outcome, mirror);
    }
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
