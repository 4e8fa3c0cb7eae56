//! Spend caps under concurrency: the account's and a named key's, exact on every backend.
//! Setting caps and named keys belongs to other seams; the story asks its backend to write them
//! with [`CapsSetup`], so it tests the admission alone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use toolgate_domain::{AccountId, Admission, CapPeriod, CapScope, KeyId, Micros, MonthKey};

use crate::{CallCharge, Store};

/// Writes caps as the dashboard would: the account's (`None` key) or a named key's (made if
/// missing); amounts in micro-dollars, `None` for no cap.
pub type CapsSetup = Arc<
    dyn Fn(
            AccountId,
            Option<KeyId>,
            Option<i64>,
            Option<i64>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

const PRICE: i64 = 8_000;

fn capped_charge<'a>(
    account: &'a AccountId,
    month: &'a MonthKey,
    key: Option<&'a KeyId>,
) -> CallCharge<'a> {
    CallCharge {
        account,
        month,
        tool: "svc_write",
        free_monthly_calls: 0,
        paid_call_cost: Micros(PRICE),
        key,
        capped: true,
    }
}

/// 32 concurrent calls against each cap, split over `first` and `second` (two front ends of
/// one database, or two handles of one file): exactly as many are paid as the cap holds.
pub async fn caps_story(first: Arc<dyn Store>, second: Arc<dyn Store>, set: CapsSetup, tag: &str) {
    let (account, _) = super::new_account(&format!("caps-{tag}@example.org"));
    first.create_account(&account).await.unwrap();
    first
        .credit_wallet(&account.id, Micros(1_000_000), "caps-start")
        .await
        .unwrap();
    let month = MonthKey::now();

    // the account's daily cap holds 10 calls: of 32 at once, 10 are paid, 22 capped
    set(account.id.clone(), None, Some(500_000), Some(10 * PRICE)).await;
    let outcomes = concurrently(&first, &second, &account.id, &month, None).await;
    assert_eq!(
        count_paid(&outcomes),
        10,
        "{tag}: the daily cap holds exactly 10 calls"
    );
    for outcome in outcomes.iter().filter(|o| !o.admitted()) {
        let Admission::Capped(room) = outcome else {
            panic!("{tag}: a call past the cap is refused as capped, got {outcome:?}");
        };
        assert_eq!(
            (room.scope, room.period),
            (CapScope::Account, CapPeriod::Day)
        );
        assert_eq!(room.cap, Micros(10 * PRICE));
        assert_eq!(
            room.spent,
            Micros(10 * PRICE),
            "{tag}: the spend is counted exactly"
        );
    }
    let usage = first.usage(&account.id, &month).await.unwrap();
    assert_eq!(
        usage.wallet,
        Micros(1_000_000 - 10 * PRICE),
        "{tag}: only paid calls cost"
    );

    // a named key's own monthly cap of 3 calls, under a raised account cap
    set(account.id.clone(), None, Some(500_000), Some(500_000)).await;
    let key = KeyId::generate();
    set(account.id.clone(), Some(key.clone()), Some(3 * PRICE), None).await;
    let outcomes = concurrently(&first, &second, &account.id, &month, Some(&key)).await;
    assert_eq!(
        count_paid(&outcomes),
        3,
        "{tag}: the key's cap holds exactly 3 calls"
    );
    assert!(
        outcomes
            .iter()
            .filter(|o| !o.admitted())
            .all(|o| matches!(o, Admission::Capped(room) if room.scope == CapScope::Key)),
        "{tag}: the key's calls past its cap name the key's cap"
    );
    // the account's other calls are held to the account's caps only
    let other = concurrently(&first, &second, &account.id, &month, None).await;
    assert_eq!(
        count_paid(&other),
        32,
        "{tag}: another key's cap does not apply"
    );

    // the account's monthly cap counts every key's spend: 13 + 32 + 3 calls so far
    let spent = (10 + 3 + 32) * PRICE;
    set(account.id.clone(), None, Some(spent + 2 * PRICE), None).await;
    let outcomes = concurrently(&first, &second, &account.id, &month, None).await;
    assert_eq!(
        count_paid(&outcomes),
        2,
        "{tag}: the monthly cap counts every key's spend"
    );
    let (_, paid) = first.ledger_counts(&account.id, &month).await.unwrap();
    assert_eq!(
        paid,
        10 + 3 + 32 + 2,
        "{tag}: one ledger row per paid call, none for capped"
    );

    // no cap: the wallet alone decides, as before
    set(account.id.clone(), None, None, None).await;
    let outcomes = concurrently(&first, &second, &account.id, &month, None).await;
    assert_eq!(
        count_paid(&outcomes),
        32,
        "{tag}: no cap, every call the wallet pays"
    );
}

async fn concurrently(
    first: &Arc<dyn Store>,
    second: &Arc<dyn Store>,
    account: &AccountId,
    month: &MonthKey,
    key: Option<&KeyId>,
) -> Vec<Admission> {
    let mut tasks = Vec::new();
    for index in 0..32 {
        let store = if index % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (account, month, key) = (account.clone(), month.clone(), key.cloned());
        tasks.push(tokio::spawn(async move {
            let charge = capped_charge(&account, &month, key.as_ref());
            store.admit_call(&charge).await.unwrap()
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

fn count_paid(outcomes: &[Admission]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, Admission::Paid { .. }))
        .count()
}
