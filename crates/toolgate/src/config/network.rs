//! Sessions' network: whether code reaches it at all (`sandbox_network`: `proxy`, the default,
//! or `off`) and the limits of one run's traffic through the proxy.

use std::sync::Arc;

use toolgate_egress::EgressPolicy;
use toolgate_egress_proxy::{EgressLimits, ProxySettings};

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
        Ok(Some(ProxySettings {
            policy: Arc::new(policy),
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
