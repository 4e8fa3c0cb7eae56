//! The store the hibernation tests keep images in.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use toolgate_sandbox::{
    CheckpointError, CheckpointInfo, CheckpointKey, CheckpointStore, LoadedCheckpoint,
};

#[derive(Debug, Default)]
pub struct MemoryStore {
    images: Mutex<BTreeMap<(String, String), (Vec<u8>, CheckpointInfo)>>,
}

pub fn test_store() -> (Arc<dyn CheckpointStore>, ()) {
    (Arc::new(MemoryStore::default()), ())
}

#[async_trait]
impl CheckpointStore for MemoryStore {
    async fn save(
        &self,
        key: &CheckpointKey,
        image: Vec<u8>,
    ) -> Result<CheckpointInfo, CheckpointError> {
        let mut images = self.images.lock().unwrap();
        let k = (key.account.clone(), key.session_id.clone());
        let version = images.get(&k).map_or(1, |(_, i)| i.version + 1);
        let info = CheckpointInfo {
            session_id: key.session_id.clone(),
            stored_bytes: image.len() as u64,
            saved_at: SystemTime::now(),
            version,
        };
        images.insert(k, (image, info.clone()));
        Ok(info)
    }

    async fn load(&self, key: &CheckpointKey) -> Result<Option<LoadedCheckpoint>, CheckpointError> {
        let images = self.images.lock().unwrap();
        Ok(images
            .get(&(key.account.clone(), key.session_id.clone()))
            .map(|(image, info)| LoadedCheckpoint {
                image: image.clone(),
                info: info.clone(),
                fell_back: false,
            }))
    }

    async fn delete(&self, key: &CheckpointKey) -> Result<bool, CheckpointError> {
        let mut images = self.images.lock().unwrap();
        Ok(images
            .remove(&(key.account.clone(), key.session_id.clone()))
            .is_some())
    }

    async fn list(&self, account: &str) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        let images = self.images.lock().unwrap();
        Ok(images
            .iter()
            .filter(|((a, _), _)| a == account)
            .map(|(_, (_, info))| info.clone())
            .collect())
    }

    async fn expire(&self, cutoff: SystemTime) -> Result<u64, CheckpointError> {
        let mut images = self.images.lock().unwrap();
        let before = images.len();
        images.retain(|_, (_, info)| info.saved_at >= cutoff);
        Ok((before - images.len()) as u64)
    }
}
