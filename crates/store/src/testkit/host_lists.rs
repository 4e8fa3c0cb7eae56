//! Host lists' part of the story: an account without lists has two empty ones; a change
//! replaces the lists it gives and keeps the others; an empty list clears; accounts are apart;
//! an unknown account is refused; concurrent writers each leave a whole list, never a mix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolgate_domain::AccountId;

use super::new_account;
use crate::{HostLists, HostListsChange, Store, StoreError};

fn list(patterns: &[&str]) -> Vec<String> {
    patterns.iter().map(|p| (*p).to_owned()).collect()
}

/// The host lists' seam on `store`.
pub async fn host_lists_story(store: Arc<dyn Store>, tag: &str) {
    let (alice, _) = new_account(&format!("hosts-alice-{tag}@example.org"));
    let (bob, _) = new_account(&format!("hosts-bob-{tag}@example.org"));
    store.create_account(&alice).await.unwrap();
    store.create_account(&bob).await.unwrap();

    assert_eq!(
        store.host_lists(&alice.id).await.unwrap(),
        HostLists::default(),
        "an account that never wrote lists has two empty ones"
    );

    let allow = list(&["api.github.com", "*.pypi.org", "files.pythonhosted.org"]);
    let written = store
        .change_host_lists(
            &alice.id,
            HostListsChange {
                allow: Some(&allow),
                deny: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(written.allow, allow, "the order written is kept");
    assert!(written.deny.is_empty());

    let deny = list(&["evil.pypi.org"]);
    let both = store
        .change_host_lists(
            &alice.id,
            HostListsChange {
                allow: None,
                deny: Some(&deny),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        both,
        HostLists {
            allow: allow.clone(),
            deny: deny.clone()
        },
        "a list not given is kept"
    );
    assert_eq!(store.host_lists(&alice.id).await.unwrap(), both);
    assert_eq!(
        store.host_lists(&bob.id).await.unwrap(),
        HostLists::default(),
        "accounts are apart"
    );

    let cleared = store
        .change_host_lists(
            &alice.id,
            HostListsChange {
                allow: Some(&[]),
                deny: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        cleared,
        HostLists {
            allow: Vec::new(),
            deny
        },
        "an empty list clears it"
    );

    assert!(matches!(
        store
            .change_host_lists(
                &AccountId::generate(),
                HostListsChange {
                    allow: Some(&allow),
                    deny: None,
                },
            )
            .await,
        Err(StoreError::NotFound)
    ));

    concurrent_writes_leave_whole_lists(store, &bob.id).await;
}

/// 20 writers each replace both lists with lists of their own; what is left is one writer's
/// pair, whole.
async fn concurrent_writes_leave_whole_lists(store: Arc<dyn Store>, account: &AccountId) {
    let pair = |n: usize| HostLists {
        allow: (0..50).map(|i| format!("h{i}.w{n}.example.org")).collect(),
        deny: (0..50).map(|i| format!("d{i}.w{n}.example.org")).collect(),
    };
    let writers = (0..20).map(|n| {
        let (store, account) = (store.clone(), account.clone());
        tokio::spawn(async move {
            let lists = pair(n);
            let change = HostListsChange {
                allow: Some(&lists.allow),
                deny: Some(&lists.deny),
            };
            let answered = store.change_host_lists(&account, change).await.unwrap();
            assert_eq!(
                answered, lists,
                "each writer is answered with its own lists"
            );
        })
    });
    for writer in futures::future::join_all(writers).await {
        writer.unwrap();
    }
    let left = store.host_lists(account).await.unwrap();
    assert!(
        (0..20).any(|n| left == pair(n)),
        "the lists left are one writer's, whole: {left:?}"
    );
}
