//! Sealing and opening large opaque values (blobs: a hibernated session's image), as
//! [`crate::seal`] does a secret, but without its size limit and in chunks: the value is
//! encrypted under a fresh data key with the STREAM construction (64 KiB chunks, each with its
//! own nonce from a counter and a last-chunk flag), so a blob cut short at any point, a chunk
//! boundary included, does not open. The data key is wrapped by the newest master key.
//!
//! The associated data binds the account and the caller's `context` (what the blob is and
//! where it belongs): a blob moved to another account or context does not open.
//!
//! Layout: `tgb1`, the master key version (4 bytes, big-endian), the wrapped data key
//! ([`WRAPPED_KEY`] bytes), the STREAM nonce prefix ([`STREAM_NONCE`] bytes), then the chunks,
//! each [`BLOB_CHUNK`] bytes of ciphertext and a 16-byte tag, the last one shorter or as long.

use chacha20poly1305::aead::Payload;
use chacha20poly1305::aead::stream::{NewStream, StreamBE32, StreamPrimitive};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use toolgate_domain::AccountId;

use crate::{Vault, VaultError, random};

/// Plaintext bytes per sealed chunk.
pub const BLOB_CHUNK: usize = 64 * 1024;

const MAGIC: &[u8; 4] = b"tgb1";
const TAG: usize = 16;
/// A wrapped data key: its nonce, the 32 key bytes and a tag.
const WRAPPED_KEY: usize = 24 + 32 + TAG;
/// XChaCha20's 24-byte nonce less STREAM's 4-byte counter and 1-byte flag.
const STREAM_NONCE: usize = 19;
const HEADER: usize = MAGIC.len() + 4 + WRAPPED_KEY + STREAM_NONCE;

/// The size of a sealed blob of `plain_len` bytes.
pub fn sealed_blob_len(plain_len: usize) -> usize {
    HEADER + chunk_count(plain_len) * TAG + plain_len
}

/// An empty value is one empty last chunk: there is always a last chunk to authenticate.
fn chunk_count(plain_len: usize) -> usize {
    plain_len.div_ceil(BLOB_CHUNK).max(1)
}

impl Vault {
    /// Encrypts `plaintext` for `account`, bound to `context` (the caller's purpose and place
    /// for it, e.g. a label, an id and a version): it opens only with the same account and
    /// context, under a master key this vault has.
    pub fn seal_blob(
        &self,
        account: &AccountId,
        context: &[u8],
        plaintext: &[u8],
    ) -> Result<Vec<u8>, VaultError> {
        let chunks = chunk_count(plaintext.len());
        let too_large = || VaultError::TooLarge {
            max: BLOB_CHUNK.saturating_mul(u32::MAX as usize),
            got: plaintext.len(),
        };
        let last = u32::try_from(chunks - 1).map_err(|_| too_large())?;
        let data_key = random::<32>()?;
        let (version, wrapped) =
            self.wrap_new_key(&data_key, |version| key_context(account, context, version))?;
        let nonce = random::<STREAM_NONCE>()?;
        let key: &[u8; 32] = &data_key;
        let stream = StreamBE32::from_aead(XChaCha20Poly1305::new(key.into()), &(*nonce).into());
        let aad = value_context(account, context);

        let mut sealed = Vec::with_capacity(sealed_blob_len(plaintext.len()));
        sealed.extend_from_slice(MAGIC);
        sealed.extend_from_slice(&version.to_be_bytes());
        sealed.extend_from_slice(&wrapped);
        sealed.extend_from_slice(nonce.as_ref());
        let pieces = plaintext.chunks(BLOB_CHUNK).chain(
            // `chunks` of an empty slice yields nothing; the empty value is one empty chunk
            plaintext.is_empty().then_some(&[][..]),
        );
        for (position, piece) in (0..=last).zip(pieces) {
            let payload = Payload {
                msg: piece,
                aad: &aad,
            };
            let chunk = stream
                .encrypt(position, position == last, payload)
                .map_err(|_| VaultError::Undecryptable)?;
            sealed.extend_from_slice(&chunk);
        }
        Ok(sealed)
    }

    /// Decrypts what [`Vault::seal_blob`] sealed for `account` under `context`. Anything cut
    /// short, changed, moved or relabelled is [`VaultError::Undecryptable`]; a blob sealed under
    /// a master key version this vault does not have is [`VaultError::UnknownKeyVersion`].
    ///
    /// The plaintext is a plain `Vec` (not wiped on drop): a blob is bulk data the caller
    /// copies on anyway, not a key.
    pub fn open_blob(
        &self,
        account: &AccountId,
        context: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, VaultError> {
        let (header, body) = sealed
            .split_at_checked(HEADER)
            .ok_or(VaultError::Undecryptable)?;
        let (magic, rest) = header.split_at(MAGIC.len());
        let (version, rest) = rest.split_at(4);
        let (wrapped, nonce) = rest.split_at(WRAPPED_KEY);
        if magic != MAGIC {
            return Err(VaultError::Undecryptable);
        }
        let version =
            u32::from_be_bytes(version.try_into().map_err(|_| VaultError::Undecryptable)?);
        let data_key =
            self.unwrap_data_key(version, wrapped, &key_context(account, context, version))?;
        let nonce: [u8; STREAM_NONCE] = nonce.try_into().map_err(|_| VaultError::Undecryptable)?;
        let key: &[u8; 32] = &data_key;
        let stream = StreamBE32::from_aead(XChaCha20Poly1305::new(key.into()), &nonce.into());
        let aad = value_context(account, context);

        // every chunk but the last is whole; the last has at least its tag
        let chunks = body.len().div_ceil(BLOB_CHUNK + TAG).max(1);
        let last = u32::try_from(chunks - 1).map_err(|_| VaultError::Undecryptable)?;
        let mut plain = Vec::with_capacity(body.len().saturating_sub(chunks * TAG));
        let pieces = body
            .chunks(BLOB_CHUNK + TAG)
            .chain(body.is_empty().then_some(&[][..]));
        for (position, piece) in (0..=last).zip(pieces) {
            let payload = Payload {
                msg: piece,
                aad: &aad,
            };
            let chunk = stream
                .decrypt(position, position == last, payload)
                .map_err(|_| VaultError::Undecryptable)?;
            plain.extend_from_slice(&chunk);
        }
        Ok(plain)
    }
}

/// What a blob's chunks are bound to.
fn value_context(account: &AccountId, context: &[u8]) -> Vec<u8> {
    [
        &b"toolgate/blob-value/1\0"[..],
        account.as_str().as_bytes(),
        b"\0",
        context,
    ]
    .concat()
}

/// What a blob's data key wrapping is bound to; the version has a fixed size, so the context
/// after it is unambiguous.
fn key_context(account: &AccountId, context: &[u8], version: u32) -> Vec<u8> {
    [
        &b"toolgate/blob-data-key/1\0"[..],
        account.as_str().as_bytes(),
        b"\0",
        &version.to_be_bytes(),
        context,
    ]
    .concat()
}

#[cfg(test)]
#[path = "blob_tests.rs"]
mod tests;
