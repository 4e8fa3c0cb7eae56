//! The OAuth 2.1 protocol as this service speaks it, without I/O: the values and rules the
//! authorization server behind `/mcp` (its use cases are `toolgate-app`'s `oauth` module) reads
//! and writes. Nothing here touches storage, the network or a clock.
//!
//! - discovery: [`Issuer`] writes the metadata documents (RFC 8414, RFC 9728), the
//!   `WWW-Authenticate` challenge and the redirects back to a client;
//! - clients: Client ID Metadata Documents ([`document`]) and Dynamic Client Registration
//!   requests ([`Registration`], RFC 7591), with their redirect-URI and name checks ([`uri`]);
//! - the code flow: [`AuthorizeParams`] read from the query and checked into an
//!   [`AuthorizeRequest`] against a known client; token requests read as a [`TokenForm`], PKCE
//!   S256 ([`token::pkce_matches`]), refresh-token families, and [`TokenAnswer`];
//! - the replay and rotation rule of codes and refresh tokens ([`credential::step`]), which the
//!   store applies by compare-and-set;
//! - scopes ([`scope`]) and the errors in the RFCs' words ([`OAuthError`], [`AuthorizeError`],
//!   [`TokenError`]).

mod authorize;
pub mod credential;
pub mod document;
mod error;
mod issuer;
mod register;
pub mod scope;
pub mod token;
pub mod uri;

use std::time::Duration;

pub use authorize::{AuthorizeParams, AuthorizeRequest, KnownClient};
pub use error::{AuthorizeError, ErrorRedirect, OAuthError, TokenError};
pub use issuer::Issuer;
pub use register::{MAX_REGISTRATION_BYTES, Registration};
pub use token::{TokenAnswer, TokenForm};

/// The scope that lets a token use the three tools.
pub const SCOPE_MCP: &str = "mcp";
/// The scope a client asks for to be given refresh tokens (they are issued anyway).
pub const SCOPE_OFFLINE: &str = "offline_access";
/// Every scope this server grants.
pub const SCOPES: [&str; 2] = [SCOPE_MCP, SCOPE_OFFLINE];

/// How long an authorization code may be exchanged.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// How long an access token is accepted.
pub const ACCESS_TTL: Duration = Duration::from_secs(3600);
/// How long a refresh token may be used (each use rotates it).
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Client ID Metadata Documents one signed-in account may have fetched per hour: each fetch is
/// an outbound request and a stored client, made at the owner's say.
pub const DOCUMENT_FETCHES_PER_HOUR: u32 = 20;
/// Dynamic client registrations one client address may make per hour: registering is open to
/// anyone, and each one stores a client.
pub const REGISTRATIONS_PER_HOUR: u32 = 60;
/// A registered client (or a fetched metadata document's client) holding no live token and no
/// pending code is deleted once it is this old: registering is open to anyone.
pub const UNUSED_CLIENT_TTL: Duration = Duration::from_secs(24 * 3600);
