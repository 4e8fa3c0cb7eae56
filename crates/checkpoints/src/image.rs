//! An image as stored: compressed (zstd), then sealed by the vault for its account, bound to
//! what it is (a checkpoint), its session and its version. Blocking: CPU-bound, run off the
//! async workers.

use std::io::Read;

use toolgate_domain::AccountId;
use toolgate_vault::{Vault, VaultError};

/// zstd's level: most of the ratio of higher levels, at a speed close to the disk's.
const LEVEL: i32 = 3;

/// What an image's sealing is bound to besides its account: the purpose, the session id
/// (length first, so no two ids and versions make the same bytes) and the version.
fn context(session_id: &str, version: u64) -> Vec<u8> {
    let id = session_id.as_bytes();
    let len = u64::try_from(id.len()).unwrap_or(u64::MAX);
    [
        &b"checkpoint\0"[..],
        &len.to_be_bytes(),
        id,
        &version.to_be_bytes(),
    ]
    .concat()
}

/// The stored form of `image` as `version` of the session; an error's message names no content.
pub(crate) fn seal(
    vault: &Vault,
    account: &str,
    session_id: &str,
    version: u64,
    image: &[u8],
) -> Result<Vec<u8>, String> {
    let compressed =
        zstd::bulk::compress(image, LEVEL).map_err(|e| format!("compression failed: {e}"))?;
    vault
        .seal_blob(
            &AccountId::from_stored(account.to_owned()),
            &context(session_id, version),
            &compressed,
        )
        .map_err(|e| e.to_string())
}

/// The image `sealed` holds, if it is `version` of the session, opens, and has at most `max`
/// bytes.
pub(crate) fn open(
    vault: &Vault,
    account: &str,
    session_id: &str,
    version: u64,
    sealed: &[u8],
    max: u64,
) -> Result<Vec<u8>, String> {
    let compressed = vault
        .open_blob(
            &AccountId::from_stored(account.to_owned()),
            &context(session_id, version),
            sealed,
        )
        .map_err(|e| match e {
            // the vault's wording speaks of secrets
            VaultError::Undecryptable => {
                "it does not open (damaged, cut short, moved, or sealed under another master key)"
                    .to_owned()
            }
            VaultError::UnknownKeyVersion(version) => format!(
                "it was sealed under master key version {version}, which this service does not have"
            ),
            e => e.to_string(),
        })?;
    // the frame says how large the image is (compress writes it): one allocation, not many
    let said = zstd::zstd_safe::get_frame_content_size(&compressed)
        .ok()
        .flatten();
    let capacity = said.unwrap_or(0).min(max);
    let mut image = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    zstd::stream::read::Decoder::new(compressed.as_slice())
        .map_err(|e| format!("decompression failed: {e}"))?
        .take(max.saturating_add(1))
        .read_to_end(&mut image)
        .map_err(|e| format!("decompression failed: {e}"))?;
    if image.len() as u64 > max {
        return Err("the image is larger than a checkpoint may be".to_owned());
    }
    Ok(image)
}
