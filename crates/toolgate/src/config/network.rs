//! Sessions' network: whether code reaches it at all (`sandbox_network`: `proxy`, the default,
//! or `off`), the limits of one run's traffic through the proxy, and the package index the
//! proxy serves them (`pip_*`).

use std::sync::Arc;

use toolgate_egress::EgressPolicy;
use toolgate_egress_proxy::{EgressLimits, IndexSettings, ProxySettings, extra_roots_from_pem};
use toolgate_sandbox::LimitSettings;

use super::{ConfigError, Settings};

impl Settings {
    /// The limits of a run's traffic, or `None` when sessions have no network.
    pub fn egress_limits(&self) -> Result<Option<EgressLimits>, ConfigError> {
        match self.sandbox_network.as_deref().unwrap_or("proxy") {
            "proxy" => {}
            "off" => return Ok(None),
            other => {
                return Err(ConfigError::new(
                    "sandbox_network",
                    format!("must be `proxy` or `off`, got {other:?}"),
                ));
            }
        }
        let defaults = EgressLimits::default();
        let max_connections = self
            .egress_max_connections
            .unwrap_or(defaults.max_connections);
        if !(1..=1024).contains(&max_connections) {
            return Err(ConfigError::new(
                "egress_max_connections",
                format!("must be between 1 and 1024, got {max_connections}"),
            ));
        }
        let mib = |value: Option<u64>, default: u64, name: &str| {
            value.map_or(Ok(default), |mib| {
                mib.checked_mul(1 << 20)
                    .ok_or_else(|| ConfigError::new(name, "is too large"))
            })
        };
        Ok(Some(EgressLimits {
            max_connections,
            max_bytes: mib(self.egress_max_mib, defaults.max_bytes, "egress_max_mib")?,
            bytes_per_second: mib(
                self.egress_rate_mib_s,
                defaults.bytes_per_second,
                "egress_rate_mib_s",
            )?,
        }))
    }

    /// What the proxy of a process that runs sessions shares, or `None` without network.
    pub fn proxy_settings(&self) -> Result<Option<ProxySettings>, ConfigError> {
        if self.egress_limits()?.is_none() {
            return Ok(None);
        }
        let policy = EgressPolicy::new(self.egress_allow_private.as_deref().unwrap_or_default())
            .map_err(|reason| ConfigError::worded("egress_allow_private", reason))?;
        let extra_roots = match &self.egress_extra_ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem = std::fs::read(path).map_err(|err| {
                    ConfigError::new(
                        "egress_extra_ca_file",
                        format!("cannot read {}: {err}", path.display()),
                    )
                })?;
                extra_roots_from_pem(&pem)
                    .map_err(|err| ConfigError::worded("egress_extra_ca_file", err))?
            }
        };
        Ok(Some(ProxySettings {
            policy: Arc::new(policy),
            extra_roots,
            index: self.package_index()?,
        }))
    }

    /// The package index sessions install from (`pip_index_url` `off`: none).
    fn package_index(&self) -> Result<Option<IndexSettings>, ConfigError> {
        let main = self.pip_index_url.as_deref().unwrap_or(DEFAULT_PIP_INDEX);
        if main.trim() == "off" {
            return Ok(None);
        }
        let mut urls = vec![index_url("pip_index_url", main)?];
        if let Some(extra) = &self.pip_extra_index_url {
            urls.push(index_url("pip_extra_index_url", extra)?);
        }
        let cache_mib = self.pip_cache_mib.unwrap_or(2048);
        let cache_bytes = cache_mib
            .checked_mul(1 << 20)
            .filter(|_| cache_mib >= 1)
            .ok_or_else(|| ConfigError::new("pip_cache_mib", "must be at least 1, and sane"))?;
        let workspace_bytes = self
            .sandbox_workspace_mib
            .map_or(LimitSettings::default().workspace_bytes, |mib| {
                mib.saturating_mul(1 << 20)
            });
        Ok(Some(IndexSettings {
            urls,
            cache_dir: self.data_dir().join("wheels"),
            cache_bytes,
            // a session could not hold a larger file anyway
            max_file_bytes: workspace_bytes,
        }))
    }
}

/// The index `pip install` mirrors unless the operator names another.
const DEFAULT_PIP_INDEX: &str = "https://pypi.org/simple/";

/// An index's URL, checked: http(s) with a host (reachable at its host and port whatever
/// address that is, as the operator's own endpoint).
fn index_url(setting: &str, url: &str) -> Result<String, ConfigError> {
    let url = url.trim();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(ConfigError::new(
            setting,
            format!("must be an http:// or https:// URL, got {url:?}"),
        ));
    }
    EgressPolicy::default()
        .with_endpoints([url])
        .map_err(|reason| ConfigError::new(setting, reason))?;
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sessions_have_network_through_the_proxy_unless_turned_off() {
        let on = Settings::default().egress_limits().unwrap().unwrap();
        assert_eq!(on, EgressLimits::default());
        let off = Settings {
            sandbox_network: Some("off".into()),
            ..Settings::default()
        };
        assert!(off.egress_limits().unwrap().is_none());
        assert!(off.proxy_settings().unwrap().is_none());
        let set = Settings {
            egress_max_connections: Some(4),
            egress_max_mib: Some(10),
            egress_rate_mib_s: Some(0),
            ..Settings::default()
        };
        let limits = set.egress_limits().unwrap().unwrap();
        assert_eq!(limits.max_connections, 4);
        assert_eq!(limits.max_bytes, 10 << 20);
        assert_eq!(limits.bytes_per_second, 0);
    }

    #[test]
    fn the_extra_ca_file_is_read_and_checked_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let with = |path: &std::path::Path| Settings {
            egress_extra_ca_file: Some(path.to_owned()),
            ..Settings::default()
        };
        let missing = with(&dir.path().join("missing.pem"))
            .proxy_settings()
            .unwrap_err();
        assert_eq!(missing.setting(), "egress_extra_ca_file", "{missing}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let err = with(&junk).proxy_settings().unwrap_err();
        assert_eq!(err.setting(), "egress_extra_ca_file", "{err}");
        let ca = rcgen::CertifiedIssuer::self_signed(
            {
                let mut params = rcgen::CertificateParams::default();
                params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                params
            },
            rcgen::KeyPair::generate().unwrap(),
        )
        .unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ca.pem()).unwrap();
        let settings = with(&good).proxy_settings().unwrap().unwrap();
        assert_eq!(settings.extra_roots.len(), 1);
    }

    #[test]
    fn sessions_install_packages_from_the_operators_index() {
        let settings = Settings {
            data_dir: Some("/srv/tg".into()),
            ..Settings::default()
        };
        let index = settings.proxy_settings().unwrap().unwrap().index.unwrap();
        assert_eq!(index.urls, vec!["https://pypi.org/simple/".to_owned()]);
        assert_eq!(index.cache_dir, std::path::Path::new("/srv/tg/wheels"));
        assert_eq!(index.cache_bytes, 2048 << 20);
        assert_eq!(index.max_file_bytes, 512 << 20);
        let set = Settings {
            pip_index_url: Some("http://127.0.0.1:3141/simple".into()),
            pip_extra_index_url: Some("https://extra.example/simple/".into()),
            pip_cache_mib: Some(100),
            sandbox_workspace_mib: Some(64),
            ..Settings::default()
        };
        let index = set.proxy_settings().unwrap().unwrap().index.unwrap();
        assert_eq!(
            index.urls,
            vec![
                "http://127.0.0.1:3141/simple".to_owned(),
                "https://extra.example/simple/".to_owned()
            ]
        );
        assert_eq!(
            (index.cache_bytes, index.max_file_bytes),
            (100 << 20, 64 << 20)
        );
        let off = Settings {
            pip_index_url: Some("off".into()),
            ..Settings::default()
        };
        assert!(off.proxy_settings().unwrap().unwrap().index.is_none());
        for (bad, setting) in [
            (
                Settings {
                    pip_index_url: Some("ftp://x/simple/".into()),
                    ..Settings::default()
                },
                "pip_index_url",
            ),
            (
                Settings {
                    pip_extra_index_url: Some("https://".into()),
                    ..Settings::default()
                },
                "pip_extra_index_url",
            ),
            (
                Settings {
                    pip_cache_mib: Some(0),
                    ..Settings::default()
                },
                "pip_cache_mib",
            ),
        ] {
            assert_eq!(bad.proxy_settings().unwrap_err().setting(), setting);
        }
    }

    #[test]
    fn bad_values_name_their_setting() {
        for bad in [
            Settings {
                sandbox_network: Some("on".into()),
                ..Settings::default()
            },
            Settings {
                egress_max_connections: Some(0),
                ..Settings::default()
            },
            Settings {
                egress_max_mib: Some(u64::MAX),
                ..Settings::default()
            },
        ] {
            let err = bad.egress_limits().unwrap_err();
            assert!(
                [
                    "sandbox_network",
                    "egress_max_connections",
                    "egress_max_mib"
                ]
                .contains(&err.setting()),
                "{err}"
            );
        }
    }
}
