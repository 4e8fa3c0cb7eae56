//! The settings of many hosts: a front end's execution nodes (`serve --nodes`), and the `node`
//! role's own configuration.

use std::net::SocketAddr;
use std::time::Duration;

use toolgate_node::NodeToken;
use toolgate_sandbox::LimitSettings;

use super::sandbox::SandboxConfig;
use super::store::VaultKeys;
use super::{ConfigError, Settings};

/// Where `node` listens when `listen` is not given.
const NODE_LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 7070);

/// A front end's nodes, checked.
pub struct NodesConfig {
    /// `nodes`, each `http://HOST:PORT`
    pub urls: Vec<String>,
    /// `node_token_file`'s token
    pub token: NodeToken,
    /// The operator's limits of one call (the nodes enforce their own as well).
    pub limits: LimitSettings,
    /// `sandbox_idle_minutes`: what the front end tells callers (the nodes' setting should match).
    pub idle_ttl: Duration,
    /// `node_lease_s`: how long a node keeps its sessions without a front end renewing it.
    pub lease: Duration,
}

impl NodesConfig {
    /// The front end's nodes, or `None` when `nodes` is not given (sessions run in this process).
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>, ConfigError> {
        let Some(urls) = settings.nodes.as_ref().filter(|urls| !urls.is_empty()) else {
            return Ok(None);
        };
        if settings.sandbox.as_deref() == Some("off") {
            return Err(ConfigError::new(
                "nodes",
                "sessions run on the nodes given, so `sandbox` cannot be `off` with them",
            ));
        }
        let mut checked = Vec::with_capacity(urls.len());
        for url in urls {
            let address = toolgate_node::NodeUrl::parse(url, false)
                .map_err(|err| ConfigError::worded("nodes", err))?
                .address()
                .to_owned();
            if checked.contains(&address) {
                return Err(ConfigError::new("nodes", format!("{url} is given twice")));
            }
            checked.push(address);
        }
        let lease = match settings.node_lease_s.unwrap_or(10) {
            seconds @ 3..=600 => Duration::from_secs(seconds),
            other => {
                return Err(ConfigError::new(
                    "node_lease_s",
                    format!("must be between 3 and 600, got {other}"),
                ));
            }
        };
        let token = token(settings)?;
        Ok(Some(Self {
            lease,
            urls: urls.clone(),
            token,
            limits: super::sandbox::limits(settings)?,
            idle_ttl: super::sandbox::idle_ttl(settings)?,
        }))
    }
}

/// Everything `node` needs, checked (no `Debug`: it holds the vault's keys).
pub struct NodeConfig {
    /// `listen` [default: 127.0.0.1:7070]
    pub listen: SocketAddr,
    /// `node_token_file`'s token
    pub token: NodeToken,
    /// The sessions this node runs.
    pub sandbox: SandboxConfig,
    /// The vault's master keys: checkpoints are sealed with them (the key file must exist: the
    /// front end makes it).
    pub vault: VaultKeys,
    /// `log`, checked.
    pub log: String,
}

impl NodeConfig {
    /// Reads and checks every setting `node` uses.
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let log = settings
            .log
            .clone()
            .unwrap_or_else(|| super::serve::SERVE_LOG.to_owned());
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|err| ConfigError::new("log", format!("{log:?}: {err}")))?;
        if settings.nodes.is_some() {
            return Err(ConfigError::new("nodes", "is for `serve`, not for a node"));
        }
        let token = token(settings)?;
        let sandbox = SandboxConfig::from_settings(settings)?.ok_or_else(|| {
            ConfigError::new("sandbox", "a node runs sessions: it cannot be `off`")
        })?;
        let vault = VaultKeys::from_settings(settings)?;
        if let VaultKeys::File(path) = &vault
            && !path.is_file()
        {
            return Err(ConfigError::new(
                "vault_key_file",
                format!(
                    "{} does not exist: a node seals checkpoints with the front ends' key file, \
                     which `serve` creates; give its path",
                    path.display()
                ),
            ));
        }
        Ok(Self {
            listen: settings
                .listen
                .unwrap_or_else(|| SocketAddr::from(NODE_LISTEN)),
            token,
            sandbox,
            vault,
            log,
        })
    }
}

/// Where `node --drain` finds the node (`listen`, default as `node`'s) and its token.
pub fn drain_target(settings: &Settings) -> Result<(SocketAddr, NodeToken), ConfigError> {
    let listen = settings
        .listen
        .unwrap_or_else(|| SocketAddr::from(NODE_LISTEN));
    Ok((listen, token(settings)?))
}

fn token(settings: &Settings) -> Result<NodeToken, ConfigError> {
    let path = settings.node_token_file.as_ref().ok_or_else(|| {
        ConfigError::new(
            "node_token_file",
            "front ends and nodes must share a token: name its file (mode 600, at least 32 characters)",
        )
    })?;
    NodeToken::read(path).map_err(|err| ConfigError::new("node_token_file", err))
}
