//! The secrets vault: each secret's value is encrypted under a fresh data key of its own
//! (XChaCha20-Poly1305), and that data key is wrapped by a versioned master key. The associated
//! data binds the account, the name and the master key version, so a sealed value copied to
//! another account or name, or relabelled with another version, does not open. Large opaque
//! values (blobs) are sealed the same way in authenticated chunks ([`Vault::seal_blob`]).
//!
//! Storage sees only [`SealedSecret`]s; plaintext exists only in [`Zeroizing`] buffers while a
//! call that names the secret runs. [`Redactor`] replaces a used secret's value, in the forms
//! code is likely to print it, by `[REDACTED:NAME]`.

mod blob;
mod keyfile;
mod keys;
mod redact;
mod seal;

pub use blob::{BLOB_CHUNK, sealed_blob_len};
pub use keyfile::{KeyFile, KeySource};
pub use keys::MasterKeys;
pub use redact::{Redactor, StreamRedactor};
pub use seal::Vault;
pub use zeroize::Zeroizing;

use toolgate_domain::SealedSecret;

/// What went wrong in the vault. No variant ever carries key material or a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// the secret was sealed under a master key version this service does not have
    #[error("a secret was sealed under master key version {0}, which this service does not have")]
    UnknownKeyVersion(u32),
    /// authentication failed: the wrong master key, or damaged or moved data
    #[error("a secret could not be decrypted (wrong master key, or damaged data)")]
    Undecryptable,
    /// the value is larger than a secret may be
    #[error("a secret's value has at most {max} bytes; this one has {got}")]
    TooLarge {
        /// the limit
        max: usize,
        /// the value's size
        got: usize,
    },
    /// the operating system gave no randomness
    #[error("no randomness available for a new key")]
    NoRandomness,
    /// the master key text or file is unusable; the message says why, never what it holds
    #[error("vault master key: {0}")]
    BadKeys(String),
    /// the key file could not be read or written
    #[error("vault key file {path}: {source}")]
    KeyFileIo {
        /// the file
        path: String,
        /// what failed
        source: std::io::Error,
    },
}

/// A sealed secret's size on disk beyond its value: two nonces and two tags plus the data key.
pub const SEAL_OVERHEAD: usize = 2 * (24 + 16) + 32;

/// Whether `sealed` is wrapped by a master key older than `version`.
pub fn is_older_than(sealed: &SealedSecret, version: u32) -> bool {
    sealed.key_version < version
}

fn random<const N: usize>() -> Result<Zeroizing<[u8; N]>, VaultError> {
    let mut bytes = Zeroizing::new([0u8; N]);
    getrandom::fill(bytes.as_mut()).map_err(|_| VaultError::NoRandomness)?;
    Ok(bytes)
}
