#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use toolgate_domain::{Brand, Email, Pricing};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::*;
use crate::App;

/// An app over a real SQLite store with `free` calls a month, and one account.
async fn rig(free: i64) -> (tempfile::TempDir, App, Account) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let pricing = Pricing {
        free_monthly_calls: free,
        ..Pricing::default()
    };
    let brand = Brand::parse("svc").unwrap();
    let app = App::new(
        store.clone(),
        brand,
        pricing,
        "http://127.0.0.1",
        crate::Services::default(),
    );
    app.admin()
        .create_account("code@example.org")
        .await
        .unwrap();
    let email = Email::parse("code@example.org").unwrap();
    let account = store.find_by_email(&email).await.unwrap().unwrap();
    (dir, app, account)
}

fn origin(account: &Account) -> UpcallOrigin {
    UpcallOrigin {
        account: account.id.to_string(),
        session_id: Some("s".into()),
    }
}

async fn free_left(app: &App, account: &Account) -> i64 {
    app.meter()
        .status(account)
        .await
        .unwrap()
        .free_remaining_this_month
}

/// An upcall is one metered call of the session's account, answered with the typed record
/// (which already counts it); once the allowance is used up and the wallet is empty it is
/// refused with the same message a tool call gets, and runs nothing.
#[tokio::test]
async fn an_upcall_is_one_metered_call_refused_like_any_other() {
    let (_dir, app, account) = rig(2).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let answer = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap();
    let UpcallValue::Billing(record) = answer else {
        panic!("not a billing record: {answer:?}")
    };
    assert_eq!(record.free_remaining_this_month, 1);
    assert_eq!(free_left(&app, &account).await, 1);
    upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap();
    let refused = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Refused);
    assert_eq!(refused.message, app.meter().refusal_message());
    assert_eq!(free_left(&app, &account).await, 0);
    // a funded wallet pays for the next one, as it would for a tool call
    app.admin()
        .credit_wallet("code@example.org", "1.00", None)
        .await
        .unwrap();
    let UpcallValue::Billing(paid) = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap()
    else {
        panic!("not a billing record")
    };
    assert_eq!(paid.wallet_balance_usd, "0.99");
}

/// An upcall that says it comes from another account's session is refused and charges no
/// one: identity is the sandbox's to attach, and it is always the run's own account.
#[tokio::test]
async fn an_upcall_from_another_accounts_session_charges_no_one() {
    let (_dir, app, account) = rig(5).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let stranger = UpcallOrigin {
        account: "some-other-account".into(),
        session_id: None,
    };
    let refused = upcalls
        .answer(stranger, Upcall::Billing {})
        .await
        .unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Unavailable);
    assert_eq!(free_left(&app, &account).await, 5);
}
