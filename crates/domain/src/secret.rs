//! Vault secrets as the rest of the service names them: a checked name, a sealed value, and
//! what may be shown of a secret (its name and dates, never its value).

use std::fmt;

/// The largest value a secret may hold, in bytes.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

/// The longest name, in characters.
const MAX_NAME_CHARS: usize = 128;

/// A secret's name: `[A-Za-z_][A-Za-z0-9_]{0,127}`, so that it is also a valid environment
/// variable name in every shell.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretName(String);

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretNameError {
    /// the name is empty
    #[error("a secret name cannot be empty")]
    Empty,
    /// the name is longer than 128 characters
    #[error("a secret name has at most 128 characters")]
    TooLong,
    /// the name starts with a digit or holds a character outside `[A-Za-z0-9_]`
    #[error(
        "a secret name starts with a letter or `_` and holds only letters, digits and `_` \
         (like OPENAI_API_KEY)"
    )]
    Malformed,
}

impl SecretName {
    /// Checks `raw` against the rule above.
    pub fn parse(raw: &str) -> Result<Self, SecretNameError> {
        let mut chars = raw.chars();
        let first = chars.next().ok_or(SecretNameError::Empty)?;
        if raw.len() > MAX_NAME_CHARS {
            return Err(SecretNameError::TooLong);
        }
        let head_ok = first.is_ascii_alphabetic() || first == '_';
        if !head_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(SecretNameError::Malformed);
        }
        Ok(Self(raw.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretName({})", self.0)
    }
}

/// A secret as it is stored: the value encrypted under a data key of its own, and that data key
/// wrapped by the master key of version `key_version`. Both are opaque bytes to storage.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret {
    /// The master key version that wrapped the data key.
    pub key_version: u32,
    /// The data key, encrypted by the master key (nonce first).
    pub wrapped_key: Vec<u8>,
    /// The value, encrypted by the data key (nonce first).
    pub ciphertext: Vec<u8>,
}

impl fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedSecret")
            .field("key_version", &self.key_version)
            .field("wrapped_key_bytes", &self.wrapped_key.len())
            .field("ciphertext_bytes", &self.ciphertext.len())
            .finish()
    }
}

/// What may be shown of a secret: its name, when it was created and last replaced, and the
/// hosts it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    /// Its name.
    pub name: SecretName,
    /// Created, Unix milliseconds.
    pub created_ms: i64,
    /// Last replaced (or created), Unix milliseconds.
    pub updated_ms: i64,
    /// The host patterns the sessions' network proxy may send it to (empty: none).
    pub hosts: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_environment_variable_rule() {
        for good in ["A", "_", "OPENAI_API_KEY", "db_url2", &"x".repeat(128)] {
            assert_eq!(SecretName::parse(good).map(|n| n.0), Ok(good.to_owned()));
        }
        assert_eq!(SecretName::parse(""), Err(SecretNameError::Empty));
        assert_eq!(
            SecretName::parse(&"x".repeat(129)),
            Err(SecretNameError::TooLong)
        );
        for bad in [
            "1A",
            "A-B",
            "A B",
            "é",
            "A.B",
            "A\0",
            "$HOME",
            "{{secret:A}}",
        ] {
            assert_eq!(
                SecretName::parse(bad),
                Err(SecretNameError::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_sealed_secret_shows_only_its_sizes() {
        let sealed = SealedSecret {
            key_version: 3,
            wrapped_key: vec![7; 72],
            ciphertext: b"opaque".to_vec(),
        };
        let shown = format!("{sealed:?}");
        assert!(shown.contains("key_version: 3") && !shown.contains("7, 7"));
    }
}
