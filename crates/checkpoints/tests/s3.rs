//! The store over a real S3-compatible server: the suite's Garage (`scripts/garage-up.sh DIR`
//! starts one and prints the variables; `scripts/test.sh` does this). Reads
//! `TOOLGATE_TEST_S3_URL` (`s3://bucket`), `TOOLGATE_TEST_S3_ENDPOINT`, `TOOLGATE_TEST_S3_REGION`,
//! `TOOLGATE_TEST_S3_KEY_ID` and `TOOLGATE_TEST_S3_SECRET`; without the URL each test fails,
//! saying how to start one. Each test keeps its objects under a prefix of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Raw, vault};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use toolgate_checkpoints::{ObjectCheckpoints, S3Access};
use toolgate_sandbox::{CheckpointError, CheckpointStore};
use toolgate_vault::{Vault, Zeroizing};

struct Server {
    bucket: String,
    access: S3Access,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set with TOOLGATE_TEST_S3_URL"))
}

/// The suite's server, or `None` (and a line saying so) when none is given.
fn server(test: &str) -> Option<Server> {
    // like the PostgreSQL store's tests: a missing server fails, never skips
    let Ok(url) = std::env::var("TOOLGATE_TEST_S3_URL") else {
        panic!(
            "{test}: TOOLGATE_TEST_S3_URL is not set (start a server with \
             `eval \"$(scripts/garage-up.sh /tmp/garage-tests)\"`; scripts/test.sh does)"
        );
    };
    let bucket = url
        .strip_prefix("s3://")
        .expect("TOOLGATE_TEST_S3_URL is s3://bucket")
        .trim_end_matches('/')
        .to_owned();
    Some(Server {
        bucket,
        access: S3Access {
            endpoint: Some(var("TOOLGATE_TEST_S3_ENDPOINT")),
            region: Some(var("TOOLGATE_TEST_S3_REGION")),
            access_key_id: var("TOOLGATE_TEST_S3_KEY_ID"),
            secret_access_key: Zeroizing::new(var("TOOLGATE_TEST_S3_SECRET")),
        },
    })
}

impl Server {
    /// A store under a fresh prefix of the bucket, and the raw objects beneath it.
    async fn store(&self, vault: Arc<Vault>) -> (ObjectCheckpoints, Raw) {
        let prefix = format!("tests/{}", common::fresh_account());
        self.store_at(&prefix, vault).await
    }

    /// The store by its parts (`open_bucket`; the refused-key test opens by URL).
    async fn store_at(&self, prefix: &str, vault: Arc<Vault>) -> (ObjectCheckpoints, Raw) {
        let store = ObjectCheckpoints::open_bucket(&self.bucket, prefix, &self.access, vault)
            .await
            .unwrap();
        let objects = AmazonS3Builder::new()
            .with_bucket_name(&self.bucket)
            .with_endpoint(self.access.endpoint.clone().unwrap())
            .with_allow_http(true)
            .with_region(self.access.region.clone().unwrap())
            .with_access_key_id(&self.access.access_key_id)
            .with_secret_access_key(self.access.secret_access_key.as_str())
            .build()
            .unwrap();
        let raw = Raw {
            objects: Arc::new(objects),
            prefix: Path::parse(prefix).unwrap(),
        };
        (store, raw)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_story_on_a_bucket() {
    let Some(server) = server("the_story_on_a_bucket") else {
        return;
    };
    let (store, raw) = server.store(vault()).await;
    common::nothing_readable_at_rest(&store, &raw).await;
    common::round_trip(&store, &raw).await;
    common::damage_falls_back(&store, &raw).await;
    let prefix = raw.prefix.as_ref().to_owned();
    let (other, _) = server.store_at(&prefix, vault()).await;
    common::moved_objects_do_not_open(&store, &raw, &other).await;
    common::list_and_expire(&store, &raw).await;
    // every session deleted, and the probe too: nothing left under the prefix
    assert!(raw.all().await.is_empty());
}

#[tokio::test]
async fn a_refused_key_is_a_clear_error_without_the_secret() {
    let Some(server) = server("a_refused_key_is_a_clear_error_without_the_secret") else {
        return;
    };
    let wrong = "not-the-secret-0123456789abcdef0123456789abcdef";
    let access = S3Access {
        secret_access_key: Zeroizing::new(wrong.to_owned()),
        ..server.access.clone()
    };
    let url = format!("s3://{}/tests", server.bucket);
    let err = ObjectCheckpoints::open(&url, &access, vault())
        .await
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Unavailable(_)), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(wrong), "{shown}");
    assert!(
        !shown.contains(server.access.secret_access_key.as_str()),
        "{shown}"
    );
    assert!(shown.contains("cannot write to s3://"), "{shown}");

    // a bucket that is not there
    let url = format!("s3://{}-missing/tests", server.bucket);
    let err = ObjectCheckpoints::open(&url, &server.access, vault())
        .await
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Unavailable(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains(server.access.secret_access_key.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_racing_on_a_bucket_leave_a_whole_newest() {
    let Some(server) = server("saves_racing_on_a_bucket_leave_a_whole_newest") else {
        return;
    };
    let (store, _) = server.store(vault()).await;
    let store = Arc::new(store);
    let session = common::key("acct", "raced");
    let image = |n: u8| vec![n; 1 << 20];
    let saves = [1u8, 2].map(|n| {
        let (store, session) = (store.clone(), session.clone());
        tokio::spawn(async move { store.save(&session, image(n)).await.unwrap() })
    });
    let infos: Vec<_> = futures::future::join_all(saves)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let newest = infos.iter().max_by_key(|i| i.version).unwrap();
    let loaded = store.load(&session).await.unwrap().unwrap();
    assert_eq!(loaded.info.version, newest.version);
    assert!(loaded.image == image(1) || loaded.image == image(2));
    store.delete(&session).await.unwrap();
}
