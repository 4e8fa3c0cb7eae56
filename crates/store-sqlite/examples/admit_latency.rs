//! Prints the latency of one call admission at a time (no concurrency), the metered path's floor,
//! then the admissions per second of 16 callers at once, from the allowance and from the wallet,
//! on one account and on 16, as `serve` runs them (the file claimed, so the mirror predicts), with
//! the process's CPU time per admission (steadier than the rate on a busy machine); and the same
//! for an account with a spend cap (decided on caps in the writer, never predicted by the mirror).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use toolgate_domain::{AccountId, ApiKey, Brand, Email, Micros, MonthKey};
use toolgate_store::{Accounts, CallCharge, Metering, NewAccount};
use toolgate_store_sqlite::{Durability, SqliteStore};

/// Concurrent callers in the loaded figures, as the HTTP bench's clients.
const CALLERS: usize = 16;
/// Admissions each caller makes in a loaded figure.
const CALLS_EACH: usize = 2_000;
/// Free calls a month in the figures from the allowance: more than they make.
const FREE: i64 = 1_000_000;
/// Price of a paid call; each account is credited ten times what its calls can take.
const PRICE: Micros = Micros(8_000);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("bench.db");
    let store = SqliteStore::open(&path, Durability::Full).await.unwrap();
    let account = new_account(&store, 0).await;
    let month = MonthKey::now();
    let charge = charge(&account, &month, FREE, false);
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

    store.serve_exclusively().unwrap();
    let store = Arc::new(store);
    let one = vec![account; CALLERS];
    let mut many = Vec::new();
    for n in 1..=CALLERS {
        many.push(new_account(&store, n).await);
    }
    // a monthly cap no figure reaches: what deciding on caps costs, every call admitted
    let capped = new_account(&store, CALLERS + 1).await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE accounts SET cap_month_micros = ?2 WHERE id = ?1",
            rusqlite::params![capped.as_str(), i64::MAX / 2],
        )
        .unwrap();
    let one_capped = vec![capped; CALLERS];
    for (label, accounts, free, caps) in [
        ("one account, free", &one, FREE, false),
        ("one account, paid", &one, 0, false),
        ("one account, paid, capped", &one_capped, 0, true),
        ("16 accounts, paid", &many, 0, false),
    ] {
        let cpu_before = cpu_seconds();
        let rate = loaded(&store, accounts, free, caps).await;
        let cpu = (cpu_seconds() - cpu_before) / (CALLERS * CALLS_EACH) as f64;
        println!(
            "{CALLERS} callers, {label}: {rate:.0} admissions/s, {:.1} µs CPU each",
            cpu * 1e6
        );
    }
}

async fn new_account(store: &SqliteStore, n: usize) -> AccountId {
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse(&format!("bench{n}@example.org")).unwrap(),
        key_hash: key.hash(),
    };
    store.create_account(&account).await.unwrap();
    let plenty = Micros(i64::try_from(10 * CALLERS * CALLS_EACH).unwrap() * PRICE.0);
    store
        .credit_wallet(&account.id, plenty, &format!("bench{n}"))
        .await
        .unwrap();
    account.id
}

fn charge<'a>(
    account: &'a AccountId,
    month: &'a MonthKey,
    free: i64,
    capped: bool,
) -> CallCharge<'a> {
    CallCharge {
        account,
        month,
        tool: "svc_write",
        free_monthly_calls: free,
        paid_call_cost: PRICE,
        key: None,
        capped,
    }
}

/// Admissions per second of one caller per account in `accounts`, all at once, at `free` calls
/// a month, decided on spend caps when `capped`.
async fn loaded(store: &Arc<SqliteStore>, accounts: &[AccountId], free: i64, capped: bool) -> f64 {
    let start = Instant::now();
    let callers = accounts.iter().map(|account| {
        let (store, account) = (Arc::clone(store), account.clone());
        tokio::spawn(async move {
            let month = MonthKey::now();
            for _ in 0..CALLS_EACH {
                let decided = store
                    .decide_call(&charge(&account, &month, free, capped))
                    .await
                    .unwrap();
                assert!(decided.admission.admitted());
                decided.recorded.wait().await.unwrap();
            }
        })
    });
    for caller in callers.collect::<Vec<_>>() {
        caller.await.unwrap();
    }
    (CALLERS * CALLS_EACH) as f64 / start.elapsed().as_secs_f64()
}

/// User and system CPU time of this process so far, from `/proc/self/stat` (in clock ticks of
/// 10 ms: over a figure's 32,000 admissions that is within about 1 %).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // the fields after the command name, which is in parentheses and may hold spaces
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}
