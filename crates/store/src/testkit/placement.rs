//! Placement's part of the story: nodes live while their lease runs and a heartbeat renews it;
//! a node that lapsed, was replaced or was removed loses all its sessions at once and never gets
//! them back; a valid owner keeps its session; release, forget and the epochs say what a claim
//! found; of concurrent claimers through two stores (two front ends) exactly one wins; and under
//! it all each backend's compare-and-set writes nothing over a row that moved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate_domain::{
    AccountId, Claim, Epoch, Incarnation, Lease, MAX_LEASE, NodeName, OwnerState, Previous,
    SandboxSessionId, SessionOwner,
};

use super::new_account;
use crate::{NodeBeat, NodeLoad, NodeRecord, Store, StoreError};

const URL: &str = "https://node.internal:7443";

/// Placement's seam, on two stores of one database (on PostgreSQL, two front ends' pools).
pub async fn placement_story(first: Arc<dyn Store>, second: Arc<dyn Store>) {
    nodes_are_live_while_their_lease_runs(&*first, &*second).await;
    a_lapsed_node_loses_its_sessions(&*first, &*second).await;
    a_replaced_incarnation_loses_its_sessions(&*first).await;
    release_remove_and_forget(&*first, &*second).await;
    a_stale_compare_and_set_writes_nothing(&*first).await;
    concurrent_claims_have_one_winner(first, second).await;
}

fn node(name: &str) -> NodeName {
    NodeName::parse(name).unwrap()
}

fn session(id: &str) -> SandboxSessionId {
    SandboxSessionId::parse(id).unwrap()
}

fn lease(millis: u64) -> Lease {
    Lease::new(Duration::from_millis(millis)).unwrap()
}

const MINUTE: u64 = 60_000;

fn owner(name: &NodeName, incarnation: Incarnation, epoch: i64) -> SessionOwner {
    SessionOwner {
        node: name.clone(),
        incarnation,
        epoch: Epoch(epoch),
    }
}

fn owned(epoch: i64, previous: Previous) -> Claim {
    Claim::Owned {
        epoch: Epoch(epoch),
        previous,
    }
}

async fn account(store: &dyn Store, label: &str) -> AccountId {
    let (account, _) = new_account(&format!("{label}@placement.example.org"));
    store.create_account(&account).await.unwrap();
    account.id
}

async fn live(store: &dyn Store, name: &NodeName) -> Option<NodeRecord> {
    let nodes = store.live_nodes().await.unwrap();
    nodes.into_iter().find(|n| n.name == *name)
}

async fn beat(store: &dyn Store, name: &NodeName, inc: Incarnation, load: NodeLoad) -> bool {
    let beat = NodeBeat {
        name: name.clone(),
        incarnation: inc,
        lease: lease(MINUTE),
        load,
    };
    store.heartbeat_node(&beat).await.unwrap()
}

/// Waits until `name`'s lease, which runs out `lease` after `since`, is over by the store's
/// clock. Waiting is all this does: nothing here asserts how fast anything happens.
async fn wait_until_lapsed(store: &dyn Store, name: &NodeName, since: Instant, lease: Duration) {
    tokio::time::sleep((since + lease).saturating_duration_since(Instant::now())).await;
    for _ in 0..500 {
        if live(store, name).await.is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name}'s lease of {lease:?} never ran out");
}

async fn nodes_are_live_while_their_lease_runs(store: &dyn Store, other: &dyn Store) {
    let a = node("live-a");
    let first = store.register_node(&a, URL, lease(MINUTE)).await.unwrap();
    let record = live(other, &a).await.expect("a registered node is live");
    assert_eq!(
        (record.incarnation, record.url.as_str(), record.load),
        (first, URL, NodeLoad::default()),
        "seen from another store, not draining, no load yet"
    );
    assert!(record.lease_left > Duration::ZERO && record.lease_left <= lease(MINUTE).duration());

    let load = NodeLoad {
        sessions: 3,
        memory_bytes: u64::MAX,
        draining: true,
    };
    assert!(beat(store, &a, first, load).await, "a live node's beat");
    let record = live(other, &a).await.unwrap();
    let stored = NodeLoad {
        memory_bytes: i64::MAX.unsigned_abs(),
        ..load
    };
    assert_eq!(record.load, stored, "the load is recorded, memory capped");
    let longest = NodeBeat {
        name: a.clone(),
        incarnation: first,
        lease: Lease::new(MAX_LEASE).unwrap(),
        load,
    };
    assert!(store.heartbeat_node(&longest).await.unwrap());

    let second = other.register_node(&a, URL, lease(MINUTE)).await.unwrap();
    assert_ne!(second, first, "a new incarnation each time");
    let record = live(store, &a).await.unwrap();
    assert_eq!(record.incarnation, second);
    assert_eq!(
        record.load,
        NodeLoad::default(),
        "registering starts afresh"
    );
    assert!(
        !beat(store, &a, first, load).await,
        "the replaced one is fenced"
    );
    assert!(!store.remove_node(&a, first).await.unwrap());
    assert!(
        live(store, &a).await.is_some(),
        "not removed by a stale one"
    );
    assert!(store.remove_node(&a, second).await.unwrap());
    assert!(live(store, &a).await.is_none(), "removed");
    assert!(
        !beat(store, &a, second, load).await,
        "a removed node is fenced"
    );
    let third = store.register_node(&a, URL, lease(MINUTE)).await.unwrap();
    assert!(
        third != first && third != second,
        "incarnations are not reused after a removal"
    );
    assert!(store.remove_node(&a, third).await.unwrap());
}

async fn a_lapsed_node_loses_its_sessions(store: &dyn Store, other: &dyn Store) {
    let id = account(store, "lapse").await;
    let s = session("lapse");
    let (short, kept) = (node("short"), node("kept"));
    // kept's first lease need only outlast the next statement; a long one leaves room for a
    // loaded machine's pauses, and short lapses by a beat, after its claim, to the same end
    let kept_lease = Duration::from_secs(2);
    let since = Instant::now();
    let kept_inc = store
        .register_node(&kept, URL, Lease::new(kept_lease).unwrap())
        .await
        .unwrap();
    assert!(beat(store, &kept, kept_inc, NodeLoad::default()).await);
    let short_inc = store
        .register_node(&short, URL, lease(MINUTE))
        .await
        .unwrap();

    let claimed = store.claim_session(&id, &s, &short, short_inc).await;
    assert_eq!(claimed.unwrap(), owned(1, Previous::None), "a new session");
    let short_owns = owner(&short, short_inc, 1);
    let seen = other.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, Some(short_owns.clone()), "any store finds the owner");
    let claimed = other.claim_session(&id, &s, &kept, kept_inc).await;
    assert_eq!(claimed.unwrap(), Claim::HeldBy(short_owns));
    let last_beat = NodeBeat {
        name: short.clone(),
        incarnation: short_inc,
        lease: lease(200),
        load: NodeLoad::default(),
    };
    assert!(store.heartbeat_node(&last_beat).await.unwrap());
    let record = live(other, &short).await;
    let left = record.map(|r| r.lease_left).unwrap_or_default();
    assert!(
        left <= lease(200).duration(),
        "a beat leases from now: {left:?}"
    );

    wait_until_lapsed(store, &short, since, kept_lease).await;
    assert!(
        live(store, &kept).await.is_some(),
        "the heartbeat kept its node live past its first lease"
    );
    assert!(!beat(store, &short, short_inc, NodeLoad::default()).await);
    let seen = store.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, None, "a lapsed node's session has no owner");
    let other_session = session("other");
    let fenced = store.claim_session(&id, &other_session, &short, short_inc);
    assert_eq!(fenced.await.unwrap(), Claim::Fenced);
    let lost = Previous::Lost {
        node: short.clone(),
    };
    let claimed = other.claim_session(&id, &s, &kept, kept_inc).await;
    assert_eq!(claimed.unwrap(), owned(2, lost), "taken over, epoch bumped");

    let back = store
        .register_node(&short, URL, lease(MINUTE))
        .await
        .unwrap();
    assert_ne!(back, short_inc);
    let kept_owns = owner(&kept, kept_inc, 2);
    let claimed = store.claim_session(&id, &s, &short, back).await;
    assert_eq!(
        claimed.unwrap(),
        Claim::HeldBy(kept_owns.clone()),
        "coming back does not resurrect a session another took"
    );
    let seen = store.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, Some(kept_owns));
    for (name, inc) in [(&short, back), (&kept, kept_inc)] {
        assert!(store.remove_node(name, inc).await.unwrap());
    }
}

async fn a_replaced_incarnation_loses_its_sessions(store: &dyn Store) {
    let id = account(store, "replaced").await;
    let s = session("replaced");
    let b = node("replaced-b");
    let first = store.register_node(&b, URL, lease(MINUTE)).await.unwrap();
    let claimed = store.claim_session(&id, &s, &b, first).await;
    assert_eq!(claimed.unwrap(), owned(1, Previous::None));
    let second = store.register_node(&b, URL, lease(MINUTE)).await.unwrap();
    let seen = store.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, None, "a restarted node's old sessions are unowned");
    let claimed = store.claim_session(&id, &s, &b, first).await;
    assert_eq!(claimed.unwrap(), Claim::Fenced);
    let lost = Previous::Lost { node: b.clone() };
    let claimed = store.claim_session(&id, &s, &b, second).await;
    assert_eq!(claimed.unwrap(), owned(2, lost), "its new self restores it");
    let again = store.claim_session(&id, &s, &b, second).await;
    assert_eq!(
        again.unwrap(),
        owned(2, Previous::Same),
        "same owner, same epoch"
    );
    assert!(store.remove_node(&b, second).await.unwrap());
}

async fn release_remove_and_forget(store: &dyn Store, other: &dyn Store) {
    let id = account(store, "release").await;
    let stranger = account(store, "release-stranger").await;
    let s = session("release");
    let (a, b) = (node("release-a"), node("release-b"));
    let a_inc = store.register_node(&a, URL, lease(MINUTE)).await.unwrap();
    let b_inc = store.register_node(&b, URL, lease(MINUTE)).await.unwrap();
    let claimed = store.claim_session(&id, &s, &a, a_inc).await;
    assert_eq!(claimed.unwrap(), owned(1, Previous::None));
    let theirs = other.claim_session(&stranger, &s, &b, b_inc).await;
    assert_eq!(
        theirs.unwrap(),
        owned(1, Previous::None),
        "another account's session of the same id is another session"
    );

    assert!(!store.release_session(&id, &s, &b, b_inc).await.unwrap());
    assert!(store.release_session(&id, &s, &a, a_inc).await.unwrap());
    assert_eq!(store.session_owner(&id, &s).await.unwrap(), None);
    assert!(!store.release_session(&id, &s, &a, a_inc).await.unwrap());
    let claimed = other.claim_session(&id, &s, &b, b_inc).await;
    assert_eq!(claimed.unwrap(), owned(2, Previous::Released));

    assert!(store.remove_node(&b, b_inc).await.unwrap());
    assert_eq!(store.session_owner(&id, &s).await.unwrap(), None);
    assert_eq!(store.session_owner(&stranger, &s).await.unwrap(), None);
    let lost = Previous::Lost { node: b.clone() };
    let claimed = store.claim_session(&id, &s, &a, a_inc).await;
    assert_eq!(claimed.unwrap(), owned(3, lost), "a removed node's session");

    store.forget_session(&id, &s).await.unwrap();
    assert_eq!(store.session_owner(&id, &s).await.unwrap(), None);
    let claimed = other.claim_session(&id, &s, &a, a_inc).await;
    assert_eq!(claimed.unwrap(), owned(1, Previous::None), "forgotten");
    store.forget_session(&id, &session("never")).await.unwrap();

    let nobody = AccountId::generate();
    let refused = store.claim_session(&nobody, &s, &a, a_inc).await;
    assert!(
        matches!(refused, Err(StoreError::NotFound)),
        "a session needs an account: {refused:?}"
    );
    assert!(store.remove_node(&a, a_inc).await.unwrap());
}

async fn a_stale_compare_and_set_writes_nothing(store: &dyn Store) {
    let id = account(store, "stale").await;
    let s = session("stale");
    let (a, b) = (node("stale-a"), node("stale-b"));
    let a_inc = store.register_node(&a, URL, lease(MINUTE)).await.unwrap();
    let b_inc = store.register_node(&b, URL, lease(MINUTE)).await.unwrap();
    let claimed = store.claim_session(&id, &s, &a, a_inc).await;
    assert_eq!(claimed.unwrap(), owned(1, Previous::None));
    let held = |owner: SessionOwner| OwnerState::Owned {
        owner,
        valid: false,
    };
    let stale = [
        OwnerState::Unowned,
        OwnerState::Released { epoch: Epoch(1) },
        held(owner(&a, a_inc, 2)),
        held(owner(&a, b_inc, 1)),
        held(owner(&b, a_inc, 1)),
    ];
    let next = owner(&b, b_inc, 2);
    for seen in &stale {
        let took = store.take_session(&id, &s, seen, &next).await.unwrap();
        assert!(!took, "a compare-and-set over {seen:?} wrote");
    }
    let seen = store.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, Some(owner(&a, a_inc, 1)), "nothing changed");
    let current = held(owner(&a, a_inc, 1));
    assert!(store.take_session(&id, &s, &current, &next).await.unwrap());
    let seen = store.session_owner(&id, &s).await.unwrap();
    assert_eq!(seen, Some(next), "the current state is taken");
    for (name, inc) in [(&a, a_inc), (&b, b_inc)] {
        assert!(store.remove_node(name, inc).await.unwrap());
    }
}

async fn concurrent_claims_have_one_winner(first: Arc<dyn Store>, second: Arc<dyn Store>) {
    let id = account(&*first, "race").await;
    let s = session("race");
    let stores = [first, second];
    let mut nodes = Vec::new();
    for n in 0..16 {
        let name = node(&format!("race-{n}"));
        let store = &stores[n % 2];
        let inc = store
            .register_node(&name, URL, lease(MINUTE))
            .await
            .unwrap();
        nodes.push((name, inc));
    }
    let race = |nodes: Vec<(NodeName, Incarnation)>| {
        let claims = nodes.into_iter().enumerate().map(|(n, (name, inc))| {
            let (store, id, s) = (stores[n % 2].clone(), id.clone(), s.clone());
            tokio::spawn(async move {
                let claim = store.claim_session(&id, &s, &name, inc).await.unwrap();
                (name, inc, claim)
            })
        });
        futures::future::join_all(claims)
    };
    let claims: Vec<_> = race(nodes.clone())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let winner = one_winner(&claims, 1, &Previous::None);
    assert_eq!(
        stores[1].session_owner(&id, &s).await.unwrap(),
        Some(winner.clone())
    );

    assert!(
        stores[0]
            .remove_node(&winner.node, winner.incarnation)
            .await
            .unwrap()
    );
    let rest: Vec<_> = nodes
        .into_iter()
        .filter(|(n, _)| *n != winner.node)
        .collect();
    let claims: Vec<_> = race(rest.clone())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let lost = Previous::Lost {
        node: winner.node.clone(),
    };
    let second_winner = one_winner(&claims, 2, &lost);
    assert_eq!(
        stores[0].session_owner(&id, &s).await.unwrap(),
        Some(second_winner)
    );
    for (name, inc) in rest {
        assert!(stores[0].remove_node(&name, inc).await.unwrap());
    }
}

/// The one claimer that got the session at `epoch` from `previous`; every other is told it is
/// held by that one.
fn one_winner(
    claims: &[(NodeName, Incarnation, Claim)],
    epoch: i64,
    previous: &Previous,
) -> SessionOwner {
    let won: Vec<_> = claims
        .iter()
        .filter(|(_, _, claim)| matches!(claim, Claim::Owned { .. }))
        .collect();
    assert_eq!(won.len(), 1, "exactly one claimer wins: {claims:?}");
    let (name, inc, claim) = won[0];
    assert_eq!(*claim, owned(epoch, previous.clone()));
    let winner = owner(name, *inc, epoch);
    for (_, _, claim) in claims {
        if !matches!(claim, Claim::Owned { .. }) {
            assert_eq!(
                *claim,
                Claim::HeldBy(winner.clone()),
                "the others see the winner"
            );
        }
    }
    winner
}
