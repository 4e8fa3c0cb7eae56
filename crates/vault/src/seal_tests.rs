#![allow(clippy::unwrap_used)]

use toolgate_domain::{AccountId, MAX_SECRET_BYTES, SecretName};

use crate::{KeyFile, KeySource, MasterKeys, Vault, VaultError};

fn name(raw: &str) -> SecretName {
    SecretName::parse(raw).unwrap()
}

fn given() -> Vault {
    Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap()
}

#[test]
fn a_sealed_value_opens_only_where_it_was_sealed() {
    let vault = given();
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let sealed = vault.seal(&alice, &name("TOKEN"), b"hunter2").unwrap();
    assert_eq!(sealed.key_version, 1);
    assert!(!sealed.ciphertext.windows(7).any(|w| w == b"hunter2"));
    assert_eq!(
        vault
            .open(&alice, &name("TOKEN"), &sealed)
            .unwrap()
            .as_slice(),
        b"hunter2"
    );
    // moved to another account or name, or relabelled with another version: refused
    for (account, secret) in [(&bob, "TOKEN"), (&alice, "OTHER")] {
        assert!(matches!(
            vault.open(account, &name(secret), &sealed),
            Err(VaultError::Undecryptable)
        ));
    }
    // any bit changed, anywhere (the nonce, the body, the tag, the wrapped key), or a part cut
    // off: refused as undecryptable, never opened to something else
    let mut tampered = Vec::new();
    for at in 0..sealed.ciphertext.len() {
        let mut changed = sealed.clone();
        changed.ciphertext[at] ^= 1;
        tampered.push((format!("ciphertext byte {at}"), changed));
    }
    for at in 0..sealed.wrapped_key.len() {
        let mut changed = sealed.clone();
        changed.wrapped_key[at] ^= 0x80;
        tampered.push((format!("wrapped key byte {at}"), changed));
    }
    for keep in [0, 23, 24, sealed.ciphertext.len() - 1] {
        let mut cut = sealed.clone();
        cut.ciphertext.truncate(keep);
        tampered.push((format!("ciphertext cut to {keep} bytes"), cut));
        let mut cut = sealed.clone();
        cut.wrapped_key.truncate(keep);
        tampered.push((format!("wrapped key cut to {keep} bytes"), cut));
    }
    let mut swapped = sealed.clone();
    std::mem::swap(&mut swapped.ciphertext, &mut swapped.wrapped_key);
    tampered.push(("ciphertext and wrapped key swapped".to_owned(), swapped));
    for (what, changed) in &tampered {
        let opened = vault.open(&alice, &name("TOKEN"), changed);
        assert!(
            matches!(opened, Err(VaultError::Undecryptable)),
            "{what}: {:?}",
            opened.map(|plain| plain.to_vec())
        );
    }
    let mut relabelled = sealed.clone();
    relabelled.key_version = 2;
    assert!(matches!(
        vault.open(&alice, &name("TOKEN"), &relabelled),
        Err(VaultError::UnknownKeyVersion(2))
    ));
    // each seal has its own data key and nonces
    let again = vault.seal(&alice, &name("TOKEN"), b"hunter2").unwrap();
    assert_ne!(again.ciphertext, sealed.ciphertext);
    assert_ne!(again.wrapped_key, sealed.wrapped_key);
}

#[test]
fn another_master_key_opens_nothing() {
    let account = AccountId::generate();
    let sealed = given().seal(&account, &name("A"), b"value").unwrap();
    assert!(matches!(
        given().open(&account, &name("A"), &sealed),
        Err(VaultError::Undecryptable)
    ));
}

#[test]
fn values_are_bounded() {
    let vault = given();
    let account = AccountId::generate();
    let largest = vec![b'x'; MAX_SECRET_BYTES];
    let sealed = vault.seal(&account, &name("BIG"), &largest).unwrap();
    assert_eq!(
        vault.open(&account, &name("BIG"), &sealed).unwrap().len(),
        MAX_SECRET_BYTES
    );
    let err = vault
        .seal(&account, &name("BIG"), &[b'x'; MAX_SECRET_BYTES + 1])
        .unwrap_err();
    assert!(matches!(err, VaultError::TooLarge { .. }));
}

#[test]
fn rotation_through_the_key_file_rewraps_and_a_running_vault_follows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vault.key");
    KeyFile::new(&path).create().unwrap();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let before = std::fs::read(&path).unwrap();
    let again = KeyFile::new(&path).create();
    assert!(
        matches!(&again, Err(VaultError::KeyFileIo { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists),
        "an existing key file is never replaced: {again:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let running = Vault::open_source(KeySource::File(KeyFile::new(&path))).unwrap();
    let account = AccountId::generate();
    let old = running
        .seal(&account, &name("DB_URL"), b"postgres://x")
        .unwrap();
    assert_eq!(old.key_version, 1);

    // the rotation command, in another process: a new version in the file, then a re-wrap
    let keys = KeyFile::new(&path).add_version().unwrap();
    assert_eq!(keys.newest(), 2);
    let rotator = Vault::open_source(KeySource::File(KeyFile::new(&path))).unwrap();
    let rewrapped = rotator
        .rewrap(&account, &name("DB_URL"), &old)
        .unwrap()
        .unwrap();
    assert_eq!(rewrapped.key_version, 2);
    assert_eq!(rewrapped.ciphertext, old.ciphertext);
    assert!(
        rotator
            .rewrap(&account, &name("DB_URL"), &rewrapped)
            .unwrap()
            .is_none()
    );

    // the running service opens the re-wrapped secret and seals new ones under version 2
    assert_eq!(
        running
            .open(&account, &name("DB_URL"), &rewrapped)
            .unwrap()
            .as_slice(),
        b"postgres://x"
    );
    assert_eq!(
        running
            .seal(&account, &name("B"), b"v")
            .unwrap()
            .key_version,
        2
    );
    assert_eq!(running.newest_version(), 2);
}

#[test]
fn an_account_key_opens_only_as_that_accounts_key() {
    let vault = given();
    let (alice, bob) = (AccountId::generate(), AccountId::generate());
    let sealed = vault.seal_account_key(&alice, b"svck_0123").unwrap();
    assert_eq!(
        vault.open_account_key(&alice, &sealed).unwrap().as_slice(),
        b"svck_0123"
    );
    assert!(matches!(
        vault.open_account_key(&bob, &sealed),
        Err(VaultError::Undecryptable)
    ));
    // never as a secret of any name (the empty-named label included), nor a secret as the key
    for secret in ["A", "_"] {
        assert!(matches!(
            vault.open(&alice, &name(secret), &sealed),
            Err(VaultError::Undecryptable)
        ));
    }
    let secret = vault.seal(&alice, &name("KEY"), b"svck_0123").unwrap();
    assert!(matches!(
        vault.open_account_key(&alice, &secret),
        Err(VaultError::Undecryptable)
    ));
}

#[test]
fn a_derived_key_is_the_same_for_the_same_keys_and_changes_with_purpose_and_version() {
    let keys = MasterKeys::generate().unwrap();
    let one = Vault::open_source(KeySource::Given(keys.clone())).unwrap();
    let again = Vault::open_source(KeySource::Given(keys.clone())).unwrap();
    let links = one.derive_key(b"download links").unwrap();
    assert_eq!(*links, *again.derive_key(b"download links").unwrap());
    assert_ne!(*links, *one.derive_key(b"something else").unwrap());
    assert_ne!(*links, *given().derive_key(b"download links").unwrap());
    let rotated = Vault::open_source(KeySource::Given(keys.with_new_version().unwrap())).unwrap();
    assert_ne!(*links, *rotated.derive_key(b"download links").unwrap());
}
