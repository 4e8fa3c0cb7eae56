//! The shared secret between front ends and nodes: read from a file, sent as a bearer token,
//! compared in constant time, never shown.

use std::path::Path;

use subtle::ConstantTimeEq;

/// The fewest characters a node token may have (a random 32-byte token in hex has 64).
pub const MIN_TOKEN_CHARS: usize = 32;

/// The node token. `Debug` never shows it.
#[derive(Clone)]
pub struct NodeToken(String);

/// Why a node token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// the file could not be read
    #[error("the node token file {path} cannot be read: {source}")]
    Read {
        /// the file
        path: String,
        /// why
        source: std::io::Error,
    },
    /// its content is not a usable token (the message never holds it)
    #[error(
        "the node token must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces (one line)"
    )]
    Weak,
    /// the file may be read by others than its owner
    #[error("the node token file {0} may be read by others than its owner (chmod 600 it)")]
    Exposed(String),
}

impl NodeToken {
    /// The token in `text` (one line; surrounding white space is dropped).
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let token = text.trim();
        let printable = token.bytes().all(|b| b.is_ascii_graphic());
        if token.len() < MIN_TOKEN_CHARS || !printable {
            return Err(TokenError::Weak);
        }
        Ok(Self(token.to_owned()))
    }

    /// The token in the file at `path`, which only its owner may read.
    pub fn read(path: &Path) -> Result<Self, TokenError> {
        let shown = path.display().to_string();
        let bytes = read_private(path).map_err(|error| match error {
            PrivateFileError::Read(source) => TokenError::Read {
                path: shown.clone(),
                source,
            },
            PrivateFileError::Exposed => TokenError::Exposed(shown.clone()),
        })?;
        Self::parse(std::str::from_utf8(&bytes).map_err(|_| TokenError::Weak)?)
    }

    /// The `authorization` header's value.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether an `authorization` header's value carries this token (constant time in the
    /// token's bytes).
    pub(crate) fn admits(&self, header: Option<&http::HeaderValue>) -> bool {
        let Some(given) = header.and_then(|h| h.as_bytes().strip_prefix(b"Bearer ")) else {
            return false;
        };
        given.ct_eq(self.0.as_bytes()).into()
    }
}

/// Why a file only its owner may read (the token, a TLS key) could not be had.
#[derive(Debug)]
pub(crate) enum PrivateFileError {
    /// it could not be read
    Read(std::io::Error),
    /// its group or others may read it
    Exposed,
}

/// The bytes of the secret file at `path`, refused when anyone but its owner may read it: a
/// secret others can read is no secret, and saying so at start beats finding out later.
pub(crate) fn read_private(path: &Path) -> Result<Vec<u8>, PrivateFileError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(PrivateFileError::Read)?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(PrivateFileError::Exposed);
    }
    std::fs::read(path).map_err(PrivateFileError::Read)
}

impl std::fmt::Debug for NodeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeToken(…)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_is_checked_and_never_shown() {
        let secret = "k".repeat(40);
        let token = NodeToken::parse(&format!("{secret}\n")).unwrap();
        assert!(!format!("{token:?}").contains(&secret));
        let header = http::HeaderValue::from_str(&token.bearer()).unwrap();
        assert!(token.admits(Some(&header)));
        for wrong in [
            format!("Bearer {}", "k".repeat(39)),
            secret.clone(),
            format!("Basic {secret}"),
        ] {
            let header = http::HeaderValue::from_str(&wrong).unwrap();
            assert!(!token.admits(Some(&header)), "{wrong}");
        }
        assert!(!token.admits(None));
        for weak in [
            "short",
            &format!("{} {}", "a".repeat(20), "b".repeat(20)),
            "",
        ] {
            let error = NodeToken::parse(weak).unwrap_err();
            assert!(!error.to_string().contains("aaaa"), "{error}");
        }
    }

    #[test]
    fn a_token_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node-token");
        std::fs::write(&path, "t".repeat(64)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            NodeToken::read(&path),
            Err(TokenError::Exposed(_))
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        NodeToken::read(&path).unwrap();
        assert!(matches!(
            NodeToken::read(&dir.path().join("missing")),
            Err(TokenError::Read { .. })
        ));
    }
}
