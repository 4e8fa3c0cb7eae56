//! The jobs the admissions thread applies, in the order they were queued: one call's admission
//! and one refund or dispute taken back from a wallet, each with the channels its answers go
//! back on. The mirror (`allowance`) queues them; the writer (`admit`, `take_back`) runs them
//! and records how they ended, which settles them in the mirror.

use tokio::sync::oneshot;
use toolgate_domain::{Admission, Decision, Micros, Terms};
use toolgate_store::{CallCharge, Decided, Recorded, Reversal, StoreError, TakeBack, TakenBack};

/// An account in one month: `(account id, month)`.
pub(crate) type Key = (String, String);

/// What the writer thread applies, in the order it was queued.
pub(crate) enum WriterJob {
    /// One call's admission.
    Admit(AdmitJob),
    /// One refund or dispute taken back from a wallet.
    TakeBack(TakeBackJob),
}

impl WriterJob {
    /// What the mirror predicted for it (never anything for a take-back).
    #[cfg(test)]
    pub(crate) fn predicted(&self) -> Option<&Admission> {
        match self {
            Self::Admit(job) => job.predicted.as_ref(),
            Self::TakeBack(_) => None,
        }
    }

    /// Drops the prediction of a job that is queued later than predicted.
    pub(crate) fn forget_prediction(&mut self) {
        if let Self::Admit(job) = self {
            job.predicted = None;
        }
    }
}

/// One call waiting to be admitted, with the channels its two answers go back on.
pub(crate) struct AdmitJob {
    /// The account and the month its allowance is counted in.
    pub(crate) key: Key,
    pub(crate) tool: String,
    /// The named key that made the call, for its ledger row and its caps.
    pub(crate) key_id: Option<String>,
    /// Whether spend caps may apply: decided on caps read in the transaction, never predicted.
    pub(crate) capped: bool,
    pub(crate) terms: Terms,
    pub(crate) decided: Option<oneshot::Sender<Result<Admission, StoreError>>>,
    pub(crate) recorded: oneshot::Sender<Result<(), StoreError>>,
    /// What the mirror predicted when it queued the job.
    pub(crate) predicted: Option<Admission>,
    /// What the database decided, and the standing right after it, once it has.
    pub(crate) decision: Option<Decision>,
    /// Its statements failed and were rolled back to its savepoint.
    pub(crate) undone: bool,
}

/// What the caller of [`AdmitJob::new`] waits on.
pub(crate) struct Answers {
    pub(crate) decided: oneshot::Receiver<Result<Admission, StoreError>>,
    pub(crate) recorded: oneshot::Receiver<Result<(), StoreError>>,
}

impl Answers {
    /// Durability alone, for a job whose admission was predicted.
    pub(crate) fn recorded(self) -> Recorded {
        let recorded = self.recorded;
        Recorded::when(async move { recorded.await.map_err(|_| dropped())? })
    }

    /// The decision, and the durability still to come.
    pub(crate) async fn decided(mut self) -> Result<Decided, StoreError> {
        let admission = (&mut self.decided).await.map_err(|_| dropped())??;
        Ok(Decided {
            admission,
            usage: None,
            recorded: self.recorded(),
        })
    }
}

fn dropped() -> StoreError {
    StoreError::Unavailable("the metering writer dropped a call".to_owned())
}

impl AdmitJob {
    pub(crate) fn new(charge: &CallCharge<'_>) -> (Self, Answers) {
        let (decided, decided_rx) = oneshot::channel();
        let (recorded, recorded_rx) = oneshot::channel();
        let job = Self {
            key: charge.account_month(),
            tool: charge.tool.to_owned(),
            key_id: charge.key.map(|key| key.as_str().to_owned()),
            capped: charge.capped,
            terms: charge.terms(),
            decided: Some(decided),
            recorded,
            predicted: None,
            decision: None,
            undone: false,
        };
        let answers = Answers {
            decided: decided_rx,
            recorded: recorded_rx,
        };
        (job, answers)
    }

    /// The account and month whose standing it changes.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// The prices the call is admitted at.
    pub(crate) fn terms(&self) -> Terms {
        self.terms
    }

    /// Passes the decision on (once; later calls are ignored).
    pub(crate) fn decide(&mut self, outcome: Result<Admission, StoreError>) {
        if let Some(decided) = self.decided.take() {
            // A caller that went away no longer needs its answer; its ledger row stands.
            let _ = decided.send(outcome);
        }
    }
}

/// What a take-back asks, owned, to cross to the writer thread.
pub(crate) enum Asked {
    Refunded(Micros),
    Disputed(String, Micros),
}

/// One take-back waiting for the writer, with the channel its answer goes back on.
pub(crate) struct TakeBackJob {
    /// The account the payment credited, as read before queueing: the one fenced.
    pub(crate) account: String,
    pub(crate) reference: String,
    pub(crate) payment: String,
    pub(crate) asked: Asked,
    pub(crate) answer: oneshot::Sender<Result<TakenBack, StoreError>>,
    pub(crate) outcome: Option<TakenBack>,
    /// Mirror entries made unknown for it, given back when it settles.
    pub(crate) fenced: Vec<Key>,
    /// Its statements failed and were rolled back to its savepoint.
    pub(crate) undone: bool,
}

impl TakeBackJob {
    /// A job for `take`, whose payment credited `account`.
    pub(crate) fn new(
        take: &TakeBack<'_>,
        account: String,
    ) -> (Self, oneshot::Receiver<Result<TakenBack, StoreError>>) {
        let (answer, receiver) = oneshot::channel();
        let asked = match take.reversal {
            Reversal::Refunded { total } => Asked::Refunded(total),
            Reversal::Disputed { dispute, amount } => Asked::Disputed(dispute.to_owned(), amount),
        };
        let job = Self {
            account,
            reference: take.reference.to_owned(),
            payment: take.payment.to_owned(),
            asked,
            answer,
            outcome: None,
            fenced: Vec::new(),
            undone: false,
        };
        (job, receiver)
    }

    /// The account whose mirror entries it fences.
    pub(crate) fn account(&self) -> &str {
        &self.account
    }
}
