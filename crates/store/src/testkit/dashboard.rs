//! The dashboard's part of the story: sign-in links used at most once, sessions found until
//! they expire or end, the sealed key kept only for the current key, and the history pages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::{AccountId, Admission, ApiKey, Brand, Email, Micros, MonthKey, SealedSecret};

use super::{charge, new_account, time};
use crate::{DailyCalls, NewSignInSession, Store, StoreError, TokenHash, now_millis};

/// An hour in milliseconds: far enough from now that no step's row expires while it runs.
const HOUR: i64 = 3_600_000;

/// A fresh random token hash; a key's hash is as random as a token's, and 32 bytes long.
fn token() -> TokenHash {
    *ApiKey::generate(&Brand::parse("svc").unwrap())
        .unwrap()
        .hash()
        .as_bytes()
}

fn email(label: &str, tag: &str) -> Email {
    Email::parse(&format!("{label}-{tag}@example.org")).unwrap()
}

/// A new account of the story's own, with the key it was created with.
async fn created_account(store: &dyn Store, label: &str, tag: &str) -> (AccountId, ApiKey) {
    let (account, key) = new_account(&format!("{label}-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    (account.id, key)
}

fn session(account: &AccountId, expires_at: i64) -> NewSignInSession {
    NewSignInSession {
        token_hash: token(),
        account: account.clone(),
        expires_at,
    }
}

/// The dashboard's seam: sign-in, sessions, the sealed key and the history it shows.
pub(super) async fn dashboard_story(store: Arc<dyn Store>, tag: &str) {
    links_are_used_once(&*store, tag).await;
    concurrent_uses_of_a_link_succeed_once(store.clone(), tag).await;
    single_use_links_are_used_once(store.clone()).await;
    links_are_counted_since(&*store, tag).await;
    sessions_are_found_until_they_end(&*store, tag).await;
    sealed_keys_follow_the_current_key(&*store, tag).await;
    daily_calls_split_free_and_paid(&*store, tag).await;
    wallet_credits_come_newest_first(&*store, tag).await;
    purging_removes_only_expired_rows(&*store, tag).await;
}

async fn links_are_used_once(store: &dyn Store, tag: &str) {
    let address = email("link", tag);
    let (link, now) = (token(), now_millis());
    store
        .put_sign_in_link(&link, &address, now, now + HOUR)
        .await
        .unwrap();
    assert!(
        matches!(
            store
                .put_sign_in_link(&link, &address, now, now + HOUR)
                .await,
            Err(StoreError::Conflict(_))
        ),
        "a token hash is stored once"
    );
    for _ in 0..2 {
        assert_eq!(
            store.peek_sign_in_link(&link, now).await.unwrap().as_ref(),
            Some(&address),
            "peeking does not use the link"
        );
    }
    assert_eq!(
        store.use_sign_in_link(&link, now).await.unwrap().as_ref(),
        Some(&address)
    );
    assert_eq!(
        store.use_sign_in_link(&link, now).await.unwrap(),
        None,
        "a link is used once"
    );
    assert_eq!(
        store.peek_sign_in_link(&link, now).await.unwrap(),
        None,
        "a used link is no longer shown"
    );

    let expiring = token();
    store
        .put_sign_in_link(&expiring, &address, now, now + 1_000)
        .await
        .unwrap();
    assert!(
        store
            .peek_sign_in_link(&expiring, now + 999)
            .await
            .unwrap()
            .is_some()
    );
    for at in [now + 1_000, now + 2_000] {
        assert_eq!(
            store.peek_sign_in_link(&expiring, at).await.unwrap(),
            None,
            "a link is refused from its expiry on"
        );
        assert_eq!(store.use_sign_in_link(&expiring, at).await.unwrap(), None);
    }
    assert_eq!(
        store.use_sign_in_link(&expiring, now + 999).await.unwrap(),
        Some(address.clone()),
        "the refusals after expiry did not use it"
    );

    let unknown = token();
    assert_eq!(store.peek_sign_in_link(&unknown, now).await.unwrap(), None);
    assert_eq!(store.use_sign_in_link(&unknown, now).await.unwrap(), None);
}

async fn concurrent_uses_of_a_link_succeed_once(store: Arc<dyn Store>, tag: &str) {
    let address = email("race", tag);
    let (link, now) = (token(), now_millis());
    store
        .put_sign_in_link(&link, &address, now, now + HOUR)
        .await
        .unwrap();
    let uses = (0..16).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.use_sign_in_link(&link, now_millis()).await.unwrap() })
    });
    let outcomes = futures::future::join_all(uses).await;
    let signed_in: Vec<Email> = outcomes
        .into_iter()
        .filter_map(|outcome| outcome.unwrap())
        .collect();
    assert_eq!(signed_in, vec![address], "exactly one caller uses the link");
}

/// A single-use link's use is recorded once: a second use, or all but one of many at once, is
/// refused; another link is not affected.
async fn single_use_links_are_used_once(store: Arc<dyn Store>) {
    let (link, other) = (token(), token());
    let expires = now_millis() + HOUR;
    let uses = (0..16).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.use_link_once(&link, expires).await.unwrap() })
    });
    let first: usize = futures::future::join_all(uses)
        .await
        .into_iter()
        .filter(|used| *used.as_ref().unwrap())
        .count();
    assert_eq!(first, 1, "exactly one use of a single-use link succeeds");
    assert!(!store.use_link_once(&link, expires).await.unwrap());
    assert!(store.use_link_once(&other, expires).await.unwrap());
}

async fn links_are_counted_since(store: &dyn Store, tag: &str) {
    let (address, other) = (email("count", tag), email("count-other", tag));
    let now = now_millis();
    for created_at in [now - 3 * HOUR, now - 2 * HOUR, now - HOUR, now] {
        store
            .put_sign_in_link(&token(), &address, created_at, created_at + HOUR)
            .await
            .unwrap();
    }
    store
        .put_sign_in_link(&token(), &other, now, now + HOUR)
        .await
        .unwrap();
    let count = |since| store.count_sign_in_links(&address, since);
    assert_eq!(count(0).await.unwrap(), 4, "expired links count too");
    assert_eq!(
        count(now - 2 * HOUR).await.unwrap(),
        3,
        "`since` is inclusive"
    );
    assert_eq!(count(now - 2 * HOUR + 1).await.unwrap(), 2);
    assert_eq!(count(now + 1).await.unwrap(), 0);
    let used = token();
    store
        .put_sign_in_link(&used, &address, now, now + HOUR)
        .await
        .unwrap();
    store.use_sign_in_link(&used, now).await.unwrap().unwrap();
    assert_eq!(count(now).await.unwrap(), 2, "used links count too");
    let nobody = email("count-nobody", tag);
    assert_eq!(store.count_sign_in_links(&nobody, 0).await.unwrap(), 0);
}

async fn sessions_are_found_until_they_end(store: &dyn Store, tag: &str) {
    let (mine, _) = created_account(store, "session", tag).await;
    let (theirs, _) = created_account(store, "session-other", tag).await;
    let now = now_millis();
    let (first, second) = (session(&mine, now + HOUR), session(&mine, now + HOUR));
    let other = session(&theirs, now + HOUR);
    for s in [&first, &second, &other] {
        store.create_sign_in_session(s).await.unwrap();
    }
    assert!(
        matches!(
            store.create_sign_in_session(&first).await,
            Err(StoreError::Conflict(_))
        ),
        "a token hash is stored once"
    );
    let found = store
        .find_sign_in_session(&first.token_hash, now)
        .await
        .unwrap()
        .expect("a live session is found");
    assert_eq!(found.id, mine);
    assert_eq!(found.email, email("session", tag));
    assert_eq!(found.tier, "free");
    let expiry = now + HOUR;
    assert!(
        store
            .find_sign_in_session(&first.token_hash, expiry - 1)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .find_sign_in_session(&first.token_hash, expiry)
            .await
            .unwrap()
            .is_none(),
        "a session is refused from its expiry on"
    );
    assert!(
        store
            .find_sign_in_session(&token(), now)
            .await
            .unwrap()
            .is_none()
    );

    assert!(store.end_sign_in_session(&first.token_hash).await.unwrap());
    assert!(
        !store.end_sign_in_session(&first.token_hash).await.unwrap(),
        "a session ends once"
    );
    assert!(
        store
            .find_sign_in_session(&first.token_hash, now)
            .await
            .unwrap()
            .is_none()
    );
    let third = session(&mine, now + HOUR);
    store.create_sign_in_session(&third).await.unwrap();
    assert_eq!(store.end_all_sign_in_sessions(&mine).await.unwrap(), 2);
    for ended in [&second, &third] {
        assert!(
            store
                .find_sign_in_session(&ended.token_hash, now)
                .await
                .unwrap()
                .is_none()
        );
    }
    let survivor = store.find_sign_in_session(&other.token_hash, now).await;
    assert_eq!(
        survivor.unwrap().map(|a| a.id),
        Some(theirs.clone()),
        "another account's session is untouched"
    );
    assert_eq!(store.end_all_sign_in_sessions(&mine).await.unwrap(), 0);

    let stranger = session(&AccountId::generate(), now + HOUR);
    assert!(
        matches!(
            store.create_sign_in_session(&stranger).await,
            Err(StoreError::NotFound)
        ),
        "a session needs an account"
    );
}

fn sealed(key_version: u32, byte: u8) -> SealedSecret {
    SealedSecret {
        key_version,
        wrapped_key: vec![byte; 60],
        ciphertext: vec![!byte; 40],
    }
}

async fn sealed_keys_follow_the_current_key(store: &dyn Store, tag: &str) {
    let (account, key) = created_account(store, "sealed", tag).await;
    let (other, other_key) = created_account(store, "sealed-other", tag).await;
    assert_eq!(store.sealed_key(&account).await.unwrap(), None);
    assert!(
        store
            .put_sealed_key(&account, &key.hash(), &sealed(3, 0x5a))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_sealed_key(&other, &other_key.hash(), &sealed(1, 0x01))
            .await
            .unwrap()
    );
    assert_eq!(
        store.sealed_key(&account).await.unwrap(),
        Some(sealed(3, 0x5a))
    );
    assert!(
        !store
            .put_sealed_key(&account, &other_key.hash(), &sealed(4, 0x66))
            .await
            .unwrap(),
        "another key's hash does not match"
    );
    assert!(
        !store
            .put_sealed_key(&AccountId::generate(), &key.hash(), &sealed(4, 0x66))
            .await
            .unwrap(),
        "an unknown account matches nothing"
    );

    let rotated = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    store.replace_key(&account, &rotated.hash()).await.unwrap();
    assert_eq!(
        store.sealed_key(&account).await.unwrap(),
        None,
        "a rotation forgets the old key's sealed copy"
    );
    assert!(
        !store
            .put_sealed_key(&account, &key.hash(), &sealed(3, 0x5a))
            .await
            .unwrap(),
        "the old key's copy is refused after the rotation"
    );
    assert_eq!(store.sealed_key(&account).await.unwrap(), None);
    assert!(
        store
            .put_sealed_key(&account, &rotated.hash(), &sealed(3, 0x77))
            .await
            .unwrap()
    );
    assert_eq!(
        store.sealed_key(&account).await.unwrap(),
        Some(sealed(3, 0x77))
    );
    assert_eq!(
        store.sealed_key(&other).await.unwrap(),
        Some(sealed(1, 0x01)),
        "another account's sealed key is untouched"
    );
}

/// Today's UTC day of the month, and its month.
fn today() -> (u8, MonthKey) {
    let now = time::OffsetDateTime::now_utc();
    (now.day(), MonthKey::containing(now))
}

async fn daily_calls_split_free_and_paid(store: &dyn Store, tag: &str) {
    let (account, _) = created_account(store, "daily", tag).await;
    let (before, month) = today();
    assert!(
        store
            .daily_calls(&account, &month)
            .await
            .unwrap()
            .is_empty()
    );
    store
        .credit_wallet(&account, Micros(20_000), &format!("daily-{tag}"))
        .await
        .unwrap();
    let call = charge(&account, &month, 2);
    let mut admitted = Vec::new();
    for _ in 0..5 {
        admitted.push(store.admit_call(&call).await.unwrap());
    }
    assert!(
        matches!(
            admitted[..],
            [
                Admission::Free { .. },
                Admission::Free { .. },
                Admission::Paid { .. },
                Admission::Paid { .. },
                Admission::Refused,
            ]
        ),
        "{admitted:?}"
    );
    let (after, month_after) = today();
    let days = store.daily_calls(&account, &month).await.unwrap();
    if (before, &month) == (after, &month_after) {
        let expected = DailyCalls {
            day: before,
            free: 2,
            paid: 2,
            paid_cost: Micros(16_000),
        };
        assert_eq!(days, vec![expected], "refused calls are not counted");
    } else {
        // Midnight UTC passed while the calls ran: only the totals are certain.
        let free: i64 = days.iter().map(|d| d.free).sum();
        let paid: i64 = days.iter().map(|d| d.paid).sum();
        assert_eq!((free, paid), (2, 2), "{days:?}");
    }
    let (other, _) = created_account(store, "daily-other", tag).await;
    assert!(store.daily_calls(&other, &month).await.unwrap().is_empty());
    let october = MonthKey::containing(
        time::Date::from_calendar_date(2020, time::Month::October, 1)
            .unwrap()
            .midnight()
            .assume_utc(),
    );
    assert!(
        store
            .daily_calls(&account, &october)
            .await
            .unwrap()
            .is_empty(),
        "another month's days are apart"
    );
}

async fn wallet_credits_come_newest_first(store: &dyn Store, tag: &str) {
    let (account, _) = created_account(store, "credits", tag).await;
    let (other, _) = created_account(store, "credits-other", tag).await;
    assert!(store.wallet_credits(&account, 10).await.unwrap().is_empty());
    // References sort as they are made, so credits made in one millisecond keep their order.
    let started = now_millis();
    for n in 1..=3 {
        store
            .credit_wallet(&account, Micros(n * 1_000), &format!("wc-{tag}-{n}"))
            .await
            .unwrap();
    }
    store
        .credit_wallet(&other, Micros(9_000), &format!("wc-other-{tag}"))
        .await
        .unwrap();
    let all = store.wallet_credits(&account, 10).await.unwrap();
    let seen: Vec<(&str, i64)> = all
        .iter()
        .map(|c| (c.reference.as_str(), c.amount.0))
        .collect();
    let expected = [3, 2, 1].map(|n| (format!("wc-{tag}-{n}"), n * 1_000));
    let expected: Vec<(&str, i64)> = expected.iter().map(|(r, a)| (r.as_str(), *a)).collect();
    assert_eq!(seen, expected, "newest first, this account's only");
    assert!(
        all.iter().all(|c| started <= c.at && c.at <= now_millis()),
        "credits are dated when applied: {all:?}"
    );
    let newest = store.wallet_credits(&account, 2).await.unwrap();
    assert_eq!(newest, all[..2].to_vec(), "the limit keeps the newest");
}

async fn purging_removes_only_expired_rows(store: &dyn Store, tag: &str) {
    // Rows other steps left to expire go first, so that the count below is this step's own.
    let now = now_millis();
    store.purge_expired(now).await.unwrap();
    let (account, _) = created_account(store, "purge", tag).await;
    let address = email("purge", tag);
    let (expired_link, live_link) = (token(), token());
    store
        .put_sign_in_link(&expired_link, &address, now - HOUR, now - 1_000)
        .await
        .unwrap();
    store
        .put_sign_in_link(&live_link, &address, now, now + HOUR)
        .await
        .unwrap();
    let (expired, live) = (
        session(&account, now - 1_000),
        session(&account, now + HOUR),
    );
    store.create_sign_in_session(&expired).await.unwrap();
    store.create_sign_in_session(&live).await.unwrap();
    let (spent, live_use) = (token(), token());
    assert!(store.use_link_once(&spent, now - 1_000).await.unwrap());
    assert!(store.use_link_once(&live_use, now + HOUR).await.unwrap());
    // An expired session is still found at a time before its expiry until it is purged.
    let before_expiry = now - 2_000;
    assert!(
        store
            .find_sign_in_session(&expired.token_hash, before_expiry)
            .await
            .unwrap()
            .is_some()
    );

    assert_eq!(
        store.purge_expired(now).await.unwrap(),
        3,
        "one link, one session and one single-use link's use"
    );
    assert!(
        !store.use_link_once(&live_use, now + HOUR).await.unwrap(),
        "a live link's use outlives the purge"
    );
    assert_eq!(
        store.count_sign_in_links(&address, 0).await.unwrap(),
        1,
        "the expired link went, the live one stayed"
    );
    assert!(
        store
            .find_sign_in_session(&expired.token_hash, before_expiry)
            .await
            .unwrap()
            .is_none(),
        "the expired session went"
    );
    assert_eq!(
        store.peek_sign_in_link(&live_link, now).await.unwrap(),
        Some(address)
    );
    assert!(
        store
            .find_sign_in_session(&live.token_hash, now)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.purge_expired(now).await.unwrap(),
        0,
        "nothing is left"
    );
}
