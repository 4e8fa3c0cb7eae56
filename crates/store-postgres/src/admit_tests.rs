#![allow(clippy::unwrap_used, clippy::expect_used)]

use sqlx::{Connection, PgConnection};
use toolgate_domain::{AccountId, ApiKey, Brand, Email, MonthKey, Terms, decide};
use toolgate_store::{Accounts, CallCharge, Metering, NewAccount, StoreError};

use super::*;
use crate::PgStore;
use crate::batch::MAX_READS;
use crate::testkit::{until_lock_taken, until_waiting, with_fresh_database};

/// A migrated database with one account holding `wallet`, and a connection of its own to it.
async fn database_with_account(url: &str, wallet: i64) -> (PgStore, PgConnection, AccountId) {
    let store = PgStore::connect(url).await.unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("standing@example.org").unwrap(),
        key_hash: ApiKey::generate(&Brand::parse("svc").unwrap())
            .unwrap()
            .hash(),
    };
    store.create_account(&account).await.unwrap();
    if wallet > 0 {
        store
            .credit_wallet(&account.id, Micros(wallet), "start")
            .await
            .unwrap();
    }
    let conn = PgConnection::connect(url).await.unwrap();
    (store, conn, account.id)
}

fn charge<'a>(account: &'a AccountId, month: &'a MonthKey, free: i64, cost: i64) -> CallCharge<'a> {
    CallCharge {
        account,
        month,
        tool: "svc_read",
        free_monthly_calls: free,
        paid_call_cost: Micros(cost),
        key: None,
        capped: false,
    }
}

fn terms(charge: &CallCharge<'_>) -> Terms {
    Terms {
        free_monthly_calls: charge.free_monthly_calls,
        paid_call_cost: charge.paid_call_cost,
    }
}

async fn ledger_rows(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM call_ledger")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn execute(conn: &mut PgConnection, statement: &'static str, account: &AccountId) {
    sqlx::query(statement)
        .bind(account.as_str())
        .execute(conn)
        .await
        .unwrap();
}

/// The account's key in `month`.
fn key_of(account: &AccountId, month: &MonthKey) -> Key {
    (account.as_str().to_owned(), month.as_str().to_owned())
}

/// The standing of one key, its account's row locked.
async fn read_one(conn: &mut PgConnection, key: &Key) -> Option<Standing> {
    read_standings(conn, std::slice::from_ref(key))
        .await
        .unwrap()
        .get(key)
        .copied()
}

/// A run of `calls` calls at `call`'s terms decided one after the other, the first on `before`.
fn run_of<'a>(key: &'a Key, before: Standing, call: &CallCharge<'_>, calls: usize) -> Run<'a> {
    let mut run = Run::new(key, before);
    for _ in 0..calls {
        let decision = decide(run.after, terms(call));
        run.push("svc_read", None, &decision);
    }
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_run_decided_on_a_stale_count_writes_nothing() {
    with_fresh_database(|url| async move {
        let (store, mut conn, account) = database_with_account(&url, 0).await;
        let month = MonthKey::now();
        let key = key_of(&account, &month);
        let call = charge(&account, &month, 5, 8);
        let first = read_one(&mut conn, &key).await.unwrap();
        assert_eq!(first, Standing::default(), "no usage row yet: nothing used");
        let second = first;
        assert_eq!(
            apply_one(&mut conn, &run_of(&key, first, &call, 2))
                .await
                .unwrap(),
            Applied::Written
        );
        assert_eq!(
            apply_one(&mut conn, &run_of(&key, second, &call, 1))
                .await
                .unwrap(),
            Applied::Stale,
            "the count it rests on changed"
        );
        assert_eq!(ledger_rows(&mut conn).await, 2, "no row for the stale one");
        let fresh = read_one(&mut conn, &key).await.unwrap();
        assert_eq!(fresh.free_used, 2, "counted once each");
        store.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_run_decided_on_a_stale_wallet_or_debt_writes_nothing() {
    with_fresh_database(|url| async move {
        let (store, mut conn, account) = database_with_account(&url, 20).await;
        let month = MonthKey::now();
        let key = key_of(&account, &month);
        let call = charge(&account, &month, 0, 8);
        let before = read_one(&mut conn, &key).await.unwrap();
        let run = run_of(&key, before, &call, 3);
        assert_eq!(run.admitted.len(), 2, "20 pays for two calls of 8");
        let credit = "UPDATE accounts SET wallet_micros = wallet_micros + 5 WHERE id = $1";
        execute(&mut conn, credit, &account).await;
        assert_eq!(apply_one(&mut conn, &run).await.unwrap(), Applied::Stale);
        assert_eq!(
            store.usage(&account, &month).await.unwrap().wallet,
            Micros(25),
            "the credit is kept, nothing charged"
        );

        // at a price of nothing an empty wallet pays; a debt arising meanwhile must stop it
        let empty = "UPDATE accounts SET wallet_micros = 0 WHERE id = $1";
        execute(&mut conn, empty, &account).await;
        let free_price = charge(&account, &month, 0, 0);
        let before = read_one(&mut conn, &key).await.unwrap();
        let run = run_of(&key, before, &free_price, 1);
        assert!(matches!(run.admitted[..], [(_, _, Admission::Paid { .. })]));
        let owe = "UPDATE accounts SET owed_micros = 3 WHERE id = $1";
        execute(&mut conn, owe, &account).await;
        assert_eq!(apply_one(&mut conn, &run).await.unwrap(), Applied::Stale);
        assert_eq!(ledger_rows(&mut conn).await, 0);
        assert_eq!(
            store.admit_call(&free_price).await.unwrap(),
            Admission::Refused,
            "nothing paid while anything is owed"
        );
        store.close().await;
    })
    .await;
}

/// A run of free calls then paid ones is one statement; should its wallet change after its
/// count was read fresh (impossible while the row is locked), it reports the tear so that the
/// transaction is not committed, rather than a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_wallet_changed_under_a_fresh_count_is_torn() {
    with_fresh_database(|url| async move {
        let (store, mut conn, account) = database_with_account(&url, 20).await;
        let month = MonthKey::now();
        let key = key_of(&account, &month);
        let call = charge(&account, &month, 1, 8);
        let before = read_one(&mut conn, &key).await.unwrap();
        let run = run_of(&key, before, &call, 2);
        assert!(matches!(
            run.admitted[..],
            [
                (_, _, Admission::Free { .. }),
                (_, _, Admission::Paid { .. })
            ]
        ));
        let credit = "UPDATE accounts SET wallet_micros = wallet_micros + 5 WHERE id = $1";
        execute(&mut conn, credit, &account).await;
        let mut tx = conn.begin_with(BEGIN).await.unwrap();
        assert_eq!(apply_one(&mut tx, &run).await.unwrap(), Applied::Torn);
        tx.rollback().await.unwrap();
        assert_eq!(ledger_rows(&mut conn).await, 0);
        store.close().await;
    })
    .await;
}

/// The read locks the accounts' rows, so no other admission, credit or take-back decides on
/// the same standing before this transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_standings_holds_the_accounts_until_the_transaction_ends() {
    with_fresh_database(|url| async move {
        let (store, mut conn, account) = database_with_account(&url, 0).await;
        let month = MonthKey::now();
        let mut other = PgConnection::connect(&url).await.unwrap();
        let try_lock = "SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE NOWAIT";

        let mut tx = conn.begin_with(BEGIN).await.unwrap();
        let stranger = AccountId::generate();
        let keys = [key_of(&account, &month), key_of(&stranger, &month)];
        let read = read_standings(&mut tx, &keys).await.unwrap();
        assert_eq!(read.len(), 1, "an unknown account is left out: {read:?}");
        let locked = sqlx::query(try_lock)
            .bind(account.as_str())
            .execute(&mut other)
            .await;
        assert!(locked.is_err(), "the row is held: {locked:?}");
        tx.rollback().await.unwrap();
        sqlx::query(try_lock)
            .bind(account.as_str())
            .execute(&mut other)
            .await
            .expect("released with the transaction");
        store.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_writes_nothing_and_an_unknown_account_is_not_found() {
    with_fresh_database(|url| async move {
        let (store, mut conn, account) = database_with_account(&url, 7).await;
        let month = MonthKey::now();
        let call = charge(&account, &month, 0, 8);
        assert_eq!(store.admit_call(&call).await.unwrap(), Admission::Refused);
        assert_eq!(ledger_rows(&mut conn).await, 0);
        let usage_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM monthly_usage")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(usage_rows, 0, "no usage row for a refused call");
        let stranger = AccountId::generate();
        assert!(matches!(
            store.admit_call(&charge(&stranger, &month, 5, 8)).await,
            Err(StoreError::NotFound)
        ));
        store.close().await;
    })
    .await;
}

/// An admission that waited for the account's lock reads the month's count as it was before
/// the wait (PostgreSQL's snapshot is the statement's), so its first decision may rest on a
/// stale count. It must read again with the lock held, not give the lock up: here whoever held
/// it counts a call each time the admission waits, and the admission is still counted exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_that_waited_for_the_lock_decides_again_on_what_is_committed() {
    with_fresh_database(|url| async move {
        let (store, mut watcher, account) = database_with_account(&url, 0).await;
        let month = MonthKey::now();
        let mut holder = PgConnection::connect(&url).await.unwrap();
        let call = charge(&account, &month, 100, 8);
        let key = key_of(&account, &month);
        let mut tx = holder.begin_with(BEGIN).await.unwrap();
        let mut before = read_one(&mut tx, &key).await;
        let (admitting, id, held_month) = (store.clone(), account.clone(), month.clone());
        let admission = tokio::spawn(async move {
            admitting
                .admit_call(&charge(&id, &held_month, 100, 8))
                .await
        });
        let mut counted_by_holder = 0;
        // each round: with the lock held, let the admission queue behind it, count a call and
        // release; then take the lock again (waiting while the admission holds it)
        for _ in 0..=MAX_READS {
            until_waiting(&mut watcher, 1, || admission.is_finished()).await;
            if admission.is_finished() {
                break;
            }
            let counted = apply_one(&mut tx, &run_of(&key, before.unwrap(), &call, 1)).await;
            assert_eq!(counted.unwrap(), Applied::Written);
            tx.commit().await.unwrap();
            counted_by_holder += 1;
            // the admission takes the lock it waited for before the holder asks again (else a
            // loaded machine may let the holder's next statement in first, which is no fault of
            // the admission); from here on it must keep it until it has decided
            until_lock_taken(&mut watcher, || admission.is_finished()).await;
            tx = holder.begin_with(BEGIN).await.unwrap();
            before = read_one(&mut tx, &key).await;
        }
        tx.rollback().await.unwrap();
        let admitted = admission.await.unwrap();
        let free_used = match admitted {
            Ok(Admission::Free { free_used }) => free_used,
            other => panic!("the admission failed though the allowance could pay: {other:?}"),
        };
        assert_eq!(counted_by_holder, 1, "it kept the lock once it had it");
        assert_eq!(free_used, counted_by_holder + 1);
        assert_eq!(store.ledger_counts(&account, &month).await.unwrap(), (2, 0));
        store.close().await;
    })
    .await;
}
