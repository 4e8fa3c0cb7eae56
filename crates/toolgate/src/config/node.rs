//! The settings of many hosts: a front end's execution nodes (`serve --nodes`), and the `node`
//! role's own configuration.

use std::net::SocketAddr;
use std::time::Duration;

use toolgate_node::{ClientTls, NodeToken, NodeUrl, ServerTls, TlsError, TlsFile, TlsFiles};
use toolgate_sandbox::LimitSettings;

use super::sandbox::SandboxConfig;
use super::store::VaultKeys;
use super::{ConfigError, Settings};

/// Where `node` listens when `listen` is not given.
const NODE_LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 7070);

/// A front end's nodes, checked.
pub struct NodesConfig {
    /// `nodes`, each `http://HOST:PORT` (`https://` on mutual TLS)
    pub urls: Vec<String>,
    /// `node_token_file`'s token
    pub token: NodeToken,
    /// `node_tls_*`: mutual TLS on the channel, when given
    pub tls: Option<ClientTls>,
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
        let tls_files = tls_files(settings)?;
        let mut checked = Vec::with_capacity(urls.len());
        for url in urls {
            let address = NodeUrl::parse(url, tls_files.is_some())
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
        let tls = match tls_files {
            Some(files) => Some(files.client().map_err(tls_error)?),
            None => None,
        };
        let token = token(settings)?;
        Ok(Some(Self {
            lease,
            urls: urls.clone(),
            token,
            tls,
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
    /// `node_tls_*`: mutual TLS on the channel, when given
    pub tls: Option<ServerTls>,
    /// The sessions this node runs.
    pub sandbox: SandboxConfig,
    /// The vault's master keys: checkpoints are sealed with them (the key file must exist: the
    /// front end makes it).
    pub vault: VaultKeys,
    /// `worker_threads`: the async runtime's worker threads.
    pub worker_threads: usize,
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
        let tls = match tls_files(settings)? {
            Some(files) => Some(files.server().map_err(tls_error)?),
            None => None,
        };
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
            tls,
            sandbox,
            vault,
            worker_threads: settings.worker_threads()?,
            log,
        })
    }
}

/// How `node --drain` reaches the node on this host.
pub struct DrainTarget {
    /// `http://LISTEN` (`listen`, default as `node`'s), or `https://` on mutual TLS, where a
    /// wildcard address is dialled as loopback: the node's certificate must name it
    pub url: String,
    /// `node_token_file`'s token
    pub token: NodeToken,
    /// `node_tls_*`, when given: a certificate the node takes, as a front end's
    pub tls: Option<ClientTls>,
}

/// Where `node --drain` finds the node, and what it shows it.
pub fn drain_target(settings: &Settings) -> Result<DrainTarget, ConfigError> {
    let mut listen = settings
        .listen
        .unwrap_or_else(|| SocketAddr::from(NODE_LISTEN));
    let token = token(settings)?;
    let Some(files) = tls_files(settings)? else {
        return Ok(DrainTarget {
            url: format!("http://{listen}"),
            token,
            tls: None,
        });
    };
    if listen.ip().is_unspecified() {
        listen.set_ip(match listen {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(DrainTarget {
        url: format!("https://{listen}"),
        token,
        tls: Some(files.client().map_err(tls_error)?),
    })
}

/// The channel's TLS files: all three of `node_tls_cert`, `node_tls_key` and `node_tls_ca`,
/// or none (the channel is then h2c, as between hosts of a private network).
fn tls_files(settings: &Settings) -> Result<Option<TlsFiles>, ConfigError> {
    let given = [
        ("node_tls_cert", &settings.node_tls_cert),
        ("node_tls_key", &settings.node_tls_key),
        ("node_tls_ca", &settings.node_tls_ca),
    ];
    match given.map(|(_, path)| path.clone()) {
        [None, None, None] => Ok(None),
        [Some(cert), Some(key), Some(ca)] => Ok(Some(TlsFiles { cert, key, ca })),
        _ => {
            let missing = given
                .iter()
                .find_map(|(setting, path)| path.is_none().then_some(*setting))
                .unwrap_or("node_tls_cert");
            Err(ConfigError::new(
                missing,
                "mutual TLS on the node channel needs node_tls_cert, node_tls_key and \
                 node_tls_ca together: give all three, or none",
            ))
        }
    }
}

/// A TLS file's refusal, named by its setting.
fn tls_error(err: TlsError) -> ConfigError {
    let setting = match err.file() {
        TlsFile::Cert => "node_tls_cert",
        TlsFile::Key => "node_tls_key",
        TlsFile::Ca => "node_tls_ca",
    };
    ConfigError::new(setting, err)
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

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
