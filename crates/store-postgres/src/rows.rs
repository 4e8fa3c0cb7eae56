//! Error mapping shared by the backend's queries.

use toolgate_store::StoreError;

/// Maps a driver error onto the storage seam's cases.
///
/// PostgreSQL's `Display` for a database error is its message only, never the `DETAIL` line
/// that would echo the offending values (a key hash, an address), so the text is safe to log.
pub(crate) fn map_error(error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict("a record with this unique value already exists")
        }
        sqlx::Error::RowNotFound => StoreError::NotFound,
        _ => StoreError::Unavailable(error.to_string()),
    }
}

/// A write's errors, where a broken foreign key means the account does not exist.
pub(crate) fn map_write_error(error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_foreign_key_violation() => StoreError::NotFound,
        _ => map_error(error),
    }
}

/// A master key version as the INTEGER columns hold it.
pub(crate) fn version_to_column(version: u32) -> Result<i32, StoreError> {
    i32::try_from(version).map_err(|_| {
        StoreError::Unavailable(format!(
            "key version {version} does not fit an INTEGER column"
        ))
    })
}
