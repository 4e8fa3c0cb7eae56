//! Save and load times of 1 MiB and 100 MiB images, random and compressible, on one store:
//! `cargo run -p toolgate-checkpoints --example figures -- URL` (`file:///dir`, or `s3://bucket/prefix`
//! with the `TOOLGATE_TEST_S3_*` variables that `scripts/garage-up.sh` prints). Figures, not a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use toolgate_checkpoints::{ObjectCheckpoints, S3Access};
use toolgate_sandbox::{CheckpointKey, CheckpointStore};
use toolgate_vault::{KeySource, MasterKeys, Vault, Zeroizing};

#[tokio::main]
async fn main() {
    let url = std::env::args().nth(1).expect("usage: figures URL");
    let var = |name: &str| std::env::var(name).ok();
    let access = S3Access {
        endpoint: var("TOOLGATE_TEST_S3_ENDPOINT"),
        region: var("TOOLGATE_TEST_S3_REGION"),
        access_key_id: var("TOOLGATE_TEST_S3_KEY_ID").unwrap_or_default(),
        secret_access_key: Zeroizing::new(var("TOOLGATE_TEST_S3_SECRET").unwrap_or_default()),
    };
    let vault = Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap();
    let store = ObjectCheckpoints::open(&url, &access, Arc::new(vault))
        .await
        .unwrap();
    for mib in [1usize, 100] {
        let len = mib << 20;
        let mut random = vec![0u8; len];
        getrandom::fill(&mut random).unwrap();
        let line = b"    total = sum(x * x for x in values)  # a line of Python\n";
        let compressible: Vec<u8> = line.iter().copied().cycle().take(len).collect();
        for (kind, image) in [("random", random), ("compressible", compressible)] {
            let key = CheckpointKey {
                account: "figures".to_owned(),
                session_id: format!("{kind}-{mib}"),
            };
            let started = Instant::now();
            let info = store.save(&key, image).await.unwrap();
            let save = started.elapsed();
            let started = Instant::now();
            let loaded = store.load(&key).await.unwrap().unwrap();
            let load = started.elapsed();
            assert_eq!(loaded.image.len(), len);
            println!(
                "{url}: {mib:>3} MiB {kind:<12} save {:>6.1} ms  load {:>6.1} ms  stored {:>10} bytes",
                save.as_secs_f64() * 1e3,
                load.as_secs_f64() * 1e3,
                info.stored_bytes
            );
            store.delete(&key).await.unwrap();
        }
    }
}
