//! The store the hibernation tests keep images in: the service's own, over a directory, sealed
//! under a fresh master key.

use std::sync::Arc;

use tempfile::TempDir;
use toolgate_checkpoints::ObjectCheckpoints;
use toolgate_sandbox::CheckpointStore;
use toolgate_vault::{KeySource, MasterKeys, Vault};

pub async fn test_store() -> (Arc<dyn CheckpointStore>, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let keys = MasterKeys::generate().unwrap();
    let vault = Arc::new(Vault::open_source(KeySource::Given(keys)).unwrap());
    let store = ObjectCheckpoints::open_directory(dir.path().join("checkpoints"), vault)
        .await
        .unwrap();
    (Arc::new(store), dir)
}
