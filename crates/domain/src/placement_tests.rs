//! The names and bounds placement accepts, and the claim rule, by example and over any state.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

fn node(name: &str) -> NodeName {
    NodeName::parse(name).unwrap()
}

fn owner(name: &str, incarnation: i64, epoch: i64) -> SessionOwner {
    SessionOwner {
        node: node(name),
        incarnation: Incarnation(incarnation),
        epoch: Epoch(epoch),
    }
}

#[test]
fn node_names_are_short_lower_case_words() {
    for good in ["a", "node-1", "eu.west_2", &"n".repeat(64)] {
        assert_eq!(NodeName::parse(good).unwrap().as_str(), good);
    }
    assert_eq!(NodeName::parse(""), Err(NodeNameError::Empty));
    assert_eq!(
        NodeName::parse(&"n".repeat(65)),
        Err(NodeNameError::TooLong)
    );
    for bad in ["Node", "a b", "a/b", "a:1", "é", "a\0", "node;DROP"] {
        assert_eq!(NodeName::parse(bad), Err(NodeNameError::Malformed), "{bad}");
    }
    assert!(
        NodeNameError::Malformed.to_string().contains("node-1"),
        "the error shows a good name"
    );
}

#[test]
fn session_ids_hold_1_to_256_bytes() {
    assert!(SandboxSessionId::parse("s").is_ok());
    let longest = "é".repeat(128);
    assert_eq!(SandboxSessionId::parse(&longest).unwrap().as_str(), longest);
    assert_eq!(
        SandboxSessionId::parse(&"x".repeat(257)),
        Err(SandboxSessionIdError::TooLong)
    );
    assert_eq!(
        SandboxSessionId::parse(""),
        Err(SandboxSessionIdError::Empty)
    );
}

#[test]
fn leases_run_from_a_millisecond_to_an_hour() {
    assert_eq!(Lease::new(Duration::ZERO), Err(LeaseError::TooShort));
    assert_eq!(
        Lease::new(Duration::from_micros(999)),
        Err(LeaseError::TooShort)
    );
    assert_eq!(Lease::new(Duration::from_millis(1)).unwrap().millis(), 1);
    assert_eq!(Lease::new(MAX_LEASE).unwrap().millis(), 3_600_000);
    assert_eq!(
        Lease::new(MAX_LEASE + Duration::from_millis(1)),
        Err(LeaseError::TooLong)
    );
    assert_eq!(Lease::new(Duration::MAX), Err(LeaseError::TooLong));
}

#[test]
fn claims_by_example() {
    let me = node("me");
    let take = |state: &OwnerState| claim_step(state, &me, Incarnation(7), true);
    assert_eq!(
        take(&OwnerState::Unowned),
        ClaimStep::Take {
            epoch: FIRST_EPOCH,
            previous: Previous::None
        }
    );
    assert_eq!(
        take(&OwnerState::Released { epoch: Epoch(4) }),
        ClaimStep::Take {
            epoch: Epoch(5),
            previous: Previous::Released
        }
    );
    let mine = owner("me", 7, 3);
    assert_eq!(
        take(&OwnerState::Owned {
            owner: mine,
            valid: true
        }),
        ClaimStep::Answer(Claim::Owned {
            epoch: Epoch(3),
            previous: Previous::Same
        })
    );
    // the same name in an earlier incarnation is another owner: a restarted node
    let my_past = owner("me", 6, 3);
    assert_eq!(
        take(&OwnerState::Owned {
            owner: my_past.clone(),
            valid: true
        }),
        ClaimStep::Answer(Claim::HeldBy(my_past.clone()))
    );
    assert_eq!(
        take(&OwnerState::Owned {
            owner: my_past,
            valid: false
        }),
        ClaimStep::Take {
            epoch: Epoch(4),
            previous: Previous::Lost { node: node("me") }
        }
    );
    assert_eq!(
        claim_step(&OwnerState::Unowned, &me, Incarnation(7), false),
        ClaimStep::Answer(Claim::Fenced)
    );
}

fn any_node() -> impl Strategy<Value = NodeName> {
    "[a-c]{1,2}".prop_map(|name| NodeName::parse(&name).unwrap())
}

fn any_epoch() -> impl Strategy<Value = Epoch> {
    prop_oneof![Just(1), Just(i64::MAX), 1..10i64, 1..i64::MAX].prop_map(Epoch)
}

fn any_state() -> impl Strategy<Value = OwnerState> {
    let owned = (any_node(), 1..4i64, any_epoch(), any::<bool>()).prop_map(
        |(node, incarnation, epoch, valid)| OwnerState::Owned {
            owner: SessionOwner {
                node,
                incarnation: Incarnation(incarnation),
                epoch,
            },
            valid,
        },
    );
    prop_oneof![
        Just(OwnerState::Unowned),
        any_epoch().prop_map(|epoch| OwnerState::Released { epoch }),
        owned,
    ]
}

fn epoch_of(state: &OwnerState) -> Option<Epoch> {
    match state {
        OwnerState::Unowned => None,
        OwnerState::Released { epoch } => Some(*epoch),
        OwnerState::Owned { owner, .. } => Some(owner.epoch),
    }
}

proptest! {
    /// Over any state and claimer: a fenced claimer changes nothing; a valid owner is never
    /// displaced (and is told apart from the claimer only by name and incarnation); a take
    /// never lowers the epoch and raises it whenever there was one, so no two owners of a
    /// session share an epoch unless it saturated.
    #[test]
    fn a_valid_owner_is_never_displaced(
        state in any_state(),
        claimer in any_node(),
        incarnation in 1..4i64,
        live in any::<bool>(),
    ) {
        let step = claim_step(&state, &claimer, Incarnation(incarnation), live);
        if !live {
            prop_assert_eq!(step, ClaimStep::Answer(Claim::Fenced));
            return Ok(());
        }
        match (&state, step) {
            (OwnerState::Owned { owner, valid: true }, ClaimStep::Answer(answer)) => {
                let itself = owner.node == claimer && owner.incarnation.0 == incarnation;
                let expected = if itself {
                    Claim::Owned { epoch: owner.epoch, previous: Previous::Same }
                } else {
                    Claim::HeldBy(owner.clone())
                };
                prop_assert_eq!(answer, expected);
            }
            (OwnerState::Owned { valid: true, .. }, take) => {
                prop_assert!(false, "a valid owner was displaced: {:?}", take);
            }
            (_, ClaimStep::Take { epoch, previous }) => {
                match epoch_of(&state) {
                    None => prop_assert_eq!(epoch, FIRST_EPOCH),
                    Some(seen) if seen.0 == i64::MAX => prop_assert_eq!(epoch, seen),
                    Some(seen) => prop_assert_eq!(epoch.0, seen.0 + 1),
                }
                let expected = match &state {
                    OwnerState::Unowned => Previous::None,
                    OwnerState::Released { .. } => Previous::Released,
                    OwnerState::Owned { owner, .. } => Previous::Lost { node: owner.node.clone() },
                };
                prop_assert_eq!(previous, expected);
            }
            (_, answer) => prop_assert!(false, "no owner, yet no take: {:?}", answer),
        }
    }
}
