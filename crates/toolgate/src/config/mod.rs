//! Configuration in two steps. [`Settings`] is what was given: every option as a flag, a
//! `TOOLGATE_*` environment variable and a key of the TOML file given by `--config`, in that
//! order of precedence, each `None` when not given. A role's configuration ([`ServeConfig`]
//! for `serve`; the operator commands use the same pieces) is then read from it, every value
//! checked and given its default, before anything is opened, created or bound; a refusal is a
//! [`ConfigError`], which names its setting. A further role (an execution `node`) would get a
//! configuration of its own beside `ServeConfig`, from the same typed pieces (store, sandbox,
//! providers, …).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

pub use checkpoints::{CheckpointLocation, CheckpointsConfig};
pub use node::{DrainTarget, NodeConfig, NodesConfig, drain_target};
pub use providers::{ProviderTable, Providers};
pub use sandbox::SandboxConfig;
pub use serve::{MailConfig, ServeConfig};
pub use store::{StoreConfig, VaultKeys};

/// A setting that cannot be used: its name and why. Every refusal of the configuration is one,
/// so every message names its setting; the reason never repeats a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    // the message names it; kept apart for the tests that check which setting was refused
    #[cfg_attr(not(test), allow(dead_code))]
    setting: String,
    message: String,
}

impl ConfigError {
    /// `setting` refused for `reason`: "setting: reason".
    pub fn new(setting: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        let setting = setting.into();
        let message = format!("{setting}: {reason}");
        Self { setting, message }
    }

    /// `setting` refused with a message of an adapter's that already names it.
    pub fn worded(setting: &str, message: impl std::fmt::Display) -> Self {
        let message = message.to_string();
        if message.contains(setting) {
            Self {
                setting: setting.to_owned(),
                message,
            }
        } else {
            Self::new(setting, message)
        }
    }

    /// The setting refused.
    #[cfg(test)]
    pub fn setting(&self) -> &str {
        &self.setting
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A setting that holds a credential (a database URL with its password): its `Debug` shows
/// nothing of it, so no log line or error built from the settings can leak it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self(value.to_owned()))
    }
}

/// Options every command reads. `Option` everywhere so that "not given" can fall through to the
/// file and then to the default.
#[derive(Debug, Default, Clone, Args, Deserialize)]
pub struct Settings {
    /// Directory for the embedded database and other local state [default: ./toolgate-data]
    #[arg(long, env = "TOOLGATE_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,

    /// postgres://user:pass@host:port/db to use PostgreSQL instead of the embedded SQLite file
    #[arg(
        long,
        env = "TOOLGATE_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub database_url: Option<Secret>,

    /// The URL clients reach this server at; personal URLs and the allowed Origin derive from it
    /// [default: http://<the listening address>, a wildcard or loopback one as 127.0.0.1]
    #[arg(long, env = "TOOLGATE_PUBLIC_URL", global = true)]
    pub public_url: Option<String>,

    /// Address and port to listen on; port 0 takes a free one, which `serve` announces on stdout
    /// as {"listening": "ADDRESS", "public_url": "URL"} [default: 127.0.0.1:8080]
    #[arg(long, env = "TOOLGATE_LISTEN", global = true)]
    pub listen: Option<SocketAddr>,

    /// The service's prefix: tools <brand>_read/_write/_ai, keys <brand>k_… [default: svc]
    #[arg(long, env = "TOOLGATE_BRAND", global = true)]
    pub brand: Option<String>,

    /// Free calls per account per calendar month (UTC) [default: 1000]
    #[arg(long, env = "TOOLGATE_FREE_MONTHLY_CALLS", global = true)]
    pub free_monthly_calls: Option<i64>,

    /// Price of one call after the free allowance, in USD [default: 0.008]
    #[arg(long, env = "TOOLGATE_PAID_CALL_COST_USD", global = true)]
    pub paid_call_cost_usd: Option<String>,

    /// Smallest wallet top-up, in USD [default: 5.00]
    #[arg(long, env = "TOOLGATE_MIN_TOPUP_USD", global = true)]
    pub min_topup_usd: Option<String>,

    /// Largest wallet top-up, in USD [default: 500.00]
    #[arg(long, env = "TOOLGATE_MAX_TOPUP_USD", global = true)]
    pub max_topup_usd: Option<String>,

    /// Further browser origins allowed to call the MCP endpoints, comma-separated
    /// (the public URL's origin is always allowed)
    #[arg(
        long,
        env = "TOOLGATE_ALLOWED_ORIGINS",
        global = true,
        value_delimiter = ','
    )]
    pub allowed_origins: Option<Vec<String>>,

    /// Further Host header values accepted, comma-separated (the public URL's host and loopback
    /// are always accepted)
    #[arg(
        long,
        env = "TOOLGATE_ALLOWED_HOSTS",
        global = true,
        value_delimiter = ','
    )]
    pub allowed_hosts: Option<Vec<String>>,

    /// Largest request body accepted, in bytes [default: 10485760]
    #[arg(long, env = "TOOLGATE_MAX_REQUEST_BYTES", global = true)]
    pub max_request_bytes: Option<usize>,

    /// Open HTTP connections at most; at the limit the longest-idle one is closed to make room
    /// [default: three quarters of the open-file limit, raised to its hard limit at start]
    #[arg(long, env = "TOOLGATE_MAX_CONNECTIONS", global = true)]
    pub max_connections: Option<usize>,

    /// `on`: tool calls answer with a `Server-Timing` header, the duration of each stage the
    /// server sees (durations only) [default: off]
    #[arg(long, env = "TOOLGATE_SERVER_TIMING", global = true)]
    pub server_timing: Option<String>,

    /// Days the call history keeps each call; 0 records no history [default: 30]
    #[arg(long, env = "TOOLGATE_HISTORY_DAYS", global = true)]
    pub history_days: Option<u32>,

    /// Open legacy MCP sessions (2025-11-25 handshake) per key's account; at the limit its
    /// longest-idle session is closed for a new one [default: 64]
    #[arg(long, env = "TOOLGATE_MAX_MCP_SESSIONS_PER_ACCOUNT", global = true)]
    pub max_mcp_sessions_per_account: Option<usize>,

    /// Open legacy MCP sessions on this server; beyond it `initialize` is refused (503)
    /// [default: 100000]
    #[arg(long, env = "TOOLGATE_MAX_MCP_SESSIONS", global = true)]
    pub max_mcp_sessions: Option<usize>,

    /// A call of a 2026-07-28 client that accepts tasks becomes an MCP task when it has not
    /// ended after this many seconds [default: 10]
    #[arg(long, env = "TOOLGATE_TASK_AFTER_S", global = true)]
    pub task_after_s: Option<u64>,

    /// How long an MCP task and its result are kept, in seconds; a client may ask for less,
    /// not under 60 [default: 3600]
    #[arg(long, env = "TOOLGATE_TASK_TTL_S", global = true)]
    pub task_ttl_s: Option<u64>,

    /// MCP tasks one account may run at once [default: 16]
    #[arg(long, env = "TOOLGATE_TASK_MAX_RUNNING", global = true)]
    pub task_max_running: Option<u32>,

    /// SQLite commit durability: `full` (fsync per commit) or `normal` (survives a killed
    /// process, not a power cut) [default: full]
    #[arg(long, env = "TOOLGATE_SQLITE_SYNCHRONOUS", global = true)]
    pub sqlite_synchronous: Option<String>,

    /// Threads that run the server's own work (HTTP, MCP, the sessions' channels); sessions
    /// are processes of their own [default: one per core]
    #[arg(long, env = "TOOLGATE_WORKER_THREADS", global = true)]
    pub worker_threads: Option<usize>,

    /// Log filter, e.g. `info`, `warn`, `toolgate=debug` [default: info]
    #[arg(long, env = "TOOLGATE_LOG", global = true)]
    pub log: Option<String>,

    /// Execution nodes to run sessions on, comma-separated `http://HOST:PORT` (`toolgate node`
    /// listening there); given, `serve` starts no sandbox of its own and needs no privilege
    #[arg(long, env = "TOOLGATE_NODES", global = true, value_delimiter = ',')]
    pub nodes: Option<Vec<String>>,

    /// File holding the secret shared by front ends and nodes (at least 32 characters, mode
    /// 600); needed by `toolgate node` and by `serve --nodes`
    #[arg(long, env = "TOOLGATE_NODE_TOKEN_FILE", global = true)]
    pub node_token_file: Option<PathBuf>,

    /// How long a node keeps its sessions when no front end renews its lease (a node cut off
    /// fences itself 2 s before; its sessions may then be restored elsewhere), in seconds
    /// [default: 10]
    #[arg(long, env = "TOOLGATE_NODE_LEASE_S", global = true)]
    pub node_lease_s: Option<u64>,

    /// PEM certificate chain of this node or front end: with node_tls_key and node_tls_ca,
    /// the node channel runs over mutual TLS (node URLs are then https://) [default: none: h2c]
    #[arg(long, env = "TOOLGATE_NODE_TLS_CERT", global = true)]
    pub node_tls_cert: Option<PathBuf>,

    /// PEM private key of node_tls_cert (mode 600, like the token file)
    #[arg(long, env = "TOOLGATE_NODE_TLS_KEY", global = true)]
    pub node_tls_key: Option<PathBuf>,

    /// PEM certificate of the CA that signs the other side's certificates (a node accepts only
    /// front ends' certificates it signed, and a front end only nodes')
    #[arg(long, env = "TOOLGATE_NODE_TLS_CA", global = true)]
    pub node_tls_ca: Option<PathBuf>,

    /// `on`: svc_write runs Python and bash in the sandbox (the server refuses to start if the
    /// runtime is missing); `off`: no sandbox capabilities [default: on]
    #[arg(long, env = "TOOLGATE_SANDBOX", global = true)]
    pub sandbox: Option<String>,

    /// The Python runtime made by scripts/python-runtime.sh [default: .deps/python-runtime of
    /// the working directory, else of the checkout the binary was built in]
    #[arg(long, env = "TOOLGATE_SANDBOX_RUNTIME", global = true)]
    pub sandbox_runtime: Option<PathBuf>,

    /// The zygote script [default: runtime/toolgate_zygote.py, found like the runtime]
    #[arg(long, env = "TOOLGATE_SANDBOX_ZYGOTE", global = true)]
    pub sandbox_zygote: Option<PathBuf>,

    /// The confinement library [default: libtoolgate_sandbox_harden.so next to this binary]
    #[arg(long, env = "TOOLGATE_SANDBOX_HARDEN_LIB", global = true)]
    pub sandbox_harden_lib: Option<PathBuf>,

    /// `required`: every session is confined (the server refuses to start without the
    /// library); `off`: sessions run unconfined, for development only [default: required]
    #[arg(long, env = "TOOLGATE_SANDBOX_CONFINEMENT", global = true)]
    pub sandbox_confinement: Option<String>,

    /// Where session workspaces live [default: <data_dir>/sessions]
    #[arg(long, env = "TOOLGATE_SANDBOX_ROOT", global = true)]
    pub sandbox_root: Option<PathBuf>,

    /// Minutes without a call after which a session expires [default: 20]
    #[arg(long, env = "TOOLGATE_SANDBOX_IDLE_MINUTES", global = true)]
    pub sandbox_idle_minutes: Option<u64>,

    /// Live sessions per account [default: 10]
    #[arg(long, env = "TOOLGATE_SANDBOX_MAX_SESSIONS", global = true)]
    pub sandbox_max_sessions: Option<usize>,

    /// Warm sessions kept ready at least (started and confined ahead of time, so a new session
    /// answers in a millisecond); 0: none [default: 2]
    #[arg(long, env = "TOOLGATE_SANDBOX_WARM_SESSIONS", global = true)]
    pub sandbox_warm_sessions: Option<usize>,

    /// The most warm sessions kept ready under demand (as many as new sessions wanted one in
    /// the last ten seconds, while memory allows) [default: 256]
    #[arg(long, env = "TOOLGATE_SANDBOX_WARM_SESSIONS_MAX", global = true)]
    pub sandbox_warm_sessions_max: Option<usize>,

    /// Seconds without a call after which a session is hibernated: written out to its
    /// checkpoint and its processes ended; its next call restores it [default: 300]
    #[arg(long, env = "TOOLGATE_SANDBOX_HIBERNATE_AFTER_S", global = true)]
    pub sandbox_hibernate_after_s: Option<u64>,

    /// After a call, a session whose last checkpoint is this many seconds old is checkpointed
    /// again, so that a crash loses at most this much [default: 300]
    #[arg(long, env = "TOOLGATE_SANDBOX_CHECKPOINT_EVERY_S", global = true)]
    pub sandbox_checkpoint_every_s: Option<u64>,

    /// Days a session's checkpoint is kept after it was written, then deleted [default: 7]
    #[arg(long, env = "TOOLGATE_SANDBOX_SESSION_RETENTION_DAYS", global = true)]
    pub sandbox_session_retention_days: Option<u64>,

    /// What one account's checkpoints may take (each session's newest), in MiB; past it the
    /// account's oldest hibernated sessions are dropped [default: 2048; 0: none]
    #[arg(long, env = "TOOLGATE_SANDBOX_ACCOUNT_CHECKPOINT_MIB", global = true)]
    pub sandbox_account_checkpoint_mib: Option<u64>,

    /// Where sessions' checkpoints live: `file:///abs/dir` or `s3://bucket/prefix`; `off`: a
    /// session lives only as long as its process [default: file://<data_dir>/checkpoints]
    #[arg(long, env = "TOOLGATE_CHECKPOINT_URL", global = true)]
    pub checkpoint_url: Option<String>,

    /// The S3 endpoint of an `s3://` checkpoint_url, e.g. http://127.0.0.1:3900 [default: AWS]
    #[arg(long, env = "TOOLGATE_CHECKPOINT_S3_ENDPOINT", global = true)]
    pub checkpoint_s3_endpoint: Option<String>,

    /// The S3 region of an `s3://` checkpoint_url [default: us-east-1]
    #[arg(long, env = "TOOLGATE_CHECKPOINT_S3_REGION", global = true)]
    pub checkpoint_s3_region: Option<String>,

    /// The S3 access key id of an `s3://` checkpoint_url
    #[arg(long, env = "TOOLGATE_CHECKPOINT_S3_ACCESS_KEY_ID", global = true)]
    pub checkpoint_s3_access_key_id: Option<String>,

    /// The S3 secret access key of an `s3://` checkpoint_url
    #[arg(
        long,
        env = "TOOLGATE_CHECKPOINT_S3_SECRET_ACCESS_KEY",
        global = true,
        hide_env_values = true
    )]
    pub checkpoint_s3_secret_access_key: Option<Secret>,

    /// `timeout_s` of a call that gives none [default: 60]
    #[arg(long, env = "TOOLGATE_SANDBOX_DEFAULT_TIMEOUT_S", global = true)]
    pub sandbox_default_timeout_s: Option<u64>,

    /// The largest `timeout_s` a call may ask for [default: 300]
    #[arg(long, env = "TOOLGATE_SANDBOX_MAX_TIMEOUT_S", global = true)]
    pub sandbox_max_timeout_s: Option<u64>,

    /// The largest `timeout_s` of a call that runs as an MCP task [default: 3600]
    #[arg(long, env = "TOOLGATE_SANDBOX_MAX_TASK_S", global = true)]
    pub sandbox_max_task_s: Option<u64>,

    /// Memory of one session, in MiB [default: 1024]
    #[arg(long, env = "TOOLGATE_SANDBOX_MEMORY_MIB", global = true)]
    pub sandbox_memory_mib: Option<u64>,

    /// Workspace size of one session, in MiB [default: 512]
    #[arg(long, env = "TOOLGATE_SANDBOX_WORKSPACE_MIB", global = true)]
    pub sandbox_workspace_mib: Option<u64>,

    /// Characters of a run's stream shown inline; a longer one comes back as its head and tail,
    /// its whole kept as a workspace file with a signed download link. A client's `_meta`
    /// `anthropic/maxResultSizeChars` raises it for its call [default: 20000; 1000 to 1048576]
    #[arg(long, env = "TOOLGATE_INLINE_RESULT_CHARS", global = true)]
    pub inline_result_chars: Option<u64>,

    /// How long a signed download link works, in seconds [default: 3600; 60 to 604800]
    #[arg(long, env = "TOOLGATE_DOWNLOAD_URL_TTL_S", global = true)]
    pub download_url_ttl_s: Option<u64>,

    /// How long a signed upload link works (until its one PUT), in seconds
    /// [default: 3600; 60 to 604800]
    #[arg(long, env = "TOOLGATE_UPLOAD_URL_TTL_S", global = true)]
    pub upload_url_ttl_s: Option<u64>,

    /// Processes and threads of one session [default: 256]
    #[arg(long, env = "TOOLGATE_SANDBOX_MAX_PROCESSES", global = true)]
    pub sandbox_max_processes: Option<u32>,

    /// The first of the 65,536 host uids sessions are given; nodes sharing one host need ranges
    /// apart [default: 1000000000]
    #[arg(long, env = "TOOLGATE_SANDBOX_FIRST_UID", global = true)]
    pub sandbox_first_uid: Option<u32>,

    /// Memory of all live sessions together, in MiB; a new session beyond it is refused with
    /// "the service is at capacity" [default: three quarters of the host's memory; 0: none]
    #[arg(long, env = "TOOLGATE_SANDBOX_BUDGET_MEMORY_MIB", global = true)]
    pub sandbox_budget_memory_mib: Option<u64>,

    /// Processes and threads of all live sessions together [default: half the host's pid_max;
    /// 0: none]
    #[arg(long, env = "TOOLGATE_SANDBOX_BUDGET_PROCESSES", global = true)]
    pub sandbox_budget_processes: Option<u64>,

    /// Memory one account's live sessions may reserve together (each its sandbox_memory_mib),
    /// in MiB [default: half of sandbox_budget_memory_mib; 0: none]
    #[arg(long, env = "TOOLGATE_SANDBOX_ACCOUNT_MEMORY_MIB", global = true)]
    pub sandbox_account_memory_mib: Option<u64>,

    /// Private ranges outbound requests (`url`) may reach after all, as addresses or CIDR
    /// ranges, e.g. 10.1.2.0/24 for an internal API [default: none: loopback, private,
    /// link-local, CGNAT, multicast and metadata addresses are refused]
    #[arg(
        long,
        env = "TOOLGATE_EGRESS_ALLOW_PRIVATE",
        global = true,
        value_delimiter = ','
    )]
    pub egress_allow_private: Option<Vec<String>>,

    /// Sessions' network: `proxy` (through the service's egress proxy, under the account's
    /// rules) or `off` (none at all) [default: proxy]
    #[arg(long, env = "TOOLGATE_SANDBOX_NETWORK", global = true)]
    pub sandbox_network: Option<String>,

    /// Connections one run's code may have open at once through the proxy [default: 16]
    #[arg(long, env = "TOOLGATE_EGRESS_MAX_CONNECTIONS", global = true)]
    pub egress_max_connections: Option<u32>,

    /// MiB one run's code may send and receive through the proxy, together; 0: no limit
    /// [default: 1024]
    #[arg(long, env = "TOOLGATE_EGRESS_MAX_MIB", global = true)]
    pub egress_max_mib: Option<u64>,

    /// MiB per second one run's traffic through the proxy may reach; 0: no limit [default: 100]
    #[arg(long, env = "TOOLGATE_EGRESS_RATE_MIB_S", global = true)]
    pub egress_rate_mib_s: Option<u64>,

    /// A PEM file of CA certificates the proxy trusts, besides the public roots, when it
    /// terminates a session's HTTPS to add a secret bound to hosts (an internal CA, a test's)
    #[arg(long, env = "TOOLGATE_EGRESS_EXTRA_CA_FILE", global = true)]
    pub egress_extra_ca_file: Option<PathBuf>,
    /// The package index `pip install` in sessions mirrors (a PEP 503/691 simple index; on a
    /// private address too: it is the operator's) [default: https://pypi.org/simple/]
    #[arg(long, env = "TOOLGATE_PIP_INDEX_URL", global = true)]
    pub pip_index_url: Option<String>,

    /// A second index pip in sessions also finds projects on (a file name the first index has
    /// is taken from it) [default: none]
    #[arg(long, env = "TOOLGATE_PIP_EXTRA_INDEX_URL", global = true)]
    pub pip_extra_index_url: Option<String>,

    /// MiB of the host's package file cache (<data_dir>/wheels); the least recently used files
    /// are removed past it [default: 2048]
    #[arg(long, env = "TOOLGATE_PIP_CACHE_MIB", global = true)]
    pub pip_cache_mib: Option<u64>,

    /// The vault's master keys themselves, as `v1 <base64 of 32 bytes>` entries separated by
    /// newlines or `;` (instead of a key file; rotation then is the operator's: add a version)
    #[arg(
        long,
        env = "TOOLGATE_VAULT_MASTER_KEY",
        global = true,
        hide_env_values = true
    )]
    pub vault_master_key: Option<Secret>,

    /// The vault's key file, created 0600 with a fresh key on the first start
    /// [default: <data_dir>/vault.key]
    #[arg(long, env = "TOOLGATE_VAULT_KEY_FILE", global = true)]
    pub vault_key_file: Option<PathBuf>,

    /// `<provider>_base_url` and `<provider>_api_key` of every model provider and search engine
    /// of the catalogs (see `providers.rs`)
    #[command(flatten)]
    #[serde(flatten)]
    pub providers: ProviderTable,

    /// OpenAI-compatible model endpoints, as NAME=BASE_URL (models then are NAME/model)
    #[arg(
        long,
        env = "TOOLGATE_AI_ENDPOINTS",
        global = true,
        value_delimiter = ','
    )]
    pub ai_endpoints: Option<Vec<String>>,

    /// Keys of those endpoints, as NAME=KEY
    #[arg(
        long,
        env = "TOOLGATE_AI_ENDPOINT_KEYS",
        global = true,
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub ai_endpoint_keys: Option<Vec<Secret>>,

    /// A model call's time limit, retries included, in seconds [default: 120]
    #[arg(long, env = "TOOLGATE_AI_TIMEOUT_S", global = true)]
    pub ai_timeout_s: Option<u64>,

    /// The most `max_tokens` a model call on the operator's keys may ask (more is capped to
    /// it), and what such a call asks when it names none [default: 4096]
    #[arg(long, env = "TOOLGATE_OPERATOR_MAX_TOKENS", global = true)]
    pub operator_max_tokens: Option<u32>,

    /// Input and output tokens one account's model calls may use of the operator's keys per UTC
    /// day; 0: the operator's keys are not lent [default: 100000]
    #[arg(long, env = "TOOLGATE_OPERATOR_TOKENS_PER_DAY", global = true)]
    pub operator_tokens_per_day: Option<u64>,

    /// A SearXNG instance for `search` (its JSON API), e.g. http://127.0.0.1:8888
    #[arg(long, env = "TOOLGATE_SEARXNG_URL", global = true)]
    pub searxng_url: Option<String>,

    /// Where sign-in mails go: smtp://user:pass@host:port (STARTTLS when offered) or
    /// smtps://… [default: none: each mail is an .eml file in <data-dir>/outbox, its link logged]
    #[arg(long, env = "TOOLGATE_SMTP_URL", global = true, hide_env_values = true)]
    pub smtp_url: Option<Secret>,

    /// The sender of sign-in mails [default: toolgate@<the public URL's host>]
    #[arg(long, env = "TOOLGATE_MAIL_FROM", global = true)]
    pub mail_from: Option<String>,

    /// Stripe's secret key (sk_live_… or sk_test_…): wallet top-ups through Stripe Checkout
    /// [default: none: top-ups are off]
    #[arg(
        long,
        env = "TOOLGATE_STRIPE_SECRET_KEY",
        global = true,
        hide_env_values = true
    )]
    pub stripe_secret_key: Option<Secret>,

    /// The signing secret (whsec_…) of the webhook endpoint POST <public-url>/billing/stripe/webhook
    #[arg(
        long,
        env = "TOOLGATE_STRIPE_WEBHOOK_SECRET",
        global = true,
        hide_env_values = true
    )]
    pub stripe_webhook_secret: Option<Secret>,

    /// Stripe's API base URL [default: https://api.stripe.com]
    #[arg(long, env = "TOOLGATE_STRIPE_API_BASE", global = true)]
    pub stripe_api_base: Option<String>,

    /// Reverse proxies (addresses or CIDR ranges, comma-separated) whose X-Forwarded-For names
    /// the client, for per-client limits [default: none: the TCP peer is the client]
    #[arg(
        long,
        env = "TOOLGATE_TRUSTED_PROXIES",
        global = true,
        value_delimiter = ','
    )]
    pub trusted_proxies: Option<Vec<String>>,

    /// Sign-in links one e-mail address may ask for per 15 minutes [default: 5]
    #[arg(long, env = "TOOLGATE_SIGN_IN_LIMIT_PER_ADDRESS", global = true)]
    pub sign_in_limit_per_address: Option<u32>,

    /// Sign-in requests one client address (IPv6: one /64) may make per 15 minutes [default: 30]
    #[arg(long, env = "TOOLGATE_SIGN_IN_LIMIT_PER_CLIENT", global = true)]
    pub sign_in_limit_per_client: Option<u32>,
}

mod checkpoints;
mod derived;
mod file;
mod network;
mod node;
mod providers;
mod sandbox;
mod serve;
mod store;

#[cfg(test)]
mod tests;
