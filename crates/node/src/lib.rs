//! The sandbox seam across hosts. An execution node (`toolgate node`) owns sessions and serves
//! its [`SandboxSessions`](toolgate_sandbox::SandboxSessions) to front ends over an authenticated
//! HTTP/2 channel ([`NodeServer`]); a front end (`toolgate serve --nodes …`) reaches them
//! through [`RemoteSessions`], the same seam, so `app` cannot tell where its sessions run.
//!
//! - [`wire`]: the frames of a run (start, files, output, upcalls and their answers, cancel, the
//!   end) and the JSON of the other requests, read within bounds.
//! - [`NodeServer`] (serve.rs, node_run.rs): the node's side.
//! - [`RemoteSessions`] (remote.rs, remote_run.rs) over a [`Fleet`] of [`NodeLink`]s (fleet.rs,
//!   link.rs): the front end's, placing each session on one node by the placement store.
//! - [`NodeLease`] (lease.rs): a node's incarnation and lease, fenced when no front end renews it.
//! - [`NodeToken`]: the shared secret, never shown.
//! - [`TlsFiles`] (tls.rs): mutual TLS on the channel, an option beside the token.

mod fleet;
mod lease;
mod link;
mod node_run;
mod remote;
mod remote_run;
mod serve;
mod tls;
mod token;
pub mod wire;

pub use fleet::{Fleet, FleetError};
pub use lease::{NodeControl, NodeLease, NodeLoad, Renewal};
pub use link::{LinkError, NodeLink, NodeUrl};
pub use remote::RemoteSessions;
pub use remote_run::NODE_LOST;
pub use serve::NodeServer;
pub use tls::{ClientTls, ServerTls, TlsError, TlsFile, TlsFiles};
pub use token::{MIN_TOKEN_CHARS, NodeToken, TokenError};
