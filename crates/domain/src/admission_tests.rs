use super::*;

fn standing(free_used: i64, wallet: i64, owed: i64) -> Standing {
    Standing {
        free_used,
        wallet: Micros(wallet),
        owed: Micros(owed),
    }
}

fn terms(free_monthly_calls: i64, paid_call_cost: i64) -> Terms {
    Terms {
        free_monthly_calls,
        paid_call_cost: Micros(paid_call_cost),
    }
}

fn free(free_used: i64, after: Standing) -> Decision {
    Decision {
        admission: Admission::Free { free_used },
        after,
    }
}

fn paid(balance_after: i64, after: Standing) -> Decision {
    Decision {
        admission: Admission::Paid {
            balance_after: Micros(balance_after),
        },
        after,
    }
}

fn refused(before: Standing) -> Decision {
    Decision {
        admission: Admission::Refused,
        after: before,
    }
}

#[test]
fn the_allowance_pays_first_even_with_money_in_the_wallet() {
    assert_eq!(
        decide(standing(0, 0, 0), terms(2, 8)),
        free(1, standing(1, 0, 0))
    );
    assert_eq!(
        decide(standing(1, 500, 0), terms(2, 8)),
        free(2, standing(2, 500, 0)),
        "the wallet is untouched while the allowance lasts"
    );
}

#[test]
fn the_wallet_pays_once_the_allowance_is_used_up() {
    assert_eq!(
        decide(standing(2, 20, 0), terms(2, 8)),
        paid(12, standing(2, 12, 0))
    );
    assert_eq!(
        decide(standing(2, 8, 0), terms(2, 8)),
        paid(0, standing(2, 0, 0)),
        "exactly the price empties the wallet"
    );
}

#[test]
fn refused_when_neither_pays_and_nothing_changes() {
    let before = standing(2, 7, 0);
    assert_eq!(decide(before, terms(2, 8)), refused(before));
    let over = standing(50, 0, 0);
    assert_eq!(
        decide(over, terms(10, 8)),
        refused(over),
        "a limit lowered below what was used"
    );
}

#[test]
fn no_allowance_at_all_means_the_wallet_pays_from_the_first_call() {
    assert_eq!(
        decide(standing(0, 8, 0), terms(0, 8)),
        paid(0, standing(0, 0, 0))
    );
    let before = standing(0, 7, 0);
    assert_eq!(decide(before, terms(0, 8)), refused(before));
    assert_eq!(
        decide(before, terms(-3, 1)),
        paid(6, standing(0, 6, 0)),
        "a negative allowance is none"
    );
}

#[test]
fn while_anything_is_owed_no_paid_call_but_free_calls_go_on() {
    let owing = standing(2, 0, 3_000_000);
    assert_eq!(decide(owing, terms(2, 8)), refused(owing));
    assert_eq!(
        decide(standing(1, 0, 3_000_000), terms(2, 8)),
        free(2, standing(2, 0, 3_000_000)),
        "what is owed is carried unchanged"
    );
    // a standing storage never holds (money in the wallet while owing) still pays nothing
    let both = standing(2, 100, 1);
    assert_eq!(decide(both, terms(2, 8)), refused(both));
}

#[test]
fn a_price_of_zero_admits_without_charging_and_a_negative_one_never() {
    assert_eq!(
        decide(standing(2, 0, 0), terms(2, 0)),
        paid(0, standing(2, 0, 0))
    );
    let owing = standing(2, 0, 1);
    assert_eq!(
        decide(owing, terms(2, 0)),
        refused(owing),
        "owed, even a free price is not paid"
    );
    let rich = standing(2, 1_000, 0);
    assert_eq!(
        decide(rich, terms(2, -8)),
        refused(rich),
        "a negative price would credit the wallet"
    );
}

#[test]
fn the_allowance_is_per_month_and_the_wallet_and_debt_carry_over() {
    // October's standing, used up; November's as storage reads it: no usage row yet, 0 used
    let october = standing(1_000, 4, 0);
    assert_eq!(decide(october, terms(1_000, 8)), refused(october));
    let november = Standing {
        free_used: 0,
        ..october
    };
    assert_eq!(
        decide(november, terms(1_000, 8)),
        free(1, standing(1, 4, 0))
    );
    let owing_november = standing(0, 0, 9);
    assert_eq!(
        decide(owing_november, terms(1_000, 8)),
        free(1, standing(1, 0, 9)),
        "a debt does not take the new month's allowance"
    );
}

#[test]
fn the_largest_values_never_overflow() {
    let max = i64::MAX;
    assert_eq!(
        decide(standing(max - 1, 0, 0), terms(max, 8)),
        free(max, standing(max, 0, 0))
    );
    let full = standing(max, max, 0);
    assert_eq!(decide(full, terms(max, max)), paid(0, standing(max, 0, 0)));
    assert_eq!(
        decide(full, terms(max, 1)),
        paid(max - 1, standing(max, max - 1, 0))
    );
    let poor = standing(max, 0, 0);
    assert_eq!(decide(poor, terms(max, max)), refused(poor));
    let min = standing(i64::MIN, i64::MIN, i64::MIN);
    assert_eq!(
        decide(min, terms(i64::MIN, i64::MIN)),
        refused(min),
        "nonsense is refused, not wrapped"
    );
    assert_eq!(
        decide(min, terms(max, 0)),
        free(i64::MIN + 1, standing(i64::MIN + 1, i64::MIN, i64::MIN))
    );
    let wide = standing(0, i64::MIN, 0);
    assert_eq!(decide(wide, terms(0, max)), refused(wide));
}

#[test]
fn terms_come_from_the_operators_pricing() {
    let pricing = Pricing::default();
    assert_eq!(
        Terms::from(&pricing),
        terms(pricing.free_monthly_calls, pricing.paid_call_cost.0)
    );
}
