//! The database and its companions are the owner's alone: files 0600, a directory we create
//! 0711 (the sandbox's session root may live beneath it, and confined sessions must be able to
//! pass through). Without this, `toolgate.db` took the umask's 0644 and every local user could
//! read the key hashes and the ledger.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every file the store creates.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a data directory the store creates.
pub const DIR_MODE: u32 = 0o711;

/// Creates `dir` (and missing parents) owner-only but traversable.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` read-write, creating it 0600; an existing file is narrowed to 0600 too, so an
/// installation made before this rule is fixed on its next start.
pub fn open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)?;
    narrow(&file)?;
    Ok(file)
}

/// Narrows an existing file, if there is one, to 0600 (SQLite's `-wal` and `-shm` copy the
/// database's mode, but ones left by an older version keep theirs).
pub fn narrow_if_present(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(file) => narrow(&file),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn narrow(file: &File) -> io::Result<()> {
    if file.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_the_owners() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
        let file = dir.join("db");
        open(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        open(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE, "an older, wider file is narrowed");
        let wal = dir.join("db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, Permissions::from_mode(0o664)).unwrap();
        narrow_if_present(&wal).unwrap();
        assert_eq!(mode(&wal), FILE_MODE);
        narrow_if_present(&dir.join("missing")).unwrap();
    }
}
