//! Spend caps as an admission reads them: the caps that apply to a call (the account's and its
//! named key's) with what the wallet already paid in each cap's period. Written once; each
//! backend reads the eight numbers in one statement inside the admission's transaction (see
//! [`CapColumns`]; the spend from the `spend` table, which every paid admission adds to in its
//! own transaction, by [`spend_rows`]) and turns them into rooms here.

use toolgate_domain::{CapPeriod, CapRoom, CapScope, Micros};

/// What a backend reads for one call, in this order: the account's monthly and daily cap, the
/// key's monthly and daily cap (NULL: none, or no key), and the wallet's spend this month and
/// today for the account and for the key.
pub type CapColumns = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
);

/// The `spend` rows a paid call of `cost` adds to, as `(key_id, period)`: the account's month
/// and day (key `''`), and its named key's, if one made it.
pub fn spend_rows<'a>(
    month: &'a str,
    day: &'a str,
    key: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut rows = vec![("", month), ("", day)];
    if let Some(key) = key {
        rows.extend([(key, month), (key, day)]);
    }
    rows
}

/// The rooms of every cap set in `columns`.
pub fn cap_rooms(columns: CapColumns) -> Vec<CapRoom> {
    let (
        account_month,
        account_day,
        key_month,
        key_day,
        spent_month,
        spent_day,
        key_spent_month,
        key_spent_day,
    ) = columns;
    [
        (
            CapScope::Account,
            CapPeriod::Month,
            account_month,
            spent_month,
        ),
        (CapScope::Account, CapPeriod::Day, account_day, spent_day),
        (CapScope::Key, CapPeriod::Month, key_month, key_spent_month),
        (CapScope::Key, CapPeriod::Day, key_day, key_spent_day),
    ]
    .into_iter()
    .filter_map(|(scope, period, cap, spent)| {
        cap.map(|cap| CapRoom {
            scope,
            period,
            cap: Micros(cap),
            spent: Micros(spent),
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_set_caps_have_rooms() {
        assert!(cap_rooms((None, None, None, None, 5, 5, 0, 0)).is_empty());
        let rooms = cap_rooms((Some(100), None, None, Some(7), 50, 20, 3, 3));
        assert_eq!(rooms.len(), 2);
        assert_eq!(rooms[0].scope, CapScope::Account);
        assert_eq!(rooms[0].spent, Micros(50));
        assert_eq!(rooms[1].period, CapPeriod::Day);
        assert_eq!(rooms[1].cap, Micros(7));
    }
}
