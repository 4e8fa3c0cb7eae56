//! Bearer tokens of the dashboard: sign-in links and session cookies. 256 random bits each,
//! written as 64 lowercase hex characters; storage keeps only their SHA-256.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::KeyShapeError;

/// Hex characters in a token.
const TOKEN_HEX_LEN: usize = 64;

/// A fresh or presented token; `Debug` never shows it.
#[derive(Clone)]
pub struct SecretToken(String);

impl SecretToken {
    /// Draws a new token from the operating system's generator.
    pub fn generate() -> Result<Self, KeyShapeError> {
        let mut bytes = [0u8; TOKEN_HEX_LEN / 2];
        getrandom::fill(&mut bytes).map_err(|_| KeyShapeError::NoRandomness)?;
        Ok(Self(hex::encode(bytes)))
    }

    /// Reads a presented token; `None` unless it has exactly the generated shape.
    pub fn parse(presented: &str) -> Option<Self> {
        let well_formed = presented.len() == TOKEN_HEX_LEN
            && presented
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed.then(|| Self(presented.to_owned()))
    }

    /// The token itself, for the link or cookie that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What storage keeps instead of the token.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// The anti-forgery value of the session this token opens: derived from the cookie, which
    /// another site can neither read nor guess, so forms need no stored value of their own.
    pub fn csrf(&self) -> String {
        let digest = Sha256::new()
            .chain_update(b"toolgate/csrf/1\0")
            .chain_update(self.0.as_bytes())
            .finalize();
        hex::encode(&digest[..16])
    }

    /// Whether `presented` is this session's anti-forgery value, compared in constant time.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        self.csrf().as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

impl fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretToken(…)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_are_random_hex_and_parse_back() {
        let (a, b) = (
            SecretToken::generate().unwrap(),
            SecretToken::generate().unwrap(),
        );
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.expose().len(), 64);
        assert_eq!(SecretToken::parse(a.expose()).unwrap().hash(), a.hash());
        assert_ne!(a.hash(), b.hash());
        for bad in [
            "",
            "abc",
            &a.expose().to_uppercase(),
            &format!("{}0", a.expose()),
        ] {
            assert!(SecretToken::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(format!("{a:?}"), "SecretToken(…)");
    }

    #[test]
    fn csrf_is_bound_to_the_session() {
        let (a, b) = (
            SecretToken::generate().unwrap(),
            SecretToken::generate().unwrap(),
        );
        assert!(a.csrf_matches(&a.csrf()));
        assert!(!a.csrf_matches(&b.csrf()));
        assert!(!a.csrf_matches(""));
        assert_eq!(a.csrf().len(), 32);
    }
}
