//! The key epoch: a small file beside the database holding a random token, overwritten whenever
//! a key changes. The server reads it (one `pread`, no query) before trusting a cached key, so a
//! rotation by another process — the CLI — takes effect on the very next request.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of one token: 16 hex digits. Always written whole at offset 0.
const TOKEN_LEN: usize = 16;

/// The epoch file of one database, kept open.
#[derive(Debug)]
pub struct KeyEpoch {
    file: File,
}

impl KeyEpoch {
    /// The epoch beside `database`, created (with a first token) when missing.
    pub fn beside(database: &Path) -> std::io::Result<Self> {
        let mut name = database.as_os_str().to_owned();
        name.push("-keys-epoch");
        let path = PathBuf::from(name);
        let file = crate::file_modes::open(&path)?;
        let epoch = Self { file };
        if epoch.current().is_none() {
            epoch.bump()?;
        }
        Ok(epoch)
    }

    /// The current token; `None` if it cannot be read (then nothing may be cached).
    pub fn current(&self) -> Option<u64> {
        let mut buf = [0u8; TOKEN_LEN];
        self.file.read_exact_at(&mut buf, 0).ok()?;
        u64::from_str_radix(std::str::from_utf8(&buf).ok()?, 16).ok()
    }

    /// Overwrites the token with a fresh random one. A reader racing the write can at worst see
    /// a mix of old and new digits, which differs from the old token, so it only misses the cache.
    pub fn bump(&self) -> std::io::Result<()> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let token = format!("{:016x}", u64::from_le_bytes(random));
        self.file.write_all_at(token.as_bytes(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bump_changes_the_token_for_every_handle() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let server = KeyEpoch::beside(&db).unwrap();
        let cli = KeyEpoch::beside(&db).unwrap();
        let first = server.current().unwrap();
        assert_eq!(cli.current(), Some(first), "opening keeps the token");
        cli.bump().unwrap();
        let second = server.current().unwrap();
        assert_ne!(first, second, "another handle's bump is seen");
        std::fs::write(dir.path().join("t.db-keys-epoch"), "garbage!").unwrap();
        assert_eq!(
            server.current(),
            None,
            "an unreadable token disables caching"
        );
    }
}
