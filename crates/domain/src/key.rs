//! API keys: generation, shape checks and the hash that storage keeps.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Number of hexadecimal characters after the key's prefix.
pub const KEY_SECRET_HEX_LEN: usize = 64;

/// Why a brand was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrandError {
    /// the brand must be 1 to 16 lowercase letters or digits, starting with a letter
    #[error("the brand must be 1 to 16 lowercase letters or digits, starting with a letter")]
    Malformed,
}

/// The operator's prefix for tool names (`{brand}_read`) and keys (`{brand}k_…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brand {
    name: String,
    key_prefix: String,
}

impl Brand {
    /// Validates a brand such as `svc`.
    pub fn parse(raw: &str) -> Result<Self, BrandError> {
        let well_formed = (1..=16).contains(&raw.len())
            && raw.starts_with(|c: char| c.is_ascii_lowercase())
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !well_formed {
            return Err(BrandError::Malformed);
        }
        Ok(Self {
            name: raw.to_owned(),
            key_prefix: format!("{raw}k_"),
        })
    }

    /// The brand itself, e.g. `svc`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prefix every key carries, e.g. `svck_`.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The name of one of the three tools, e.g. `svc_read` for `read`.
    pub fn tool_name(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.name)
    }
}

/// Why a presented key was refused before any look-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyShapeError {
    /// the API key does not have the documented shape
    #[error("the API key does not have the documented shape")]
    Malformed,
    /// the operating system's random number generator failed
    #[error("the operating system's random number generator failed")]
    NoRandomness,
}

/// A full API key (prefix and secret). Treated like a password: never printed by `Debug`.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Draws a new key from the operating system's CSPRNG.
    pub fn generate(brand: &Brand) -> Result<Self, KeyShapeError> {
        let mut secret = [0u8; KEY_SECRET_HEX_LEN / 2];
        getrandom::fill(&mut secret).map_err(|_| KeyShapeError::NoRandomness)?;
        Ok(Self(format!(
            "{}{}",
            brand.key_prefix(),
            hex::encode(secret)
        )))
    }

    /// Accepts only `{prefix}` followed by exactly 64 lowercase hex characters.
    pub fn parse(brand: &Brand, presented: &str) -> Result<Self, KeyShapeError> {
        let secret = presented
            .strip_prefix(brand.key_prefix())
            .ok_or(KeyShapeError::Malformed)?;
        let well_formed = secret.len() == KEY_SECRET_HEX_LEN
            && secret
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if well_formed {
            Ok(Self(presented.to_owned()))
        } else {
            Err(KeyShapeError::Malformed)
        }
    }

    /// The key's text, for the one moment it is shown to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 digest that storage keeps instead of the key.
    pub fn hash(&self) -> KeyHash {
        KeyHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// SHA-256 of an API key: what storage indexes and compares.
#[derive(Clone, Copy, Eq)]
pub struct KeyHash([u8; 32]);

impl KeyHash {
    /// Wraps a digest read back from storage; `None` when it has the wrong length.
    pub fn from_stored(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl PartialEq for KeyHash {
    /// Constant-time, so timing never tells how much of a digest matched.
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHash(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Brand {
        Brand::parse("svc").unwrap()
    }

    #[test]
    fn generated_keys_have_the_documented_shape_and_differ() {
        let a = ApiKey::generate(&svc()).unwrap();
        let b = ApiKey::generate(&svc()).unwrap();
        assert!(a.expose().starts_with("svck_"));
        assert_eq!(a.expose().len(), 5 + 64);
        assert!(ApiKey::parse(&svc(), a.expose()).is_ok());
        assert_ne!(a.expose(), b.expose());
        assert!(a.hash() != b.hash());
    }

    #[test]
    fn malformed_keys_are_refused_by_shape() {
        let good = "svck_".to_owned() + &"a".repeat(64);
        assert!(ApiKey::parse(&svc(), &good).is_ok());
        for bad in [
            String::new(),
            "svck_".to_owned(),
            "svck_".to_owned() + &"a".repeat(63),
            "svck_".to_owned() + &"a".repeat(65),
            "svck_".to_owned() + &"A".repeat(64),
            "svck_".to_owned() + &"g".repeat(64),
            "xyzk_".to_owned() + &"a".repeat(64),
            " svck_".to_owned() + &"a".repeat(64),
            "svck_".to_owned() + &"é".repeat(32),
        ] {
            assert_eq!(
                ApiKey::parse(&svc(), &bad).map(|_| ()),
                Err(KeyShapeError::Malformed)
            );
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = ApiKey::generate(&svc()).unwrap();
        let shown = format!("{key:?} {:?}", key.hash());
        assert!(!shown.contains(&key.expose()[5..]));
    }

    #[test]
    fn brands_are_validated() {
        assert_eq!(svc().key_prefix(), "svck_");
        assert_eq!(svc().tool_name("read"), "svc_read");
        for bad in ["", "Svc", "1svc", "s-c", "abcdefghijklmnopq"] {
            assert_eq!(Brand::parse(bad), Err(BrandError::Malformed));
        }
    }
}
