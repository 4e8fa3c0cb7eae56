//! Property tests of the replay and rotation rule over whole families: whatever events come in
//! whatever order, a spent code or a rotated refresh token never works again, and a replay
//! leaves its family revoked, tokens issued into it afterwards included.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

/// A refresh token's life in these tests, in steps of the clock.
const REFRESH_LIFE: i64 = 40;
/// A code's.
const CODE_LIFE: i64 = 6;

/// One thing that happens to the family.
#[derive(Debug, Clone)]
enum Happening {
    /// The code is presented.
    PresentCode,
    /// The refresh token issued `n`-th (modulo how many there are) is presented.
    PresentRefresh(usize),
    /// A token of the family, or the client, is revoked.
    Revoke(usize),
    /// The clock moves on.
    Wait(i64),
}

fn happening() -> impl Strategy<Value = Happening> {
    prop_oneof![
        3 => Just(Happening::PresentCode),
        6 => any::<usize>().prop_map(Happening::PresentRefresh),
        1 => any::<usize>().prop_map(Happening::Revoke),
        2 => (1..15i64).prop_map(Happening::Wait),
    ]
}

/// A family as a store keeps it, the rule applied to it event by event.
struct Family {
    now: i64,
    code: CredentialState,
    refresh: Vec<CredentialState>,
    /// Set by a family revocation; tokens issued afterwards are stored revoked.
    revoked: bool,
}

impl Family {
    fn new() -> Self {
        Self {
            now: 0,
            code: CredentialState {
                credential: Credential::Code,
                stage: Stage::default(),
                expires_at: CODE_LIFE,
            },
            refresh: Vec::new(),
            revoked: false,
        }
    }

    /// Applies the rule's answer to the credential; a spend issues the next refresh token.
    fn apply(&mut self, which: Option<usize>, t: Transition) {
        match which {
            None => self.code.stage = t.next,
            Some(n) => self.refresh[n].stage = t.next,
        }
        if t.revoke_family {
            self.revoked = true;
            self.code.stage.revoked = true;
            for token in &mut self.refresh {
                token.stage.revoked = true;
            }
        }
        if t.outcome == Outcome::Spent {
            self.refresh.push(CredentialState {
                credential: Credential::Refresh,
                stage: Stage {
                    used: false,
                    revoked: self.revoked,
                },
                expires_at: self.now + REFRESH_LIFE,
            });
        }
    }

    fn get(&self, which: Option<usize>) -> CredentialState {
        which.map_or(self.code, |n| self.refresh[n])
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn spent_credentials_never_work_again_and_replays_revoke_the_family(
        happenings in proptest::collection::vec(happening(), 1..60)
    ) {
        let mut family = Family::new();
        let mut replayed = false;
        for happening in happenings {
            let (which, event) = match happening {
                Happening::Wait(dt) => {
                    family.now += dt;
                    continue;
                }
                Happening::PresentCode => (None, Event::Present { now: family.now }),
                Happening::PresentRefresh(n) if !family.refresh.is_empty() => {
                    (Some(n % family.refresh.len()), Event::Present { now: family.now })
                }
                Happening::PresentRefresh(_) => continue,
                Happening::Revoke(n) => {
                    let which = (!family.refresh.is_empty()).then(|| n % family.refresh.len());
                    (which, Event::Revoke)
                }
            };
            let before = family.get(which);
            let t = step(before, event);
            if before.stage.used {
                prop_assert_ne!(t.outcome, Outcome::Spent, "a spent credential worked again");
            }
            if replayed {
                prop_assert_ne!(t.outcome, Outcome::Spent, "a family worked after a replay");
            }
            let replay = before.stage.used && matches!(event, Event::Present { .. });
            let live = before.expires_at > family.now;
            if replay && (before.credential == Credential::Code || live) {
                prop_assert!(
                    before.stage.revoked || t.outcome == Outcome::Replayed,
                    "a replay was not caught: {before:?} → {t:?}"
                );
            }
            prop_assert!(t.next.used >= before.stage.used, "a stage went back");
            prop_assert!(t.next.revoked >= before.stage.revoked, "a stage went back");
            family.apply(which, t);
            if t.outcome == Outcome::Replayed {
                replayed = true;
            }
            if replayed || t.outcome == Outcome::Revoked {
                prop_assert!(family.code.stage.revoked);
                prop_assert!(family.refresh.iter().all(|r| r.stage.revoked));
            }
        }
    }

    #[test]
    fn of_presenters_racing_by_compare_and_set_exactly_one_spends(
        order in proptest::collection::vec(0..8usize, 8..64),
        credential in prop_oneof![Just(Credential::Code), Just(Credential::Refresh)],
    ) {
        // Eight presenters each read the stage, ask the rule, and write by compare-and-set,
        // reading again when the stage moved meanwhile; `order` says who acts next.
        let mut stage = Stage::default();
        let mut seen: [Option<Stage>; 8] = [None; 8];
        let mut outcomes: [Option<Outcome>; 8] = [None; 8];
        let at = |stage| CredentialState { credential, stage, expires_at: 100 };
        for who in order.into_iter().chain((0..8).cycle().take(8 * 8)) {
            if outcomes[who].is_some() {
                continue;
            }
            match seen[who] {
                None => seen[who] = Some(stage),
                Some(read) => {
                    let t = step(at(read), Event::Present { now: 0 });
                    if !t.writes() {
                        outcomes[who] = Some(t.outcome);
                    } else if read == stage {
                        stage = t.next;
                        outcomes[who] = Some(t.outcome);
                    } else {
                        seen[who] = None;
                    }
                }
            }
        }
        let outcomes: Vec<Outcome> = outcomes.into_iter().map(Option::unwrap).collect();
        let spent = outcomes.iter().filter(|o| **o == Outcome::Spent).count();
        prop_assert_eq!(spent, 1, "{:?}", outcomes);
        prop_assert!(stage.used && stage.revoked == outcomes.contains(&Outcome::Replayed));
    }
}
