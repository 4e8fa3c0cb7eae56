//! `serve`'s configuration: every setting the server uses, read from [`Settings`], checked and
//! given its default before a file, a socket or a database is touched. `serve` then runs from
//! this alone.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use toolgate_app::capabilities::OperatorKeyLimits;
use toolgate_app::owner::SignInLimits;
use toolgate_app::tasks::TaskSettings;
use toolgate_domain::{Brand, Pricing};
use toolgate_egress::EgressPolicy;
use toolgate_payments::StripeSettings;
use toolgate_server::HttpSettings;

use super::derived::public_url_of;
use super::sandbox::SandboxConfig;
use super::store::{StoreConfig, VaultKeys};
use super::{ConfigError, Providers, Secret, Settings};

/// The server's default log filter: rmcp logs every session at info and each protocol error
/// at warn; ours are in the access log.
pub const SERVE_LOG: &str = "warn,rmcp=error,toolgate=info,toolgate_server=info,toolgate_app=info";

/// Days a call stays in the history unless `history_days` says otherwise.
const DEFAULT_HISTORY_DAYS: u32 = 30;

/// Everything `serve` needs, checked (no `Debug`: it holds the vault's keys).
pub struct ServeConfig {
    /// `listen`
    pub listen: SocketAddr,
    /// `public_url` as given, checked; `None`: the bound address's
    public_url: Option<String>,
    /// `brand`
    pub brand: Brand,
    /// Prices and allowance.
    pub pricing: Pricing,
    /// The HTTP front door's settings; its public URL is the listening address's until bound.
    pub http: HttpSettings,
    /// `max_connections` [default: from the open-file limit]
    pub max_connections: Option<usize>,
    /// `history_days`: how long calls are kept in the history; 0: none is recorded.
    pub history_days: u32,
    /// `egress_allow_private`: where tenants' requests may go.
    pub egress: EgressPolicy,
    /// The storage backend.
    pub store: StoreConfig,
    /// The vault's master keys.
    pub vault: VaultKeys,
    /// The limits of a run's traffic through sessions' proxy; `None`: sessions have no network.
    pub network: Option<toolgate_egress_proxy::EgressLimits>,
    /// The sandbox in this process; `None`: off, or on the nodes.
    pub sandbox: Option<SandboxConfig>,
    /// `nodes`: sessions run on these execution nodes instead of in this process.
    pub nodes: Option<super::NodesConfig>,
    /// Model providers and search engines.
    pub providers: Providers,
    /// `operator_max_tokens`, `operator_tokens_per_day`
    pub operator_keys: OperatorKeyLimits,
    /// Sign-in mail.
    pub mail: MailConfig,
    /// Stripe, when a secret key or webhook secret is set; `None`: top-ups are off.
    pub payments: Option<StripeSettings>,
    /// `sign_in_limit_per_address`, `sign_in_limit_per_client`
    pub sign_in_limits: SignInLimits,
    /// `task_after_s`, `task_ttl_s`, `task_max_running`: how MCP tasks are kept.
    pub tasks: TaskSettings,
    /// `inline_result_chars`, `download_url_ttl_s`, `upload_url_ttl_s`
    pub results: ResultsConfig,
    /// `worker_threads`: the async runtime's worker threads.
    pub worker_threads: usize,
    /// `log`, checked.
    pub log: String,
}

/// How long output is shown and how long signed links work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsConfig {
    /// `inline_result_chars` [default: 20000]
    pub inline_chars: usize,
    /// `download_url_ttl_s` [default: 3600]
    pub download_ttl: Duration,
    /// `upload_url_ttl_s` [default: 3600]
    pub upload_ttl: Duration,
}

impl ResultsConfig {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let inline = within(
            "inline_result_chars",
            settings.inline_result_chars,
            20_000,
            1_000..=1 << 20,
        )?;
        let ttl = |setting, given| within(setting, given, 3600, 60..=7 * 24 * 3600);
        Ok(Self {
            inline_chars: usize::try_from(inline).unwrap_or(usize::MAX),
            download_ttl: Duration::from_secs(ttl(
                "download_url_ttl_s",
                settings.download_url_ttl_s,
            )?),
            upload_ttl: Duration::from_secs(ttl("upload_url_ttl_s", settings.upload_url_ttl_s)?),
        })
    }
}

/// `given` (or `default`) if within `bounds`, else a refusal naming `setting`.
fn within(
    setting: &str,
    given: Option<u64>,
    default: u64,
    bounds: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let value = given.unwrap_or(default);
    if bounds.contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(
            setting,
            format!(
                "{value} is out of bounds ({} to {})",
                bounds.start(),
                bounds.end()
            ),
        ))
    }
}

/// Where sign-in mails go.
pub struct MailConfig {
    /// `smtp_url`; `None`: `.eml` files in [`Self::outbox`].
    pub smtp_url: Option<Secret>,
    /// `mail_from` as given, checked; `None`: `toolgate@<the public URL's host>`.
    pub from: Option<String>,
    /// `<data_dir>/outbox`
    pub outbox: PathBuf,
}

impl ServeConfig {
    /// Reads and checks every setting `serve` uses; the first refusal names its setting.
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let listen = settings.listen();
        // the default is built from the address, so only a given URL can be refused
        let public_url = public_url_of(settings.public_url.as_deref(), listen)?;
        let log = settings.log.clone().unwrap_or_else(|| SERVE_LOG.to_owned());
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|err| ConfigError::new("log", format!("{log:?}: {err}")))?;
        // tenants' database connections would carry the operator's PostgreSQL settings
        toolgate_database::check_operator_environment()
            .map_err(|reason| ConfigError::new("environment", reason))?;
        let store = StoreConfig::from_settings(settings)?;
        // one process on an SQLite file: tasks it left running failed at once at start
        let sole_process = matches!(store, StoreConfig::Sqlite { .. });
        Ok(Self {
            listen,
            public_url: settings.public_url.clone(),
            brand: settings.brand()?,
            pricing: settings.pricing()?,
            http: HttpSettings {
                public_url,
                allowed_origins: settings.allowed_origins.clone().unwrap_or_default(),
                allowed_hosts: settings.allowed_hosts.clone().unwrap_or_default(),
                max_request_bytes: settings.max_request_bytes()?,
                sessions: settings.mcp_session_limits()?,
                trusted_proxies: settings.trusted_proxies()?,
                server_timing: settings.server_timing()?,
            },
            max_connections: match settings.max_connections {
                Some(0) => return Err(ConfigError::new("max_connections", "must be at least 1")),
                other => other,
            },
            history_days: match settings.history_days {
                Some(days) if days > 3660 => {
                    return Err(ConfigError::new(
                        "history_days",
                        format!("must be at most 3660 (ten years), got {days}"),
                    ));
                }
                other => other.unwrap_or(DEFAULT_HISTORY_DAYS),
            },
            egress: EgressPolicy::new(settings.egress_allow_private.as_deref().unwrap_or_default())
                .map_err(|reason| ConfigError::worded("egress_allow_private", reason))?,
            store,
            network: settings.egress_limits()?,
            vault: VaultKeys::from_settings(settings)?,
            nodes: super::NodesConfig::from_settings(settings)?,
            // with nodes, this process runs no session: no runtime, no root, no cgroups
            sandbox: if settings.nodes.as_ref().is_some_and(|n| !n.is_empty()) {
                None
            } else {
                SandboxConfig::from_settings(settings)?
            },
            providers: Providers::from_settings(settings)?,
            operator_keys: operator_key_limits(settings)?,
            mail: MailConfig::from_settings(settings)?,
            payments: payments(settings)?,
            sign_in_limits: sign_in_limits(settings),
            tasks: settings.task_settings(sole_process)?,
            results: ResultsConfig::from_settings(settings)?,
            worker_threads: settings.worker_threads()?,
            log,
        })
    }

    /// The public URL of the server once bound at `bound` (port 0 becomes the port it got).
    pub fn public_url_for(&self, bound: SocketAddr) -> Result<String, ConfigError> {
        public_url_of(self.public_url.as_deref(), bound)
    }
}

impl MailConfig {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        if let Some(from) = &settings.mail_from {
            toolgate_mail::check_from(from).map_err(|err| ConfigError::worded("mail_from", err))?;
        }
        if let Some(url) = &settings.smtp_url {
            // the transport is built again at start; building it connects to nothing
            let from = settings
                .mail_from
                .as_deref()
                .unwrap_or("toolgate@localhost");
            toolgate_mail::Smtp::from_url(url.expose(), from)
                .map_err(|err| ConfigError::worded("smtp_url", err))?;
        }
        Ok(Self {
            smtp_url: settings.smtp_url.clone(),
            from: settings.mail_from.clone(),
            outbox: settings.data_dir().join("outbox"),
        })
    }
}

/// What model calls on the operator's keys may use: `operator_max_tokens` (at least 1) and
/// `operator_tokens_per_day`.
fn operator_key_limits(settings: &Settings) -> Result<OperatorKeyLimits, ConfigError> {
    let defaults = OperatorKeyLimits::default();
    let max_tokens = settings.operator_max_tokens.unwrap_or(defaults.max_tokens);
    if max_tokens == 0 {
        return Err(ConfigError::new(
            "operator_max_tokens",
            "must be at least 1 (operator_tokens_per_day = 0 lends no key)",
        ));
    }
    Ok(OperatorKeyLimits {
        max_tokens,
        tokens_per_day: settings
            .operator_tokens_per_day
            .unwrap_or(defaults.tokens_per_day),
    })
}

/// Stripe when a secret key or webhook secret is set, its API base checked.
fn payments(settings: &Settings) -> Result<Option<StripeSettings>, ConfigError> {
    let secret_key = settings
        .stripe_secret_key
        .as_ref()
        .map(|s| s.expose().to_owned());
    let webhook_secret = settings
        .stripe_webhook_secret
        .as_ref()
        .map(|s| s.expose().to_owned());
    if secret_key.is_none() && webhook_secret.is_none() {
        return Ok(None);
    }
    let mut stripe = StripeSettings {
        secret_key,
        webhook_secret,
        ..StripeSettings::default()
    };
    if let Some(base) = &settings.stripe_api_base {
        stripe.api_base = base.clone();
    }
    // the client is built again at start; building it connects to nothing
    toolgate_payments::Stripe::new(stripe.clone())
        .map_err(|reason| ConfigError::new("stripe_api_base", reason))?;
    Ok(Some(stripe))
}

/// The sign-in limits, defaults where not set.
fn sign_in_limits(settings: &Settings) -> SignInLimits {
    let defaults = SignInLimits::default();
    SignInLimits {
        per_address: settings
            .sign_in_limit_per_address
            .unwrap_or(defaults.per_address),
        per_client: settings
            .sign_in_limit_per_client
            .unwrap_or(defaults.per_client),
    }
}
