//! Legacy MCP sessions' part of the story, on two stores of one database (two front ends): a
//! session opened through one is found through the other with its owner; closed, expired and
//! unknown ids are nobody's; the per-account cap counts every front end's opens and closes the
//! longest-idle one; key rotation closes them all; purging drops only dead rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::AccountId;

use super::new_account;
use crate::{McpSessionOpened, Store, StoreError};

const IDLE: Duration = Duration::from_secs(300);

/// The legacy MCP sessions' seam, on two stores of one database.
pub async fn mcp_sessions_story(first: Arc<dyn Store>, second: Arc<dyn Store>, tag: &str) {
    let alice = account(&*first, &format!("mcp-alice-{tag}@example.org")).await;
    let bob = account(&*first, &format!("mcp-bob-{tag}@example.org")).await;

    let id = format!("{tag}a1");
    let opened = first.open_mcp_session(&id, &alice, 3, IDLE).await.unwrap();
    assert_eq!(opened, McpSessionOpened::Opened);
    assert_eq!(
        second.mcp_session_owner(&id, IDLE).await.unwrap(),
        Some(alice.clone()),
        "a session opened through one front end is found through another"
    );
    assert_eq!(
        second.mcp_session_owner(&id, Duration::ZERO).await.unwrap(),
        None,
        "a session idle for longer than the limit is nobody's"
    );
    assert_eq!(
        second.mcp_session_owner("forged", IDLE).await.unwrap(),
        None
    );
    assert!(matches!(
        second.open_mcp_session(&id, &bob, 3, IDLE).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(
        !second.close_mcp_session(&id, &bob).await.unwrap(),
        "another account cannot close it"
    );
    // an idle window wide enough that a loaded machine never stretches a renewal past it
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        first
            .mcp_session_owner(&id, Duration::from_millis(1_000))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        first.renew_mcp_session(&id).await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(
        second
            .mcp_session_owner(&id, Duration::from_millis(1_000))
            .await
            .unwrap(),
        Some(alice.clone()),
        "renewing a session held in use makes it used now"
    );
    second.touch_mcp_session(&id).await.unwrap();
    assert!(second.close_mcp_session(&id, &alice).await.unwrap());
    assert!(!first.close_mcp_session(&id, &alice).await.unwrap());
    assert_eq!(first.mcp_session_owner(&id, IDLE).await.unwrap(), None);
    second.touch_mcp_session(&id).await.unwrap();
    assert_eq!(first.renew_mcp_session(&id).await.unwrap(), None);
    assert_eq!(
        first.mcp_session_owner(&id, IDLE).await.unwrap(),
        None,
        "using a closed session does not reopen it"
    );

    // the cap counts the opens of both front ends; the longest idle one makes room
    let ids: Vec<String> = (0..3).map(|n| format!("{tag}c{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let store = if n % 2 == 0 { &first } else { &second };
        let opened = store.open_mcp_session(id, &alice, 3, IDLE).await.unwrap();
        assert_eq!(opened, McpSessionOpened::Opened, "{id} fits under the cap");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    second.touch_mcp_session(&ids[0]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    let fourth = format!("{tag}c3");
    let opened = second
        .open_mcp_session(&fourth, &alice, 3, IDLE)
        .await
        .unwrap();
    assert_eq!(
        opened,
        McpSessionOpened::Replaced(ids[1].clone()),
        "the longest idle session made room"
    );
    assert_eq!(first.mcp_session_owner(&ids[1], IDLE).await.unwrap(), None);
    assert_eq!(
        first.mcp_session_owner(&ids[0], IDLE).await.unwrap(),
        Some(alice.clone())
    );
    let bobs = format!("{tag}b0");
    assert_eq!(
        first.open_mcp_session(&bobs, &bob, 3, IDLE).await.unwrap(),
        McpSessionOpened::Opened,
        "other accounts are counted apart"
    );

    // rotation closes every session of the account, and only its
    assert_eq!(first.close_mcp_sessions_of(&alice).await.unwrap(), 3);
    for id in ids.iter().chain([&fourth]) {
        assert_eq!(second.mcp_session_owner(id, IDLE).await.unwrap(), None);
    }
    assert_eq!(
        second.mcp_session_owner(&bobs, IDLE).await.unwrap(),
        Some(bob.clone())
    );

    // purging drops closed and idle rows, never an open one
    assert!(second.purge_mcp_sessions(IDLE).await.unwrap() >= 4);
    assert_eq!(
        first.mcp_session_owner(&bobs, IDLE).await.unwrap(),
        Some(bob.clone())
    );
    second.purge_mcp_sessions(Duration::ZERO).await.unwrap();
    assert_eq!(first.mcp_session_owner(&bobs, IDLE).await.unwrap(), None);
    assert!(matches!(
        first
            .open_mcp_session(&format!("{tag}x"), &AccountId::generate(), 3, IDLE)
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn account(store: &dyn Store, email: &str) -> AccountId {
    let (account, _) = new_account(email);
    store.create_account(&account).await.unwrap().id
}
