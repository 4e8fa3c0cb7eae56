//! Codes and refresh tokens spent once: a code used once and its replay revoking its tokens, a
//! refresh token rotated once and its replay revoking its family, each exact among concurrent
//! presenters; and under them the backend's compare-and-set, which writes nothing over a stage
//! that moved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::AccountId;

use super::{
    HOUR, code, conflict, created_account, family, grant, issued, live, not_found, refresh,
    refresh_of, rotate, token, tokens, used,
};
use crate::{Advance, CodeUse, NewCode, NewTokens, Refreshed, Stage, Store, UsedCode, now_millis};

pub(super) async fn codes_are_used_once(store: &dyn Store, tag: &str) {
    let account = created_account(store, "code", tag).await;
    let now = now_millis();
    let granted = grant(&account.id, &format!("code-client-{tag}"), "mcp");
    let stored = code(&family(), &granted, now + HOUR);
    store.put_code(&stored).await.unwrap();
    let same_hash = NewCode {
        family: family(),
        ..stored.clone()
    };
    let same_family = NewCode {
        code_hash: token(),
        ..stored.clone()
    };
    for taken in [same_hash, same_family] {
        let refused = store.put_code(&taken).await;
        assert!(conflict(&refused), "code hash and family are unique");
    }
    let stranger = grant(&AccountId::generate(), "code-client", "mcp");
    let strangers = code(&family(), &stranger, now + HOUR);
    let refused = store.put_code(&strangers).await;
    assert!(not_found(&refused), "a code needs an account");

    let used = UsedCode {
        family: stored.family.clone(),
        grant: granted.clone(),
        redirect_uri: stored.redirect_uri.clone(),
        code_challenge: stored.code_challenge.clone(),
    };
    let first = store.use_code(&stored.code_hash, now).await.unwrap();
    assert_eq!(first, CodeUse::Fresh(used));
    for at in [now, now + 2 * HOUR] {
        assert_eq!(
            store.use_code(&stored.code_hash, at).await.unwrap(),
            CodeUse::Reused,
            "a code is used once, and its replay is known even once expired"
        );
    }

    let expiring = code(&family(), &granted, now + 1_000);
    store.put_code(&expiring).await.unwrap();
    for at in [now + 1_000, now + 2_000] {
        assert_eq!(
            store.use_code(&expiring.code_hash, at).await.unwrap(),
            CodeUse::Invalid,
            "a code is refused from its expiry on"
        );
    }
    let in_time = store.use_code(&expiring.code_hash, now + 999).await;
    let in_time = matches!(in_time.unwrap(), CodeUse::Fresh(_));
    assert!(in_time, "the refusals after expiry did not use it");
    let unknown = store.use_code(&token(), now).await.unwrap();
    assert_eq!(unknown, CodeUse::Invalid);
}

pub(super) async fn a_replayed_code_revokes_its_tokens(store: &dyn Store, tag: &str) {
    let account = created_account(store, "replay", tag).await;
    let client = format!("replay-client-{tag}");
    let granted = grant(&account.id, &client, "mcp");
    let now = now_millis();
    let sibling = issued(store, &granted, now + HOUR).await;

    let stored = code(&family(), &granted, now + HOUR);
    let from_code = used(store, &stored).await;
    let from_code = tokens(&from_code.family, &from_code.grant, now + HOUR);
    store.put_tokens(&from_code).await.unwrap();
    assert!(live(store, &from_code).await);
    let replay = store.use_code(&stored.code_hash, now).await.unwrap();
    assert_eq!(replay, CodeUse::Reused);
    assert!(!live(store, &from_code).await, "the replay revoked them");
    assert_eq!(
        refresh(store, &from_code, &client).await,
        Refreshed::Invalid,
        "their refresh token too"
    );
    assert!(live(store, &sibling).await, "another family is untouched");

    // Replayed before its tokens are stored: they are stored revoked.
    let raced = code(&family(), &granted, now + HOUR);
    let late = used(store, &raced).await;
    let replay = store.use_code(&raced.code_hash, now).await.unwrap();
    assert_eq!(replay, CodeUse::Reused);
    let late = tokens(&late.family, &late.grant, now + HOUR);
    store.put_tokens(&late).await.unwrap();
    assert!(!live(store, &late).await, "stored revoked");
    assert_eq!(refresh(store, &late, &client).await, Refreshed::Invalid);
}

pub(super) async fn concurrent_uses_of_a_code_succeed_once(store: Arc<dyn Store>, tag: &str) {
    let account = created_account(&*store, "code-race", tag).await;
    let granted = grant(&account.id, &format!("race-client-{tag}"), "mcp");
    let stored = code(&family(), &granted, now_millis() + HOUR);
    store.put_code(&stored).await.unwrap();
    let uses = (0..16).map(|_| {
        let (store, hash) = (store.clone(), stored.code_hash);
        tokio::spawn(async move { store.use_code(&hash, now_millis()).await.unwrap() })
    });
    let outcomes: Vec<CodeUse> = futures::future::join_all(uses)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let reused = outcomes.iter().filter(|o| **o == CodeUse::Reused).count();
    let fresh = outcomes.iter().filter(|o| matches!(o, CodeUse::Fresh(_)));
    assert_eq!((fresh.count(), reused), (1, 15), "{outcomes:?}");
}

pub(super) async fn refresh_tokens_rotate_once(store: &dyn Store, tag: &str) {
    let account = created_account(store, "refresh", tag).await;
    let client = format!("refresh-client-{tag}");
    let granted = grant(&account.id, &client, "mcp read");
    let now = now_millis();
    let first = issued(store, &granted, now + HOUR).await;
    let sibling = issued(store, &granted, now + HOUR).await;
    let family = first.family.clone();
    let next = tokens(&family, &granted, now + HOUR);
    let refused = [
        (refresh_of(&first), "another-client", now),
        (first.access.0, client.as_str(), now),
        (refresh_of(&first), client.as_str(), now + HOUR),
        (token(), client.as_str(), now),
    ];
    for (hash, client_id, at) in refused {
        assert_eq!(
            store.refresh(&hash, client_id, at, &next).await.unwrap(),
            Refreshed::Invalid,
            "another client's, an access token, an expired or an unknown one"
        );
    }
    let astray = tokens(&self::family(), &granted, now + HOUR);
    let refused = rotate(store, &first, &client, &astray).await;
    assert!(conflict(&refused), "new tokens join its family");
    assert!(!live(store, &astray).await, "nothing of it is stored");

    // `next.grant` is not read: the new tokens inherit the stored grant.
    let second = tokens(&family, &grant(&account.id, &client, "admin"), now + HOUR);
    assert_eq!(
        rotate(store, &first, &client, &second).await.unwrap(),
        Refreshed::Rotated(granted.clone()),
        "the refusals left it unused"
    );
    let found = store.find_access(&second.access.0, now).await.unwrap();
    assert_eq!(found.map(|f| f.grant), Some(granted.clone()));
    assert!(live(store, &first).await, "the old access token lives on");
    let third = tokens(&family, &granted, now + HOUR);
    let rotated = rotate(store, &second, &client, &third).await.unwrap();
    assert_eq!(rotated, Refreshed::Rotated(granted.clone()));

    assert_eq!(refresh(store, &first, &client).await, Refreshed::Reused);
    for pair in [&first, &second, &third] {
        assert!(
            !live(store, pair).await,
            "a replayed refresh token revokes its whole family"
        );
    }
    assert_eq!(
        refresh(store, &third, &client).await,
        Refreshed::Invalid,
        "the family's newest refresh token too"
    );
    assert_eq!(refresh(store, &first, &client).await, Refreshed::Invalid);
    assert!(live(store, &sibling).await, "another family is untouched");
    let rotated = refresh(store, &sibling, &client).await;
    assert_eq!(rotated, Refreshed::Rotated(granted));
}

pub(super) async fn concurrent_refreshes_rotate_once(store: Arc<dyn Store>, tag: &str) {
    let account = created_account(&*store, "refresh-race", tag).await;
    let client = format!("refresh-race-client-{tag}");
    let granted = grant(&account.id, &client, "mcp");
    let first = issued(&*store, &granted, now_millis() + HOUR).await;
    let attempts = (0..16).map(|_| {
        let next = tokens(&first.family, &granted, now_millis() + HOUR);
        let (store, hash, client) = (store.clone(), refresh_of(&first), client.clone());
        tokio::spawn(async move {
            let outcome = store.refresh(&hash, &client, now_millis(), &next).await;
            (outcome.unwrap(), next)
        })
    });
    let outcomes: Vec<(Refreshed, NewTokens)> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let count = |wanted: fn(&Refreshed) -> bool| outcomes.iter().filter(|o| wanted(&o.0)).count();
    let counts = (
        count(|o| matches!(o, Refreshed::Rotated(_))),
        count(|o| *o == Refreshed::Reused),
        count(|o| *o == Refreshed::Invalid),
    );
    // The first rotates; the next finds it used and revokes the family; the rest find it revoked.
    assert_eq!(counts, (1, 1, 14));
    let winner = outcomes
        .iter()
        .find(|o| matches!(o.0, Refreshed::Rotated(_)))
        .map(|o| o.1.clone())
        .unwrap();
    for pair in [&first, &winner] {
        assert!(
            !live(&*store, pair).await,
            "after a replay none of the family's access tokens is found"
        );
    }
    assert_eq!(refresh(&*store, &winner, &client).await, Refreshed::Invalid);
}

/// The primitives under the rule: a compare-and-set writes only over the stage it names, never
/// clears a flag, revokes the family when told, and stores a rotation's tokens with it.
pub(super) async fn stale_compare_and_sets_write_nothing(store: &dyn Store, tag: &str) {
    let account = created_account(store, "cas", tag).await;
    let client = format!("cas-client-{tag}");
    let granted = grant(&account.id, &client, "mcp");
    let now = now_millis();
    let (fresh, used_stage) = (
        Stage::default(),
        Stage {
            used: true,
            revoked: false,
        },
    );
    let all = Stage {
        used: true,
        revoked: true,
    };
    let change = |hash, seen, next, revoke_family| Advance {
        hash,
        seen,
        next,
        revoke_family,
        now,
    };
    let stage_of_code = |hash| async move {
        let stored = store.code_state(&hash).await.unwrap();
        stored.map(|s| s.state.stage)
    };

    let stored = code(&family(), &granted, now + HOUR);
    store.put_code(&stored).await.unwrap();
    let hash = stored.code_hash;
    let read = store.code_state(&hash).await.unwrap().unwrap();
    assert_eq!(read.code.grant, granted);
    assert_eq!(
        (read.state.stage, read.state.expires_at),
        (fresh, now + HOUR)
    );
    let stale = change(&hash, used_stage, all, true);
    assert!(!store.advance_code(&stale).await.unwrap(), "a stale stage");
    assert_eq!(stage_of_code(hash).await, Some(fresh), "wrote nothing");
    let spend = change(&hash, fresh, used_stage, false);
    assert!(store.advance_code(&spend).await.unwrap());
    assert_eq!(stage_of_code(hash).await, Some(used_stage));
    assert!(!store.advance_code(&spend).await.unwrap(), "it moved");
    let from_code = tokens(&stored.family, &granted, now + HOUR);
    store.put_tokens(&from_code).await.unwrap();
    let replay = change(&hash, used_stage, all, true);
    assert!(store.advance_code(&replay).await.unwrap());
    assert!(!live(store, &from_code).await, "its family went with it");
    let clearing = change(&hash, all, fresh, false);
    assert!(store.advance_code(&clearing).await.unwrap());
    assert_eq!(stage_of_code(hash).await, Some(all), "a flag stays set");
    let unknown = token();
    assert!(
        !store
            .advance_code(&change(&unknown, fresh, used_stage, false))
            .await
            .unwrap()
    );
    assert_eq!(stage_of_code(unknown).await, None);

    let first = issued(store, &granted, now + HOUR).await;
    let hash = refresh_of(&first);
    for (presented, client_id) in [(hash, "another-client"), (first.access.0, client.as_str())] {
        let found = store.refresh_state(&presented, client_id).await.unwrap();
        assert_eq!(found, None, "another client's, or an access token");
    }
    let read = store.refresh_state(&hash, &client).await.unwrap().unwrap();
    assert_eq!(
        (read.family.as_str(), &read.grant),
        (first.family.as_str(), &granted)
    );
    assert_eq!(read.state.stage, fresh);
    let next = tokens(&first.family, &granted, now + HOUR);
    let stale = change(&hash, used_stage, used_stage, false);
    assert!(!store.advance_refresh(&stale, Some(&next)).await.unwrap());
    assert!(
        !live(store, &next).await,
        "a lost compare-and-set stores nothing"
    );
    let rotation = change(&hash, fresh, used_stage, false);
    assert!(store.advance_refresh(&rotation, Some(&next)).await.unwrap());
    assert!(live(store, &next).await, "stored with the rotation");
    let read = store.refresh_state(&hash, &client).await.unwrap().unwrap();
    assert_eq!(read.state.stage, used_stage);
    assert!(!store.advance_refresh(&rotation, None).await.unwrap());
    let replay = change(&hash, used_stage, all, true);
    assert!(store.advance_refresh(&replay, None).await.unwrap());
    for pair in [&first, &next] {
        assert!(!live(store, pair).await, "the family went with it");
    }
}
