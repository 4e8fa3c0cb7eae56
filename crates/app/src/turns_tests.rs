#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;

fn limits(global: usize, per_account: usize) -> TurnLimits {
    TurnLimits {
        wait: Duration::from_millis(300),
        ..TurnLimits::new(global, per_account)
    }
}

async fn granted_within(turns: &Arc<Turns>, account: &str, within: Duration) -> Option<Turn> {
    tokio::time::timeout(within, turns.turn(account))
        .await
        .ok()
        .and_then(Result::ok)
}

#[tokio::test]
async fn an_account_waits_for_its_own_turn_and_all_for_the_servers() {
    let turns = Turns::new(TurnKind::WorkspaceRead, limits(2, 1));
    let a = turns.turn("a").await.unwrap();
    assert!(
        granted_within(&turns, "a", Duration::from_millis(50))
            .await
            .is_none()
    );
    let b = turns.turn("b").await.unwrap();
    assert!(
        granted_within(&turns, "c", Duration::from_millis(50))
            .await
            .is_none()
    );
    drop(a);
    let c = turns.turn("c").await.unwrap();
    drop((b, c));
    assert_eq!(turns.load(), (0, 0), "every turn and place given back");
}

#[tokio::test]
async fn eight_busy_accounts_leave_room_for_a_ninth() {
    let turns = Turns::new(TurnKind::Fetch, TurnLimits::new(32, 4));
    let mut held = Vec::new();
    let mut waiting = Vec::new();
    for account in 0..8 {
        for _ in 0..5 {
            let turns = turns.clone();
            let name = format!("busy-{account}");
            let pending = tokio::spawn(async move { turns.turn(&name).await });
            waiting.push(pending);
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (in_use, queued) = turns.load();
    // extra turns stop while a quarter is free: those are for accounts holding none
    assert!((8..32).contains(&in_use), "{in_use} in use");
    assert_eq!(queued, 40 - in_use);
    let ninth = granted_within(&turns, "ninth", Duration::from_millis(100)).await;
    assert!(ninth.is_some(), "the ninth account is served at once");
    held.push(ninth);
    for pending in waiting {
        pending.abort();
    }
}

#[tokio::test]
async fn a_waiting_account_holding_none_is_served_before_one_that_holds_some() {
    let turns = Turns::new(TurnKind::Models, limits(2, 2));
    let first = turns.turn("a").await.unwrap();
    let second = turns.turn("b").await.unwrap();
    // a asks first for another, then c for its first: c is served first
    let again = tokio::spawn({
        let turns = turns.clone();
        async move { turns.turn("a").await.map(|_| "a") }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let newcomer = tokio::spawn({
        let turns = turns.clone();
        async move { turns.turn("c").await.map(|turn| (turn, "c")) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(second);
    let (turn_c, who) = newcomer.await.unwrap().unwrap();
    assert_eq!(who, "c");
    assert!(!again.is_finished(), "a still waits");
    drop((first, turn_c));
    assert_eq!(again.await.unwrap().unwrap(), "a");
}

#[tokio::test]
async fn a_wait_is_bounded_and_a_crowd_of_waiters_is_turned_away() {
    let turns = Turns::new(TurnKind::Database, limits(1, 1));
    let held = turns.turn("a").await.unwrap();
    let busy = turns.turn("b").await.unwrap_err();
    assert_eq!(busy.kind, TurnKind::Database);
    assert!(busy.to_string().contains("nothing was charged"), "{busy}");
    assert_eq!(turns.load(), (1, 0), "the place was given up");
    // sixteen may wait for one account; the seventeenth is told at once
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let turns = turns.clone();
            tokio::spawn(async move { turns.turn("c").await.is_ok() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let started = tokio::time::Instant::now();
    assert!(turns.turn("c").await.is_err());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "refused without waiting"
    );
    drop(held);
    let mut served = 0;
    for waiter in waiters {
        served += usize::from(waiter.await.unwrap());
    }
    assert!(served >= 1, "the first in line got the freed turn");
}

#[tokio::test]
async fn a_call_that_stops_waiting_leaves_no_trace() {
    let turns = Turns::new(TurnKind::Fetch, limits(1, 1));
    let held = turns.turn("a").await.unwrap();
    let gone = tokio::spawn({
        let turns = turns.clone();
        async move { turns.turn("b").await.is_ok() }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(turns.load(), (1, 1));
    gone.abort();
    let _ = gone.await;
    assert_eq!(turns.load(), (1, 0), "a cancelled call is out of the queue");
    drop(held);
    assert_eq!(turns.load(), (0, 0));
    assert!(turns.turn("c").await.is_ok());
}
