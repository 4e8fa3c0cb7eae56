//! A run's way out: what the service's egress proxy lets a session's code reach during one run
//! ([`EgressGrant`], carried in the [`RunRequest`](crate::RunRequest)), and what it reached
//! ([`Destination`], in the [`RunOutcome`](crate::RunOutcome)). Plain data, so a run on an
//! execution node carries them over the wire like the rest of the run.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a session may reach through the proxy during one run. Without a grant the proxy
/// refuses every connection (the session's network is `off` for that run).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressGrant {
    /// Host patterns the run may reach (`example.org`, `*.github.com`); empty: every public host.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Host patterns the run may not reach, applied after `allow`.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Secrets the proxy writes into requests to their hosts in place of `{{secret:NAME}}`.
    #[serde(default)]
    pub secrets: Vec<EdgeSecret>,
    /// Per-session limits of this run's traffic.
    pub limits: EgressLimits,
}

impl fmt::Debug for EgressGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressGrant")
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("secrets", &self.secrets)
            .field("limits", &self.limits)
            .finish()
    }
}

/// A secret bound to hosts: its value never enters the session; the proxy adds it to requests
/// to those hosts only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeSecret {
    /// Its name, as code writes it in `{{secret:NAME}}`.
    pub name: String,
    /// Its value. Never shown by `Debug`, never logged.
    pub value: String,
    /// Host patterns it may be sent to.
    pub hosts: Vec<String>,
}

impl fmt::Debug for EdgeSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EdgeSecret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// The proxy's limits on one session's traffic during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressLimits {
    /// Connections open at once.
    pub max_connections: u32,
    /// Bytes sent and received together during the run (0: no limit).
    pub max_bytes: u64,
    /// Bytes per second sent and received together (0: no limit).
    pub bytes_per_second: u64,
}

impl Default for EgressLimits {
    /// 16 connections, 1 GiB, 100 MiB/s.
    fn default() -> Self {
        Self {
            max_connections: 16,
            max_bytes: 1 << 30,
            bytes_per_second: 100 << 20,
        }
    }
}

/// One connection (or one refused attempt) a run made through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    /// The host as the code named it.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `connect` (a tunnel), `http` (a plain request), `https` (a request seen inside TLS the
    /// proxy terminated to add a secret), or `index` (the package index).
    pub kind: String,
    /// Bytes the session sent.
    pub bytes_sent: u64,
    /// Bytes the session received.
    pub bytes_received: u64,
    /// Milliseconds from the request to the connection's end (or refusal).
    pub duration_ms: u64,
    /// Why it was refused, if it was (the message the code got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}
