//! Group commit of admissions: each store (each front end's process) queues its calls to a
//! batcher task, which decides every call waiting at the moment in one transaction and commits
//! them together, so a commit's round trips and its WAL flush are shared by the batch.
//!
//! Accounts the batcher remembers go the fast way first ([`known`]): decided on the standing
//! their last batch left and written in one guarded statement, commit included. The rest take
//! the locked way below, and so does any account whose guards fail there.
//!
//! In the locked way, the accounts' rows are locked and read at once (`admit::read_standings`, in the
//! order of their ids); each account's calls are then decided in the order they arrived, each on
//! the standing the one before it left, with the one rule (`toolgate_domain::decide`), and
//! applied per account and month in one guarded statement (`admit::apply`). An account whose
//! standing turns out stale (its read waited for the lock while another front end counted a
//! call) is read again, now exactly, and decided again, alone. Every decision goes out once all
//! of the batch's statements have run, before the commit, so the calls' work overlaps it; each
//! caller hears after the commit whether its record is durable.
//!
//! A deadlock or serialisation failure PostgreSQL reports rolls the batch back and runs it again
//! (no decision has gone out yet, so nothing is counted twice); any other failure runs each of
//! the batch's accounts again in a transaction of its own, so one failing call fails only its
//! account's calls of that batch.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use sqlx::{PgConnection, PgPool};
use tokio::sync::{Mutex, mpsc};
use toolgate_domain::{Standing, decide};
use toolgate_store::{CallCharge, Decided, StoreError};

use crate::admit::{Applied, BEGIN, Key, Run, apply, read_standings};
use crate::job::{Job, Verdict, stopped};
use crate::known::{self, Known, Plan};
use crate::rows::map_error;

/// Most admissions decided in one transaction.
const MAX_BATCH: usize = 512;
/// Admissions that may wait for a batcher before callers feel back-pressure.
const QUEUE_DEPTH: usize = 4096;
/// Batchers per store. One: a second (collecting while the first commits) made a busy account
/// slower, its batch waiting for the first's lock with fewer calls (`admit_throughput` example:
/// ~2,100 against ~1,400 admissions/s on one account, ~10 % less on 16 accounts).
pub(crate) const BATCHERS: usize = 1;
/// Times a batch is run when PostgreSQL breaks a deadlock or a serialisation conflict with it.
const MAX_BATCH_ATTEMPTS: usize = 5;
/// Reads one account's run of calls may be decided on: the second, made with the lock held,
/// always holds unless something wrote the standing without taking the lock.
pub(crate) const MAX_READS: usize = 3;

/// The queue to a store's batchers.
#[derive(Clone)]
pub(crate) struct Admissions {
    queue: mpsc::Sender<Job>,
}

impl Admissions {
    /// Starts `batchers` tasks admitting over `pool`; they end when every clone is dropped.
    pub(crate) fn start(pool: &PgPool, batchers: usize) -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE_DEPTH);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..batchers.max(1) {
            tokio::spawn(run_batcher(pool.clone(), receiver.clone()));
        }
        Self { queue }
    }

    /// Queues one call; answers with its decision, and the durability still to come.
    pub(crate) async fn decide(&self, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
        let (job, answers) = Job::new(charge);
        self.queue.send(job).await.map_err(|_| stopped())?;
        answers.decided().await
    }
}

async fn run_batcher(pool: PgPool, receiver: Arc<Mutex<mpsc::Receiver<Job>>>) {
    // One batch at a time: a second one sent while the first is written often reaches the
    // account's row first, and its guards then fail (3,200 against 16,000 admissions/s on one
    // account in `examples/admit_throughput`).
    let mut known = Known::default();
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = Vec::new();
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            batch
        };
        let plan = known.plan(&batch);
        run_batch(&pool, batch, plan, &mut known).await;
    }
}

/// Why a batch's transaction was given up.
#[derive(Debug)]
enum Abort {
    /// PostgreSQL broke a deadlock or a serialisation conflict by failing it: safe to run again.
    Conflict(StoreError),
    /// Anything else.
    Failed(StoreError),
}

impl From<sqlx::Error> for Abort {
    fn from(error: sqlx::Error) -> Self {
        let conflict = matches!(&error, sqlx::Error::Database(db)
            if matches!(db.code().as_deref(), Some("40001" | "40P01")));
        if conflict {
            Self::Conflict(map_error(error))
        } else {
            Self::Failed(map_error(error))
        }
    }
}

/// How running a batch's calls failed.
#[derive(Debug)]
enum Unrun {
    /// No transaction could be opened (the database is unreachable): trying again per account
    /// would only wait again.
    Unreachable(StoreError),
    /// A statement failed (or the batch kept meeting conflicts).
    Failed(StoreError),
}

/// Decides and commits `batch`: what it can the fast way ([`known`](crate::known)), the rest
/// under the accounts' locks; when a statement fails there and more than one account is left,
/// each account's calls go again in a transaction of their own.
async fn run_batch(pool: &PgPool, mut batch: Vec<Job>, plan: Plan, known: &mut Known) {
    let left = known::write(pool, &mut batch, plan, known).await;
    if left.is_empty() {
        return;
    }
    let failed = match decide_and_commit(pool, &mut batch, &left, known).await {
        Ok(recorded) => return answer(batch, recorded),
        Err(Unrun::Unreachable(error)) => return fail(batch, &error),
        Err(Unrun::Failed(error)) => error,
    };
    let mut accounts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for index in left {
        accounts
            .entry(batch[index].key.0.clone())
            .or_default()
            .push(index);
    }
    if accounts.len() == 1 {
        return fail(batch, &failed);
    }
    let mut recorded: Vec<Option<Result<(), StoreError>>> = batch.iter().map(|_| None).collect();
    for indices in accounts.into_values() {
        match decide_and_commit(pool, &mut batch, &indices, known).await {
            Ok(alone) => {
                for (index, heard) in alone.into_iter().enumerate() {
                    if heard.is_some() {
                        recorded[index] = heard;
                    }
                }
            }
            Err(Unrun::Failed(error)) => {
                for index in indices {
                    recorded[index] = Some(Err(copy(&error)));
                }
            }
            Err(Unrun::Unreachable(error)) => {
                // every call not answered yet hears it
                for heard in recorded.iter_mut().filter(|heard| heard.is_none()) {
                    *heard = Some(Err(copy(&error)));
                }
                break;
            }
        }
    }
    answer(batch, recorded);
}

fn fail(batch: Vec<Job>, error: &StoreError) {
    let recorded = batch.iter().map(|_| Some(Err(copy(error)))).collect();
    answer(batch, recorded);
}

/// The same error for another caller (`StoreError` is not `Clone`).
fn copy(error: &StoreError) -> StoreError {
    match error {
        StoreError::NotFound => StoreError::NotFound,
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// Sends every call what it has not heard yet: a decision that never went out is the failure,
/// as is a record that never came.
fn answer(batch: Vec<Job>, recorded: Vec<Option<Result<(), StoreError>>>) {
    for (mut job, recorded) in batch.into_iter().zip(recorded) {
        let recorded = recorded.unwrap_or_else(|| Err(stopped()));
        let failure = match &recorded {
            Ok(()) => stopped(),
            Err(error) => copy(error),
        };
        job.answer(Err(failure), recorded);
    }
}

/// Runs the calls `indices` of `batch` in one transaction (again on a conflict, a bounded number
/// of times), sends their decisions once every statement has run, and commits. Returns whether
/// each call's record is durable, indexed like `batch` (`None` for calls not in `indices`).
async fn decide_and_commit(
    pool: &PgPool,
    batch: &mut [Job],
    indices: &[usize],
    known: &mut Known,
) -> Result<Vec<Option<Result<(), StoreError>>>, Unrun> {
    let mut last = None;
    for _ in 0..MAX_BATCH_ATTEMPTS {
        let mut tx = pool
            .begin_with(BEGIN)
            .await
            .map_err(|error| Unrun::Unreachable(map_error(error)))?;
        match decide_all(&mut tx, batch, indices).await {
            Ok((decisions, standings)) => {
                let mut admitted = Vec::with_capacity(decisions.len());
                for (job, decision) in batch.iter_mut().zip(decisions) {
                    let Some(decision) = decision else {
                        admitted.push(None);
                        continue;
                    };
                    admitted.push(Some(decision.is_ok()));
                    job.decide(decision);
                }
                let committed = tx.commit().await.map_err(map_error);
                // read under the lock and written in this transaction: exact once committed
                for (key, standing) in &standings {
                    match committed {
                        Ok(()) => known.committed(key, *standing),
                        Err(_) => known.forget(&key.0),
                    }
                }
                return Ok(admitted
                    .into_iter()
                    .map(|decided| {
                        decided.map(|_| match &committed {
                            Ok(()) => Ok(()),
                            Err(error) => Err(copy(error)),
                        })
                    })
                    .collect());
            }
            Err(Abort::Conflict(error)) => {
                // rolling back releases the locks at once
                let _ = tx.rollback().await;
                last = Some(error);
            }
            Err(Abort::Failed(error)) => {
                let _ = tx.rollback().await;
                return Err(Unrun::Failed(error));
            }
        }
    }
    Err(Unrun::Failed(last.unwrap_or_else(stopped)))
}

/// Decides every call of `indices` inside the open transaction and applies the decisions;
/// indexed like `batch`, with the standings the accounts are left in. Each round decides one run of every account with calls left and
/// applies all of them in one statement; an account whose run was stale is read again (its lock
/// is held now, so the read is exact) and its run decided again in the next round.
async fn decide_all(
    conn: &mut PgConnection,
    batch: &[Job],
    indices: &[usize],
) -> Result<(Decisions, HashMap<Key, Standing>), Abort> {
    let mut keys: Vec<Key> = indices.iter().map(|&i| batch[i].key.clone()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut standings = read_standings(conn, &keys).await?;
    let mut decisions: Decisions = batch.iter().map(|_| None).collect();
    let mut accounts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &index in indices {
        accounts
            .entry(batch[index].key.0.as_str())
            .or_default()
            .push(index);
    }
    let mut pending: Vec<Pending<'_>> = accounts
        .values()
        .map(|calls| Pending {
            // a run: consecutive calls of the account in one month (a batch spans months rarely)
            runs: calls
                .chunk_by(|&a, &b| batch[a].key.1 == batch[b].key.1)
                .collect(),
            next: 0,
            reads: 1,
        })
        .collect();
    while !pending.is_empty() {
        let mut wave = Vec::with_capacity(pending.len());
        for (at, account) in pending.iter_mut().enumerate() {
            let calls = account.runs[account.next];
            let key = &batch[calls[0]].key;
            let Some(&before) = standings.get(key) else {
                account.answer_rest(&mut decisions, || StoreError::NotFound);
                continue;
            };
            let mut run = Run::new(key, before);
            let admissions: Vec<(usize, Verdict)> = calls
                .iter()
                .map(|&index| {
                    let decision = decide(run.after, batch[index].terms);
                    run.push(
                        &batch[index].tool,
                        batch[index].key_id.as_deref(),
                        &decision,
                    );
                    // read under the account's lock: exact
                    (index, (decision.admission, Some(decision.after.usage())))
                })
                .collect();
            wave.push((at, run, admissions));
        }
        let runs: Vec<Run<'_>> = wave.iter().map(|(_, run, _)| run.clone()).collect();
        let applied = apply(conn, &runs).await?;
        let mut stale = Vec::new();
        for ((at, run, admissions), (applied, _)) in wave.into_iter().zip(applied) {
            let account = &mut pending[at];
            match applied {
                Applied::Written => {
                    set_standing(&mut standings, run.key, run.after);
                    for (index, verdict) in admissions {
                        decisions[index] = Some(Ok(verdict));
                    }
                    account.next += 1;
                    account.reads = 1;
                }
                Applied::Stale if account.reads < MAX_READS => {
                    account.reads += 1;
                    stale.push(run.key.clone());
                }
                Applied::Stale => account.answer_rest(&mut decisions, || {
                    StoreError::Unavailable(
                        "the account's standing kept changing during its admission".to_owned(),
                    )
                }),
                Applied::Torn => {
                    return Err(Abort::Failed(StoreError::Unavailable(
                        "an admission's compare-and-set held in part".to_owned(),
                    )));
                }
            }
        }
        if !stale.is_empty() {
            stale.sort_unstable();
            let fresh = read_standings(conn, &stale).await?;
            for key in &stale {
                match fresh.get(key) {
                    Some(&standing) => set_standing(&mut standings, key, standing),
                    None => {
                        standings.remove(key);
                    }
                }
            }
        }
        pending.retain(|account| account.next < account.runs.len());
    }
    Ok((decisions, standings))
}

/// Each call's decision, indexed like its batch (`None`: not decided in this transaction).
type Decisions = Vec<Option<Result<Verdict, StoreError>>>;

/// An account's calls in a batch, as runs of one month each, and how far they are applied.
struct Pending<'a> {
    runs: Vec<&'a [usize]>,
    /// The first run not applied yet.
    next: usize,
    /// Reads its next run has been decided on so far.
    reads: usize,
}

impl Pending<'_> {
    /// Answers every call not applied yet with `error`; nothing of the account is left to do.
    fn answer_rest(
        &mut self,
        decisions: &mut [Option<Result<Verdict, StoreError>>],
        error: impl Fn() -> StoreError,
    ) {
        for &index in self.runs[self.next..].iter().copied().flatten() {
            decisions[index] = Some(Err(error()));
        }
        self.next = self.runs.len();
    }
}

/// Records `standing` for `key`, and its wallet and debt for the account's other months.
fn set_standing(standings: &mut HashMap<Key, Standing>, key: &Key, standing: Standing) {
    for (other, known) in standings.iter_mut() {
        if other.0 == key.0 {
            known.wallet = standing.wallet;
            known.owed = standing.owed;
        }
    }
    standings.insert(key.clone(), standing);
}

#[cfg(test)]
#[path = "batch_tests.rs"]
pub(crate) mod tests;
