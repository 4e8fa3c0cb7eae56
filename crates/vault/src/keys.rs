//! Versioned master keys and their text form: one `v<N> <base64 of 32 bytes>` line per version,
//! `#` comments allowed. The highest version seals new secrets; older ones only open.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use crate::{VaultError, random};

/// A master key's bytes.
pub(crate) type KeyBytes = Zeroizing<[u8; 32]>;

/// The master keys, by version.
#[derive(Clone)]
pub struct MasterKeys {
    keys: BTreeMap<u32, KeyBytes>,
}

impl std::fmt::Debug for MasterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let versions: Vec<u32> = self.keys.keys().copied().collect();
        f.debug_struct("MasterKeys")
            .field("versions", &versions)
            .finish_non_exhaustive()
    }
}

impl MasterKeys {
    /// One fresh key, version 1.
    pub fn generate() -> Result<Self, VaultError> {
        Ok(Self {
            keys: BTreeMap::from([(1, random::<32>()?)]),
        })
    }

    /// These keys and a fresh one under the next version, which seals from now on.
    pub fn with_new_version(&self) -> Result<Self, VaultError> {
        let next = self
            .newest()
            .checked_add(1)
            .ok_or_else(|| VaultError::BadKeys("no version after u32::MAX".to_owned()))?;
        let mut keys = self.keys.clone();
        keys.insert(next, random::<32>()?);
        Ok(Self { keys })
    }

    /// Reads the text form. Errors name the line, never its content.
    pub fn parse(text: &str) -> Result<Self, VaultError> {
        let mut keys = BTreeMap::new();
        // `;` separates entries too, so that the keys fit one environment variable
        for (index, line) in text.split(['\n', ';']).enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| VaultError::BadKeys(format!("entry {}: {why}", index + 1));
            let (version, encoded) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad("expected `v<version> <base64 key>`"))?;
            let version: u32 = version
                .strip_prefix('v')
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| bad("the version is `v` and a number from 1"))?;
            let decoded = Zeroizing::new(
                STANDARD
                    .decode(encoded.trim())
                    .map_err(|_| bad("the key is not base64"))?,
            );
            let mut key = Zeroizing::new([0u8; 32]);
            if decoded.len() != key.len() {
                return Err(bad("a key is 32 bytes"));
            }
            key.copy_from_slice(&decoded);
            if keys.insert(version, key).is_some() {
                return Err(bad("this version is listed twice"));
            }
        }
        if keys.is_empty() {
            return Err(VaultError::BadKeys("no key is given".to_owned()));
        }
        Ok(Self { keys })
    }

    /// The text form, for the key file.
    pub fn render(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::from(
            "# toolgate vault master keys. Keep this file secret (mode 0600) and backed up apart\n\
             # from the database: without it no stored secret can ever be read again.\n",
        ));
        for (version, key) in &self.keys {
            text.push_str(&format!("v{version} {}\n", STANDARD.encode(key.as_ref())));
        }
        text
    }

    /// The version that seals new secrets.
    pub fn newest(&self) -> u32 {
        self.keys.keys().next_back().copied().unwrap_or(0)
    }

    pub(crate) fn newest_key(&self) -> Option<(u32, &KeyBytes)> {
        self.keys.iter().next_back().map(|(v, k)| (*v, k))
    }

    pub(crate) fn key(&self, version: u32) -> Option<&KeyBytes> {
        self.keys.get(&version)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_text_form_round_trips_and_the_highest_version_seals() {
        let keys = MasterKeys::generate().unwrap().with_new_version().unwrap();
        assert_eq!(keys.newest(), 2);
        let again = MasterKeys::parse(&keys.render()).unwrap();
        assert_eq!(again.newest(), 2);
        assert_eq!(
            again.key(1).unwrap().as_ref(),
            keys.key(1).unwrap().as_ref()
        );
        assert_ne!(
            again.key(1).unwrap().as_ref(),
            again.key(2).unwrap().as_ref()
        );
    }

    #[test]
    fn bad_key_text_is_refused_without_echoing_it() {
        let key = STANDARD.encode([7u8; 32]);
        for (text, why) in [
            ("", "no key"),
            ("v1", "expected"),
            (&format!("1 {key}") as &str, "version"),
            (&format!("v0 {key}"), "version"),
            ("v1 not-base64!", "not base64"),
            (&format!("v1 {}", STANDARD.encode([1u8; 16])), "32 bytes"),
            (&format!("v1 {key}\nv1 {key}"), "twice"),
        ] {
            let err = MasterKeys::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
            assert!(!err.contains(&key), "the message echoes the key: {err}");
        }
        let debug = format!("{:?}", MasterKeys::parse(&format!("v3 {key}")).unwrap());
        assert!(debug.contains("[3]") && !debug.contains(&key));
    }
}
