//! Where a store keeps its objects, from its URL: `file:///abs/path` (a directory, made 0700)
//! or `s3://bucket/prefix` (an S3-compatible service, reached with the [`S3Access`] values).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use toolgate_sandbox::CheckpointError;
use toolgate_vault::Zeroizing;

/// How to reach an `s3://` store. Unused for `file://`.
#[derive(Clone, Default)]
pub struct S3Access {
    /// The service's base URL (`https://…`, or `http://…` on a private network); AWS's when
    /// not given.
    pub endpoint: Option<String>,
    /// The region the requests are signed for (`us-east-1` when not given).
    pub region: Option<String>,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key: it signs requests, and is never sent, shown or logged.
    pub secret_access_key: Zeroizing<String>,
}

impl std::fmt::Debug for S3Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Access")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A directory.
    File(PathBuf),
    /// A bucket and the prefix of every name in it.
    S3 { bucket: String, prefix: String },
}

impl Location {
    /// Reads `url`. The message of an error quotes only the scheme, never the URL (which could
    /// hold credentials someone put there).
    pub(crate) fn parse(url: &str) -> Result<Self, CheckpointError> {
        let bad = |why: &str| CheckpointError::Unavailable(format!("checkpoint store URL: {why}"));
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad("a file:// URL needs an absolute path (file:///…)"));
            }
            return Ok(Self::File(PathBuf::from(path)));
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(bad("the scheme is neither file:// nor s3://"));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        Self::bucket(bucket, prefix)
    }

    /// A bucket and a prefix, checked. Errors quote neither.
    pub(crate) fn bucket(bucket: &str, prefix: &str) -> Result<Self, CheckpointError> {
        let bad = |why: &str| CheckpointError::Unavailable(format!("checkpoint store URL: {why}"));
        if bucket.contains(['@', ':', '?', '#', '/']) {
            return Err(bad(
                "an s3:// URL is s3://bucket/prefix; credentials are given apart, never in it",
            ));
        }
        if bucket.is_empty() {
            return Err(bad("an s3:// URL names a bucket (s3://bucket/prefix)"));
        }
        if prefix.contains(['?', '#']) || prefix.split('/').any(|p| p == "." || p == "..") {
            return Err(bad("the prefix of an s3:// URL is a plain path"));
        }
        Ok(Self::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
        })
    }

    /// The object store, and the prefix of the store's names in it.
    pub(crate) fn connect(
        &self,
        s3: &S3Access,
    ) -> Result<(Arc<dyn ObjectStore>, String), CheckpointError> {
        match self {
            Self::File(dir) => Ok((Arc::new(local_directory(dir)?), String::new())),
            Self::S3 { bucket, prefix } => {
                Ok((Arc::new(bucket_store(bucket, s3)?), prefix.clone()))
            }
        }
    }
}

/// The directory `dir` (created if missing), readable by this service's user only: the names
/// under it hold account and session ids.
fn local_directory(dir: &std::path::Path) -> Result<LocalFileSystem, CheckpointError> {
    let unavailable = |what: &str, e: &dyn std::fmt::Display| {
        CheckpointError::Unavailable(format!("{what} {}: {e}", dir.display()))
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| unavailable("cannot create the checkpoint directory", &e))?;
    // also when it existed with a wider mode
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| unavailable("cannot make private the checkpoint directory", &e))?;
    // fsync: an object is durable, with its name, before `save` answers; cleanup: a deleted
    // session leaves no empty directories behind
    Ok(LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| unavailable("cannot open the checkpoint directory", &e))?
        .with_fsync(true)
        .with_automatic_cleanup(true))
}

fn bucket_store(
    bucket: &str,
    access: &S3Access,
) -> Result<object_store::aws::AmazonS3, CheckpointError> {
    if access.access_key_id.is_empty() || access.secret_access_key.is_empty() {
        return Err(CheckpointError::Unavailable(
            "an s3:// checkpoint store needs an access key id and a secret access key".to_owned(),
        ));
    }
    // reqwest is built without a TLS provider of its own: the build's one is ring
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(access.region.as_deref().unwrap_or("us-east-1"))
        .with_access_key_id(&access.access_key_id)
        .with_secret_access_key(access.secret_access_key.as_str())
        .with_retry(RetryConfig {
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
            ..RetryConfig::default()
        })
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                // an image of many MiB over a slow link
                .with_timeout(Duration::from_secs(300)),
        );
    if let Some(endpoint) = &access.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    builder
        .build()
        .map_err(|e| CheckpointError::Unavailable(format!("the S3 checkpoint store: {e}")))
}

#[cfg(test)]
#[path = "location_tests.rs"]
mod tests;
