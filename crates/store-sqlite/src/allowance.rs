//! A mirror of each busy account's allowance and wallet as they will stand once every queued
//! admission is applied, so that a call certain to be admitted starts without waiting for the
//! database. The database stays the authority: every call is still decided and recorded there,
//! and its answer still waits for that record. The mirror only predicts, with the rule the
//! database decides by (`toolgate_domain::decide`), and only when it can be certain:
//!
//! - it is enabled only for the one process that serves (`serve` holds a lock on the database
//!   for its life), so no other process admits calls; other processes may only credit wallets,
//!   which makes the database more generous than the mirror, never less;
//! - a refund or dispute taken back from a wallet (which makes it less generous) is queued like
//!   an admission and fences the account: its entries are unknown from the moment it is queued
//!   until it is settled, and are learnt again from an admission decided after it;
//! - a prediction is made and the job queued under one lock, so the mirror applies jobs in the
//!   order the writer does;
//! - anything it cannot know (a job it did not predict, a refusal, a failed commit) makes the
//!   account's entry unknown until every queued job of it is settled; then the standing the
//!   database decided the last one on, with that decision applied, seeds it again;
//! - should the database ever decide otherwise than predicted, something else is changing it:
//!   the mirror switches itself off for good and says so.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc::{self, error::TrySendError};
use toolgate_domain::{Admission, Decision, Standing, decide};

use crate::jobs::{AdmitJob, Key, TakeBackJob, WriterJob};

/// Entries kept before idle ones (nothing queued) are dropped.
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Default)]
struct Entry {
    /// The standing once every queued job is applied, when certain.
    known: Option<Standing>,
    /// Jobs queued and not yet settled.
    in_flight: u32,
}

/// What [`Mirror::submit`] did with a job.
pub(crate) enum Submitted {
    /// Queued; the database will admit it thus.
    Predicted(Admission),
    /// Queued without a prediction: wait for the database's decision.
    Queued,
    /// Not queued (the queue is full or closed): send it, then wait for the decision.
    Send(WriterJob),
}

/// The mirror of one database; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    enabled: AtomicBool,
    entries: Mutex<HashMap<Key, Entry>>,
}

impl Mirror {
    /// Lets it predict; only for the one process that admits calls on the database.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// Queues `job` behind every job submitted before it, predicting its admission if certain.
    pub(crate) fn submit(&self, mut job: AdmitJob, queue: &mpsc::Sender<WriterJob>) -> Submitted {
        if !self.enabled.load(Ordering::SeqCst) {
            return Submitted::Send(WriterJob::Admit(job));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.entry(job.key().clone()).or_default();
        // a refusal is never predicted: the database may be more generous (a credit meanwhile);
        // nor is a capped call: the mirror knows no spend
        let prediction = entry
            .known
            .filter(|_| !job.capped)
            .map(|standing| decide(standing, job.terms()))
            .filter(|decision| decision.admission.admitted());
        job.predicted = prediction.map(|decision| decision.admission);
        match queue.try_send(WriterJob::Admit(job)) {
            Ok(()) => {
                entry.in_flight += 1;
                entry.known = prediction.map(|decision| decision.after);
                match prediction {
                    Some(decision) => Submitted::Predicted(decision.admission),
                    None => Submitted::Queued,
                }
            }
            Err(TrySendError::Full(mut job)) => {
                // queued later, behind jobs submitted after it: its effect is unknown to them
                job.forget_prediction();
                entry.in_flight += 1;
                entry.known = None;
                Submitted::Send(job)
            }
            Err(TrySendError::Closed(mut job)) => {
                job.forget_prediction();
                Submitted::Send(job)
            }
        }
    }

    /// Queues a take-back behind every job submitted before it, first making each entry of its
    /// account unknown until it settles ([`Mirror::unfence`]): no prediction made after this
    /// rests on the wallet before it. `Some`: not queued (full or closed), send it.
    #[must_use = "a take-back not queued must be sent"]
    pub(crate) fn submit_take_back(
        &self,
        mut job: TakeBackJob,
        queue: &mpsc::Sender<WriterJob>,
    ) -> Option<WriterJob> {
        if !self.enabled.load(Ordering::SeqCst) {
            return Some(WriterJob::TakeBack(job));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for (key, entry) in entries.iter_mut() {
            if key.0 == job.account() {
                entry.known = None;
                entry.in_flight += 1;
                job.fenced.push(key.clone());
            }
        }
        // sent later it is still fenced: its entries stay unknown until it settles
        queue
            .try_send(WriterJob::TakeBack(job))
            .err()
            .map(TrySendError::into_inner)
    }

    /// Gives back the entries a settled take-back fenced; they are learnt again from the next
    /// admission the database decides.
    pub(crate) fn unfence(&self, keys: &[Key]) {
        if keys.is_empty() || !self.enabled.load(Ordering::SeqCst) {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            if let Some(entry) = entries.get_mut(key) {
                entry.in_flight = entry.in_flight.saturating_sub(1);
                entry.known = None;
            }
        }
    }

    /// Settles one queued job once its commit is known: `outcome` is the database's decision
    /// (with the standing right after it), or `None` if it failed or was undone.
    pub(crate) fn settle(
        &self,
        key: &Key,
        predicted: Option<&Admission>,
        outcome: Option<&Decision>,
    ) {
        if !self.enabled.load(Ordering::SeqCst) {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(predicted), Some(decided)) = (predicted, outcome)
            && std::mem::discriminant(predicted) != std::mem::discriminant(&decided.admission)
        {
            tracing::error!(
                ?predicted,
                ?decided,
                "another process is admitting calls on this database; admissions now wait for it"
            );
            self.enabled.store(false, Ordering::SeqCst);
            entries.clear();
            return;
        }
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        match outcome {
            None => entry.known = None,
            Some(decided) if entry.known.is_none() && entry.in_flight == 0 => {
                entry.known = Some(decided.after);
            }
            Some(_) => {}
        }
        if entry.in_flight == 0 && entries.len() > MAX_ENTRIES {
            entries.retain(|_, e| e.in_flight > 0);
        }
    }
}

#[cfg(test)]
#[path = "allowance_tests.rs"]
mod tests;
