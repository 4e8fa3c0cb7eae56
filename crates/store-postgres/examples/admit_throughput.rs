//! Prints the admissions per second of 16 callers at once on the PostgreSQL server that
//! `TOOLGATE_TEST_POSTGRES_URL` names (a fresh database, dropped afterwards): through one store
//! and through two (two front ends, each its own pool and batchers, the callers split between
//! them), on one account and on 16, from the allowance and from the wallet. The storage side of
//! the HTTP bench's metered figure, without HTTP, key look-ups or the billing read. The same for
//! an account with a spend cap none of the calls reaches (each decided alone under the lock).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::Connection;

use toolgate_domain::{AccountId, ApiKey, Brand, Email, Micros, MonthKey};
use toolgate_store::{Accounts, CallCharge, Metering, NewAccount};
use toolgate_store_postgres::PgStore;
use toolgate_store_postgres::testkit::with_fresh_database;

/// Concurrent callers, as the HTTP bench's clients.
const CALLERS: usize = 16;
/// How long each figure runs.
const MEASURED: Duration = Duration::from_secs(4);
/// Free calls a month in the figures from the allowance: more than they make.
const FREE: i64 = 100_000_000;
/// Price of a paid call; each account is credited far more than its calls can take.
const PRICE: Micros = Micros(8);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    with_fresh_database(|url| async move {
        let stores = [
            Arc::new(PgStore::connect(&url).await.unwrap()),
            Arc::new(PgStore::connect(&url).await.unwrap()),
        ];
        let one = vec![new_account(&stores[0], 0).await; CALLERS];
        let mut many = Vec::new();
        for n in 1..=CALLERS {
            many.push(new_account(&stores[0], n).await);
        }
        let capped = vec![new_account(&stores[0], CALLERS + 1).await; CALLERS];
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("UPDATE accounts SET cap_month_micros = $2 WHERE id = $1")
            .bind(capped[0].as_str())
            .bind(i64::MAX / 2)
            .execute(&mut conn)
            .await
            .unwrap();
        for fronts in [1, 2] {
            for (label, accounts, free, caps) in [
                ("one account, free", &one, FREE, false),
                ("one account, paid", &one, 0, false),
                ("one account, paid, capped", &capped, 0, true),
                ("16 accounts, paid", &many, 0, false),
            ] {
                let rate = loaded(&stores[..fronts], accounts, free, caps).await;
                println!(
                    "{fronts} front end(s), {CALLERS} callers, {label}: {rate:.0} admissions/s"
                );
            }
        }
        for store in stores {
            store.close().await;
        }
    })
    .await;
}

async fn new_account(store: &PgStore, n: usize) -> AccountId {
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse(&format!("bench{n}@example.org")).unwrap(),
        key_hash: key.hash(),
    };
    store.create_account(&account).await.unwrap();
    store
        .credit_wallet(&account.id, Micros(1_000_000_000_000), &format!("bench{n}"))
        .await
        .unwrap();
    account.id
}

/// Admissions per second of `CALLERS` callers, caller `n` charging `accounts[n]` through
/// `stores[n % stores.len()]`.
async fn loaded(stores: &[Arc<PgStore>], accounts: &[AccountId], free: i64, capped: bool) -> f64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let callers: Vec<_> = accounts
        .iter()
        .enumerate()
        .map(|(n, account)| {
            let (store, account) = (stores[n % stores.len()].clone(), account.clone());
            let admitted = admitted.clone();
            tokio::spawn(async move {
                let month = MonthKey::now();
                let charge = CallCharge {
                    account: &account,
                    month: &month,
                    tool: "svc_read",
                    free_monthly_calls: free,
                    paid_call_cost: PRICE,
                    key: None,
                    capped,
                };
                while start.elapsed() < MEASURED {
                    assert!(store.admit_call(&charge).await.unwrap().admitted());
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    admitted.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}
