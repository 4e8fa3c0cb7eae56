//! Property tests of the admission rule: over any input it never panics and never admits a call
//! the standing cannot pay; over any standing storage can hold, applying its decision keeps every
//! invariant of the books, and a run of calls is admitted exactly as far as the standing pays.

use proptest::prelude::*;

use super::*;

/// Any `i64`, with the edges and small numbers (where the branches turn) drawn often.
fn edgy() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(i64::MAX),
        Just(i64::MIN),
        -20..20i64,
        any::<i64>(),
    ]
}

fn any_standing() -> impl Strategy<Value = Standing> {
    (edgy(), edgy(), edgy()).prop_map(|(free_used, wallet, owed)| Standing {
        free_used,
        wallet: Micros(wallet),
        owed: Micros(owed),
    })
}

fn any_terms() -> impl Strategy<Value = Terms> {
    (edgy(), edgy()).prop_map(|(free_monthly_calls, cost)| Terms {
        free_monthly_calls,
        paid_call_cost: Micros(cost),
    })
}

/// Counts and amounts as storage holds them: none below zero, and an empty wallet while anything
/// is owed (the refund and credit rules keep it so).
fn held_standing(max: i64) -> impl Strategy<Value = Standing> {
    (0..=max, 0..=max, 0..=max, any::<bool>()).prop_map(|(free_used, wallet, owed, owing)| {
        Standing {
            free_used,
            wallet: Micros(if owing { 0 } else { wallet }),
            owed: Micros(if owing { owed } else { 0 }),
        }
    })
}

fn holds(standing: Standing) -> bool {
    standing.free_used >= 0
        && standing.wallet.0 >= 0
        && standing.owed.0 >= 0
        && (standing.owed.0 == 0 || standing.wallet.0 == 0)
}

/// Whether `before` can pay one call at `terms`, said independently of `decide`.
fn allowance_pays(before: Standing, terms: Terms) -> bool {
    terms.free_monthly_calls > 0
        && i128::from(before.free_used) < i128::from(terms.free_monthly_calls)
}

fn wallet_pays(before: Standing, terms: Terms) -> bool {
    before.owed.0 == 0
        && terms.paid_call_cost.0 >= 0
        && i128::from(before.wallet.0) >= i128::from(terms.paid_call_cost.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn never_admits_what_the_standing_cannot_pay(before in any_standing(), terms in any_terms()) {
        let decision = decide(before, terms);
        match decision.admission {
            Admission::Free { free_used } => {
                prop_assert!(allowance_pays(before, terms));
                prop_assert_eq!(i128::from(free_used), i128::from(before.free_used) + 1);
                prop_assert_eq!(decision.after, Standing { free_used, ..before });
            }
            Admission::Paid { balance_after } => {
                prop_assert!(!allowance_pays(before, terms), "the allowance goes first");
                prop_assert!(wallet_pays(before, terms));
                prop_assert_eq!(
                    i128::from(balance_after.0),
                    i128::from(before.wallet.0) - i128::from(terms.paid_call_cost.0)
                );
                prop_assert_eq!(decision.after, Standing { wallet: balance_after, ..before });
            }
            Admission::Refused => {
                prop_assert!(!allowance_pays(before, terms) && !wallet_pays(before, terms));
                prop_assert_eq!(decision.after, before, "a refusal changes nothing");
            }
            Admission::Capped(_) => prop_assert!(false, "decide knows no caps"),
        }
    }

    #[test]
    fn applying_a_decision_keeps_the_books(
        before in held_standing(i64::MAX),
        limit in 0..=i64::MAX,
        cost in 0..=i64::MAX,
    ) {
        let terms = Terms { free_monthly_calls: limit, paid_call_cost: Micros(cost) };
        let after = decide(before, terms).after;
        prop_assert!(holds(after), "{after:?} from {before:?}");
        prop_assert!(after.wallet <= before.wallet, "an admission never adds money");
        prop_assert_eq!(after.owed, before.owed, "an admission never touches what is owed");
        prop_assert!(after.free_used <= before.free_used.max(limit), "never past the limit");
        let counted = after.free_used - before.free_used;
        let charged = before.wallet.0 - after.wallet.0;
        prop_assert!(
            (counted, charged) == (0, 0) || (counted, charged) == (1, 0) || (counted, charged) == (0, cost),
            "one call is counted once, from one source: {counted} free, {charged} charged"
        );
    }

    #[test]
    fn a_run_of_calls_is_admitted_exactly_as_far_as_the_standing_pays(
        before in held_standing(300),
        limit in 0..300i64,
        cost in 1..50i64,
    ) {
        let terms = Terms { free_monthly_calls: limit, paid_call_cost: Micros(cost) };
        let (mut standing, mut free, mut paid) = (before, 0, 0);
        loop {
            let decision = decide(standing, terms);
            match decision.admission {
                Admission::Free { .. } => free += 1,
                Admission::Paid { .. } => paid += 1,
                Admission::Refused | Admission::Capped(_) => break,
            }
            prop_assert!(holds(decision.after));
            standing = decision.after;
        }
        prop_assert_eq!(free, (limit - before.free_used).max(0));
        let affordable = if before.owed.0 == 0 { before.wallet.0 / cost } else { 0 };
        prop_assert_eq!(paid, affordable);
        prop_assert_eq!(standing.wallet.0, before.wallet.0 - paid * cost, "no charge lost or doubled");
        prop_assert_eq!(decide(standing, terms).after, standing, "refused stays refused");
    }
}

fn any_rooms() -> impl Strategy<Value = Vec<CapRoom>> {
    use crate::controls::{CapPeriod, CapScope};
    prop::collection::vec(
        (edgy(), edgy(), any::<bool>(), any::<bool>()).prop_map(|(cap, spent, key, day)| CapRoom {
            scope: if key {
                CapScope::Key
            } else {
                CapScope::Account
            },
            period: if day {
                CapPeriod::Day
            } else {
                CapPeriod::Month
            },
            cap: Micros(cap),
            spent: Micros(spent),
        }),
        0..5,
    )
}

proptest! {
    #[test]
    fn caps_only_ever_refuse_a_paid_call_that_would_pass_one(
        before in any_standing(), terms in any_terms(), rooms in any_rooms(),
    ) {
        let plain = decide(before, terms);
        let capped = decide_capped(before, terms, &rooms);
        let price = i128::from(terms.paid_call_cost.0);
        let passes = |room: &CapRoom| i128::from(room.spent.0) + price > i128::from(room.cap.0);
        match (plain.admission, capped.admission) {
            (Admission::Paid { .. }, Admission::Capped(room)) => {
                prop_assert!(passes(&room), "the cap named is one the charge passes");
                prop_assert!(rooms.contains(&room));
                prop_assert_eq!(capped.after, before, "a capped call changes nothing");
            }
            (Admission::Paid { .. }, Admission::Paid { .. }) => {
                prop_assert!(!rooms.iter().any(passes), "no cap is passed by a paid call");
                prop_assert_eq!(capped, plain);
            }
            // free calls and refusals are never a cap's business
            (_, _) => prop_assert_eq!(capped, plain),
        }
    }
}
