#![allow(clippy::unwrap_used)]
use super::*;

use toolgate_domain::Micros;

fn standing(free_used: i64, wallet: i64) -> Standing {
    Standing {
        free_used,
        wallet: Micros(wallet),
        owed: Micros::ZERO,
    }
}

/// The database's decision on `before` at the rig's terms, as the writer reports it.
fn decided(admission: Admission, after: Standing) -> Decision {
    Decision { admission, after }
}

struct Rig {
    mirror: Mirror,
    queue: mpsc::Sender<WriterJob>,
    jobs: mpsc::Receiver<WriterJob>,
    account: toolgate_domain::AccountId,
    month: toolgate_domain::MonthKey,
}

fn rig(depth: usize) -> Rig {
    let (queue, jobs) = mpsc::channel(depth);
    let mirror = Mirror::default();
    mirror.enable();
    Rig {
        mirror,
        queue,
        jobs,
        account: toolgate_domain::AccountId::generate(),
        month: toolgate_domain::MonthKey::now(),
    }
}

impl Rig {
    /// Submits a call at 2 free calls a month and a price of 8.
    fn submit(&self) -> Submitted {
        let charge = toolgate_store::CallCharge {
            account: &self.account,
            month: &self.month,
            tool: "svc_write",
            free_monthly_calls: 2,
            paid_call_cost: Micros(8),
            key: None,
            capped: false,
        };
        let (job, _answers) = AdmitJob::new(&charge);
        self.mirror.submit(job, &self.queue)
    }

    /// Settles the oldest queued job as the database would have decided it.
    fn settle(&mut self, admission_decided: Option<Admission>, after: Standing) {
        let job = admission(self.jobs.try_recv().unwrap());
        let outcome = admission_decided.map(|a| decided(a, after));
        self.mirror
            .settle(job.key(), job.predicted.as_ref(), outcome.as_ref());
    }
}

/// The admission a queued job is.
fn admission(job: WriterJob) -> AdmitJob {
    match job {
        WriterJob::Admit(job) => job,
        WriterJob::TakeBack(_) => panic!("a take-back where an admission was queued"),
    }
}

fn predicted(submitted: &Submitted) -> Option<Admission> {
    match submitted {
        Submitted::Predicted(admission) => Some(*admission),
        _ => None,
    }
}

#[test]
fn an_unknown_account_waits_for_the_database_then_is_predicted() {
    let mut r = rig(16);
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 1 }), standing(1, 20));
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Free { free_used: 2 })
    );
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Paid {
            balance_after: Micros(12)
        })
    );
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Paid {
            balance_after: Micros(4)
        })
    );
    // a refusal is never predicted, and what the database makes of it is unknown until settled
    assert!(matches!(r.submit(), Submitted::Queued));
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 2 }), standing(2, 20));
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(12),
        }),
        standing(2, 12),
    );
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(4),
        }),
        standing(2, 4),
    );
    // a wallet credit from another process: the database admits what the mirror would not
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(992),
        }),
        standing(2, 992),
    );
    assert!(matches!(r.submit(), Submitted::Queued), "one is in flight");
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(984),
        }),
        standing(2, 984),
    );
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(976),
        }),
        standing(2, 976),
    );
    // every queued job settled: seeded from the last one's standing
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Paid {
            balance_after: Micros(968)
        })
    );
}

#[test]
fn a_failed_commit_makes_the_account_unknown() {
    let mut r = rig(16);
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 1 }), standing(1, 0));
    assert!(predicted(&r.submit()).is_some());
    let job = admission(r.jobs.try_recv().unwrap());
    r.mirror.settle(job.key(), job.predicted.as_ref(), None);
    assert!(matches!(r.submit(), Submitted::Queued));
}

#[test]
fn a_decision_other_than_predicted_switches_the_mirror_off() {
    let mut r = rig(16);
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 1 }), standing(1, 0));
    assert!(predicted(&r.submit()).is_some());
    // another process used the last free call meanwhile
    r.settle(Some(Admission::Refused), standing(2, 0));
    assert!(matches!(r.submit(), Submitted::Send(_)));
}

#[test]
fn off_by_default_and_a_full_queue_sends_later_without_a_prediction() {
    let (queue, _jobs) = mpsc::channel(1);
    let off = Mirror::default();
    let account = toolgate_domain::AccountId::generate();
    let month = toolgate_domain::MonthKey::now();
    let charge = toolgate_store::CallCharge {
        account: &account,
        month: &month,
        tool: "svc_write",
        free_monthly_calls: 2,
        paid_call_cost: Micros(8),
        key: None,
        capped: false,
    };
    assert!(matches!(
        off.submit(AdmitJob::new(&charge).0, &queue),
        Submitted::Send(_)
    ));

    let mut r = rig(1);
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 1 }), standing(1, 0));
    assert!(predicted(&r.submit()).is_some());
    match r.submit() {
        Submitted::Send(job) => assert!(job.predicted().is_none()),
        _ => panic!("the queue of one is full"),
    }
    // the full one is unknown to those after it
    r.settle(Some(Admission::Free { free_used: 2 }), standing(2, 0));
    assert!(matches!(r.submit(), Submitted::Queued));
}

#[test]
fn a_take_back_fences_the_account_until_it_settles() {
    let mut r = rig(16);
    assert!(matches!(r.submit(), Submitted::Queued));
    r.settle(Some(Admission::Free { free_used: 1 }), standing(1, 100));
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Free { free_used: 2 })
    );
    // a refund of 20 is queued behind that call: the wallet will hold 80, not 100
    let take = toolgate_store::TakeBack {
        reference: "evt_refund",
        payment: "pi_1",
        reversal: toolgate_store::Reversal::Refunded { total: Micros(20) },
    };
    let (job, _answer) = TakeBackJob::new(&take, r.account.as_str().to_owned());
    assert!(r.mirror.submit_take_back(job, &r.queue).is_none());
    assert!(
        matches!(r.submit(), Submitted::Queued),
        "no prediction from the wallet before the take-back"
    );
    r.settle(Some(Admission::Free { free_used: 2 }), standing(2, 100));
    assert!(
        matches!(r.submit(), Submitted::Queued),
        "still fenced: the standing after the call before it is stale"
    );
    let fenced = match r.jobs.try_recv().unwrap() {
        WriterJob::TakeBack(job) => job.fenced.clone(),
        WriterJob::Admit(_) => panic!("the take-back was queued second"),
    };
    assert_eq!(fenced.len(), 1);
    r.mirror.unfence(&fenced);
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(72),
        }),
        standing(2, 72),
    );
    r.settle(
        Some(Admission::Paid {
            balance_after: Micros(64),
        }),
        standing(2, 64),
    );
    assert_eq!(
        predicted(&r.submit()),
        Some(Admission::Paid {
            balance_after: Micros(56)
        }),
        "learnt again from the calls decided after it"
    );
}
