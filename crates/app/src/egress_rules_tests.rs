//! The lists' rules and their cache, on a real SQLite file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::AccountId;
use toolgate_store::{Accounts, HostListStore, HostListsChange, NewAccount};
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::*;

#[test]
fn lists_are_parsed_bounded_and_kept_in_canonical_form() {
    assert_eq!(
        canonical_list(
            "allow",
            &["A.example.ORG.", "*.Example.org", "a.example.org", "*"]
        )
        .unwrap(),
        ["a.example.org", "*.example.org", "*"]
    );
    assert!(canonical_list("allow", &[]).unwrap().is_empty());
    let hundred: Vec<String> = (0..MAX_PATTERNS).map(|i| format!("h{i}.org")).collect();
    let hundred: Vec<&str> = hundred.iter().map(String::as_str).collect();
    assert_eq!(
        canonical_list("allow", &hundred).unwrap().len(),
        MAX_PATTERNS
    );
    let more: Vec<&str> = hundred.iter().copied().chain(["x.org"]).collect();
    let err = canonical_list("allow", &more).unwrap_err();
    assert!(err.contains("`allow` has 101 patterns"), "{err}");
    let err = canonical_list("deny", &["ok.org", "bad host"]).unwrap_err();
    assert!(
        err.starts_with("`deny[1]`: ") && err.contains("not a host pattern"),
        "{err}"
    );
}

#[test]
fn the_lists_read_as_a_sentence() {
    let lists = |allow: &[&str], deny: &[&str]| HostLists {
        allow: allow.iter().map(|s| (*s).to_owned()).collect(),
        deny: deny.iter().map(|s| (*s).to_owned()).collect(),
    };
    assert_eq!(
        describe(&lists(&[], &[])),
        "Sessions' code may reach every public host."
    );
    assert_eq!(
        describe(&lists(&["a.org", "*.b.org"], &["x.b.org"])),
        "Sessions' code may reach only a.org, *.b.org, except x.b.org."
    );
}

async fn store_with_account() -> (tempfile::TempDir, Arc<SqliteStore>, AccountId) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let key =
        toolgate_domain::ApiKey::generate(&toolgate_domain::Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: toolgate_domain::Email::parse("rules@example.org").unwrap(),
        key_hash: key.hash(),
    };
    store.create_account(&account).await.unwrap();
    (dir, store, account.id)
}

/// A write made through another front end (straight to the store here).
async fn written_elsewhere(store: &SqliteStore, account: &AccountId, deny: &[&str]) {
    let deny: Vec<String> = deny.iter().map(|s| (*s).to_owned()).collect();
    let change = HostListsChange {
        allow: None,
        deny: Some(&deny),
    };
    store.change_host_lists(account, change).await.unwrap();
}

#[tokio::test]
async fn runs_read_the_lists_from_memory_and_a_write_here_is_seen_at_once() {
    let (_dir, store, account) = store_with_account().await;
    let rules = EgressRules::new(store.clone()).fresh_for(Duration::from_secs(3600));
    assert!(rules.lists(&account).await.unwrap().deny.is_empty());

    // while fresh, the cached lists are used: no read per run
    written_elsewhere(&store, &account, &["elsewhere.org"]).await;
    assert!(
        rules.lists(&account).await.unwrap().deny.is_empty(),
        "a fresh entry is used without a read"
    );

    // a write through this process forgets the entry
    let written = rules
        .change(&account, Some(&["a.org"]), Some(&["b.org"]))
        .await
        .unwrap();
    assert_eq!(
        (written.allow.as_slice(), written.deny.as_slice()),
        (&["a.org".to_owned()][..], &["b.org".to_owned()][..])
    );
    let now = rules.lists(&account).await.unwrap();
    assert_eq!(
        (now.allow.clone(), now.deny.clone()),
        (written.allow, written.deny)
    );

    let refused = rules
        .change(&account, Some(&["a b"]), None)
        .await
        .unwrap_err();
    assert!(matches!(refused, EgressRulesError::Refused(_)), "{refused}");
    let nobody = rules
        .change(&AccountId::generate(), Some(&["a.org"]), None)
        .await
        .unwrap_err();
    assert!(matches!(nobody, EgressRulesError::NoAccount), "{nobody}");
}

#[tokio::test]
async fn a_write_elsewhere_is_seen_once_the_entry_is_stale() {
    let (_dir, store, account) = store_with_account().await;
    let rules = EgressRules::new(store.clone()).fresh_for(Duration::ZERO);
    assert!(rules.lists(&account).await.unwrap().deny.is_empty());
    written_elsewhere(&store, &account, &["elsewhere.org"]).await;
    assert_eq!(rules.lists(&account).await.unwrap().deny, ["elsewhere.org"]);
}
