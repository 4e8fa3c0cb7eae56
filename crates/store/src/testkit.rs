//! One behavioural story that every backend runs in its own tests, so SQLite and PostgreSQL
//! cannot drift apart. Each step panics with a message naming what broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod call_history;
mod caps;
mod dashboard;
mod host_lists;
mod mcp_sessions;
mod money;
mod named_keys;
mod oauth;
mod placement;
mod secrets;
mod spend;
mod tasks;

pub use caps::{CapsSetup, caps_story};
pub use mcp_sessions::mcp_sessions_story;
pub use named_keys::named_keys_story;
pub use placement::placement_story;
pub use spend::spend_story;
pub use tasks::tasks_story;

use std::sync::Arc;

use toolgate_domain::{AccountId, Admission, ApiKey, Brand, Email, Micros, MonthKey};

use crate::{CallCharge, NewAccount, Store, StoreError};
use toolgate_domain::time_reexport as time;

fn new_account(email: &str) -> (NewAccount, ApiKey) {
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse(email).unwrap(),
        key_hash: key.hash(),
    };
    (account, key)
}

fn charge<'a>(account: &'a AccountId, month: &'a MonthKey, free: i64) -> CallCharge<'a> {
    CallCharge {
        account,
        month,
        tool: "svc_read",
        free_monthly_calls: free,
        paid_call_cost: Micros(8_000),
        key: None,
        capped: false,
    }
}

/// Runs every step of the story against `store`, which must be empty of the addresses used.
pub async fn run_story(store: Arc<dyn Store>, tag: &str) {
    call_history::call_history_story(&*store, tag).await;
    accounts_and_keys(&*store, tag).await;
    allowance_then_wallet_then_refusal(&*store, tag).await;
    credits_apply_once_per_reference(&*store, tag).await;
    months_are_counted_apart(&*store, tag).await;
    concurrent_calls_are_counted_exactly(store.clone(), tag).await;
    decided_calls_are_counted_exactly(store.clone(), tag).await;
    dashboard::dashboard_story(store.clone(), tag).await;
    money::money_story(store.clone(), tag).await;
    oauth::oauth_story(store.clone(), tag).await;
    secrets::secrets_story(store.clone(), tag).await;
    host_lists::host_lists_story(store, tag).await;
}

async fn accounts_and_keys(store: &dyn Store, tag: &str) {
    let (account, key) = new_account(&format!("keys-{tag}@example.org"));
    let created = store.create_account(&account).await.unwrap();
    assert_eq!(created.id, account.id);
    assert_eq!(created.tier, "free");

    let (duplicate, _) = new_account(&format!("keys-{tag}@example.org"));
    assert!(matches!(
        store.create_account(&duplicate).await,
        Err(StoreError::Conflict(_))
    ));

    let (found, hash) = store.find_by_key_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(found.id, account.id);
    assert!(hash == key.hash());
    let by_email = store.find_by_email(&account.email).await.unwrap().unwrap();
    assert_eq!(by_email.id, account.id);
    assert!(
        store
            .find_by_email(&Email::parse("nobody@example.org").unwrap())
            .await
            .unwrap()
            .is_none()
    );

    let new_key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    store
        .replace_key(&account.id, &new_key.hash())
        .await
        .unwrap();
    assert!(
        store.find_by_key_hash(&key.hash()).await.unwrap().is_none(),
        "old key must stop working"
    );
    assert!(
        store
            .find_by_key_hash(&new_key.hash())
            .await
            .unwrap()
            .is_some()
    );
    assert!(matches!(
        store.replace_key(&AccountId::generate(), &key.hash()).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.usage(&AccountId::generate(), &MonthKey::now()).await,
        Err(StoreError::NotFound)
    ));
}

async fn allowance_then_wallet_then_refusal(store: &dyn Store, tag: &str) {
    let (account, _) = new_account(&format!("meter-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    let month = MonthKey::now();
    let call = charge(&account.id, &month, 2);
    assert_eq!(
        store.admit_call(&call).await.unwrap(),
        Admission::Free { free_used: 1 }
    );
    assert_eq!(
        store.admit_call(&call).await.unwrap(),
        Admission::Free { free_used: 2 }
    );
    assert_eq!(store.admit_call(&call).await.unwrap(), Admission::Refused);

    store
        .credit_wallet(&account.id, Micros(20_000), &format!("meter-{tag}"))
        .await
        .unwrap();
    assert_eq!(
        store.admit_call(&call).await.unwrap(),
        Admission::Paid {
            balance_after: Micros(12_000)
        }
    );
    assert_eq!(
        store.admit_call(&call).await.unwrap(),
        Admission::Paid {
            balance_after: Micros(4_000)
        }
    );
    assert_eq!(
        store.admit_call(&call).await.unwrap(),
        Admission::Refused,
        "4,000 cannot pay 8,000"
    );
    let usage = store.usage(&account.id, &month).await.unwrap();
    assert_eq!((usage.free_used, usage.wallet), (2, Micros(4_000)));
    assert_eq!(
        store.ledger_counts(&account.id, &month).await.unwrap(),
        (2, 2)
    );

    let none_free = charge(&account.id, &month, 0);
    store
        .credit_wallet(&account.id, Micros(4_000), &format!("meter2-{tag}"))
        .await
        .unwrap();
    assert_eq!(
        store.admit_call(&none_free).await.unwrap(),
        Admission::Paid {
            balance_after: Micros::ZERO
        }
    );
}

async fn credits_apply_once_per_reference(store: &dyn Store, tag: &str) {
    let (account, _) = new_account(&format!("credit-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    let reference = format!("evt-{tag}");
    let first = store
        .credit_wallet(&account.id, Micros(5_000_000), &reference)
        .await
        .unwrap();
    let again = store
        .credit_wallet(&account.id, Micros(5_000_000), &reference)
        .await
        .unwrap();
    assert_eq!(first, (Micros(5_000_000), true));
    assert_eq!(
        again,
        (Micros(5_000_000), false),
        "a reference credits once"
    );
    assert!(matches!(
        store
            .credit_wallet(&AccountId::generate(), Micros(1), &format!("x-{tag}"))
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn months_are_counted_apart(store: &dyn Store, tag: &str) {
    let (account, _) = new_account(&format!("months-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    let october = MonthKey::containing(time_at(2026, 10));
    let november = MonthKey::containing(time_at(2026, 11));
    assert!(
        store
            .admit_call(&charge(&account.id, &october, 1))
            .await
            .unwrap()
            .admitted()
    );
    assert_eq!(
        store
            .admit_call(&charge(&account.id, &october, 1))
            .await
            .unwrap(),
        Admission::Refused
    );
    assert_eq!(
        store
            .admit_call(&charge(&account.id, &november, 1))
            .await
            .unwrap(),
        Admission::Free { free_used: 1 }
    );
}

fn time_at(year: i32, month: u8) -> time::OffsetDateTime {
    let month = time::Month::try_from(month).unwrap();
    time::Date::from_calendar_date(year, month, 15)
        .unwrap()
        .midnight()
        .assume_utc()
}

async fn concurrent_calls_are_counted_exactly(store: Arc<dyn Store>, tag: &str) {
    let (account, _) = new_account(&format!("burst-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    store
        .credit_wallet(&account.id, Micros(5_000_000), &format!("burst-{tag}"))
        .await
        .unwrap();
    let month = MonthKey::now();
    let tasks = (0..1000).map(|_| {
        let (store, id, month) = (store.clone(), account.id.clone(), month.clone());
        tokio::spawn(async move { store.admit_call(&charge(&id, &month, 10)).await.unwrap() })
    });
    // Calls for an account that does not exist fail among them, and must fail alone: a backend
    // that decides many calls in one transaction may not lose or double the others' rows.
    let stranger = AccountId::generate();
    let failing = (0..50).map(|_| {
        let (store, id, month) = (store.clone(), stranger.clone(), month.clone());
        tokio::spawn(async move { store.admit_call(&charge(&id, &month, 10)).await })
    });
    let (outcomes, failed) = futures::future::join(
        futures::future::join_all(tasks),
        futures::future::join_all(failing),
    )
    .await;
    for outcome in failed {
        assert!(
            outcome.unwrap().is_err(),
            "a call for an unknown account is an error"
        );
    }
    let admitted = outcomes
        .into_iter()
        .filter(|o| o.as_ref().unwrap().admitted())
        .count();
    assert_eq!(admitted, 635, "10 free + 5.00 / 0.008 paid");
    let usage = store.usage(&account.id, &month).await.unwrap();
    assert_eq!((usage.free_used, usage.wallet), (10, Micros::ZERO));
    assert_eq!(
        store.ledger_counts(&account.id, &month).await.unwrap(),
        (10, 625)
    );
}

/// Calls decided early (before their record is durable) follow the same rules: after a first
/// call, a burst of 100 gets the 9 free calls left and 10 paid ones, and nothing else.
async fn decided_calls_are_counted_exactly(store: Arc<dyn Store>, tag: &str) {
    let (account, _) = new_account(&format!("decided-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    store
        .credit_wallet(&account.id, Micros(80_000), &format!("decided-{tag}"))
        .await
        .unwrap();
    let month = MonthKey::now();
    let first = store.decide_call(&charge(&account.id, &month, 10)).await;
    let first = first.unwrap();
    first.recorded.wait().await.unwrap();
    assert_eq!(first.admission, Admission::Free { free_used: 1 });
    let tasks = (0..100).map(|_| {
        let (store, id, month) = (store.clone(), account.id.clone(), month.clone());
        tokio::spawn(async move {
            let decided = store.decide_call(&charge(&id, &month, 10)).await.unwrap();
            decided.recorded.wait().await.unwrap();
            decided.admission
        })
    });
    let outcomes: Vec<Admission> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let free = outcomes
        .iter()
        .filter(|a| matches!(a, Admission::Free { .. }))
        .count();
    let paid: Vec<i64> = outcomes
        .iter()
        .filter_map(|a| match a {
            Admission::Paid { balance_after } => Some(balance_after.0),
            _ => None,
        })
        .collect();
    assert_eq!((free, paid.len()), (9, 10), "{outcomes:?}");
    let mut balances = paid;
    balances.sort_unstable();
    let expected: Vec<i64> = (0..10).map(|n| n * 8_000).collect();
    assert_eq!(balances, expected, "each paid call saw its own balance");
    assert_eq!(
        store.ledger_counts(&account.id, &month).await.unwrap(),
        (10, 10)
    );
    let usage = store.usage(&account.id, &month).await.unwrap();
    assert_eq!((usage.free_used, usage.wallet), (10, Micros::ZERO));
}
