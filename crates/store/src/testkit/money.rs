//! Money's part of the story: tokens on the operator's model keys counted per account and day
//! without losing or doubling any, and refunds and disputes taken back from wallets once per
//! event, below zero if need be, repaid by the next credits, never past what a payment credited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::{AccountId, Admission, DayKey, Micros, MonthKey};

use super::{new_account, time};
use crate::{CallCharge, PaymentCredit, Reversal, Store, StoreError, TakeBack, TakenBack};

const USD: i64 = 1_000_000;

/// Money's seam: operator tokens, then take-backs.
pub(super) async fn money_story(store: Arc<dyn Store>, tag: &str) {
    operator_tokens_add_up_per_day(store.clone(), tag).await;
    a_payment_credits_once(&*store, tag).await;
    take_backs_go_below_zero_and_credits_repay(&*store, tag).await;
    refunds_and_disputes_never_pass_the_credit(&*store, tag).await;
    concurrent_deliveries_take_back_once(store.clone(), tag).await;
    take_backs_and_calls_at_once_add_up(store, tag).await;
}

async fn account(store: &dyn Store, label: &str, tag: &str) -> AccountId {
    let (account, _) = new_account(&format!("{label}-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    account.id
}

fn day(date: u8) -> DayKey {
    let date = time::Date::from_calendar_date(2026, time::Month::November, date).unwrap();
    DayKey::containing(date.midnight().assume_utc())
}

async fn operator_tokens_add_up_per_day(store: Arc<dyn Store>, tag: &str) {
    let id = account(&*store, "tokens", tag).await;
    let other = account(&*store, "tokens-other", tag).await;
    assert_eq!(store.operator_tokens(&id, &day(3)).await.unwrap(), 0);
    assert_eq!(
        store.add_operator_tokens(&id, &day(3), 900).await.unwrap(),
        900
    );
    let adds = (0..50).map(|_| {
        let (store, id) = (store.clone(), id.clone());
        tokio::spawn(async move { store.add_operator_tokens(&id, &day(3), 7).await.unwrap() })
    });
    let mut totals: Vec<i64> = futures::future::join_all(adds)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    totals.sort_unstable();
    let expected: Vec<i64> = (1..=50).map(|n| 900 + 7 * n).collect();
    assert_eq!(
        totals, expected,
        "each add saw its own total: none lost or doubled"
    );
    assert_eq!(store.operator_tokens(&id, &day(3)).await.unwrap(), 1250);
    assert_eq!(
        store.operator_tokens(&id, &day(4)).await.unwrap(),
        0,
        "a new day starts at zero"
    );
    assert_eq!(store.operator_tokens(&other, &day(3)).await.unwrap(), 0);
    assert!(matches!(
        store
            .add_operator_tokens(&AccountId::generate(), &day(3), 1)
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn credit(
    store: &dyn Store,
    account: &AccountId,
    amount: i64,
    reference: &str,
    payment: &str,
) -> (Micros, bool) {
    let credit = PaymentCredit {
        account,
        amount: Micros(amount),
        reference,
        payment,
    };
    store.credit_payment(&credit).await.unwrap()
}

async fn refund(store: &dyn Store, reference: &str, payment: &str, total: i64) -> TakenBack {
    let reversal = Reversal::Refunded {
        total: Micros(total),
    };
    store
        .take_back(&TakeBack {
            reference,
            payment,
            reversal,
        })
        .await
        .unwrap()
}

async fn dispute(
    store: &dyn Store,
    reference: &str,
    payment: &str,
    id: &str,
    amount: i64,
) -> TakenBack {
    let reversal = Reversal::Disputed {
        dispute: id,
        amount: Micros(amount),
    };
    store
        .take_back(&TakeBack {
            reference,
            payment,
            reversal,
        })
        .await
        .unwrap()
}

fn taken(account: &AccountId, amount: i64, balance: i64) -> TakenBack {
    TakenBack::Taken {
        account: account.clone(),
        amount: Micros(amount),
        balance: Micros(balance),
    }
}

/// A paid call with no allowance at `price`.
async fn call(store: &dyn Store, account: &AccountId, price: i64) -> Admission {
    let month = MonthKey::now();
    let charge = CallCharge {
        account,
        month: &month,
        tool: "svc_ai",
        free_monthly_calls: 0,
        paid_call_cost: Micros(price),
        key: None,
        capped: false,
    };
    store.admit_call(&charge).await.unwrap()
}

async fn balance(store: &dyn Store, account: &AccountId) -> i64 {
    store
        .usage(account, &MonthKey::now())
        .await
        .unwrap()
        .wallet
        .0
}

async fn a_payment_credits_once(store: &dyn Store, tag: &str) {
    let id = account(store, "payment", tag).await;
    let payment = format!("pi_once_{tag}");
    let first = credit(store, &id, 25 * USD, &format!("evt_c1_{tag}"), &payment).await;
    assert_eq!(first, (Micros(25 * USD), true));
    let replay = credit(store, &id, 25 * USD, &format!("evt_c1_{tag}"), &payment).await;
    assert_eq!(
        replay,
        (Micros(25 * USD), false),
        "an event id credits once"
    );
    let other_event = credit(store, &id, 25 * USD, &format!("evt_c2_{tag}"), &payment).await;
    assert_eq!(
        other_event,
        (Micros(25 * USD), false),
        "a payment credits once, whichever of its events comes"
    );
    assert_eq!(balance(store, &id).await, 25 * USD);
    let stranger = store
        .credit_payment(&PaymentCredit {
            account: &AccountId::generate(),
            amount: Micros(USD),
            reference: &format!("evt_c3_{tag}"),
            payment: &format!("pi_stranger_{tag}"),
        })
        .await;
    assert!(
        matches!(stranger, Err(StoreError::NotFound)),
        "{stranger:?}"
    );
    assert_eq!(
        refund(
            store,
            &format!("evt_r0_{tag}"),
            &format!("pi_nobody_{tag}"),
            USD
        )
        .await,
        TakenBack::UnknownPayment,
        "a payment no wallet was credited from changes nothing"
    );
}

async fn take_backs_go_below_zero_and_credits_repay(store: &dyn Store, tag: &str) {
    let id = account(store, "owed", tag).await;
    let payment = format!("pi_owed_{tag}");
    credit(store, &id, 25 * USD, &format!("evt_o1_{tag}"), &payment).await;
    assert!(call(store, &id, 20 * USD).await.admitted(), "20.00 spent");
    // a partial refund of 10.00 of the 25.00: the wallet's 5.00, then 5.00 owed
    let first = refund(store, &format!("evt_o2_{tag}"), &payment, 10 * USD).await;
    assert_eq!(first, taken(&id, 10 * USD, -5 * USD));
    assert_eq!(
        refund(store, &format!("evt_o2_{tag}"), &payment, 10 * USD).await,
        TakenBack::AlreadyApplied,
        "an event id takes back once"
    );
    // the refunds total grows to 12.00: only the 2.00 more is taken
    let second = refund(store, &format!("evt_o3_{tag}"), &payment, 12 * USD).await;
    assert_eq!(second, taken(&id, 2 * USD, -7 * USD));
    assert_eq!(balance(store, &id).await, -7 * USD);
    assert_eq!(
        call(store, &id, 8_000).await,
        Admission::Refused,
        "no paid call while anything is owed"
    );
    // an operator's credit repays first
    let (after, applied) = store
        .credit_wallet(&id, Micros(3 * USD), &format!("manual-owed-{tag}"))
        .await
        .unwrap();
    assert_eq!((after, applied), (Micros(-4 * USD), true));
    assert_eq!(
        call(store, &id, 8_000).await,
        Admission::Refused,
        "still owed"
    );
    let (after, _) = credit(
        store,
        &id,
        5 * USD,
        &format!("evt_o4_{tag}"),
        &format!("pi_owed2_{tag}"),
    )
    .await;
    assert_eq!(after, Micros(USD), "4.00 repaid, 1.00 left");
    assert_eq!(
        call(store, &id, 8_000).await,
        Admission::Paid {
            balance_after: Micros(USD - 8_000)
        }
    );
    let history = store.wallet_credits(&id, 10).await.unwrap();
    assert!(
        history.iter().all(|c| c.kind
            == if c.amount.0 < 0 {
                crate::WalletEntry::Refund
            } else {
                crate::WalletEntry::Credit
            }),
        "each entry is named for what it was: {history:?}"
    );
    let amounts: Vec<i64> = history.iter().map(|c| c.amount.0).collect();
    assert_eq!(
        amounts.iter().filter(|a| **a < 0).count(),
        2,
        "take-backs show in the history, negative: {history:?}"
    );
    assert_eq!(
        amounts.iter().sum::<i64>(),
        25 * USD + 3 * USD + 5 * USD - 12 * USD
    );
}

async fn refunds_and_disputes_never_pass_the_credit(store: &dyn Store, tag: &str) {
    let id = account(store, "capped", tag).await;
    let payment = format!("pi_capped_{tag}");
    credit(store, &id, 30 * USD, &format!("evt_k1_{tag}"), &payment).await;
    assert_eq!(
        refund(store, &format!("evt_k2_{tag}"), &payment, 10 * USD).await,
        taken(&id, 10 * USD, 20 * USD)
    );
    // a dispute of the whole charge after a partial refund takes only what is left of it
    let disputed = dispute(
        store,
        &format!("evt_k3_{tag}"),
        &payment,
        &format!("du_k_{tag}"),
        30 * USD,
    )
    .await;
    assert_eq!(disputed, taken(&id, 20 * USD, 0));
    assert_eq!(
        dispute(
            store,
            &format!("evt_k4_{tag}"),
            &payment,
            &format!("du_k_{tag}"),
            30 * USD
        )
        .await,
        TakenBack::AlreadyApplied,
        "a dispute takes back once, whatever the event carrying it"
    );
    assert_eq!(
        refund(store, &format!("evt_k5_{tag}"), &payment, 30 * USD).await,
        taken(&id, 0, 0),
        "a refund after that takes nothing more"
    );
    assert_eq!(balance(store, &id).await, 0);
}

async fn concurrent_deliveries_take_back_once(store: Arc<dyn Store>, tag: &str) {
    let id = account(&*store, "replayed", tag).await;
    let payment = format!("pi_replayed_{tag}");
    credit(&*store, &id, 40 * USD, &format!("evt_p1_{tag}"), &payment).await;
    let deliveries = (0..10).map(|_| {
        let (store, payment, reference, dispute_id) = (
            store.clone(),
            payment.clone(),
            format!("evt_p2_{tag}"),
            format!("du_p_{tag}"),
        );
        tokio::spawn(
            async move { dispute(&*store, &reference, &payment, &dispute_id, 15 * USD).await },
        )
    });
    let outcomes: Vec<TakenBack> = futures::future::join_all(deliveries)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let applied = outcomes
        .iter()
        .filter(|o| matches!(o, TakenBack::Taken { .. }))
        .count();
    let replays = outcomes
        .iter()
        .filter(|o| **o == TakenBack::AlreadyApplied)
        .count();
    assert_eq!((applied, replays), (1, 9), "{outcomes:?}");
    // ten partial refunds at once, each with the total it saw: 5.00 … 14.00 in all
    let refunds = (1..=10).map(|n| {
        let (store, payment, reference) =
            (store.clone(), payment.clone(), format!("evt_p3_{tag}_{n}"));
        tokio::spawn(async move { refund(&*store, &reference, &payment, (4 + n) * USD).await })
    });
    let taken_by_refunds: i64 = futures::future::join_all(refunds)
        .await
        .into_iter()
        .map(|o| match o.unwrap() {
            TakenBack::Taken { amount, .. } => amount.0,
            other => panic!("each refund event applies: {other:?}"),
        })
        .sum();
    assert_eq!(taken_by_refunds, 14 * USD, "the largest total, taken once");
    assert_eq!(balance(&*store, &id).await, 40 * USD - 15 * USD - 14 * USD);
}

/// Paid calls decided early and a take-back at once: no call predicted to be admitted is then
/// refused, and the books add up.
async fn take_backs_and_calls_at_once_add_up(store: Arc<dyn Store>, tag: &str) {
    let id = account(&*store, "racing", tag).await;
    let payment = format!("pi_racing_{tag}");
    credit(&*store, &id, 2 * USD, &format!("evt_q1_{tag}"), &payment).await;
    let month = MonthKey::now();
    let decide = |store: Arc<dyn Store>, id: AccountId, month: MonthKey| async move {
        let charge = CallCharge {
            account: &id,
            month: &month,
            tool: "svc_ai",
            free_monthly_calls: 0,
            paid_call_cost: Micros(8_000),
            key: None,
            capped: false,
        };
        let decided = store.decide_call(&charge).await.unwrap();
        decided.recorded.wait().await.map(|()| decided.admission)
    };
    // the account is known (and, on a serving SQLite store, predicted) before the take-back
    for _ in 0..10 {
        let admitted = decide(store.clone(), id.clone(), month.clone()).await;
        assert!(admitted.unwrap().admitted());
    }
    let calls: Vec<_> = (0..300)
        .map(|_| tokio::spawn(decide(store.clone(), id.clone(), month.clone())))
        .collect();
    let taken_back = dispute(
        &*store,
        &format!("evt_q2_{tag}"),
        &payment,
        &format!("du_q_{tag}"),
        USD,
    )
    .await;
    assert!(
        matches!(
            taken_back,
            TakenBack::Taken {
                amount: Micros(USD),
                ..
            }
        ),
        "{taken_back:?}"
    );
    let mut admitted = 10;
    for call in futures::future::join_all(calls).await {
        match call.unwrap() {
            Ok(admission) => admitted += i64::from(admission.admitted()),
            Err(error) => panic!("a call predicted to be admitted was refused: {error}"),
        }
    }
    assert_eq!(
        balance(&*store, &id).await,
        2 * USD - USD - 8_000 * admitted,
        "what the calls paid and the dispute took add up"
    );
    assert_eq!(
        store.ledger_counts(&id, &month).await.unwrap(),
        (0, admitted)
    );
    assert!(
        (125..=250).contains(&admitted),
        "1.00 pays for 125 calls, 2.00 for 250: {admitted}"
    );
}
