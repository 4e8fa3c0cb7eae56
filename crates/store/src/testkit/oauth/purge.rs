//! Clients that were never used are purged: old, without a live token or a pending code of any
//! account. Whatever some account still holds keeps its client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{HOUR, client, code, created_account, family, grant, issued, live, used};
use crate::{OAuthClient, Store, now_millis};

/// When the story's clients count as stored: the old ones just before, the young one at it.
const CUTOFF: i64 = 50_000;

pub(super) async fn unused_clients_are_purged(store: &dyn Store, tag: &str) {
    let (mine, theirs) = (
        created_account(store, "purge-clients", tag).await,
        created_account(store, "purge-clients-other", tag).await,
    );
    let id = |label: &str| format!("purge-{label}-{tag}");
    let stored = |label: &str, at: i64| -> OAuthClient {
        client(&id(label), label, &["https://app.example/cb"], at)
    };
    let labels = [
        "idle",
        "young",
        "live",
        "refresh-only",
        "theirs-live",
        "revoked",
        "expired",
        "pending",
        "used-code",
        "expired-code",
    ];
    for label in labels {
        let at = if label == "young" { CUTOFF } else { CUTOFF - 1 };
        store.put_client(&stored(label, at)).await.unwrap();
    }
    let now = now_millis();
    let mine_of = |label: &str| grant(&mine.id, &id(label), "mcp");

    let live_pair = issued(store, &mine_of("live"), now + HOUR).await;
    let refresh_only = super::NewTokens {
        access: (super::token(), now - 1_000),
        ..super::tokens(&family(), &mine_of("refresh-only"), now + HOUR)
    };
    store.put_tokens(&refresh_only).await.unwrap();
    issued(
        store,
        &grant(&theirs.id, &id("theirs-live"), "mcp"),
        now + HOUR,
    )
    .await;
    let revoked = issued(store, &mine_of("revoked"), now + HOUR).await;
    store.revoke_token(&revoked.access.0, now).await.unwrap();
    issued(store, &mine_of("expired"), now - 1_000).await;
    let pending = code(&family(), &mine_of("pending"), now + HOUR);
    store.put_code(&pending).await.unwrap();
    used(store, &code(&family(), &mine_of("used-code"), now + HOUR)).await;
    let stale = code(&family(), &mine_of("expired-code"), now - 1_000);
    store.put_code(&stale).await.unwrap();

    let purged = store.purge_clients(CUTOFF, now).await.unwrap();
    assert!(
        purged >= 5,
        "the five unused old clients at least: {purged}"
    );
    for label in labels {
        let kept = matches!(
            label,
            "young" | "live" | "refresh-only" | "theirs-live" | "pending"
        );
        let found = store.client(&id(label)).await.unwrap();
        assert_eq!(found.is_some(), kept, "{label}: kept is {kept}");
    }
    assert_eq!(
        store.purge_clients(CUTOFF, now).await.unwrap(),
        0,
        "nothing unused and old is left"
    );
    // a purge touches no token: what was live stays live
    assert!(live(store, &live_pair).await);
    // once its last token is gone, a kept client goes too
    store.revoke_token(&live_pair.access.0, now).await.unwrap();
    assert_eq!(store.purge_clients(CUTOFF, now).await.unwrap(), 1);
    assert!(store.client(&id("live")).await.unwrap().is_none());
}
