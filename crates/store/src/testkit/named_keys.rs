//! Named keys' part of the story: a key is created with its scope and caps and found by its
//! hash as the account with `via` naming it; a live duplicate name is refused, a revoked one's
//! name may be used again; revocation is idempotent and stops the hash matching; a change of
//! caps and scope is what authentication sees next; another account's key is not found;
//! last uses are recorded in one statement and never go back; of concurrent creates of one
//! name exactly one wins; every write moves the key epoch on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::{
    AccountId, ApiKey, Brand, KeyId, KeyScope, Micros, NamedKey, SpendCaps, Via,
};

use super::new_account;
use crate::{KeyChange, NewNamedKey, Store, StoreError};

fn read_only() -> KeyScope {
    KeyScope {
        tools: vec!["read".to_owned()],
        fields: vec![],
    }
}

fn fresh_key() -> ApiKey {
    ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap()
}

/// The named keys' seam on `store`.
pub async fn named_keys_story(store: Arc<dyn Store>, tag: &str) {
    let (alice, first) = new_account(&format!("named-alice-{tag}@example.org"));
    let (bob, _) = new_account(&format!("named-bob-{tag}@example.org"));
    store.create_account(&alice).await.unwrap();
    store.create_account(&bob).await.unwrap();
    assert!(store.named_keys(&alice.id).await.unwrap().is_empty());

    let caps = SpendCaps {
        month: Some(Micros(2_000_000)),
        day: Some(Micros(500_000)),
    };
    let (id, key) = (KeyId::generate(), fresh_key());
    let epoch = store.key_epoch();
    let created = store
        .create_named_key(&NewNamedKey {
            id: &id,
            account: &alice.id,
            name: "ci agent",
            key_hash: &key.hash(),
            scope: &read_only(),
            caps,
        })
        .await
        .unwrap();
    assert_eq!(created.key.id, id);
    assert_eq!(created.key.scope, read_only());
    assert_eq!(created.key.caps, caps);
    assert!(created.revoked_at.is_none() && created.last_used_at.is_none());
    if epoch.is_some() {
        assert_ne!(store.key_epoch(), epoch, "a created key moves the epoch on");
    }

    let (found, hash) = store.find_by_key_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(found.id, alice.id);
    assert!(hash == key.hash(), "the hash answered is the named key's");
    assert_eq!(
        found.via,
        Via::NamedKey(NamedKey {
            id: id.clone(),
            name: "ci agent".to_owned(),
            scope: read_only(),
            caps,
        })
    );
    let (by_first, _) = store
        .find_by_key_hash(&first.hash())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_first.via, Via::PrimaryKey, "the first key still works");

    let duplicate = store
        .create_named_key(&NewNamedKey {
            id: &KeyId::generate(),
            account: &alice.id,
            name: "ci agent",
            key_hash: &fresh_key().hash(),
            scope: &KeyScope::default(),
            caps: SpendCaps::default(),
        })
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Conflict(_))),
        "a live name is unique: {duplicate:?}"
    );
    let other_account = store
        .create_named_key(&NewNamedKey {
            id: &KeyId::generate(),
            account: &bob.id,
            name: "ci agent",
            key_hash: &fresh_key().hash(),
            scope: &KeyScope::default(),
            caps: SpendCaps::default(),
        })
        .await;
    assert!(other_account.is_ok(), "names are per account");
    let nobody = store
        .create_named_key(&NewNamedKey {
            id: &KeyId::generate(),
            account: &AccountId::generate(),
            name: "x",
            key_hash: &fresh_key().hash(),
            scope: &KeyScope::default(),
            caps: SpendCaps::default(),
        })
        .await;
    assert!(matches!(nobody, Err(StoreError::NotFound)), "{nobody:?}");

    // a change is what authentication sees next
    let epoch = store.key_epoch();
    let wider = KeyScope {
        tools: vec!["read".to_owned(), "ai".to_owned()],
        fields: vec!["query".to_owned()],
    };
    let changed = store
        .change_named_key(
            &alice.id,
            &id,
            KeyChange {
                caps: Some(SpendCaps {
                    month: None,
                    day: Some(Micros(1)),
                }),
                scope: Some(&wider),
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.key.caps.month, None);
    assert_eq!(changed.key.caps.day, Some(Micros(1)));
    if epoch.is_some() {
        assert_ne!(store.key_epoch(), epoch, "a change moves the epoch on");
    }
    let (found, _) = store.find_by_key_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(found.via.named_key().unwrap().scope, wider);
    let kept = store
        .change_named_key(&alice.id, &id, KeyChange::default())
        .await
        .unwrap();
    assert_eq!(kept.key, changed.key, "nothing given keeps everything");
    assert!(matches!(
        store
            .change_named_key(&bob.id, &id, KeyChange::default())
            .await,
        Err(StoreError::NotFound)
    ));

    // last uses: one statement, never going back, unknown ids skipped
    store
        .record_key_uses(&[(id.clone(), 5_000), (KeyId::generate(), 7_000)])
        .await
        .unwrap();
    store.record_key_uses(&[(id.clone(), 4_000)]).await.unwrap();
    store.record_key_uses(&[]).await.unwrap();
    let listed = store.named_keys(&alice.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_used_at, Some(5_000));

    // revocation: idempotent, another account's refused, the hash stops matching
    assert!(matches!(
        store.revoke_named_key(&bob.id, &id).await,
        Err(StoreError::NotFound)
    ));
    let epoch = store.key_epoch();
    let (revoked, did) = store.revoke_named_key(&alice.id, &id).await.unwrap();
    assert!(did && revoked.revoked_at.is_some());
    if epoch.is_some() {
        assert_ne!(store.key_epoch(), epoch, "a revocation moves the epoch on");
    }
    let (again, did_again) = store.revoke_named_key(&alice.id, &id).await.unwrap();
    assert!(!did_again, "revoked once only");
    assert_eq!(again.revoked_at, revoked.revoked_at);
    assert!(store.find_by_key_hash(&key.hash()).await.unwrap().is_none());
    assert!(matches!(
        store
            .change_named_key(&alice.id, &id, KeyChange::default())
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.revoke_named_key(&alice.id, &KeyId::generate()).await,
        Err(StoreError::NotFound)
    ));

    // a revoked key's name may be used again; of concurrent creates of one name, one wins
    let mut racers = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        let account = alice.id.clone();
        racers.push(tokio::spawn(async move {
            store
                .create_named_key(&NewNamedKey {
                    id: &KeyId::generate(),
                    account: &account,
                    name: "ci agent",
                    key_hash: &fresh_key().hash(),
                    scope: &KeyScope::default(),
                    caps: SpendCaps::default(),
                })
                .await
        }));
    }
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(other) => panic!("a racing create failed otherwise: {other}"),
        }
    }
    assert_eq!(won, 1, "exactly one of the concurrent creates wins");
    let listed = store.named_keys(&alice.id).await.unwrap();
    assert_eq!(listed.len(), 2, "the revoked key and the new one");
    assert!(listed[0].revoked_at.is_some() && listed[1].revoked_at.is_none());
}
