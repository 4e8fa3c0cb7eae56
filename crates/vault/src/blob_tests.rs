#![allow(clippy::unwrap_used)]

use toolgate_domain::AccountId;

use super::{HEADER, TAG};
use crate::{BLOB_CHUNK, KeySource, MasterKeys, Vault, VaultError, sealed_blob_len};

fn given() -> Vault {
    Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap()
}

/// Bytes that do not repeat in a way that lines up with chunks.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn refused(vault: &Vault, account: &AccountId, context: &[u8], sealed: &[u8], what: &str) {
    let opened = vault.open_blob(account, context, sealed);
    assert!(
        matches!(opened, Err(VaultError::Undecryptable)),
        "{what}: {:?}",
        opened.map(|plain| plain.len())
    );
}

#[test]
fn a_blob_of_any_size_opens_whole_where_it_was_sealed() {
    let vault = given();
    let account = AccountId::generate();
    for len in [
        0,
        1,
        BLOB_CHUNK - 1,
        BLOB_CHUNK,
        BLOB_CHUNK + 1,
        3 * BLOB_CHUNK,
        3 * BLOB_CHUNK + 5,
    ] {
        let plain = pattern(len);
        let sealed = vault.seal_blob(&account, b"ctx", &plain).unwrap();
        assert_eq!(sealed.len(), sealed_blob_len(len), "{len} bytes");
        assert_eq!(
            vault.open_blob(&account, b"ctx", &sealed).unwrap(),
            plain,
            "{len} bytes"
        );
        // a fresh data key and nonce each time
        assert_ne!(vault.seal_blob(&account, b"ctx", &plain).unwrap(), sealed);
    }
}

#[test]
fn a_blob_opens_only_with_its_account_and_context() {
    let vault = given();
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let context = b"checkpoint\0session-1\0\0\0\0\0\0\0\0\x07";
    let sealed = vault
        .seal_blob(&alice, context, &pattern(2 * BLOB_CHUNK + 9))
        .unwrap();
    refused(&vault, &bob, context, &sealed, "another account");
    let mut other = context.to_vec();
    *other.last_mut().unwrap() = 8;
    refused(
        &vault,
        &alice,
        &other,
        &sealed,
        "another version in the context",
    );
    refused(&vault, &alice, b"", &sealed, "no context");
    refused(
        &vault,
        &alice,
        &context[1..],
        &sealed,
        "the context shortened",
    );
    refused(
        &vault,
        &alice,
        &[context, &b"x"[..]].concat(),
        &sealed,
        "lengthened",
    );
    refused(&given(), &alice, context, &sealed, "another master key");
    // the data key is unwrapped under the version the header names: relabelled, it fails
    let mut relabelled = sealed.clone();
    relabelled[7] = 2;
    assert!(matches!(
        vault.open_blob(&alice, context, &relabelled),
        Err(VaultError::UnknownKeyVersion(2))
    ));
}

#[test]
fn a_blob_cut_short_anywhere_does_not_open() {
    let vault = given();
    let account = AccountId::generate();
    for len in [0, 10, BLOB_CHUNK, 3 * BLOB_CHUNK, 3 * BLOB_CHUNK + 100] {
        let sealed = vault.seal_blob(&account, b"c", &pattern(len)).unwrap();
        // inside the header, byte by byte
        for keep in 0..=HEADER {
            refused(&vault, &account, b"c", &sealed[..keep], "header cut");
        }
        // at every chunk boundary (a STREAM without its last chunk), and in every tag
        let mut cuts = Vec::new();
        let mut boundary = HEADER + BLOB_CHUNK + TAG;
        while boundary < sealed.len() {
            cuts.extend([boundary, boundary - 1, boundary - TAG, boundary + 1]);
            boundary += BLOB_CHUNK + TAG;
        }
        cuts.extend([sealed.len() - 1, sealed.len() - TAG]);
        for keep in cuts {
            refused(
                &vault,
                &account,
                b"c",
                &sealed[..keep],
                &format!("{len} bytes cut to {keep}"),
            );
        }
        // nor lengthened by a byte
        let mut longer = sealed.clone();
        longer.push(0);
        refused(&vault, &account, b"c", &longer, "a byte appended");
    }
}

#[test]
fn a_changed_or_reordered_blob_does_not_open() {
    let vault = given();
    let account = AccountId::generate();
    let small = vault.seal_blob(&account, b"c", b"marker").unwrap();
    for at in 0..small.len() {
        let mut changed = small.clone();
        changed[at] ^= 1;
        let opened = vault.open_blob(&account, b"c", &changed);
        // the version byte changed names a key this vault lacks; any other byte: undecryptable
        assert!(
            matches!(
                opened,
                Err(VaultError::Undecryptable | VaultError::UnknownKeyVersion(_))
            ),
            "byte {at}: {:?}",
            opened.map(|plain| plain.len())
        );
    }
    let large = vault
        .seal_blob(&account, b"c", &pattern(3 * BLOB_CHUNK + 7))
        .unwrap();
    for at in (HEADER..large.len()).step_by(4099).chain([large.len() - 1]) {
        let mut changed = large.clone();
        changed[at] ^= 0x80;
        refused(&vault, &account, b"c", &changed, &format!("byte {at}"));
    }
    // two whole chunks swapped: each is authentic, but not at that position
    let mut swapped = large.clone();
    let (first, second) = (HEADER, HEADER + BLOB_CHUNK + TAG);
    let chunk = swapped[first..second].to_vec();
    swapped.copy_within(second..second + BLOB_CHUNK + TAG, first);
    swapped[second..second + BLOB_CHUNK + TAG].copy_from_slice(&chunk);
    refused(&vault, &account, b"c", &swapped, "chunks swapped");
}

#[test]
fn a_blob_sealed_before_a_rotation_still_opens() {
    let keys = MasterKeys::generate().unwrap();
    let old = Vault::open_source(KeySource::Given(keys.clone())).unwrap();
    let account = AccountId::generate();
    let sealed = old.seal_blob(&account, b"c", b"image").unwrap();
    let rotated = Vault::open_source(KeySource::Given(keys.with_new_version().unwrap())).unwrap();
    assert_eq!(
        rotated.open_blob(&account, b"c", &sealed).unwrap(),
        b"image"
    );
    let newer = rotated.seal_blob(&account, b"c", b"image").unwrap();
    assert_eq!(&newer[4..8], &2u32.to_be_bytes());
    assert!(matches!(
        old.open_blob(&account, b"c", &newer),
        Err(VaultError::UnknownKeyVersion(2))
    ));
}
