//! One call waiting for an admission batcher, and the two answers its caller waits on: the
//! decision, and whether its record became durable.

use tokio::sync::oneshot;
use toolgate_domain::{Admission, Terms, UsageSnapshot};
use toolgate_store::{CallCharge, Decided, Recorded, StoreError};

use crate::admit::Key;

/// A call's admission, and the usage it leaves when that is known exactly.
pub(crate) type Verdict = (Admission, Option<UsageSnapshot>);

/// One call waiting for a batcher, with the channels its two answers go back on.
pub(crate) struct Job {
    pub(crate) key: Key,
    pub(crate) tool: String,
    /// The named key that made the call, for its ledger row.
    pub(crate) key_id: Option<String>,
    pub(crate) terms: Terms,
    /// Taken when the decision goes out.
    decided: Option<oneshot::Sender<Result<Verdict, StoreError>>>,
    /// Taken when the record's fate goes out.
    recorded: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// What the caller of [`Job::new`] waits on.
pub(crate) struct Answers {
    decided: oneshot::Receiver<Result<Verdict, StoreError>>,
    recorded: oneshot::Receiver<Result<(), StoreError>>,
}

impl Answers {
    /// The decision, and the durability still to come.
    pub(crate) async fn decided(self) -> Result<Decided, StoreError> {
        let (admission, usage) = self.decided.await.map_err(|_| stopped())??;
        let recorded = self.recorded;
        Ok(Decided {
            admission,
            usage,
            recorded: Recorded::when(async move { recorded.await.map_err(|_| stopped())? }),
        })
    }
}

impl Job {
    /// A job for `charge`, and what its caller waits on.
    pub(crate) fn new(charge: &CallCharge<'_>) -> (Self, Answers) {
        let (decided, decided_rx) = oneshot::channel();
        let (recorded, recorded_rx) = oneshot::channel();
        let job = Self {
            key: charge.account_month(),
            tool: charge.tool.to_owned(),
            key_id: charge.key.map(|key| key.as_str().to_owned()),
            terms: charge.terms(),
            decided: Some(decided),
            recorded: Some(recorded),
        };
        let answers = Answers {
            decided: decided_rx,
            recorded: recorded_rx,
        };
        (job, answers)
    }

    /// Sends the call its decision, before its record's fate is known.
    pub(crate) fn decide(&mut self, decision: Result<Verdict, StoreError>) {
        // A caller that went away no longer needs it; its ledger row stands.
        if let Some(decided) = self.decided.take() {
            let _ = decided.send(decision);
        }
    }

    /// Sends what the call has not heard yet: its decision (or, when it never had one, the
    /// failure of its record) and its record's fate.
    pub(crate) fn answer(
        &mut self,
        decision: Result<Verdict, StoreError>,
        recorded: Result<(), StoreError>,
    ) {
        // A caller that went away no longer needs its answers; its ledger row stands.
        if let Some(decided) = self.decided.take() {
            let _ = decided.send(decision);
        }
        if let Some(sender) = self.recorded.take() {
            let _ = sender.send(recorded);
        }
    }
}

/// What a caller hears when the batcher is gone.
pub(crate) fn stopped() -> StoreError {
    StoreError::Unavailable("the metering batcher stopped".to_owned())
}
