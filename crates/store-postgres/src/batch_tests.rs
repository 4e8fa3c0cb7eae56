#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use sqlx::{Connection, PgConnection};
use toolgate_domain::{AccountId, Admission, ApiKey, Brand, Email, Micros, MonthKey, Terms};
use toolgate_store::{Accounts, Metering, NewAccount};

use super::*;
use crate::PgStore;
use crate::admit::apply_one;
use crate::testkit::{until_waiting, with_fresh_database};

pub(crate) const FREE: i64 = 5;
pub(crate) const PRICE: i64 = 8;
/// Pays for 10 calls at `PRICE`.
pub(crate) const WALLET: i64 = 80;

pub(crate) fn charge<'a>(account: &'a AccountId, month: &'a MonthKey) -> CallCharge<'a> {
    CallCharge {
        account,
        month,
        tool: "svc_read",
        free_monthly_calls: FREE,
        paid_call_cost: Micros(PRICE),
        key: None,
        capped: false,
    }
}

/// `count` accounts, each with `WALLET` in its wallet.
pub(crate) async fn accounts(store: &PgStore, count: usize) -> Vec<AccountId> {
    let mut ids = Vec::new();
    for n in 0..count {
        let account = NewAccount {
            id: AccountId::generate(),
            email: Email::parse(&format!("batch-{n}@example.org")).unwrap(),
            key_hash: ApiKey::generate(&Brand::parse("svc").unwrap())
                .unwrap()
                .hash(),
        };
        store.create_account(&account).await.unwrap();
        let (_, applied) = store
            .credit_wallet(&account.id, Micros(WALLET), &format!("start-{n}"))
            .await
            .unwrap();
        assert!(applied);
        ids.push(account.id);
    }
    ids
}

/// Checks that `admissions` of one account are exactly what its standing allowed: the free
/// calls counted 1..=FREE, the wallet charged down to 0 one price at a time, each step once.
fn assert_exact(admissions: &[Admission]) {
    let mut free: Vec<i64> = Vec::new();
    let mut balances: Vec<i64> = Vec::new();
    for admission in admissions {
        match admission {
            Admission::Free { free_used } => free.push(*free_used),
            Admission::Paid { balance_after } => balances.push(balance_after.0),
            Admission::Refused | Admission::Capped(_) => {}
        }
    }
    free.sort_unstable();
    balances.sort_unstable();
    assert_eq!(free, (1..=FREE).collect::<Vec<_>>(), "{admissions:?}");
    let paid: Vec<i64> = (0..WALLET / PRICE).map(|n| n * PRICE).collect();
    assert_eq!(balances, paid, "each paid call saw its own balance");
}

/// Two front ends (two stores, each its own pool and batchers) on one database race 40 calls
/// per account for 5 free calls and 10 paid ones, with many accounts in each batch and calls of
/// unknown accounts among them: each account admits exactly 15, one ledger row per admission,
/// the wallet never below zero, nothing counted twice, and the unknown accounts fail alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_front_ends_racing_for_the_last_calls_and_cents_admit_exactly() {
    with_fresh_database(|url| async move {
        let fronts = [
            Arc::new(PgStore::connect(&url).await.unwrap()),
            Arc::new(PgStore::connect(&url).await.unwrap()),
        ];
        let ids = accounts(&fronts[0], 8).await;
        let month = MonthKey::now();
        let mut calls = Vec::new();
        for round in 0..40 {
            for (n, id) in ids.iter().enumerate() {
                let (front, id, month) =
                    (fronts[(round + n) % 2].clone(), id.clone(), month.clone());
                calls.push(tokio::spawn(async move {
                    let decided = front.decide_call(&charge(&id, &month)).await.unwrap();
                    decided.recorded.wait().await.unwrap();
                    (id, decided.admission)
                }));
            }
            if round % 8 == 0 {
                let (front, month) = (fronts[round % 2].clone(), month.clone());
                calls.push(tokio::spawn(async move {
                    let stranger = AccountId::generate();
                    let unknown = front.admit_call(&charge(&stranger, &month)).await;
                    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
                    (stranger, Admission::Refused)
                }));
            }
        }
        let mut by_account: HashMap<AccountId, Vec<Admission>> = HashMap::new();
        for call in calls {
            let (id, admission) = call.await.unwrap();
            by_account.entry(id).or_default().push(admission);
        }
        for id in &ids {
            let admissions = &by_account[id];
            assert_eq!(admissions.len(), 40);
            assert_exact(admissions);
            for front in &fronts {
                assert_eq!(
                    front.ledger_counts(id, &month).await.unwrap(),
                    (FREE, WALLET / PRICE),
                    "one ledger row per admission"
                );
                let usage = front.usage(id, &month).await.unwrap();
                assert_eq!((usage.free_used, usage.wallet), (FREE, Micros::ZERO));
            }
        }
        for front in fronts {
            front.close().await;
        }
    })
    .await;
}

/// One batch holds calls of three accounts; its read waits for the lock of one of them while
/// another front end counts a call of that account and credits its wallet, so the batch's first
/// decisions for it rest on a stale count and its compare-and-set loses. That account is read
/// again and decided again; the other two are decided once; every caller hears the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_compare_and_set_loses_for_one_account_answers_every_call_right() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        let ids = accounts(&store, 3).await;
        let month = MonthKey::now();
        let contended = (ids[1].as_str().to_owned(), month.as_str().to_owned());
        let mut holder = PgConnection::connect(&url).await.unwrap();
        let mut watcher = PgConnection::connect(&url).await.unwrap();

        // the other front end: holds the account's row while the batch comes to wait for it
        let mut tx = holder.begin_with(BEGIN).await.unwrap();
        let held = read_standings(&mut tx, std::slice::from_ref(&contended))
            .await
            .unwrap()[&contended];
        let mut jobs = Vec::new();
        let mut answers = Vec::new();
        for round in 0..7_i32 {
            for id in &ids {
                let (job, answer) = Job::new(&charge(id, &month));
                jobs.push(job);
                answers.push((id.clone(), round, answer));
            }
        }
        let pool = store.pool.clone();
        let batch = tokio::spawn(async move {
            let all: Vec<usize> = (0..jobs.len()).collect();
            let recorded = decide_and_commit(&pool, &mut jobs, &all, &mut Known::default())
                .await
                .unwrap();
            answer(jobs, recorded);
        });
        until_waiting(&mut watcher, 1, || batch.is_finished()).await;
        assert!(!batch.is_finished(), "the batch waits for the held account");
        let mut counted = Run::new(&contended, held);
        let terms = Terms {
            free_monthly_calls: FREE,
            paid_call_cost: Micros(PRICE),
        };
        counted.push("svc_read", None, &decide(held, terms));
        assert_eq!(
            apply_one(&mut tx, &counted).await.unwrap(),
            Applied::Written
        );
        sqlx::query("UPDATE accounts SET wallet_micros = wallet_micros + $1 WHERE id = $2")
            .bind(2 * PRICE)
            .bind(&contended.0)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        batch.await.unwrap();

        for (id, round, answer) in answers {
            let decided = answer.decided().await.unwrap();
            decided.recorded.wait().await.unwrap();
            let round = i64::from(round);
            let expected = if id == ids[1] {
                // one free call counted and two prices credited by the other front end
                match round + 2 {
                    free_used @ ..=FREE => Admission::Free { free_used },
                    _ => Admission::Paid {
                        balance_after: Micros(WALLET + 2 * PRICE - (round - 3) * PRICE),
                    },
                }
            } else {
                match round + 1 {
                    free_used @ ..=FREE => Admission::Free { free_used },
                    _ => Admission::Paid {
                        balance_after: Micros(WALLET - (round - 4) * PRICE),
                    },
                }
            };
            assert_eq!(decided.admission, expected, "call {round} of {id:?}");
        }
        assert_eq!(store.ledger_counts(&ids[0], &month).await.unwrap(), (5, 2));
        assert_eq!(
            store.ledger_counts(&ids[1], &month).await.unwrap(),
            (5, 3),
            "the other front end's call and this batch's seven"
        );
        let usage = store.usage(&ids[1], &month).await.unwrap();
        assert_eq!(usage.wallet, Micros(WALLET + 2 * PRICE - 3 * PRICE));
        store.close().await;
    })
    .await;
}

/// One batch holds an account's calls of two months, interleaved: each month's allowance is
/// counted apart, the wallet they share is charged in the order the calls came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_two_months_counts_them_apart_and_shares_the_wallet() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        let id = accounts(&store, 1).await.remove(0);
        let month_of = |month| {
            let day = time::Date::from_calendar_date(2026, month, 15).unwrap();
            MonthKey::containing(day.midnight().assume_utc())
        };
        let (october, november) = (
            month_of(time::Month::October),
            month_of(time::Month::November),
        );
        let months = [
            &october, &november, &october, &november, &october, &november,
        ];
        let mut jobs = Vec::new();
        let mut answers = Vec::new();
        for month in months {
            let mut call = charge(&id, month);
            call.free_monthly_calls = 1;
            let (job, answer) = Job::new(&call);
            jobs.push(job);
            answers.push(answer);
        }
        let all: Vec<usize> = (0..jobs.len()).collect();
        let recorded = decide_and_commit(&store.pool, &mut jobs, &all, &mut Known::default())
            .await
            .unwrap();
        answer(jobs, recorded);
        let mut heard = Vec::new();
        for answer in answers {
            let decided = answer.decided().await.unwrap();
            decided.recorded.wait().await.unwrap();
            heard.push(decided.admission);
        }
        let paid = |left| Admission::Paid {
            balance_after: Micros(WALLET - left * PRICE),
        };
        assert_eq!(
            heard,
            [
                Admission::Free { free_used: 1 },
                Admission::Free { free_used: 1 },
                paid(1),
                paid(2),
                paid(3),
                paid(4),
            ]
        );
        assert_eq!(store.ledger_counts(&id, &october).await.unwrap(), (1, 2));
        assert_eq!(store.ledger_counts(&id, &november).await.unwrap(), (1, 2));
        let usage = store.usage(&id, &november).await.unwrap();
        assert_eq!(
            (usage.free_used, usage.wallet),
            (1, Micros(WALLET - 4 * PRICE))
        );
        store.close().await;
    })
    .await;
}
