//! The store over a real directory (file://): the shared story, the directory's mode, the size
//! limit, saves racing saves and loads, and errors that show no credential.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::{Raw, key, vault};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use toolgate_checkpoints::{ObjectCheckpoints, S3Access};
use toolgate_sandbox::{CheckpointError, CheckpointStore};
use toolgate_vault::{Vault, Zeroizing};

/// A store in a fresh directory of its own (so `expire` sees no other test's sessions).
async fn store_in(dir: &std::path::Path, vault: Arc<Vault>) -> (ObjectCheckpoints, Raw) {
    let root = dir.join("checkpoints");
    let url = format!("file://{}", root.display());
    let store = ObjectCheckpoints::open(&url, &S3Access::default(), vault)
        .await
        .unwrap();
    let raw = Raw {
        objects: Arc::new(LocalFileSystem::new_with_prefix(&root).unwrap()),
        prefix: Path::default(),
    };
    (store, raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_story_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let vault = vault();
    let (store, raw) = store_in(dir.path(), vault.clone()).await;
    common::nothing_readable_at_rest(&store, &raw).await;
    common::round_trip(&store, &raw).await;
    common::damage_falls_back(&store, &raw).await;
    let (other, _) = store_in(dir.path(), common::vault()).await;
    common::moved_objects_do_not_open(&store, &raw, &other).await;
    common::list_and_expire(&store, &raw).await;
    // every session deleted: no object, no probe, no temporary file, no empty directory left
    let left: Vec<_> = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn the_directory_is_private_and_made_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/checkpoints");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let url = format!("file://{}", root.display());
    let store = ObjectCheckpoints::open(&url, &S3Access::default(), vault())
        .await
        .unwrap();
    let mode = std::fs::metadata(&root).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // a name outside the plain form (never an account id) stays inside the directory
    let odd = key("../../escape", "s");
    store.save(&odd, b"x".to_vec()).await.unwrap();
    assert_eq!(store.load(&odd).await.unwrap().unwrap().image, b"x");
    assert!(!dir.path().join("a/escape").exists() && !dir.path().join("escape").exists());

    // the same directory by its path, with another vault: the image is found, and does not open
    let again = ObjectCheckpoints::open_directory(root.clone(), vault())
        .await
        .unwrap();
    assert!(matches!(
        again.load(&odd).await,
        Err(CheckpointError::Unreadable(_))
    ));
    let relative = ObjectCheckpoints::open_directory("relative/dir".into(), vault()).await;
    assert!(matches!(relative, Err(CheckpointError::Unavailable(_))));

    // a path that cannot be a directory: a clear error naming it
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let err = ObjectCheckpoints::open(
        &format!("file://{}/sub", file.display()),
        &S3Access::default(),
        vault(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, CheckpointError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("a-file/sub"), "{err}");
}

#[tokio::test]
async fn an_image_over_the_limit_is_refused_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, raw) = store_in(dir.path(), vault()).await;
    let store = store.with_max_image_bytes(1000);
    let session = key("acct", "s");
    store.save(&session, vec![7; 1000]).await.unwrap();
    let err = store.save(&session, vec![8; 1001]).await.unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::TooLarge {
                bytes: 1001,
                max: 1000
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        store.load(&session).await.unwrap().unwrap().image,
        vec![7; 1000]
    );
    assert_eq!(raw.all().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_racing_saves_and_loads_leave_whole_images() {
    let dir = tempfile::tempdir().unwrap();
    let (store, raw) = store_in(dir.path(), vault()).await;
    let store = Arc::new(store);
    let session = key("acct", "raced");
    // images whose every byte says which one it is, large enough to be written in many chunks
    let image = |n: u8| vec![n; 3 << 20];
    store.save(&session, image(0)).await.unwrap();
    for round in 0..6u8 {
        let (a, b) = (round * 2 + 1, round * 2 + 2);
        let saves = [a, b].map(|n| {
            let (store, session) = (store.clone(), session.clone());
            tokio::spawn(async move { store.save(&session, image(n)).await.unwrap() })
        });
        let loads = (0..3).map(|_| {
            let (store, session) = (store.clone(), session.clone());
            tokio::spawn(async move { store.load(&session).await.unwrap().unwrap() })
        });
        for loaded in futures::future::join_all(loads).await {
            let loaded = loaded.unwrap();
            assert!(!loaded.fell_back);
            let first = loaded.image[0];
            assert!(first <= b, "an image of this session: {first}");
            assert_eq!(loaded.image, image(first), "whole");
        }
        let infos: Vec<_> = futures::future::join_all(saves)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_ne!(infos[0].version, infos[1].version);
        // the newest is the save with the higher version, whole
        let newest = infos.iter().max_by_key(|i| i.version).unwrap();
        let loaded = store.load(&session).await.unwrap().unwrap();
        assert_eq!(loaded.info.version, newest.version);
        assert!(loaded.image == image(a) || loaded.image == image(b));
        assert!(!loaded.fell_back);
    }
    // the next save prunes whatever two racing saves left
    store.save(&session, image(99)).await.unwrap();
    assert_eq!(raw.all().await.len(), 2);
}

#[tokio::test]
async fn a_bad_url_or_an_unreachable_bucket_is_a_clear_error_without_the_secret() {
    let secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";
    let access = S3Access {
        // a port nothing listens on: the probe fails
        endpoint: Some(format!("http://127.0.0.1:{}", closed_port())),
        region: Some("garage".to_owned()),
        access_key_id: "GK0123456789abcdef".to_owned(),
        secret_access_key: Zeroizing::new(secret.to_owned()),
    };
    assert!(!format!("{access:?}").contains(secret));
    let cases = [
        "s3://bucket/prefix".to_owned(),
        format!("s3://GK0123:{secret}@bucket/prefix"),
        "file://relative/path".to_owned(),
        "gs://bucket".to_owned(),
        "s3:///prefix".to_owned(),
    ];
    for url in &cases {
        let err = ObjectCheckpoints::open(url, &access, vault())
            .await
            .unwrap_err();
        assert!(
            matches!(err, CheckpointError::Unavailable(_)),
            "{url}: {err:?}"
        );
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret), "{url}: {shown}");
        assert!(shown.contains("checkpoint"), "{url}: {shown}");
    }
    let no_keys = S3Access {
        endpoint: access.endpoint.clone(),
        ..S3Access::default()
    };
    let err = ObjectCheckpoints::open("s3://bucket", &no_keys, vault())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("secret access key"), "{err}");
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
