#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use toolgate_domain::{AccountId, Admission, Micros, MonthKey, UsageSnapshot};
use toolgate_store::{Metering, StoreError};

use super::CONTENDED_FOR;
use crate::PgStore;
use crate::batch::tests::{FREE, PRICE, WALLET, accounts, charge};
use crate::testkit::with_fresh_database;

/// Admits one call through `store` and waits for its record.
async fn admit(store: &PgStore, account: &AccountId) -> (Admission, Option<UsageSnapshot>) {
    let month = MonthKey::now();
    let decided = store.decide_call(&charge(account, &month)).await.unwrap();
    decided.recorded.wait().await.unwrap();
    (decided.admission, decided.usage)
}

fn usage(free_used: i64, wallet: i64) -> Option<UsageSnapshot> {
    Some(UsageSnapshot {
        free_used,
        wallet: Micros(wallet),
    })
}

/// One front end decides on what it remembers of an account; another writes that account
/// between its batches, each kind of write once. Every decision and every usage it reports is
/// what an exact read would have given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_standings_give_way_to_what_other_writers_did() {
    with_fresh_database(|url| async move {
        let remembering = PgStore::connect(&url).await.unwrap();
        let other = PgStore::connect(&url).await.unwrap();
        let account = accounts(&remembering, 1).await.remove(0);
        let after_a_change = || tokio::time::sleep(CONTENDED_FOR + Duration::from_millis(100));
        let (first, _) = admit(&remembering, &account).await;
        assert_eq!(first, Admission::Free { free_used: 1 });
        // the count moved elsewhere
        assert_eq!(
            admit(&other, &account).await.0,
            Admission::Free { free_used: 2 }
        );
        let third = admit(&remembering, &account).await;
        assert_eq!(third, (Admission::Free { free_used: 3 }, usage(3, WALLET)));
        after_a_change().await;
        // the wallet moved elsewhere: a free call does not rest on it, but shows it as found
        other
            .credit_wallet(&account, Micros(PRICE), "elsewhere-1")
            .await
            .unwrap();
        let fourth = admit(&remembering, &account).await;
        assert_eq!(
            fourth,
            (Admission::Free { free_used: 4 }, usage(4, WALLET + PRICE))
        );
        after_a_change().await;
        assert_eq!(
            admit(&remembering, &account).await.0,
            Admission::Free { free_used: FREE }
        );
        let paid_calls = (WALLET + PRICE) / PRICE;
        for n in 1..=paid_calls {
            let balance = WALLET + PRICE - n * PRICE;
            let (admission, reported) = admit(&remembering, &account).await;
            assert_eq!(
                admission,
                Admission::Paid {
                    balance_after: Micros(balance)
                }
            );
            assert_eq!(reported, usage(FREE, balance));
        }
        assert_eq!(admit(&remembering, &account).await.0, Admission::Refused);
        // a credit elsewhere after a refusal: a refusal is never made on what is remembered
        other
            .credit_wallet(&account, Micros(PRICE), "elsewhere-2")
            .await
            .unwrap();
        let after_credit = admit(&remembering, &account).await;
        assert_eq!(
            after_credit,
            (
                Admission::Paid {
                    balance_after: Micros::ZERO
                },
                usage(FREE, 0)
            )
        );
        let month = MonthKey::now();
        assert_eq!(
            remembering.ledger_counts(&account, &month).await.unwrap(),
            (FREE, paid_calls + 1)
        );
        let unknown = remembering
            .admit_call(&charge(&AccountId::generate(), &month))
            .await;
        assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
        remembering.close().await;
        other.close().await;
    })
    .await;
}
