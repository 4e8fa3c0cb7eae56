#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use toolgate_domain::Email;
use toolgate_store::NewAccount;
use toolgate_store_sqlite::{Durability, SqliteStore};

async fn keys() -> (NamedKeyAdmin, Arc<dyn Store>, AccountId, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let brand = Brand::parse("svc").unwrap();
    let id = AccountId::generate();
    store
        .create_account(&NewAccount {
            id: id.clone(),
            email: Email::parse("k@example.org").unwrap(),
            key_hash: ApiKey::generate(&brand).unwrap().hash(),
        })
        .await
        .unwrap();
    let admin = NamedKeyAdmin::new(store.clone(), brand, "http://h:1/");
    (admin, store, id, dir)
}

#[tokio::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let (admin, _store, account, _dir) = keys().await;
    let long = "n".repeat(201);
    let id_shaped = KeyId::generate().to_string();
    let bad = [
        KeyRequest {
            name: "  ",
            ..Default::default()
        },
        KeyRequest {
            name: &long,
            ..Default::default()
        },
        KeyRequest {
            name: "a\u{7}b",
            ..Default::default()
        },
        KeyRequest {
            name: &id_shaped,
            ..Default::default()
        },
        KeyRequest {
            name: "ok",
            month_cap_usd: Some("-1"),
            ..Default::default()
        },
        KeyRequest {
            name: "ok",
            day_cap_usd: Some("1.2.3"),
            ..Default::default()
        },
        KeyRequest {
            name: "ok",
            tools: Some("read,exec"),
            ..Default::default()
        },
        KeyRequest {
            name: "ok",
            fields: Some("code;drop"),
            ..Default::default()
        },
    ];
    for request in &bad {
        let refused = admin.create(&account, request).await;
        assert!(refused.is_err(), "{request:?} was accepted");
    }
    assert!(admin.list(&account).await.unwrap().is_empty());
    let fine = "n".repeat(200);
    let created = admin
        .create(
            &account,
            &KeyRequest {
                name: &fine,
                tools: Some(" read , read,ai "),
                month_cap_usd: Some("2.5"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(created.key.tools, ["read", "ai"]);
    assert_eq!(created.key.month_cap_usd.as_deref(), Some("2.50"));
    assert_eq!(
        created.personal_url,
        format!("http://h:1/u/{}", created.api_key)
    );
    assert!(matches!(
        admin
            .create(
                &account,
                &KeyRequest {
                    name: &fine,
                    ..Default::default()
                }
            )
            .await,
        Err(KeyError::DuplicateName(_))
    ));
    assert!(matches!(
        admin.set_caps(&account, &fine, Some("abc"), None).await,
        Err(KeyError::InvalidCap(..))
    ));
    assert_eq!(admin.list(&account).await.unwrap(), vec![created.key]);
}

#[tokio::test]
async fn keys_are_revoked_by_id_or_name_and_only_the_accounts_own() {
    let (admin, _store, account, _dir) = keys().await;
    let first = admin
        .create(
            &account,
            &KeyRequest {
                name: "agent",
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (view, id, revoked) = admin.revoke(&account, "agent").await.unwrap();
    assert!(revoked && view.revoked_at.is_some());
    assert_eq!(id.as_str(), first.key.key_id);
    let (_, _, again) = admin.revoke(&account, &first.key.key_id).await.unwrap();
    assert!(!again, "revoking twice answers it was revoked already");
    assert!(matches!(
        admin.set_caps(&account, "agent", Some("1"), None).await,
        Err(KeyError::Revoked)
    ));
    assert!(matches!(
        admin
            .revoke(&AccountId::generate(), &first.key.key_id)
            .await,
        Err(KeyError::NoSuchKey)
    ));
    assert!(matches!(
        admin.revoke(&account, "nobody").await,
        Err(KeyError::NoSuchKey)
    ));
    let second = admin
        .create(
            &account,
            &KeyRequest {
                name: "agent",
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let capped = admin
        .set_caps(&account, "agent", Some("3"), Some("0.5"))
        .await
        .unwrap();
    assert_eq!(capped.key_id, second.key.key_id, "the live key of the name");
    assert_eq!(capped.day_cap_usd.as_deref(), Some("0.50"));
}

#[tokio::test]
async fn uses_are_flushed_in_one_write_and_bounded() {
    let (admin, store, account, _dir) = keys().await;
    let created = admin
        .create(
            &account,
            &KeyRequest {
                name: "agent",
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let uses = KeyUses::default();
    let id = KeyId::parse(&created.key.key_id).unwrap();
    uses.note(&id);
    for _ in 0..MAX_PENDING_USES + 10 {
        uses.note(&KeyId::generate());
    }
    assert_eq!(uses.pending.lock().unwrap().len(), MAX_PENDING_USES);
    uses.flush(&*store).await.unwrap();
    assert!(uses.pending.lock().unwrap().is_empty());
    let listed = admin.list(&account).await.unwrap();
    assert!(listed[0].last_used_at.is_some());
}
