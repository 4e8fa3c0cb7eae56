#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolgate_domain::{AccountId, ApiKey, Brand, Email, Micros, MonthKey};
use toolgate_store::{
    Accounts, CallCharge, Metering, NewAccount, PaymentCredit, Reversal, TakeBack, TakeBacks,
    TakenBack,
};

use super::*;
use crate::SqliteStore;
use crate::jobs::{Answers, TakeBackJob};

/// A migrated file with one account whose wallet a payment of `wallet` credited, and the
/// writer's kind of connection to it.
async fn file_with_account(wallet: i64) -> (tempfile::TempDir, SqliteStore, Connection, AccountId) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("batch@example.org").unwrap(),
        key_hash: ApiKey::generate(&Brand::parse("svc").unwrap())
            .unwrap()
            .hash(),
    };
    store.create_account(&account).await.unwrap();
    let credit = PaymentCredit {
        account: &account.id,
        amount: Micros(wallet),
        reference: "evt_paid",
        payment: "pi_1",
    };
    store.credit_payment(&credit).await.unwrap();
    let conn = open_connection(&path, Durability::Normal).unwrap();
    (dir, store, conn, account.id)
}

/// A job charging `account` at `free` calls a month and 8 per paid call, and its answers.
fn call(account: &AccountId, month: &MonthKey, free: i64) -> (WriterJob, Answers) {
    let charge = CallCharge {
        account,
        month,
        tool: "svc_write",
        free_monthly_calls: free,
        paid_call_cost: Micros(8),
        key: None,
        capped: false,
    };
    let (job, answers) = AdmitJob::new(&charge);
    (WriterJob::Admit(job), answers)
}

async fn outcome(answers: Answers) -> Result<Admission, StoreError> {
    let decided = answers.decided().await?;
    decided.recorded.wait().await?;
    Ok(decided.admission)
}

/// Many calls of one account in one transaction, a take-back among them and a call that fails:
/// each call decided on the standing the ones before it left, nothing lost or doubled.
#[tokio::test]
async fn one_transaction_decides_each_call_on_the_standing_before_it() {
    let (_dir, store, conn, account) = file_with_account(40).await;
    let month = MonthKey::now();
    let mut batch = Vec::new();
    let mut answers = Vec::new();
    for free in [2, 2, 2, 2] {
        let (job, answer) = call(&account, &month, free);
        batch.push(job);
        answers.push(answer);
    }
    let stranger = AccountId::generate();
    let (job, failing) = call(&stranger, &month, 2);
    batch.push(job);
    // a refund of 20 of the 40 paid in, from the 24 left after two paid calls
    let take = TakeBack {
        reference: "evt_refund",
        payment: "pi_1",
        reversal: Reversal::Refunded { total: Micros(20) },
    };
    let (job, taken) = TakeBackJob::new(&take, account.as_str().to_owned());
    batch.push(WriterJob::TakeBack(job));
    let (job, after_refund) = call(&account, &month, 2);
    batch.push(job);

    decide_batch(&conn, &mut batch, &Mirror::default());

    let mut decided = Vec::new();
    for answer in answers {
        decided.push(outcome(answer).await.unwrap());
    }
    assert_eq!(
        decided,
        [
            Admission::Free { free_used: 1 },
            Admission::Free { free_used: 2 },
            Admission::Paid {
                balance_after: Micros(32)
            },
            Admission::Paid {
                balance_after: Micros(24)
            },
        ]
    );
    assert!(matches!(outcome(failing).await, Err(StoreError::NotFound)));
    assert!(matches!(
        taken.await.unwrap().unwrap(),
        TakenBack::Taken {
            amount: Micros(20),
            ..
        }
    ));
    assert_eq!(
        outcome(after_refund).await.unwrap(),
        Admission::Refused,
        "the 4 the refund left cannot pay 8"
    );
    let usage = store.usage(&account, &month).await.unwrap();
    assert_eq!((usage.free_used, usage.wallet), (2, Micros(4)));
    assert_eq!(store.ledger_counts(&account, &month).await.unwrap(), (2, 2));
}

/// `mxFrame` of the WAL index's header and `nBackfill` of its checkpoint record, read from the
/// `-shm` file (SQLite's WAL-index format: both native-endian u32, at bytes 16 and 96).
fn wal_frames_and_copied(db: &std::path::Path) -> (u32, u32) {
    let shm = std::fs::read(db.with_extension("db-shm")).unwrap();
    let word = |at: usize| u32::from_ne_bytes(shm[at..at + 4].try_into().unwrap());
    (word(16), word(96))
}

/// The admissions' commits checkpoint the WAL only rarely (one call in a hundred used to wait
/// for it); the checkpoint thread copies what they leave, and the WAL stays bounded.
#[tokio::test]
async fn the_wal_is_checkpointed_mostly_off_the_admissions_thread() {
    let (dir, store, conn, account) = file_with_account(1_000_000_000).await;
    let pages: i64 = conn
        .query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
        .unwrap();
    assert_eq!(pages, crate::wal_checkpoints::WRITER_CHECKPOINT_PAGES);
    let month = MonthKey::now();
    let charge = CallCharge {
        account: &account,
        month: &month,
        tool: "svc_write",
        free_monthly_calls: 0,
        paid_call_cost: Micros(8),
        key: None,
        capped: false,
    };
    for _ in 0..3000 {
        store.admit_call(&charge).await.unwrap();
    }
    // each commit appends about five pages: some 68 MB unchecked
    let wal = std::fs::metadata(dir.path().join("t.db-wal"))
        .unwrap()
        .len();
    assert!(wal < 20 << 20, "the WAL grew to {wal} bytes");
    // what the last admissions appended is copied by the thread, not by them
    let db = dir.path().join("t.db");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (frames, copied) = wal_frames_and_copied(&db);
        if frames > 0 && frames == copied {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{copied} of {frames} WAL frames copied after 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let usage = store.usage(&account, &month).await.unwrap();
    assert_eq!(
        usage.wallet,
        Micros(1_000_000_000 - 3000 * 8),
        "a charge was lost"
    );
}
