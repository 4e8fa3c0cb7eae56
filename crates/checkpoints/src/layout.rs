//! Object names: `<prefix>/<account>/<hex of the session id>/<version, 16 hex digits>.ckpt`.
//!
//! Names hold the account id and the session id in hex (never in the objects' contents, which
//! are sealed). An account id other than a plain one (`[A-Za-z0-9_-]`, at most 128 bytes; ids
//! are UUIDs) is replaced by `h.` and the hex SHA-256 of it. The hex session id (up to 512
//! digits) is cut into directory levels of [`SEGMENT`] digits, since a file name has at most
//! 255 bytes; a listing reads them back, so `list` can name each session.

use object_store::path::Path;

/// Hex digits of the session id per directory level.
const SEGMENT: usize = 200;
const SUFFIX: &str = ".ckpt";

/// The directory name of `account` (the seam's one rule, as workspaces are named).
pub(crate) fn account_dir(account: &str) -> String {
    toolgate_sandbox::account_dir_name(account)
}

/// Where every object of the store lives.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: Vec<String>,
}

/// An object's place, read back from its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Place {
    /// The account's directory name ([`account_dir`]).
    pub(crate) account_dir: String,
    /// The session id, in hex.
    pub(crate) session_hex: String,
    pub(crate) version: u64,
}

impl Layout {
    /// Objects under `prefix` (`a/b`, or empty for the store's root).
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix
                .split('/')
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }

    fn path<'a>(&'a self, rest: impl IntoIterator<Item = &'a str>) -> Path {
        Path::from_iter(self.prefix.iter().map(String::as_str).chain(rest))
    }

    /// The directory of everything the store holds.
    pub(crate) fn root(&self) -> Path {
        self.path([])
    }

    /// The directory of an account's sessions.
    pub(crate) fn account(&self, account: &str) -> Path {
        let dir = account_dir(account);
        self.path([dir.as_str()])
    }

    /// The directory of a session's versions (which may also hold longer sessions' directories:
    /// a listing keeps only the places of this session).
    pub(crate) fn session(&self, account: &str, session_id: &str) -> Path {
        let dir = account_dir(account);
        let hex = hex::encode(session_id.as_bytes());
        self.path(std::iter::once(dir.as_str()).chain(segments(&hex)))
    }

    /// A version's object.
    pub(crate) fn object(&self, place: &Place) -> Path {
        let file = format!("{:016x}{SUFFIX}", place.version);
        self.path(
            std::iter::once(place.account_dir.as_str())
                .chain(segments(&place.session_hex))
                .chain([file.as_str()]),
        )
    }

    /// A probe object's name: it never reads as a place (no account directory has a dot but a
    /// hashed one, which is followed by 64 hex digits).
    pub(crate) fn probe(&self, token: &str) -> Path {
        let name = format!("probe.{token}");
        self.path([name.as_str()])
    }

    /// The place `path` names; `None` for anything that is not a version's object.
    pub(crate) fn place(&self, path: &Path) -> Option<Place> {
        let mut parts = path.parts();
        for expected in &self.prefix {
            if parts.next()?.as_ref() != expected {
                return None;
            }
        }
        let parts: Vec<String> = parts.map(|part| part.as_ref().to_owned()).collect();
        let (file, dirs) = parts.split_last()?;
        let (account_dir, session) = dirs.split_first()?;
        let version = file.strip_suffix(SUFFIX)?;
        if version.len() != 16 || !version.bytes().all(is_lower_hex) {
            return None;
        }
        let version = u64::from_str_radix(version, 16).ok()?;
        let session_hex = session.concat();
        // only the canonical cut: every level but the last full, none empty
        let canonical = segments(&session_hex).eq(session.iter().map(String::as_str));
        let even = session_hex.len() % 2 == 0 && session_hex.bytes().all(is_lower_hex);
        (canonical && even && !session_hex.is_empty()).then(|| Place {
            account_dir: account_dir.clone(),
            session_hex,
            version,
        })
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `hex` cut into directory levels.
fn segments(hex: &str) -> impl Iterator<Item = &str> {
    // hex is ASCII, so every cut is a char boundary
    hex.as_bytes()
        .chunks(SEGMENT)
        .filter_map(|chunk| std::str::from_utf8(chunk).ok())
}

impl Place {
    /// The place of `version` of a session.
    pub(crate) fn new(account: &str, session_id: &str, version: u64) -> Self {
        Self {
            account_dir: account_dir(account),
            session_hex: hex::encode(session_id.as_bytes()),
            version,
        }
    }

    /// Whether this is an object of `session_id` of `account`.
    pub(crate) fn is_of(&self, account: &str, session_id: &str) -> bool {
        self.account_dir == account_dir(account)
            && self.session_hex == hex::encode(session_id.as_bytes())
    }

    /// The session id, when it is UTF-8 (as every id given to the store is).
    pub(crate) fn session_id(&self) -> Option<String> {
        String::from_utf8(hex::decode(&self.session_hex).ok()?).ok()
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
