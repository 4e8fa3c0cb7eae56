//! The spend controls' part of the story: caps and the alert amount set and cleared (the key
//! epoch moving on), spend summed per account, key and tool, and each alert recorded once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::time_reexport::{Duration, OffsetDateTime};
use toolgate_domain::{AccountId, DayKey, Micros, MonthKey, SpendCaps};

use super::{charge, new_account};
use crate::{SpendLimits, SpendLine, Store, StoreError};

/// Runs the spend controls' story against `store`.
pub async fn spend_story(store: Arc<dyn Store>, tag: &str) {
    limits_are_set_and_cleared(&*store, tag).await;
    spend_is_summed_per_account_key_and_tool(&*store, tag).await;
    an_alert_is_recorded_once_under_concurrency(store, tag).await;
}

async fn limits_are_set_and_cleared(store: &dyn Store, tag: &str) {
    let (account, key) = new_account(&format!("limits-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    let before = store.key_epoch();
    let limits = SpendLimits {
        caps: SpendCaps {
            month: Some(Micros(5_000_000)),
            day: Some(Micros(250_000)),
        },
        alert_below: Some(Micros(1_000_000)),
    };
    store.set_spend_limits(&account.id, &limits).await.unwrap();
    if let Some(before) = before {
        let after = store.key_epoch().expect("the epoch stays offered");
        assert_ne!(before, after, "setting caps moves the key epoch on");
    }
    let (found, _) = store.find_by_key_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(found.caps, limits.caps, "authentication reads the new caps");
    let month = MonthKey::now();
    let overview = store
        .spend_overview(&account.id, &month, &DayKey::now())
        .await
        .unwrap();
    assert_eq!(overview.limits, limits);
    assert_eq!(overview.email, account.email);
    assert_eq!((overview.month, overview.day), (Micros(0), Micros(0)));
    assert!(overview.keys.is_empty());

    let cleared = SpendLimits {
        caps: SpendCaps {
            month: None,
            day: Some(Micros(250_000)),
        },
        alert_below: None,
    };
    store.set_spend_limits(&account.id, &cleared).await.unwrap();
    let (found, _) = store.find_by_key_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(found.caps, cleared.caps, "a cleared cap is no cap");
    let overview = store
        .spend_overview(&account.id, &month, &DayKey::now())
        .await
        .unwrap();
    assert_eq!(overview.limits, cleared);

    let unknown = AccountId::generate();
    assert!(matches!(
        store.set_spend_limits(&unknown, &limits).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.spend_overview(&unknown, &month, &DayKey::now()).await,
        Err(StoreError::NotFound)
    ));
}

async fn spend_is_summed_per_account_key_and_tool(store: &dyn Store, tag: &str) {
    let (account, _) = new_account(&format!("spend-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    store
        .credit_wallet(&account.id, Micros(100_000), &format!("spend-{tag}"))
        .await
        .unwrap();
    let month = MonthKey::now();
    // one free call (allowance 1), then three paid, all by the first key (admission records
    // a named key's id in the ledger; the page's split by it is the suite's to show)
    for tool in ["svc_read", "svc_read", "svc_write", "svc_read"] {
        let mut call = charge(&account.id, &month, 1);
        call.tool = tool;
        let admitted = store.admit_call(&call).await.unwrap();
        assert!(admitted.admitted(), "{admitted:?}");
    }
    let overview = store
        .spend_overview(&account.id, &month, &DayKey::now())
        .await
        .unwrap();
    assert_eq!(overview.month, Micros(24_000), "free calls do not count");
    assert_eq!(overview.day, Micros(24_000));
    assert_eq!(overview.balance, Micros(76_000));
    let tomorrow = store
        .spend_overview(&account.id, &month, &next_day())
        .await
        .unwrap();
    assert_eq!(tomorrow.day, Micros(0), "another day has spent nothing");
    // purging the days before tomorrow takes today's row, never the month's
    assert!(store.purge_spend_days(&next_day()).await.unwrap() >= 1);
    let purged = store
        .spend_overview(&account.id, &month, &DayKey::now())
        .await
        .unwrap();
    assert_eq!((purged.month, purged.day), (Micros(24_000), Micros(0)));
    assert_eq!(store.purge_spend_days(&DayKey::now()).await.unwrap(), 0);
    assert_eq!(tomorrow.month, Micros(24_000));

    let line = |label: &str, free, paid, cost| SpendLine {
        label: label.to_owned(),
        free,
        paid,
        cost: Micros(cost),
    };
    let by_key = store.spend_by_key(&account.id, &month).await.unwrap();
    assert_eq!(
        by_key,
        vec![line("default", 1, 3, 24_000)],
        "the first key's calls go under default"
    );
    let by_tool = store.spend_by_tool(&account.id, &month).await.unwrap();
    assert_eq!(
        by_tool,
        vec![
            line("svc_read", 1, 2, 16_000),
            line("svc_write", 0, 1, 8_000)
        ]
    );
    let other = MonthKey::containing(super::time_at(2001, 1));
    assert!(
        store
            .spend_by_tool(&account.id, &other)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn an_alert_is_recorded_once_under_concurrency(store: Arc<dyn Store>, tag: &str) {
    let (account, _) = new_account(&format!("alerts-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    let mut racers = Vec::new();
    for _ in 0..16 {
        let (store, id) = (store.clone(), account.id.clone());
        racers.push(tokio::spawn(async move {
            store
                .record_alert(&id, "cap:account:month:80", "2026-11")
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for racer in racers {
        won += usize::from(racer.await.unwrap());
    }
    assert_eq!(won, 1, "of 16 concurrent senders exactly one sends");
    assert!(
        store
            .record_alert(&account.id, "cap:account:month:80", "2026-12")
            .await
            .unwrap(),
        "a new period is a new alert"
    );
    assert!(
        !store
            .record_alert(&account.id, "cap:account:month:80", "2026-11")
            .await
            .unwrap()
    );
    let forgotten = store
        .forget_alerts(&account.id, "cap:account:month:80", Some("2026-11"))
        .await
        .unwrap();
    assert_eq!(forgotten, 1);
    assert!(
        store
            .record_alert(&account.id, "cap:account:month:80", "2026-11")
            .await
            .unwrap(),
        "a forgotten alert may be sent again"
    );
    let all = store
        .forget_alerts(&account.id, "cap:account:month:80", None)
        .await
        .unwrap();
    assert_eq!(all, 2);
    assert!(matches!(
        store
            .record_alert(&AccountId::generate(), "wallet_below", "1000000")
            .await,
        Err(StoreError::NotFound)
    ));
}

fn next_day() -> DayKey {
    DayKey::containing(OffsetDateTime::now_utc() + Duration::days(1))
}
