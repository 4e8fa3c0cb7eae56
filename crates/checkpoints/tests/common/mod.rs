//! What the file:// and s3:// tests share: a vault, keys of fresh accounts, the raw objects
//! beneath a store (to damage, move and scan them), and the story every store passes.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use toolgate_checkpoints::ObjectCheckpoints;
use toolgate_domain::AccountId;
use toolgate_sandbox::{CheckpointError, CheckpointKey, CheckpointStore};
use toolgate_vault::{KeySource, MasterKeys, Vault};

pub fn vault() -> Arc<Vault> {
    Arc::new(Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap())
}

pub fn key(account: &str, session: &str) -> CheckpointKey {
    CheckpointKey {
        account: account.to_owned(),
        session_id: session.to_owned(),
    }
}

pub fn fresh_account() -> String {
    AccountId::generate().as_str().to_owned()
}

/// The objects beneath a store, as the service storing them sees them.
pub struct Raw {
    pub objects: Arc<dyn ObjectStore>,
    /// The store's prefix in `objects`.
    pub prefix: Path,
}

impl Raw {
    /// Every object under the store's prefix, with its bytes.
    pub async fn all(&self) -> Vec<(Path, Vec<u8>)> {
        let listed: Vec<_> = self
            .objects
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .unwrap();
        let mut all = Vec::new();
        for meta in listed {
            let bytes = self.objects.get(&meta.location).await.unwrap();
            all.push((meta.location, bytes.bytes().await.unwrap().to_vec()));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The objects whose name holds `account`.
    pub async fn of(&self, account: &str) -> Vec<(Path, Vec<u8>)> {
        let mut all = self.all().await;
        all.retain(|(path, _)| path.as_ref().contains(account));
        all
    }

    pub async fn put(&self, path: &Path, bytes: Vec<u8>) {
        self.objects
            .put(path, PutPayload::from(bytes))
            .await
            .unwrap();
    }
}

fn image(marker: &str, len: usize) -> Vec<u8> {
    let mut image = marker.as_bytes().repeat(len / marker.len() + 1);
    image.truncate(len);
    image
}

/// Save, load, versions, delete, list, size limit.
pub async fn round_trip(store: &ObjectCheckpoints, raw: &Raw) {
    let account = fresh_account();
    let alpha = key(&account, "alpha");
    assert!(store.load(&alpha).await.unwrap().is_none());
    assert!(!store.delete(&alpha).await.unwrap());

    let first = store.save(&alpha, b"one".to_vec()).await.unwrap();
    assert_eq!(first.session_id, "alpha");
    let loaded = store.load(&alpha).await.unwrap().unwrap();
    assert_eq!(loaded.image, b"one");
    assert!(!loaded.fell_back);
    assert_eq!(loaded.info.version, first.version);
    assert_eq!(loaded.info.stored_bytes, first.stored_bytes);

    // each save is newer; the store keeps the newest and the one before
    let second = store.save(&alpha, b"two".to_vec()).await.unwrap();
    let third = store.save(&alpha, Vec::new()).await.unwrap();
    assert!(first.version < second.version && second.version < third.version);
    let loaded = store.load(&alpha).await.unwrap().unwrap();
    assert_eq!(loaded.image, b"");
    assert_eq!(loaded.info.version, third.version);
    assert_eq!(
        raw.of(&account).await.len(),
        2,
        "the newest and the one before"
    );

    // another account's same session id is another session
    let other = key(&fresh_account(), "alpha");
    assert!(store.load(&other).await.unwrap().is_none());
    assert!(store.list(&other.account).await.unwrap().is_empty());

    // a session id of the longest kind, in any characters, is kept and listed by its id
    let long = key(&account, &"é/..\0z".repeat(256 / 7));
    store.save(&long, b"long".to_vec()).await.unwrap();
    assert_eq!(store.load(&long).await.unwrap().unwrap().image, b"long");
    let listed = store.list(&account).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|i| i.session_id.as_str()).collect();
    assert_eq!(ids, ["alpha", long.session_id.as_str()]);
    assert_eq!(listed[0].version, third.version);
    assert_eq!(listed[0].stored_bytes, third.stored_bytes);

    assert!(store.delete(&alpha).await.unwrap());
    assert!(store.load(&alpha).await.unwrap().is_none());
    assert_eq!(store.load(&long).await.unwrap().unwrap().image, b"long");
    assert_eq!(raw.of(&account).await.len(), 1);
    assert!(store.delete(&long).await.unwrap());
    assert!(raw.of(&account).await.is_empty());
}

/// A damaged or cut newest image falls back to the one before; none that opens is Unreadable.
pub async fn damage_falls_back(store: &ObjectCheckpoints, raw: &Raw) {
    let account = fresh_account();
    let session = key(&account, "s");
    store
        .save(&session, image("before ", 300_000))
        .await
        .unwrap();
    let newest = store
        .save(&session, image("newest ", 300_000))
        .await
        .unwrap();
    let objects = raw.of(&account).await;
    let (newest_path, newest_bytes) = objects.last().unwrap().clone();
    let (older_path, older_bytes) = objects.first().unwrap().clone();

    for (what, damaged) in [
        ("a byte flipped", {
            let mut d = newest_bytes.clone();
            d[newest_bytes.len() / 2] ^= 1;
            d
        }),
        (
            "cut short",
            newest_bytes[..newest_bytes.len() - 100].to_vec(),
        ),
        ("empty", Vec::new()),
    ] {
        raw.put(&newest_path, damaged).await;
        let loaded = store.load(&session).await.unwrap().unwrap();
        assert!(loaded.fell_back, "{what}");
        assert_eq!(loaded.image, image("before ", 300_000), "{what}");
        assert!(loaded.info.version < newest.version, "{what}");
    }
    raw.put(&older_path, older_bytes[..10].to_vec()).await;
    let err = store.load(&session).await.unwrap_err();
    assert!(matches!(err, CheckpointError::Unreadable(_)), "{err:?}");
    assert!(!err.to_string().contains("before"), "{err}");

    // a save over damaged ones writes a good newest again
    store.save(&session, b"fresh".to_vec()).await.unwrap();
    let loaded = store.load(&session).await.unwrap().unwrap();
    assert_eq!(
        (loaded.image.as_slice(), loaded.fell_back),
        (&b"fresh"[..], false)
    );
}

/// An object copied to another account, another session or another version does not open, and
/// another vault opens nothing.
pub async fn moved_objects_do_not_open(
    store: &ObjectCheckpoints,
    raw: &Raw,
    other: &ObjectCheckpoints,
) {
    let (alice, bob) = (fresh_account(), fresh_account());
    let original = store
        .save(&key(&alice, "s1"), b"alice's".to_vec())
        .await
        .unwrap();
    let (path, bytes) = raw.of(&alice).await.pop().unwrap();
    let name = path.as_ref().to_owned();
    let version = format!("{:016x}", original.version);
    let hex_s1 = "7331"; // hex of "s1"
    for (what, moved) in [
        ("another account", name.replace(&alice, &bob)),
        (
            "another session",
            name.replace(&format!("/{hex_s1}/"), "/7332/"),
        ),
        (
            "a higher version",
            name.replace(&version, &format!("{:016x}", original.version + 1)),
        ),
    ] {
        assert_ne!(moved, name, "{what}");
        let moved = Path::parse(&moved).unwrap();
        raw.put(&moved, bytes.clone()).await;
        let (account, session) = if what == "another account" {
            (bob.as_str(), "s1")
        } else if what == "another session" {
            (alice.as_str(), "s2")
        } else {
            (alice.as_str(), "s1")
        };
        let loaded = store.load(&key(account, session)).await;
        match what {
            // the relabelled newest does not open: the real one below it does
            "a higher version" => {
                let loaded = loaded.unwrap().unwrap();
                assert!(loaded.fell_back);
                assert_eq!(loaded.info.version, original.version);
            }
            _ => assert!(
                matches!(loaded, Err(CheckpointError::Unreadable(_))),
                "{what}: {loaded:?}"
            ),
        }
    }
    let err = other.load(&key(&alice, "s1")).await.unwrap_err();
    assert!(matches!(err, CheckpointError::Unreadable(_)), "{err:?}");
    for account in [&alice, &bob] {
        for session in ["s1", "s2"] {
            store.delete(&key(account, session)).await.unwrap();
        }
    }
}

/// No stored byte shows the image, the account id or the session id.
pub async fn nothing_readable_at_rest(store: &ObjectCheckpoints, raw: &Raw) {
    let account = fresh_account();
    let session = "session-7f3a9c";
    let marker = "MARKER-the-tenants-secret-notes-41c2";
    let key = key(&account, session);
    store.save(&key, image(marker, 200_000)).await.unwrap();
    store.save(&key, marker.as_bytes().to_vec()).await.unwrap();
    let objects = raw.of(&account).await;
    assert_eq!(objects.len(), 2);
    for (path, bytes) in &objects {
        for needle in [marker, &account, session] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} in {path}"
            );
        }
        // names do hold the account id and the session id in hex (the README says so)
        assert!(path.as_ref().contains(&hex::encode(session)), "{path}");
    }
    store.delete(&key).await.unwrap();
}

/// `list` gives each session's newest; `expire` deletes the sessions whose newest is older
/// than the cutoff, and only those.
pub async fn list_and_expire(store: &ObjectCheckpoints, raw: &Raw) {
    let account = fresh_account();
    let (old, young) = (key(&account, "old"), key(&account, "young"));
    store.save(&old, b"1".to_vec()).await.unwrap();
    store.save(&old, b"2".to_vec()).await.unwrap();
    store.save(&young, b"1".to_vec()).await.unwrap();
    // object stores keep times to the second or the millisecond
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cutoff = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let renewed = store.save(&young, b"2".to_vec()).await.unwrap();

    let listed = store.list(&account).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].version, renewed.version);
    assert!(listed[0].saved_at < cutoff && listed[1].saved_at > cutoff);

    // other accounts' sessions may be expired by the same call; this account's old one is
    let expired = store.expire(cutoff).await.unwrap();
    assert!(expired >= 1);
    assert!(store.load(&old).await.unwrap().is_none());
    assert_eq!(store.load(&young).await.unwrap().unwrap().image, b"2");
    assert_eq!(raw.of(&account).await.len(), 2, "young's two versions stay");
    store.delete(&young).await.unwrap();
}
