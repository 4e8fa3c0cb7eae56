//! The vault's part of the story: sealed secrets stored, listed, isolated per account, walked
//! for master-key rotation and re-wrapped by compare-and-set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::{AccountId, SealedSecret, SecretName};

use super::new_account;
use crate::{Store, StoreError, now_millis};

fn secret_name(raw: &str) -> SecretName {
    SecretName::parse(raw).unwrap()
}

/// A sealed value told apart from others by `byte`; the bytes are opaque to storage anyway.
fn sealed(key_version: u32, byte: u8) -> SealedSecret {
    SealedSecret {
        key_version,
        wrapped_key: vec![byte; 60],
        ciphertext: vec![!byte; 24],
    }
}

/// A new account of the story's own, so that assertions can ignore other steps' rows.
async fn created_account(store: &dyn Store, label: &str, tag: &str) -> AccountId {
    let (account, _) = new_account(&format!("{label}-{tag}@example.org"));
    store.create_account(&account).await.unwrap();
    account.id
}

async fn put(store: &dyn Store, account: &AccountId, name: &str, value: &SealedSecret) -> bool {
    let name = secret_name(name);
    store.put_secret(account, &name, value, None).await.unwrap()
}

/// The account's sealed value under `name`, as `sealed_secrets` returns it.
async fn value_of(store: &dyn Store, account: &AccountId, name: &str) -> Option<SealedSecret> {
    let name = secret_name(name);
    let found = store
        .sealed_secrets(account, std::slice::from_ref(&name))
        .await
        .unwrap();
    assert!(
        found.len() <= 1 && found.iter().all(|(n, _)| *n == name),
        "{found:?}"
    );
    found.into_iter().next().map(|(_, value)| value)
}

async fn rewrap(
    store: &dyn Store,
    account: &AccountId,
    old: &SealedSecret,
    new: &SealedSecret,
) -> bool {
    let name = secret_name("DB_URL");
    store.rewrap_secret(account, &name, old, new).await.unwrap()
}

async fn delete(store: &dyn Store, account: &AccountId, name: &str) -> bool {
    store
        .delete_secret(account, &secret_name(name))
        .await
        .unwrap()
}

async fn names_of(store: &dyn Store, account: &AccountId) -> Vec<String> {
    let listed = store.list_secrets(account).await.unwrap();
    listed
        .into_iter()
        .map(|info| info.name.as_str().to_owned())
        .collect()
}

/// The vault's seam: values in and out sealed, per account, and master-key rotation's walk.
pub(super) async fn secrets_story(store: Arc<dyn Store>, tag: &str) {
    secrets_are_put_listed_and_deleted_per_account(&*store, tag).await;
    secrets_are_walked_for_rotation(&*store, tag).await;
    rewraps_only_change_the_value_they_read(&*store, tag).await;
    concurrent_puts_leave_one_secret(Arc::clone(&store), tag).await;
    secrets_are_bound_to_hosts(&*store, tag).await;
}

/// A secret's hosts: stored with it, listed, kept by a replacement that does not name them,
/// cleared by one that names none, and only bound secrets given to the proxy.
async fn secrets_are_bound_to_hosts(store: &dyn Store, tag: &str) {
    let (a, b) = (
        created_account(store, "bound-a", tag).await,
        created_account(store, "bound-b", tag).await,
    );
    let hosts = vec!["api.github.com".to_owned(), "*.openai.com".to_owned()];
    let (gh, plain) = (secret_name("GH_TOKEN"), secret_name("PLAIN"));
    assert!(
        store
            .put_secret(&a, &gh, &sealed(1, 0x51), Some(&hosts))
            .await
            .unwrap()
    );
    assert!(put(store, &a, "PLAIN", &sealed(1, 0x52)).await);
    assert!(put(store, &b, "OTHER", &sealed(1, 0x53)).await);
    let listed = store.list_secrets(&a).await.unwrap();
    let shown: Vec<(&str, &[String])> = listed
        .iter()
        .map(|s| (s.name.as_str(), s.hosts.as_slice()))
        .collect();
    assert_eq!(shown, [("GH_TOKEN", &hosts[..]), ("PLAIN", &[][..])]);
    let bound = store.bound_secrets(&a).await.unwrap();
    assert_eq!(
        bound,
        [crate::BoundSecret {
            name: gh.clone(),
            sealed: sealed(1, 0x51),
            hosts: hosts.clone(),
        }],
        "only the bound one, with its value and hosts"
    );
    assert!(
        store.bound_secrets(&b).await.unwrap().is_empty(),
        "per account"
    );

    // a new value without hosts keeps them; hosts on a plain secret bind it
    assert!(!put(store, &a, "GH_TOKEN", &sealed(1, 0x61)).await);
    let bound = store.bound_secrets(&a).await.unwrap();
    assert_eq!(
        (bound[0].hosts.clone(), bound[0].sealed.clone()),
        (hosts.clone(), sealed(1, 0x61))
    );
    let one = vec!["example.org".to_owned()];
    store
        .put_secret(&a, &plain, &sealed(1, 0x62), Some(&one))
        .await
        .unwrap();
    let names: Vec<String> = store
        .bound_secrets(&a)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name.as_str().to_owned())
        .collect();
    assert_eq!(names, ["GH_TOKEN", "PLAIN"]);
    // no hosts unbinds; deleting forgets
    store
        .put_secret(&a, &gh, &sealed(1, 0x63), Some(&[]))
        .await
        .unwrap();
    assert!(delete(store, &a, "PLAIN").await);
    assert!(store.bound_secrets(&a).await.unwrap().is_empty());
    assert!(store.list_secrets(&a).await.unwrap()[0].hosts.is_empty());
    // a pattern storage could split is refused, and the secret is left as it was
    let split = vec!["a.org\nb.org".to_owned()];
    assert!(
        store
            .put_secret(&a, &gh, &sealed(1, 0x64), Some(&split))
            .await
            .is_err()
    );
    assert_eq!(value_of(store, &a, "GH_TOKEN").await, Some(sealed(1, 0x63)));
}

async fn secrets_are_put_listed_and_deleted_per_account(store: &dyn Store, tag: &str) {
    let (a, b) = (
        created_account(store, "vault-a", tag).await,
        created_account(store, "vault-b", tag).await,
    );
    let started = now_millis();
    assert!(
        put(store, &a, "API_TOKEN", &sealed(1, 0x11)).await,
        "the first put creates"
    );
    let first = store.list_secrets(&a).await.unwrap();
    assert!(
        first.len() == 1
            && started <= first[0].created_ms
            && first[0].created_ms == first[0].updated_ms,
        "a new secret is dated now, created and updated alike: {first:?}"
    );
    // Wait for the clock to move, so that a replacement that rewrote the creation time shows.
    while now_millis() <= first[0].updated_ms {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert!(
        !put(store, &a, "API_TOKEN", &sealed(1, 0x22)).await,
        "a second put replaces"
    );
    let replaced = store.list_secrets(&a).await.unwrap();
    assert_eq!(replaced.len(), 1, "a replacement adds no row: {replaced:?}");
    assert_eq!(
        replaced[0].created_ms, first[0].created_ms,
        "a replacement keeps the creation time"
    );
    assert!(
        replaced[0].updated_ms >= replaced[0].created_ms
            && replaced[0].updated_ms > first[0].updated_ms,
        "a replacement is dated after the creation, and the clock moved: {first:?} then {replaced:?}"
    );
    assert_eq!(
        value_of(store, &a, "API_TOKEN").await,
        Some(sealed(1, 0x22)),
        "the value is replaced"
    );

    // Byte order, as both backends sort: upper case, then `_`, then lower case.
    for (name, byte) in [("b_lower", 0x31), ("_under", 0x32), ("Z_UPPER", 0x33)] {
        assert!(put(store, &a, name, &sealed(1, byte)).await);
    }
    let listed = store.list_secrets(&a).await.unwrap();
    assert_eq!(
        names_of(store, &a).await,
        ["API_TOKEN", "Z_UPPER", "_under", "b_lower"],
        "by name"
    );
    let now = now_millis();
    for info in &listed {
        assert!(
            started <= info.created_ms
                && info.created_ms <= info.updated_ms
                && info.updated_ms <= now,
            "dates are Unix milliseconds of this run: {info:?}"
        );
    }
    let asked = ["b_lower", "MISSING", "API_TOKEN"].map(secret_name);
    let mut found = store.sealed_secrets(&a, &asked).await.unwrap();
    found.sort_by(|x, y| x.0.cmp(&y.0));
    let expected = [("API_TOKEN", sealed(1, 0x22)), ("b_lower", sealed(1, 0x31))];
    assert_eq!(
        found,
        expected.map(|(n, v)| (secret_name(n), v)),
        "only names that exist, each its own value"
    );
    assert!(store.sealed_secrets(&a, &[]).await.unwrap().is_empty());

    // Account B's secret of the same name is B's alone.
    assert!(
        put(store, &b, "API_TOKEN", &sealed(1, 0x44)).await,
        "a name is per account"
    );
    assert_eq!(
        store.list_secrets(&a).await.unwrap(),
        listed,
        "B's secret is not listed for A"
    );
    assert_eq!(
        value_of(store, &a, "API_TOKEN").await,
        Some(sealed(1, 0x22)),
        "nor returned for A"
    );
    assert_eq!(value_of(store, &b, "b_lower").await, None, "nor A's for B");
    assert!(delete(store, &a, "API_TOKEN").await);
    assert!(!delete(store, &a, "API_TOKEN").await, "deleted once");
    assert_eq!(
        value_of(store, &a, "API_TOKEN").await,
        None,
        "a deleted secret is gone"
    );
    assert_eq!(
        value_of(store, &b, "API_TOKEN").await,
        Some(sealed(1, 0x44)),
        "deleting A's leaves B's"
    );
    assert_eq!(names_of(store, &b).await, ["API_TOKEN"]);

    let stranger = AccountId::generate();
    assert!(
        matches!(
            store
                .put_secret(&stranger, &secret_name("X"), &sealed(1, 0), None)
                .await,
            Err(StoreError::NotFound)
        ),
        "a secret needs an account"
    );
}

/// Every secret older than `version`, walked page by page as rotation does; checks each page's
/// size and order, and keeps the rows of `ours` as (account, name, value).
async fn walk_for_rotation(
    store: &dyn Store,
    version: u32,
    page: u32,
    ours: &[&AccountId],
) -> Vec<(String, String, SealedSecret)> {
    let mut after: Option<(AccountId, SecretName)> = None;
    let mut kept = Vec::new();
    loop {
        let cursor = after.as_ref().map(|(account, name)| (account, name));
        let rows = store
            .secrets_to_rewrap(version, cursor, page)
            .await
            .unwrap();
        assert!(
            rows.len() <= page as usize,
            "a page holds at most `limit` rows"
        );
        let mut previous =
            after.map(|(account, name)| (account.as_str().to_owned(), name.as_str().to_owned()));
        for row in &rows {
            assert!(
                row.sealed.key_version < version,
                "only keys older than {version}: {row:?}"
            );
            let key = (
                row.account.as_str().to_owned(),
                row.name.as_str().to_owned(),
            );
            assert!(
                previous.as_ref().is_none_or(|p| *p < key),
                "ordered by (account, name), strictly after the cursor: {previous:?} then {key:?}"
            );
            if ours.contains(&&row.account) {
                kept.push((key.0.clone(), key.1.clone(), row.sealed.clone()));
            }
            previous = Some(key);
        }
        let Some(last) = rows.last() else { return kept };
        after = Some((last.account.clone(), last.name.clone()));
    }
}

async fn secrets_are_walked_for_rotation(store: &dyn Store, tag: &str) {
    let (c, d) = (
        created_account(store, "rotate-c", tag).await,
        created_account(store, "rotate-d", tag).await,
    );
    let rows = [
        (&c, "ONE", sealed(1, 1)),
        (&c, "TWO", sealed(2, 2)),
        (&c, "_THREE", sealed(1, 3)),
        (&c, "old", sealed(0, 4)),
        (&d, "ONE", sealed(1, 5)),
        (&d, "NEW", sealed(3, 6)),
    ];
    for (account, name, value) in &rows {
        assert!(put(store, account, name, value).await);
    }
    let older_than = |version: u32| {
        let mut older: Vec<_> = rows
            .iter()
            .filter(|(_, _, value)| value.key_version < version)
            .map(|(account, name, value)| {
                (
                    account.as_str().to_owned(),
                    (*name).to_owned(),
                    value.clone(),
                )
            })
            .collect();
        older.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
        older
    };
    assert_eq!(older_than(2).len(), 4, "the story's own check of its rows");
    for (version, page) in [(2, 2), (2, 1), (2, 1000), (1, 3), (4, 2), (0, 5)] {
        assert_eq!(
            walk_for_rotation(store, version, page, &[&c, &d]).await,
            older_than(version),
            "secrets older than version {version}, {page} a page"
        );
    }
}

async fn rewraps_only_change_the_value_they_read(store: &dyn Store, tag: &str) {
    let account = created_account(store, "rewrap", tag).await;
    let old = sealed(1, 0x61);
    // The same value with its data key wrapped again, as rotation writes it.
    let new = SealedSecret {
        key_version: 2,
        wrapped_key: vec![0x62; 60],
        ciphertext: old.ciphertext.clone(),
    };
    assert!(put(store, &account, "DB_URL", &old).await);
    let dated = store.list_secrets(&account).await.unwrap();
    let other_ciphertext = SealedSecret {
        ciphertext: vec![0; 24],
        ..old.clone()
    };
    assert!(
        !rewrap(store, &account, &other_ciphertext, &new).await,
        "the whole sealed form must match, ciphertext included"
    );
    assert!(
        rewrap(store, &account, &old, &new).await,
        "the current value is rewrapped"
    );
    assert_eq!(value_of(store, &account, "DB_URL").await, Some(new.clone()));
    assert_eq!(
        store.list_secrets(&account).await.unwrap(),
        dated,
        "a rewrap keeps the dates"
    );
    assert!(
        !rewrap(store, &account, &old, &new).await,
        "a value already rewrapped is not rewrapped again"
    );

    let put_meanwhile = sealed(2, 0x63);
    assert!(!put(store, &account, "DB_URL", &put_meanwhile).await);
    assert!(
        !rewrap(store, &account, &new, &sealed(3, 0x64)).await,
        "a value replaced since it was read is not overwritten"
    );
    assert_eq!(
        value_of(store, &account, "DB_URL").await,
        Some(put_meanwhile.clone())
    );

    assert!(delete(store, &account, "DB_URL").await);
    assert!(
        !rewrap(store, &account, &put_meanwhile, &sealed(3, 0x65)).await,
        "a deleted secret is not rewrapped"
    );
    assert!(
        store.list_secrets(&account).await.unwrap().is_empty(),
        "nor brought back"
    );
}

async fn concurrent_puts_leave_one_secret(store: Arc<dyn Store>, tag: &str) {
    let account = created_account(&*store, "race", tag).await;
    let tasks = (0..16u8).map(|n| {
        let (store, account) = (store.clone(), account.clone());
        tokio::spawn(async move { put(&*store, &account, "RACE", &sealed(1, n)).await })
    });
    let outcomes = futures::future::join_all(tasks).await;
    let created = outcomes
        .into_iter()
        .filter(|created| *created.as_ref().unwrap())
        .count();
    assert_eq!(
        created, 1,
        "one put creates the secret, the others replace it"
    );
    assert_eq!(
        names_of(&*store, &account).await,
        ["RACE"],
        "one row for one name"
    );
    let value = value_of(&*store, &account, "RACE").await.unwrap();
    assert!(
        (0..16u8).any(|n| value == sealed(1, n)),
        "the value is one of those put: {value:?}"
    );
}
