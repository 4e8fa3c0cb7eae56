//! What the settings mean: each option read, checked and given its default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use toolgate_app::tasks::TaskSettings;
use toolgate_domain::{Brand, Micros, Pricing};
use toolgate_server::McpSessionLimits;

use super::{ConfigError, Settings};

impl Settings {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("./toolgate-data"))
    }

    /// The public base URL, without a trailing slash: the setting, else the listening address
    /// (`http://127.0.0.1:8080` by default).
    pub fn public_url(&self) -> Result<String, ConfigError> {
        public_url_of(self.public_url.as_deref(), self.listen())
    }

    /// The listening address.
    pub fn listen(&self) -> SocketAddr {
        self.listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)))
    }

    /// The brand.
    pub fn brand(&self) -> Result<Brand, ConfigError> {
        let raw = self.brand.as_deref().unwrap_or("svc");
        Brand::parse(raw).map_err(|err| ConfigError::new("brand", format!("{raw:?}: {err}")))
    }

    /// Prices and allowance.
    pub fn pricing(&self) -> Result<Pricing, ConfigError> {
        let defaults = Pricing::default();
        let usd = |name: &str, value: &Option<String>, default: Micros| match value {
            None => Ok(default),
            Some(raw) => match Micros::parse_usd(raw) {
                Ok(amount) if amount.0 >= 0 => Ok(amount),
                Ok(_) => Err(ConfigError::new(name, "must not be negative")),
                Err(err) => Err(ConfigError::new(name, format!("{raw:?}: {err}"))),
            },
        };
        let free = self
            .free_monthly_calls
            .unwrap_or(defaults.free_monthly_calls);
        if free < 0 {
            return Err(ConfigError::new(
                "free_monthly_calls",
                "must not be negative",
            ));
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
            return Err(ConfigError::new(
                "paid_call_cost_usd",
                "must be greater than 0",
            ));
        }
        if pricing.min_topup.0 > pricing.max_topup.0 {
            return Err(ConfigError::new(
                "min_topup_usd",
                "must not exceed max_topup_usd",
            ));
        }
        Ok(pricing)
    }

    /// The limits of legacy MCP sessions.
    pub fn mcp_session_limits(&self) -> Result<McpSessionLimits, ConfigError> {
        let defaults = McpSessionLimits::default();
        let limits = McpSessionLimits {
            per_account: self
                .max_mcp_sessions_per_account
                .unwrap_or(defaults.per_account),
            total: self.max_mcp_sessions.unwrap_or(defaults.total),
            idle: defaults.idle,
        };
        if limits.per_account == 0 {
            return Err(ConfigError::new(
                "max_mcp_sessions_per_account",
                "must be at least 1",
            ));
        }
        if limits.total == 0 {
            return Err(ConfigError::new("max_mcp_sessions", "must be at least 1"));
        }
        Ok(limits)
    }

    /// How MCP tasks are kept; `sole_process`: this server is the only one on its store.
    pub fn task_settings(&self, sole_process: bool) -> Result<TaskSettings, ConfigError> {
        let defaults = TaskSettings::default();
        let ttl = self.task_ttl_s.unwrap_or(defaults.ttl.as_secs());
        if !(60..=7 * 24 * 3600).contains(&ttl) {
            return Err(ConfigError::new(
                "task_ttl_s",
                "must be between 60 and 604800 (a week)",
            ));
        }
        let after = self.task_after_s.unwrap_or(defaults.after.as_secs());
        if after > 3600 {
            return Err(ConfigError::new("task_after_s", "must be at most 3600"));
        }
        let max_running = self.task_max_running.unwrap_or(defaults.max_unended);
        if max_running == 0 {
            return Err(ConfigError::new("task_max_running", "must be at least 1"));
        }
        let longest = self.sandbox_max_task_s.unwrap_or(
            toolgate_sandbox::LimitSettings::default()
                .max_task_timeout
                .as_secs(),
        );
        Ok(TaskSettings {
            ttl: Duration::from_secs(ttl),
            max_unended: max_running,
            after: Duration::from_secs(after),
            result_wait: Duration::from_secs(longest.saturating_add(60)),
            sole_process,
            ..defaults
        })
    }

    /// The body limit.
    pub fn max_request_bytes(&self) -> Result<usize, ConfigError> {
        let limit = self.max_request_bytes.unwrap_or(10 * 1024 * 1024);
        if limit < 1024 {
            return Err(ConfigError::new(
                "max_request_bytes",
                "must be at least 1024",
            ));
        }
        Ok(limit)
    }

    /// The async runtime's worker threads: the setting, else one per core. One worker answers
    /// a lone caller's warm call up to 0.16 ms sooner on a 2-core host, where two wake each
    /// other for the tasks they hand on, but serves 30 % fewer light requests under load
    /// (README, "Measured figures", goal 2): the operator chooses.
    pub fn worker_threads(&self) -> Result<usize, ConfigError> {
        match self.worker_threads {
            None => Ok(std::thread::available_parallelism().map_or(1, usize::from)),
            Some(n @ 1..=MAX_WORKER_THREADS) => Ok(n),
            Some(n) => Err(ConfigError::new(
                "worker_threads",
                format!("{n} is out of bounds (1 to {MAX_WORKER_THREADS})"),
            )),
        }
    }
}

/// Most worker threads `worker_threads` may ask for.
const MAX_WORKER_THREADS: usize = 1024;

/// The public base URL of a server listening on `bound`: `given`, else `bound` as a URL (a
/// wildcard or loopback address as `127.0.0.1` or `[::1]`), so that a server told to listen on
/// port 0 knows the port it got.
pub fn public_url_of(given: Option<&str>, bound: SocketAddr) -> Result<String, ConfigError> {
    let url = given.map_or_else(
        || {
            let host = match bound.ip() {
                ip if ip.is_unspecified() || ip.is_loopback() => match ip {
                    std::net::IpAddr::V4(_) => "127.0.0.1".to_owned(),
                    std::net::IpAddr::V6(_) => "[::1]".to_owned(),
                },
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            format!("http://{host}:{}", bound.port())
        },
        str::to_owned,
    );
    let parsed: http::Uri = url
        .parse()
        .map_err(|err| ConfigError::new("public_url", format!("{url:?} is not a URL: {err}")))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
        return Err(ConfigError::new(
            "public_url",
            format!("{url:?} must be an http:// or https:// URL with a host"),
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

impl Settings {
    /// `server_timing`: whether tool calls answer with their stages' durations.
    pub fn server_timing(&self) -> Result<bool, ConfigError> {
        match self.server_timing.as_deref().unwrap_or("off") {
            "on" => Ok(true),
            "off" => Ok(false),
            other => Err(ConfigError::new(
                "server_timing",
                format!("{other:?}: must be `on` or `off`"),
            )),
        }
    }

    /// `trusted_proxies`, each entry checked.
    pub fn trusted_proxies(&self) -> Result<Vec<toolgate_server::Network>, ConfigError> {
        self.trusted_proxies
            .iter()
            .flatten()
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| {
                toolgate_server::Network::parse(entry)
                    .map_err(|err| ConfigError::new("trusted_proxies", err.to_string()))
            })
            .collect()
    }
}
