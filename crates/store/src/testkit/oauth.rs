//! The OAuth server's part of the story: codes used once and a replayed one revoking its
//! tokens, refresh tokens rotated once and a replayed one revoking its family, revocation by
//! token and by client, access tokens refused once expired, the connected apps, and the purge of
//! clients never used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod purge;
mod spend;

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::{Account, AccountId, ApiKey, Brand, Via};

use super::new_account;
use crate::{
    AccessGrant, CodeUse, Grant, NewCode, NewTokens, OAuthClient, Refreshed, Store, StoreError,
    TokenHash, UsedCode, now_millis,
};

/// An hour in milliseconds: far enough from now that no step's row expires while it runs.
const HOUR: i64 = 3_600_000;

/// A fresh random hash; a key's hash is as random as a token's, and 32 bytes long.
fn token() -> TokenHash {
    *ApiKey::generate(&Brand::parse("svc").unwrap())
        .unwrap()
        .hash()
        .as_bytes()
}

/// A fresh random family.
fn family() -> String {
    format!("family-{}", AccountId::generate().as_str())
}

async fn created_account(store: &dyn Store, label: &str, tag: &str) -> Account {
    let (account, _) = new_account(&format!("{label}-{tag}@example.org"));
    store.create_account(&account).await.unwrap()
}

fn grant(account: &AccountId, client_id: &str, scope: &str) -> Grant {
    Grant {
        account: account.clone(),
        client_id: client_id.to_owned(),
        scope: scope.to_owned(),
        resource: "https://toolgate.example/mcp".to_owned(),
    }
}

fn client(id: &str, name: &str, redirect_uris: &[&str], updated_at: i64) -> OAuthClient {
    OAuthClient {
        client_id: id.to_owned(),
        name: name.to_owned(),
        redirect_uris: redirect_uris.iter().map(|u| (*u).to_owned()).collect(),
        updated_at,
    }
}

fn code(family: &str, grant: &Grant, expires_at: i64) -> NewCode {
    NewCode {
        code_hash: token(),
        family: family.to_owned(),
        grant: grant.clone(),
        redirect_uri: "http://127.0.0.1:33418/callback".to_owned(),
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".to_owned(),
        expires_at,
    }
}

/// An access and a refresh token of `family`, both live until `expires_at`.
fn tokens(family: &str, grant: &Grant, expires_at: i64) -> NewTokens {
    NewTokens {
        family: family.to_owned(),
        grant: grant.clone(),
        access: (token(), expires_at),
        refresh: Some((token(), expires_at)),
    }
}

/// An access token of a new family, without a refresh token.
fn access_only(grant: &Grant, expires_at: i64) -> NewTokens {
    NewTokens {
        refresh: None,
        ..tokens(&family(), grant, expires_at)
    }
}

/// Whether the result is the refusal of a taken unique value.
fn conflict<T>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::Conflict(_)))
}

/// Whether the result is the refusal of an unknown account.
fn not_found<T>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::NotFound))
}

/// Stores the tokens of a new family and returns them.
async fn issued(store: &dyn Store, grant: &Grant, expires_at: i64) -> NewTokens {
    let tokens = tokens(&family(), grant, expires_at);
    store.put_tokens(&tokens).await.unwrap();
    tokens
}

/// Stores the code and uses it, which must succeed.
async fn used(store: &dyn Store, code: &NewCode) -> UsedCode {
    store.put_code(code).await.unwrap();
    match store.use_code(&code.code_hash, now_millis()).await.unwrap() {
        CodeUse::Fresh(used) => used,
        other => panic!("a stored code is fresh, not {other:?}"),
    }
}

/// The refresh token's hash of a pair that has one.
fn refresh_of(tokens: &NewTokens) -> TokenHash {
    tokens.refresh.unwrap().0
}

/// Whether the pair's access token is accepted now.
async fn live(store: &dyn Store, tokens: &NewTokens) -> bool {
    let found = store.find_access(&tokens.access.0, now_millis()).await;
    found.unwrap().is_some()
}

/// Presents the pair's refresh token with fresh tokens of its family to follow it.
async fn refresh(store: &dyn Store, tokens: &NewTokens, client_id: &str) -> Refreshed {
    let next = self::tokens(&tokens.family, &tokens.grant, now_millis() + HOUR);
    rotate(store, tokens, client_id, &next).await.unwrap()
}

/// Presents the pair's refresh token now with `next` to follow it.
async fn rotate(
    store: &dyn Store,
    tokens: &NewTokens,
    client_id: &str,
    next: &NewTokens,
) -> Result<Refreshed, StoreError> {
    let hash = refresh_of(tokens);
    store.refresh(&hash, client_id, now_millis(), next).await
}

/// The OAuth server's seam: clients, codes, tokens and their families.
pub(super) async fn oauth_story(store: Arc<dyn Store>, tag: &str) {
    clients_are_stored_and_replaced(&*store, tag).await;
    spend::codes_are_used_once(&*store, tag).await;
    spend::a_replayed_code_revokes_its_tokens(&*store, tag).await;
    spend::concurrent_uses_of_a_code_succeed_once(store.clone(), tag).await;
    access_tokens_are_found_until_they_expire(&*store, tag).await;
    spend::refresh_tokens_rotate_once(&*store, tag).await;
    spend::concurrent_refreshes_rotate_once(store.clone(), tag).await;
    spend::stale_compare_and_sets_write_nothing(&*store, tag).await;
    revoking_a_token_revokes_its_family(&*store, tag).await;
    revocations_racing_rotations_leave_nothing_live(store.clone(), tag).await;
    revoking_a_client_spares_the_others(&*store, tag).await;
    connected_apps_are_the_live_clients(&*store, tag).await;
    purge::unused_clients_are_purged(&*store, tag).await;
}

async fn clients_are_stored_and_replaced(store: &dyn Store, tag: &str) {
    let id = format!("https://app-{tag}.example/oauth/client.json");
    assert_eq!(store.client(&id).await.unwrap(), None);
    let tricky = "http://127.0.0.1:4321/cb?q=\"é\"\\x";
    let first = client(&id, "First", &["https://app.example/cb", tricky], 1_000);
    let other = client(
        &format!("dcr-{tag}"),
        "Other",
        &["https://o.example/cb"],
        1_000,
    );
    for stored in [&first, &other] {
        store.put_client(stored).await.unwrap();
    }
    assert_eq!(store.client(&id).await.unwrap().as_ref(), Some(&first));
    let second = client(&id, "Second", &[], 2_000);
    store.put_client(&second).await.unwrap();
    let found = store.client(&id).await.unwrap();
    assert_eq!(found, Some(second), "putting a client again replaces it");
    let found = store.client(&other.client_id).await.unwrap();
    assert_eq!(found, Some(other), "another client is untouched");
}

async fn access_tokens_are_found_until_they_expire(store: &dyn Store, tag: &str) {
    let account = created_account(store, "access", tag).await;
    let granted = grant(&account.id, &format!("access-client-{tag}"), "mcp read");
    let now = now_millis();
    let pair = NewTokens {
        refresh: Some((token(), now + 2 * HOUR)),
        ..tokens(&family(), &granted, now + HOUR)
    };
    store.put_tokens(&pair).await.unwrap();
    let expected = AccessGrant {
        // the account as its token presents it: through the app it was granted to
        account: Account {
            via: Via::OAuth {
                client_id: granted.client_id.clone(),
            },
            ..account.clone()
        },
        grant: granted.clone(),
        expires_at: now + HOUR,
    };
    for at in [now, now + HOUR - 1] {
        let found = store.find_access(&pair.access.0, at).await.unwrap();
        assert_eq!(found.as_ref(), Some(&expected));
    }
    for at in [now + HOUR, now + 2 * HOUR - 1] {
        assert_eq!(
            store.find_access(&pair.access.0, at).await.unwrap(),
            None,
            "an access token is refused from its expiry on"
        );
    }
    let not_access = store.find_access(&refresh_of(&pair), now).await.unwrap();
    assert_eq!(not_access, None, "a refresh token is no access token");
    assert_eq!(store.find_access(&token(), now).await.unwrap(), None);

    let half_taken = NewTokens {
        access: (token(), now + HOUR),
        ..pair.clone()
    };
    let refused = store.put_tokens(&half_taken).await;
    assert!(conflict(&refused), "a token hash is stored once");
    assert!(!live(store, &half_taken).await, "nothing of it is stored");
    let stranger = tokens(&family(), &grant(&AccountId::generate(), "c", "mcp"), now);
    let refused = store.put_tokens(&stranger).await;
    assert!(not_found(&refused), "tokens need an account");
    let access_only = access_only(&granted, now + HOUR);
    store.put_tokens(&access_only).await.unwrap();
    assert!(live(store, &access_only).await);
}

async fn revoking_a_token_revokes_its_family(store: &dyn Store, tag: &str) {
    let account = created_account(store, "revoke", tag).await;
    let client = format!("revoke-client-{tag}");
    let granted = grant(&account.id, &client, "mcp");
    let now = now_millis();
    let (by_access, by_refresh) = (
        issued(store, &granted, now + HOUR).await,
        issued(store, &granted, now + HOUR).await,
    );
    let untouched = issued(store, &granted, now + HOUR).await;
    assert!(store.revoke_token(&by_access.access.0, now).await.unwrap());
    assert!(!live(store, &by_access).await);
    assert_eq!(
        refresh(store, &by_access, &client).await,
        Refreshed::Invalid,
        "revoking the access token revokes its refresh token"
    );
    let hash = refresh_of(&by_refresh);
    assert!(store.revoke_token(&hash, now).await.unwrap());
    assert!(
        !live(store, &by_refresh).await,
        "revoking the refresh token revokes its access token"
    );
    assert!(
        store.revoke_token(&hash, now).await.unwrap(),
        "a revoked token is still known"
    );
    assert!(!store.revoke_token(&token(), now).await.unwrap());
    assert!(live(store, &untouched).await, "another family is untouched");
}

/// However a revocation and a rotation of one family interleave, the rotation's tokens die too.
async fn revocations_racing_rotations_leave_nothing_live(store: Arc<dyn Store>, tag: &str) {
    let account = created_account(&*store, "revoke-race", tag).await;
    let client = format!("revoke-race-client-{tag}");
    let granted = grant(&account.id, &client, "mcp");
    let mut races = Vec::new();
    for _ in 0..24 {
        let first = issued(&*store, &granted, now_millis() + HOUR).await;
        let next = tokens(&first.family, &granted, now_millis() + HOUR);
        let (store, revoking, client) = (store.clone(), store.clone(), client.clone());
        let (hash, following) = (first.access.0, next.clone());
        let rotation =
            tokio::spawn(async move { rotate(&*store, &first, &client, &following).await });
        let revocation =
            tokio::spawn(async move { revoking.revoke_token(&hash, now_millis()).await });
        races.push((rotation, revocation, next));
    }
    for (rotation, revocation, next) in races {
        let rotated = rotation.await.unwrap().unwrap();
        assert!(revocation.await.unwrap().unwrap());
        let outcome = format!("revoked during the rotation ({rotated:?})");
        assert!(!live(&*store, &next).await, "{outcome}");
        assert_eq!(refresh(&*store, &next, &client).await, Refreshed::Invalid);
    }
}

async fn revoking_a_client_spares_the_others(store: &dyn Store, tag: &str) {
    let (mine, theirs) = (
        created_account(store, "disconnect", tag).await,
        created_account(store, "disconnect-other", tag).await,
    );
    let (x, y) = (format!("x-client-{tag}"), format!("y-client-{tag}"));
    let now = now_millis();
    let mine_x = grant(&mine.id, &x, "mcp");
    let pair = issued(store, &mine_x, now + HOUR).await;
    let access_only = access_only(&mine_x, now + HOUR);
    store.put_tokens(&access_only).await.unwrap();
    issued(store, &mine_x, now - 1_000).await;
    let revoked = issued(store, &mine_x, now + HOUR).await;
    store.revoke_token(&revoked.access.0, now).await.unwrap();
    let pending = code(&family(), &mine_x, now + HOUR);
    store.put_code(&pending).await.unwrap();
    let other_client = issued(store, &grant(&mine.id, &y, "mcp"), now + HOUR).await;
    let other_account = issued(store, &grant(&theirs.id, &x, "mcp"), now + HOUR).await;

    assert_eq!(
        store.revoke_client(&mine.id, &x, now).await.unwrap(),
        5,
        "two, one and the expired two; not those revoked already"
    );
    for gone in [&pair, &access_only] {
        assert!(!live(store, gone).await);
    }
    assert_eq!(refresh(store, &pair, &x).await, Refreshed::Invalid);
    let use_pending = store.use_code(&pending.code_hash, now).await.unwrap();
    assert_eq!(use_pending, CodeUse::Invalid, "a pending code is refused");
    assert!(live(store, &other_client).await, "its other client lives");
    assert!(live(store, &other_account).await, "another account's live");
    let rotated = refresh(store, &other_account, &x).await;
    assert!(matches!(rotated, Refreshed::Rotated(_)), "{rotated:?}");
    assert_eq!(store.revoke_client(&mine.id, &x, now).await.unwrap(), 0);

    let again = used(store, &code(&family(), &mine_x, now + HOUR)).await;
    let reconnected = tokens(&again.family, &again.grant, now + HOUR);
    store.put_tokens(&reconnected).await.unwrap();
    assert!(live(store, &reconnected).await, "it may connect again");
}

async fn connected_apps_are_the_live_clients(store: &dyn Store, tag: &str) {
    let (mine, theirs) = (
        created_account(store, "apps", tag).await,
        created_account(store, "apps-other", tag).await,
    );
    // Ordered by id these would come otherwise: the order is the names'.
    let (alpha, zeta) = (format!("zz-{tag}"), format!("aa-{tag}"));
    let unnamed = format!("https://unnamed-{tag}.example/client.json");
    let (expired, revoked) = (format!("expired-{tag}"), format!("revoked-{tag}"));
    for (id, name) in [(&alpha, "Alpha"), (&zeta, "Zeta")] {
        let named = client(id, name, &["https://app.example/cb"], now_millis());
        store.put_client(&named).await.unwrap();
    }
    let now = now_millis();
    let mine_of = |client: &str, scope: &str| grant(&mine.id, client, scope);
    let pause = || tokio::time::sleep(Duration::from_millis(3));

    let danger = issued(store, &mine_of(&alpha, "danger"), now + HOUR).await;
    store.revoke_token(&danger.access.0, now).await.unwrap();
    issued(store, &mine_of(&alpha, "old"), now + 1_000).await;
    pause().await;
    let first_live = now_millis();
    issued(store, &mine_of(&alpha, "read write"), now + HOUR).await;
    pause().await;
    let second_live = now_millis();
    issued(store, &mine_of(&alpha, "write  admin read"), now + HOUR).await;
    pause().await;
    issued(store, &mine_of(&alpha, "read write"), now + HOUR).await;
    let zeta_from = now_millis();
    issued(store, &mine_of(&zeta, "mcp"), now + HOUR).await;
    let refresh_lives = NewTokens {
        access: (token(), now + 1_000),
        ..tokens(&family(), &mine_of(&unnamed, "read"), now + HOUR)
    };
    store.put_tokens(&refresh_lives).await.unwrap();
    issued(store, &mine_of(&expired, "mcp"), now + 1_000).await;
    issued(store, &mine_of(&revoked, "mcp"), now + HOUR).await;
    store.revoke_client(&mine.id, &revoked, now).await.unwrap();
    let other = format!("theirs-{tag}");
    issued(store, &grant(&theirs.id, &other, "x"), now + HOUR).await;
    let until = now_millis();

    let apps = store.connected_apps(&mine.id, now + 2_000).await.unwrap();
    let seen: Vec<(&str, &str, &str)> = apps
        .iter()
        .map(|a| (a.client_id.as_str(), a.name.as_str(), a.scope.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (alpha.as_str(), "Alpha", "admin read write"),
            (zeta.as_str(), "Zeta", "mcp"),
            (unnamed.as_str(), unnamed.as_str(), "read"),
        ],
        "live clients by name, a client without a row named by its id, scopes merged"
    );
    assert!(
        (first_live..second_live).contains(&apps[0].since),
        "since the earliest live token: {} not in {first_live}..{second_live}",
        apps[0].since
    );
    assert!((zeta_from..=until).contains(&apps[1].since));
    let before = store.connected_apps(&mine.id, now).await.unwrap();
    let seen: Vec<(&str, &str)> = before
        .iter()
        .map(|a| (a.client_id.as_str(), a.scope.as_str()))
        .collect();
    let expected = [
        (alpha.as_str(), "admin old read write"),
        (zeta.as_str(), "mcp"),
        (expired.as_str(), "mcp"),
        (unnamed.as_str(), "read"),
    ];
    assert_eq!(seen, expected, "before their expiry expired ones count");
    let theirs_apps = store.connected_apps(&theirs.id, now).await.unwrap();
    let ids: Vec<&str> = theirs_apps.iter().map(|a| a.client_id.as_str()).collect();
    assert_eq!(ids, [other.as_str()], "another account's apps are its own");
    let nobody = store.connected_apps(&AccountId::generate(), now).await;
    assert!(nobody.unwrap().is_empty());
}
