//! # toolgate-egress-proxy
//!
//! The only way out of a session. A confined session's network namespace has one interface,
//! loopback, and on it one listener, `127.0.0.1:3128` ([`SESSION_PROXY_PORT`]), which is not the
//! session's: the server made it inside that namespace ([`listen_in_netns`]) and accepts on it
//! itself, so every connection the session's code opens arrives here, in the server, and goes
//! on (if at all) from the host's network. There is no other route: raw sockets, UDP and DNS
//! are refused by the session's seccomp filter, and there is nothing else to reach on loopback.
//!
//! What arrives is spoken to as an HTTP proxy (`HTTP_PROXY`/`HTTPS_PROXY` point at it, see
//! [`SessionGate::env`]): `CONNECT host:port` opens a tunnel, an absolute-form request
//! (`GET http://host/path`) is forwarded. Before anything leaves:
//!
//! - the session must be running a call whose grant allows network ([`SessionGate::begin`]);
//!   between calls every connection is refused, and the run's connections end with it;
//! - the host must pass the run's allow- and deny-lists of host patterns;
//! - the name is resolved here, never by the session, and every address it resolves to must
//!   pass the egress guard (no loopback, private, link-local or metadata address unless the
//!   operator's `egress_allow_private` allows it);
//! - the run's limits hold: connections at once, bytes in all, bytes per second.
//!
//! Each connection (and each refusal) is recorded as a [`Destination`] for the run's result.
//!
//! A run holding secrets bound to hosts ([`EgressGrant::secrets`]) has every HTTPS tunnel
//! terminated with a CA made for the session (its certificate is in [`SessionGate::env`] as
//! `TOOLGATE_EGRESS_CA`), so that `{{secret:NAME}}` in a request's headers is replaced on the
//! way out to NAME's hosts and refused anywhere else; plain HTTP requests get the same.
//!
//! One host is answered by the proxy itself: [`INDEX_HOST`], the package index `pip install`
//! uses in sessions, a caching mirror of the operator's index (see `index`).

mod ca;
mod connect;
mod gate;
mod head;
mod http1;
mod index;
mod intercept;
mod netns;
mod placeholder;
mod pump;
mod run;
mod traffic;

#[cfg(test)]
mod tests;

pub use ca::{TlsSetupError, extra_roots_from_pem};
pub use gate::{RunEgress, SessionGate};
pub use index::{INDEX_HOST, IndexSettings};
pub use netns::{listen_in_netns, listen_on_loopback};
pub use rustls::pki_types::CertificateDer;

use std::sync::Arc;

use toolgate_egress::EgressPolicy;
pub use toolgate_sandbox::{Destination, EgressGrant, EgressLimits};

/// The port the proxy listens on inside every confined session's network namespace.
pub const SESSION_PROXY_PORT: u16 = 3128;

/// What the proxy of every session of this process shares.
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    /// The egress guard (the operator's `egress_allow_private`).
    pub policy: Arc<EgressPolicy>,
    /// CAs the proxy trusts besides the public roots when it terminates a tunnel (the
    /// operator's `egress_extra_ca_file`, see [`extra_roots_from_pem`]).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// The package index sessions install from (`None`: `pip install` finds no index).
    pub index: Option<IndexSettings>,
}

/// The proxy service of one process: makes a [`SessionGate`] per session.
#[derive(Debug, Clone)]
pub struct EgressProxy {
    shared: Arc<Shared>,
}

/// What every gate of a process reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) settings: ProxySettings,
    /// The TLS client of terminated tunnels.
    pub(crate) upstream_tls: Arc<rustls::ClientConfig>,
    pub(crate) index: Option<index::Index>,
}

/// Why the proxy could not be set up for a session.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The listener could not be made or served.
    #[error("the session's network proxy could not be set up: {0}")]
    Io(#[from] std::io::Error),
}

impl EgressProxy {
    /// The proxy service with `settings`.
    pub fn new(settings: ProxySettings) -> Self {
        let upstream_tls = ca::upstream_config(&settings.extra_roots);
        let index = settings
            .index
            .clone()
            .map(|index| index::Index::new(index, &settings.policy));
        Self {
            shared: Arc::new(Shared {
                settings,
                upstream_tls,
                index,
            }),
        }
    }

    /// A new session's gate, not yet listening (see [`SessionGate::serve`]), with the
    /// session's own CA.
    pub fn gate(&self) -> SessionGate {
        SessionGate::new(Arc::clone(&self.shared))
    }
}
