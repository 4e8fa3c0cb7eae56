//! Where sessions' checkpoints live and when they are taken, checked: `checkpoint_url` (a
//! directory or an S3 bucket, with the bucket's endpoint and credentials), hibernation after
//! idle seconds, a checkpoint every so many seconds of use, and how long they are kept.

use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigError, Secret, Settings};

/// Where checkpoints are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointLocation {
    /// a directory of this host (absolute)
    Directory(PathBuf),
    /// an S3-compatible bucket
    S3 {
        /// the bucket's name
        bucket: String,
        /// the prefix of every object's name (may be empty)
        prefix: String,
        /// the service's URL; `None`: AWS
        endpoint: Option<String>,
        /// the region
        region: String,
        /// the access key id
        access_key_id: String,
        /// the secret access key
        secret_access_key: Secret,
    },
}

/// Sessions that outlive their process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointsConfig {
    /// Where.
    pub location: CheckpointLocation,
    /// A session idle this long hibernates.
    pub hibernate_after: Duration,
    /// After a call, a session whose last checkpoint is this old is checkpointed again.
    pub checkpoint_every: Duration,
    /// A checkpoint this old is deleted.
    pub retention: Duration,
    /// What one account's checkpoints may take, in bytes (0: no quota).
    pub account_quota_bytes: u64,
}

impl CheckpointsConfig {
    /// The checkpoints' configuration, or `None` when `checkpoint_url` is `off`. `idle_ttl`:
    /// sessions expire after it, so they must hibernate before.
    pub fn from_settings(
        settings: &Settings,
        idle_ttl: Duration,
    ) -> Result<Option<Self>, ConfigError> {
        let url = settings.checkpoint_url.as_deref();
        let location = match url {
            Some("off") => return Ok(None),
            None => {
                CheckpointLocation::Directory(absolute(settings.data_dir().join("checkpoints"))?)
            }
            Some(url) => location(url, settings)?,
        };
        let seconds =
            |value: Option<u64>, default: u64, name: &'static str| match value.unwrap_or(default) {
                0 => Err(ConfigError::new(name, "must be at least 1")),
                n => Ok(Duration::from_secs(n)),
            };
        let hibernate_after = seconds(
            settings.sandbox_hibernate_after_s,
            300,
            "sandbox_hibernate_after_s",
        )?;
        if hibernate_after >= idle_ttl {
            return Err(ConfigError::new(
                "sandbox_hibernate_after_s",
                format!(
                    "must be less than sandbox_idle_minutes ({} s), after which a session that \
                     could not hibernate expires",
                    idle_ttl.as_secs()
                ),
            ));
        }
        let checkpoint_every = seconds(
            settings.sandbox_checkpoint_every_s,
            300,
            "sandbox_checkpoint_every_s",
        )?;
        let days = seconds(
            settings.sandbox_session_retention_days,
            7,
            "sandbox_session_retention_days",
        )?;
        Ok(Some(Self {
            location,
            hibernate_after,
            checkpoint_every,
            retention: days.saturating_mul(24 * 3600),
            account_quota_bytes: settings
                .sandbox_account_checkpoint_mib
                .unwrap_or(2048)
                .saturating_mul(1 << 20),
        }))
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf, ConfigError> {
    std::path::absolute(&path)
        .map_err(|err| ConfigError::new("checkpoint_url", format!("{}: {err}", path.display())))
}

/// `file:///abs/dir` or `s3://bucket/prefix`.
fn location(url: &str, settings: &Settings) -> Result<CheckpointLocation, ConfigError> {
    let bad = |why: &str| ConfigError::new("checkpoint_url", why.to_owned());
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(bad(
                "a file:// URL names an absolute directory: file:///var/lib/toolgate/checkpoints",
            ));
        }
        return Ok(CheckpointLocation::Directory(PathBuf::from(path)));
    }
    let Some(rest) = url.strip_prefix("s3://") else {
        return Err(bad("must be file:///dir, s3://bucket/prefix or off"));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid_bucket = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid_bucket {
        return Err(bad(
            "an s3:// URL starts with a bucket name of 3 to 63 lower-case letters, digits, '-' and '.'",
        ));
    }
    let missing = |name: &'static str| {
        ConfigError::new(name, "is needed with an s3:// checkpoint_url".to_owned())
    };
    let access_key_id = settings
        .checkpoint_s3_access_key_id
        .clone()
        .ok_or_else(|| missing("checkpoint_s3_access_key_id"))?;
    let secret_access_key = settings
        .checkpoint_s3_secret_access_key
        .clone()
        .ok_or_else(|| missing("checkpoint_s3_secret_access_key"))?;
    if let Some(endpoint) = &settings.checkpoint_s3_endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        return Err(ConfigError::new(
            "checkpoint_s3_endpoint",
            "must be an http:// or https:// URL".to_owned(),
        ));
    }
    Ok(CheckpointLocation::S3 {
        bucket: bucket.to_owned(),
        prefix: prefix.trim_matches('/').to_owned(),
        endpoint: settings.checkpoint_s3_endpoint.clone(),
        region: settings
            .checkpoint_s3_region
            .clone()
            .unwrap_or_else(|| "us-east-1".to_owned()),
        access_key_id,
        secret_access_key,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TTL: Duration = Duration::from_secs(1200);

    fn settings(url: Option<&str>) -> Settings {
        Settings {
            data_dir: Some(PathBuf::from("/srv/tg")),
            checkpoint_url: url.map(str::to_owned),
            ..Settings::default()
        }
    }

    #[test]
    fn the_default_is_a_directory_of_the_data_dir() {
        let config = CheckpointsConfig::from_settings(&settings(None), TTL)
            .unwrap()
            .unwrap();
        assert_eq!(
            config.location,
            CheckpointLocation::Directory(PathBuf::from("/srv/tg/checkpoints"))
        );
        assert_eq!(config.hibernate_after, Duration::from_secs(300));
        assert_eq!(config.retention, Duration::from_secs(7 * 86400));
        assert!(
            CheckpointsConfig::from_settings(&settings(Some("off")), TTL)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_settings_name_themselves() {
        for (url, setting) in [
            ("file://relative/dir", "checkpoint_url"),
            ("ftp://x", "checkpoint_url"),
            ("s3://A_B/x", "checkpoint_url"),
            ("s3://bucket/x", "checkpoint_s3_access_key_id"),
        ] {
            let err = CheckpointsConfig::from_settings(&settings(Some(url)), TTL).unwrap_err();
            assert_eq!(err.setting, setting, "{url}");
        }
        let mut s = settings(None);
        s.sandbox_hibernate_after_s = Some(1200);
        let err = CheckpointsConfig::from_settings(&s, TTL).unwrap_err();
        assert_eq!(err.setting, "sandbox_hibernate_after_s");
        s.sandbox_hibernate_after_s = Some(0);
        assert!(CheckpointsConfig::from_settings(&s, TTL).is_err());
    }

    #[test]
    fn the_secret_key_never_shows() {
        let mut s = settings(Some("s3://bucket/pre/fix/"));
        s.checkpoint_s3_access_key_id = Some("GK123".to_owned());
        s.checkpoint_s3_secret_access_key = Some("very-secret-key".parse().unwrap());
        let config = CheckpointsConfig::from_settings(&s, TTL).unwrap().unwrap();
        let CheckpointLocation::S3 { prefix, .. } = &config.location else {
            panic!("not s3")
        };
        assert_eq!(prefix, "pre/fix");
        assert!(!format!("{config:?}").contains("very-secret-key"));
    }
}
