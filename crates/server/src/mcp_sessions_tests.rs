#![allow(clippy::unwrap_used)]
use super::*;

fn limits(per_account: usize, total: usize) -> McpSessionLimits {
    McpSessionLimits {
        per_account,
        total,
        idle: Duration::from_secs(60),
    }
}

#[test]
fn sessions_belong_to_their_opener_for_their_whole_life() {
    let sessions = McpSessions::new(McpSessionLimits::default());
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let id = sessions.open(&alice).unwrap();
    assert!(sessions.touch(&id, &alice).is_served());
    assert!(!sessions.touch(&id, &bob).is_served());
    assert!(
        !sessions.close(&id, &bob),
        "another account cannot close it"
    );
    assert!(sessions.close(&id, &alice));
    assert!(!sessions.touch(&id, &alice).is_served());
    assert!(
        !sessions.touch(&id, &bob).is_served(),
        "a closed session is nobody's"
    );
    assert!(!sessions.touch("unknown", &bob).is_served());
}

#[test]
fn an_account_at_its_limit_loses_its_longest_idle_session() {
    let sessions = McpSessions::new(limits(3, 100));
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let ids: Vec<String> = (0..3).map(|_| sessions.open(&alice).unwrap()).collect();
    let bobs = sessions.open(&bob).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    assert!(sessions.touch(&ids[0], &alice).is_served());
    let _busy = sessions.begin_call(&ids[1], "1".into()).unwrap();
    let fourth = sessions.open(&alice).unwrap();
    assert!(
        !sessions.touch(&ids[2], &alice).is_served(),
        "the longest idle one made room"
    );
    assert!(
        sessions.touch(&ids[0], &alice).is_served() && sessions.touch(&ids[1], &alice).is_served()
    );
    assert!(
        sessions.touch(&bobs, &bob).is_served(),
        "other accounts are untouched"
    );
    assert_eq!(sessions.len(), 4);
    // every remaining one busy: a clear refusal, nothing closed
    let _a = sessions.begin_call(&ids[0], "1".into()).unwrap();
    let _b = sessions.begin_call(&fourth, "1".into()).unwrap();
    assert_eq!(sessions.open(&alice), Err(OpenError::AccountFull(3)));
    assert_eq!(sessions.len(), 4);
}

#[test]
fn the_server_total_is_a_refusal_not_an_eviction() {
    let sessions = McpSessions::new(limits(10, 3));
    let accounts: Vec<AccountId> = (0..3).map(|_| AccountId::generate()).collect();
    let ids: Vec<String> = accounts.iter().map(|a| sessions.open(a).unwrap()).collect();
    let late = AccountId::generate();
    assert_eq!(sessions.open(&late), Err(OpenError::ServerFull(3)));
    assert!(sessions.touch(&ids[0], &accounts[0]).is_served());
    assert!(sessions.close(&ids[1], &accounts[1]));
    sessions.open(&late).unwrap();
}

#[test]
fn idle_sessions_expire_unless_a_call_is_in_flight() {
    let sessions = McpSessions::new(McpSessionLimits {
        per_account: 10,
        total: 2,
        idle: Duration::from_millis(20),
    });
    let alice = AccountId::generate();
    let idle = sessions.open(&alice).unwrap();
    let busy = sessions.open(&alice).unwrap();
    let call = sessions.begin_call(&busy, "7".into()).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    sessions.open(&alice).unwrap();
    assert!(
        !sessions.touch(&idle, &alice).is_served(),
        "expired and swept"
    );
    assert!(
        sessions.touch(&busy, &alice).is_served(),
        "a long call keeps its session"
    );
    drop(call);
    std::thread::sleep(Duration::from_millis(30));
    assert!(!sessions.touch(&busy, &alice).is_served());
}

#[test]
fn cancellation_reaches_only_the_named_call_of_the_owner() {
    let sessions = McpSessions::new(McpSessionLimits::default());
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let id = sessions.open(&alice).unwrap();
    let one = sessions.begin_call(&id, "1".into()).unwrap();
    let two = sessions.begin_call(&id, "\"two\"".into()).unwrap();
    assert!(
        sessions.begin_call(&id, "1".into()).is_none(),
        "ids are unique in flight"
    );
    sessions.cancel(&id, &bob, "1");
    assert!(!one.token().is_cancelled(), "another account cannot cancel");
    sessions.cancel(&id, &alice, "1");
    assert!(one.token().is_cancelled() && !two.token().is_cancelled());
    drop(one);
    let dropped = sessions.begin_call(&id, "3".into()).unwrap();
    let token = dropped.token().clone();
    drop(dropped);
    assert!(
        token.is_cancelled(),
        "a call whose request is gone is cancelled"
    );
    let again = sessions.begin_call(&id, "1".into()).unwrap();
    assert!(!again.token().is_cancelled(), "a reused id starts afresh");
    assert!(sessions.close(&id, &alice));
    assert!(
        two.token().is_cancelled(),
        "closing a session cancels its calls"
    );
}

#[test]
fn a_rotation_closes_every_session_of_the_account_and_only_those() {
    let sessions = McpSessions::new(McpSessionLimits::default());
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let (a1, a2, b1) = (
        sessions.open(&alice).unwrap(),
        sessions.open(&alice).unwrap(),
        sessions.open(&bob).unwrap(),
    );
    let call = sessions.begin_call(&a1, "1".into()).unwrap();
    assert_eq!(sessions.close_all(&alice), 2);
    assert!(call.token().is_cancelled(), "a call in flight is cancelled");
    assert!(!sessions.touch(&a1, &alice).is_served() && !sessions.touch(&a2, &alice).is_served());
    assert!(
        sessions.touch(&b1, &bob).is_served(),
        "another account's session stays"
    );
    assert_eq!(sessions.close_all(&alice), 0);
}
