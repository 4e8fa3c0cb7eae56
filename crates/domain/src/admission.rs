//! The admission rule, written once: a call is paid by the month's free allowance while any is
//! left, else by the wallet if it holds the price and nothing is owed, else refused.
//!
//! Every backend and the SQLite mirror decide with [`decide`]; storage only reads a
//! [`Standing`] and applies the [`Decision`] atomically (failing, and trying again, when the
//! standing changed meanwhile), so no backend carries a rule of its own.

use crate::billing::{Pricing, UsageSnapshot};
use crate::controls::{CapRoom, first_cap_passed};
use crate::money::Micros;

/// What metering decided about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Paid by the monthly allowance; `free_used` counts this call.
    Free { free_used: i64 },
    /// Paid from the wallet; the balance after the charge.
    Paid { balance_after: Micros },
    /// Neither the allowance nor the wallet can pay.
    Refused,
    /// The wallet could pay, but the charge would pass this spend cap.
    Capped(CapRoom),
}

impl Admission {
    /// Whether the call may run.
    pub fn admitted(self) -> bool {
        !matches!(self, Self::Refused | Self::Capped(_))
    }
}

/// An account's standing in the month of a call, as storage holds it: the month is no input of
/// the rule because the standing is always read for the call's month (a month without a usage
/// row yet reads as no free call used), while the wallet and what is owed carry across months.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    /// Free calls used in the month.
    pub free_used: i64,
    /// Wallet balance; never below zero.
    pub wallet: Micros,
    /// What refunds and disputes took back beyond the wallet; the wallet is empty while any is owed.
    pub owed: Micros,
}

impl Standing {
    /// The usage it shows an account: the wallet less what is owed.
    pub fn usage(&self) -> UsageSnapshot {
        UsageSnapshot {
            free_used: self.free_used,
            wallet: Micros(self.wallet.0.saturating_sub(self.owed.0)),
        }
    }
}

/// The prices one call is admitted at: the operator's, when the call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// Free calls per calendar month; none at all when 0 or below.
    pub free_monthly_calls: i64,
    /// Price of a call paid from the wallet; a negative price is never charged (refused).
    pub paid_call_cost: Micros,
}

impl From<&Pricing> for Terms {
    fn from(pricing: &Pricing) -> Self {
        Self {
            free_monthly_calls: pricing.free_monthly_calls,
            paid_call_cost: pricing.paid_call_cost,
        }
    }
}

/// What [`decide`] made of one call: the admission, and the standing once it is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Free, paid, or refused.
    pub admission: Admission,
    /// The standing after the call; the standing before it when refused.
    pub after: Standing,
}

/// Decides one call on `standing` at `terms`: the allowance first, then the wallet, then
/// refusal. Total over every input (no overflow, no panic); on a standing storage can hold
/// (counts and amounts not below zero) an admitted call is always one the standing pays for.
pub fn decide(standing: Standing, terms: Terms) -> Decision {
    let allowance_left =
        terms.free_monthly_calls > 0 && standing.free_used < terms.free_monthly_calls;
    if allowance_left {
        // free_used < free_monthly_calls <= i64::MAX, so the count cannot overflow
        let free_used = standing.free_used + 1;
        return Decision {
            admission: Admission::Free { free_used },
            after: Standing {
                free_used,
                ..standing
            },
        };
    }
    let price = terms.paid_call_cost;
    let wallet_pays = standing.owed.0 == 0 && price.0 >= 0 && standing.wallet >= price;
    if wallet_pays {
        // wallet >= price >= 0, so the difference lies in 0..=wallet
        let wallet = Micros(standing.wallet.0 - price.0);
        return Decision {
            admission: Admission::Paid {
                balance_after: wallet,
            },
            after: Standing { wallet, ..standing },
        };
    }
    Decision {
        admission: Admission::Refused,
        after: standing,
    }
}

/// Decides one call as [`decide`] does, then holds a paid call to the spend caps in `rooms`: a
/// charge that would pass any of them is refused as [`Admission::Capped`], naming the first.
/// Free calls never count against a cap.
pub fn decide_capped(standing: Standing, terms: Terms, rooms: &[CapRoom]) -> Decision {
    let decision = decide(standing, terms);
    if let Admission::Paid { .. } = decision.admission
        && let Some(room) = first_cap_passed(rooms, terms.paid_call_cost)
    {
        return Decision {
            admission: Admission::Capped(room),
            after: standing,
        };
    }
    decision
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "admission_proptests.rs"]
mod proptests;
