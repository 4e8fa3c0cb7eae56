//! Error mapping shared by the backend's queries.

use toolgate_store::StoreError;

/// Maps a driver error onto the storage seam's cases.
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
