//! Accounts and the values that name them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::controls::{SpendCaps, Via};

/// An account's stable identifier (a UUID in its hyphenated text form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountId(String);

impl AccountId {
    /// Makes a fresh random identifier.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
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

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an e-mail address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    /// the e-mail address must have the form name@domain and at most 254 characters
    #[error("the e-mail address must have the form name@domain and at most 254 characters")]
    Malformed,
}

/// An e-mail address, trimmed and lower-cased so that one person has one account.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Email(String);

impl Email {
    /// Checks the address's shape (not its deliverability) and normalises its case.
    pub fn parse(raw: &str) -> Result<Self, EmailError> {
        let value = raw.trim().to_ascii_lowercase();
        let well_formed = value.len() <= 254
            && value
                .split_once('@')
                .is_some_and(|(local, domain)| is_local_part(local) && is_domain(domain));
        if well_formed {
            Ok(Self(value))
        } else {
            Err(EmailError::Malformed)
        }
    }

    /// The address as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_local_part(local: &str) -> bool {
    !local.is_empty()
        && local.len() <= 64
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&b))
}

fn is_domain(domain: &str) -> bool {
    domain.contains('.')
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An account as the service sees it after authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Stable identifier.
    pub id: AccountId,
    /// Sign-in and contact address.
    pub email: Email,
    /// Billing tier; `free` is the only one offered today.
    pub tier: String,
    /// The account's own spend caps, as read when it was authenticated (admission reads them
    /// again, exactly; these only tell it that it must).
    pub caps: SpendCaps,
    /// How this request was authenticated.
    pub via: Via,
}

impl Account {
    /// Whether any spend cap (the account's or the named key's) applies to its calls.
    pub fn capped(&self) -> bool {
        self.caps.any() || self.via.named_key().is_some_and(|key| key.caps.any())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_is_normalised() {
        let email = Email::parse("  Ada@Example.ORG ").unwrap();
        assert_eq!(email.as_str(), "ada@example.org");
    }

    #[test]
    fn malformed_emails_are_refused() {
        for raw in [
            "",
            "no-at-sign",
            "@example.org",
            "a@",
            "a@localhost",
            "a b@example.org",
            "a@exa mple.org",
            "a@-x.org",
            "a@x..org",
            "a\u{0}@x.org",
            &format!("{}@x.org", "a".repeat(65)),
            &format!("a@{}.org", "b".repeat(250)),
        ] {
            assert_eq!(Email::parse(raw), Err(EmailError::Malformed), "{raw:?}");
        }
    }
}
