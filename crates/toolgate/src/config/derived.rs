//! What the settings mean: each option read, checked and given its default.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use toolgate_domain::{Brand, Micros, Pricing};
use toolgate_server::SessionLimits;

use super::Settings;

impl Settings {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("./toolgate-data"))
    }

    /// The public base URL, without a trailing slash: the setting, else the listening address
    /// (`http://127.0.0.1:8080` by default).
    pub fn public_url(&self) -> Result<String> {
        self.public_url_for(self.listen())
    }

    /// The public base URL of a server listening on `bound`: the setting, else `bound` as a
    /// URL (a wildcard or loopback address as `127.0.0.1` or `[::1]`), so that a server told
    /// to listen on port 0 knows the port it got.
    pub fn public_url_for(&self, bound: SocketAddr) -> Result<String> {
        let url = self.public_url.clone().unwrap_or_else(|| {
            let host = match bound.ip() {
                ip if ip.is_unspecified() || ip.is_loopback() => match ip {
                    std::net::IpAddr::V4(_) => "127.0.0.1".to_owned(),
                    std::net::IpAddr::V6(_) => "[::1]".to_owned(),
                },
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            format!("http://{host}:{}", bound.port())
        });
        let parsed: http::Uri = url
            .parse()
            .with_context(|| format!("public_url {url:?} is not a URL"))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            bail!("public_url {url:?} must be an http:// or https:// URL with a host");
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    /// The listening address.
    pub fn listen(&self) -> SocketAddr {
        self.listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)))
    }

    /// The brand.
    pub fn brand(&self) -> Result<Brand> {
        let raw = self.brand.as_deref().unwrap_or("svc");
        Brand::parse(raw).map_err(|err| anyhow::anyhow!("brand {raw:?}: {err}"))
    }

    /// Prices and allowance.
    pub fn pricing(&self) -> Result<Pricing> {
        let defaults = Pricing::default();
        let usd = |name: &str, value: &Option<String>, default: Micros| -> Result<Micros> {
            match value {
                None => Ok(default),
                Some(raw) => match Micros::parse_usd(raw) {
                    Ok(amount) if amount.0 >= 0 => Ok(amount),
                    Ok(_) => bail!("{name} must not be negative"),
                    Err(err) => bail!("{name} {raw:?}: {err}"),
                },
            }
        };
        let free = self
            .free_monthly_calls
            .unwrap_or(defaults.free_monthly_calls);
        if free < 0 {
            bail!("free_monthly_calls must not be negative");
        }
        let pricing = Pricing {
            free_monthly_calls: free,
            paid_call_cost: usd(
                "paid_call_cost_usd",
                &self.paid_call_cost_usd,
                defaults.paid_call_cost,
            )?,
            min_topup: usd("min_topup_usd", &self.min_topup_usd, defaults.min_topup)?,
            max_topup: usd("max_topup_usd", &self.max_topup_usd, defaults.max_topup)?,
        };
        if pricing.paid_call_cost.0 == 0 {
            bail!("paid_call_cost_usd must be greater than 0");
        }
        if pricing.min_topup.0 > pricing.max_topup.0 {
            bail!("min_topup_usd must not exceed max_topup_usd");
        }
        Ok(pricing)
    }

    /// The limits of legacy MCP sessions.
    pub fn mcp_session_limits(&self) -> Result<SessionLimits> {
        let defaults = SessionLimits::default();
        let limits = SessionLimits {
            per_account: self
                .max_mcp_sessions_per_account
                .unwrap_or(defaults.per_account),
            total: self.max_mcp_sessions.unwrap_or(defaults.total),
            idle: defaults.idle,
        };
        if limits.per_account == 0 || limits.total == 0 {
            bail!("max_mcp_sessions_per_account and max_mcp_sessions must be at least 1");
        }
        Ok(limits)
    }

    /// The body limit.
    pub fn max_request_bytes(&self) -> Result<usize> {
        let limit = self.max_request_bytes.unwrap_or(10 * 1024 * 1024);
        if limit < 1024 {
            bail!("max_request_bytes must be at least 1024");
        }
        Ok(limit)
    }
}

impl Settings {
    /// `trusted_proxies`, each entry checked.
    pub fn trusted_proxies(&self) -> Result<Vec<toolgate_server::Network>> {
        self.trusted_proxies
            .iter()
            .flatten()
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| {
                toolgate_server::Network::parse(entry)
                    .map_err(|err| anyhow::anyhow!("trusted_proxies: {err}"))
            })
            .collect()
    }
}
