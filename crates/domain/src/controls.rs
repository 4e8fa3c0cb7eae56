//! The owner's controls over how an account is used: named keys (each with a scope of tools and
//! fields), spend caps per account and per key, and how a request was authenticated (`Via`), so
//! that metering, history and the restrictions all read the one answer authentication gave.

use std::fmt;

use crate::money::Micros;

/// A named key's stable identifier: `key_` and 32 lowercase hexadecimal characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// A fresh random identifier.
    pub fn generate() -> Self {
        Self(format!("key_{}", uuid::Uuid::new_v4().simple()))
    }

    /// Checks the shape of an identifier given by a caller (the CLI, a dashboard form).
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix("key_")?;
        (hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(raw.to_owned()))
    }

    /// Wraps an identifier read back from storage.
    pub fn from_stored(value: String) -> Self {
        Self(value)
    }

    /// The identifier as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Spend caps in USD (micro-dollars) per calendar month and per day (UTC); `None`: no cap.
/// Only calls paid from the wallet count against a cap; free calls never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpendCaps {
    /// Most the wallet may pay in one calendar month.
    pub month: Option<Micros>,
    /// Most the wallet may pay in one day.
    pub day: Option<Micros>,
}

impl SpendCaps {
    /// Whether any cap is set.
    pub fn any(&self) -> bool {
        self.month.is_some() || self.day.is_some()
    }

    /// From the two nullable columns storage keeps them in.
    pub fn from_columns(month: Option<i64>, day: Option<i64>) -> Self {
        Self {
            month: month.map(Micros),
            day: day.map(Micros),
        }
    }
}

/// What a named key may call: the tools (by kind: `read`, `write`, `ai`) and the fields; an
/// empty list allows all of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyScope {
    /// Tool kinds the key may call; empty: all three.
    pub tools: Vec<String>,
    /// Fields the key's calls may use; empty: every field.
    pub fields: Vec<String>,
}

impl KeyScope {
    /// Whether the scope restricts anything.
    pub fn restricts(&self) -> bool {
        !self.tools.is_empty() || !self.fields.is_empty()
    }

    /// Whether the key may call the tool of `kind` (`read`, `write`, `ai`).
    pub fn allows_tool(&self, kind: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|tool| tool == kind)
    }

    /// The first of `fields` the key may not use, if any.
    pub fn refused_field<'a>(&self, mut fields: impl Iterator<Item = &'a str>) -> Option<&'a str> {
        if self.fields.is_empty() {
            return None;
        }
        fields.find(|field| !self.fields.iter().any(|allowed| allowed == field))
    }
}

/// A named key as authentication found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedKey {
    /// Its identifier.
    pub id: KeyId,
    /// The owner's name for it (unique among the account's live keys).
    pub name: String,
    /// What it may call.
    pub scope: KeyScope,
    /// Its own caps, besides the account's.
    pub caps: SpendCaps,
}

/// How a request was authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Via {
    /// The account's first key (the personal URL the dashboard shows), or the service itself.
    #[default]
    PrimaryKey,
    /// One of the account's named keys.
    NamedKey(NamedKey),
    /// An OAuth access token of a connected app.
    OAuth {
        /// The app's client id.
        client_id: String,
    },
}

impl Via {
    /// The named key, if one was used.
    pub fn named_key(&self) -> Option<&NamedKey> {
        match self {
            Self::NamedKey(key) => Some(key),
            _ => None,
        }
    }

    /// The label history and the usage page show for the credential: `default`, the key's
    /// name, or `oauth:<client id>`.
    pub fn label(&self) -> String {
        match self {
            Self::PrimaryKey => "default".to_owned(),
            Self::NamedKey(key) => key.name.clone(),
            Self::OAuth { client_id } => format!("oauth:{client_id}"),
        }
    }
}

/// Which cap refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapScope {
    /// The account's own cap.
    Account,
    /// The cap of the named key that made the call.
    Key,
}

/// The period a cap counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapPeriod {
    /// The calendar month (UTC).
    Month,
    /// The day (UTC).
    Day,
}

/// One cap that applies to a call, with what was already spent against it in its period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapRoom {
    /// Whose cap.
    pub scope: CapScope,
    /// Which period.
    pub period: CapPeriod,
    /// The cap.
    pub cap: Micros,
    /// Paid from the wallet in the period so far (free calls not counted).
    pub spent: Micros,
}

impl CapRoom {
    /// Whether a further charge of `price` stays within the cap.
    pub fn admits(&self, price: Micros) -> bool {
        self.spent
            .0
            .checked_add(price.0)
            .is_some_and(|after| after <= self.cap.0)
    }
}

/// The caps that would refuse a call of `price`, the first that does: the key's before the
/// account's, the day before the month.
pub fn first_cap_passed(rooms: &[CapRoom], price: Micros) -> Option<CapRoom> {
    let rank = |room: &CapRoom| {
        (
            matches!(room.scope, CapScope::Account),
            matches!(room.period, CapPeriod::Month),
        )
    };
    let mut passed: Vec<CapRoom> = rooms
        .iter()
        .copied()
        .filter(|room| !room.admits(price))
        .collect();
    passed.sort_by_key(rank);
    passed.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_have_one_shape() {
        let id = KeyId::generate();
        assert_eq!(KeyId::parse(id.as_str()), Some(id.clone()));
        for bad in [
            "",
            "key_",
            "key_XYZ",
            "svck_00",
            &format!("key_{}", "A".repeat(32)),
        ] {
            assert_eq!(KeyId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_cap_admits_up_to_its_amount_and_not_past_it() {
        let room = CapRoom {
            scope: CapScope::Account,
            period: CapPeriod::Day,
            cap: Micros(16_000),
            spent: Micros(8_000),
        };
        assert!(room.admits(Micros(8_000)));
        assert!(!room.admits(Micros(8_001)));
        let overflowing = CapRoom {
            spent: Micros(i64::MAX),
            ..room
        };
        assert!(!overflowing.admits(Micros(1)));
    }

    #[test]
    fn the_narrowest_cap_is_named_first() {
        let account_month = CapRoom {
            scope: CapScope::Account,
            period: CapPeriod::Month,
            cap: Micros(0),
            spent: Micros(0),
        };
        let key_day = CapRoom {
            scope: CapScope::Key,
            period: CapPeriod::Day,
            ..account_month
        };
        let found = first_cap_passed(&[account_month, key_day], Micros(1));
        assert_eq!(found, Some(key_day));
        assert_eq!(first_cap_passed(&[account_month], Micros(0)), None);
    }

    #[test]
    fn scopes_allow_what_they_list() {
        let read_only = KeyScope {
            tools: vec!["read".into()],
            fields: vec![],
        };
        assert!(read_only.allows_tool("read"));
        assert!(!read_only.allows_tool("write"));
        let fields = KeyScope {
            tools: vec![],
            fields: vec!["code".into(), "session_id".into()],
        };
        assert_eq!(
            fields.refused_field(["code", "bash"].into_iter()),
            Some("bash")
        );
        assert_eq!(KeyScope::default().refused_field(["x"].into_iter()), None);
    }
}
