//! Sessions' network: whether code reaches it at all (`sandbox_network`: `proxy`, the default,
//! or `off`) and the limits of one run's traffic through the proxy.

use std::sync::Arc;

use toolgate_egress::EgressPolicy;
use toolgate_egress_proxy::{EgressLimits, ProxySettings, extra_roots_from_pem};

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
        }))
    }
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
