#![allow(clippy::unwrap_used, clippy::expect_used)]

use rusqlite::Connection;
use toolgate_domain::{AccountId, ApiKey, Brand, Email, Terms, decide};
use toolgate_store::{Accounts, Metering, NewAccount};

use super::*;
use crate::{Durability, SqliteStore};

/// A migrated file with one account holding `wallet`, and a connection of its own to it.
async fn file_with_account(wallet: i64) -> (tempfile::TempDir, Connection, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path, Durability::Normal).await.unwrap();
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
    let conn = Connection::open(&path).unwrap();
    (dir, conn, account.id.as_str().to_owned())
}

fn call(account: &str) -> Call<'_> {
    Call {
        account,
        month: "2026-11",
        tool: "svc_read",
        key: None,
    }
}

fn terms(free_monthly_calls: i64) -> Terms {
    Terms {
        free_monthly_calls,
        paid_call_cost: Micros(8),
    }
}

fn ledger_rows(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM call_ledger", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test]
async fn reads_a_standing_and_none_for_an_unknown_account() {
    let (_dir, conn, account) = file_with_account(20).await;
    assert_eq!(read(&conn, &call("nobody")).unwrap(), None);
    let before = read(&conn, &call(&account)).unwrap().unwrap();
    assert_eq!(
        before,
        Standing {
            free_used: 0,
            wallet: Micros(20),
            owed: Micros::ZERO
        },
        "no usage row yet: nothing used this month"
    );
    let decision = decide(before, terms(1));
    assert!(apply(&conn, &call(&account), before, &decision).unwrap());
    assert_eq!(
        read(&conn, &call(&account)).unwrap(),
        Some(decision.after),
        "what is read back is what was decided"
    );
    assert_eq!(ledger_rows(&conn), 1);
}

#[tokio::test]
async fn a_free_call_decided_on_a_stale_count_writes_nothing() {
    let (_dir, conn, account) = file_with_account(0).await;
    let call = call(&account);
    let first = read(&conn, &call).unwrap().unwrap();
    let second = read(&conn, &call).unwrap().unwrap();
    // two deciders read the same standing; the first to apply wins
    assert!(apply(&conn, &call, first, &decide(first, terms(5))).unwrap());
    assert!(
        !apply(&conn, &call, second, &decide(second, terms(5))).unwrap(),
        "the count it rests on changed"
    );
    assert_eq!(ledger_rows(&conn), 1, "no ledger row for the stale one");
    let fresh = read(&conn, &call).unwrap().unwrap();
    assert_eq!(fresh.free_used, 1, "counted once");
    assert!(apply(&conn, &call, fresh, &decide(fresh, terms(5))).unwrap());
    assert_eq!(read(&conn, &call).unwrap().unwrap().free_used, 2);
}

#[tokio::test]
async fn a_paid_call_decided_on_a_stale_wallet_or_debt_writes_nothing() {
    let (_dir, conn, account) = file_with_account(20).await;
    let call = call(&account);
    let before = read(&conn, &call).unwrap().unwrap();
    let decision = decide(before, terms(0));
    assert!(matches!(decision.admission, Admission::Paid { .. }));
    // a credit lands between the read and the charge
    conn.execute(
        "UPDATE accounts SET wallet_micros = wallet_micros + 5 WHERE id = ?1",
        [&account],
    )
    .unwrap();
    assert!(!apply(&conn, &call, before, &decision).unwrap());
    let credited = read(&conn, &call).unwrap().unwrap();
    assert_eq!(
        credited.wallet,
        Micros(25),
        "the credit is kept, nothing charged"
    );
    // a dispute empties the wallet and leaves a debt between the read and the charge
    conn.execute(
        "UPDATE accounts SET wallet_micros = 0, owed_micros = 3 WHERE id = ?1",
        [&account],
    )
    .unwrap();
    assert!(!apply(&conn, &call, credited, &decide(credited, terms(0))).unwrap());
    assert_eq!(ledger_rows(&conn), 0);
    let owing = read(&conn, &call).unwrap().unwrap();
    assert_eq!(decide(owing, terms(0)).admission, Admission::Refused);
}

#[tokio::test]
async fn a_debt_arising_under_an_unchanged_wallet_stops_the_charge() {
    let (_dir, conn, account) = file_with_account(0).await;
    let call = call(&account);
    let before = read(&conn, &call).unwrap().unwrap();
    // at a price of nothing an empty wallet pays; a debt must stop it all the same
    let free_price = Terms {
        free_monthly_calls: 0,
        paid_call_cost: Micros::ZERO,
    };
    let decision = decide(before, free_price);
    assert!(matches!(decision.admission, Admission::Paid { .. }));
    conn.execute(
        "UPDATE accounts SET owed_micros = 3 WHERE id = ?1",
        [&account],
    )
    .unwrap();
    assert!(!apply(&conn, &call, before, &decision).unwrap());
    assert_eq!(ledger_rows(&conn), 0);
}

#[tokio::test]
async fn a_refusal_writes_nothing() {
    let (_dir, conn, account) = file_with_account(7).await;
    let call = call(&account);
    let before = read(&conn, &call).unwrap().unwrap();
    let decision = decide(before, terms(0));
    assert_eq!(decision.admission, Admission::Refused);
    assert!(apply(&conn, &call, before, &decision).unwrap());
    assert_eq!(read(&conn, &call).unwrap(), Some(before));
    assert_eq!(ledger_rows(&conn), 0);
    let none: i64 = conn
        .query_row("SELECT count(*) FROM monthly_usage", [], |row| row.get(0))
        .unwrap();
    assert_eq!(none, 0, "no usage row for a refused call");
}
