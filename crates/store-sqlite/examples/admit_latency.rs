//! Prints the latency of one call admission at a time (no concurrency), the metered path's floor.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use toolgate_domain::{AccountId, ApiKey, Brand, Email, Micros, MonthKey};
use toolgate_store::{Accounts, CallCharge, Metering, NewAccount};
use toolgate_store_sqlite::{Durability, SqliteStore};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = SqliteStore::open(&dir.path().join("bench.db"), Durability::Full)
        .await
        .unwrap();
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("bench@example.org").unwrap(),
        key_hash: key.hash(),
    };
    store.create_account(&account).await.unwrap();
    let month = MonthKey::now();
    let charge = CallCharge {
        account: &account.id,
        month: &month,
        tool: "svc_write",
        free_monthly_calls: 1_000_000,
        paid_call_cost: Micros(8000),
    };
    let mut samples = Vec::new();
    for i in 0..3000 {
        let start = Instant::now();
        store.admit_call(&charge).await.unwrap();
        if i >= 500 {
            samples.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    println!("admission p50 {:.3} ms p99 {:.3} ms", at(0.5), at(0.99));
}
