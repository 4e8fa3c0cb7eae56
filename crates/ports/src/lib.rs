//! The ports: what the application needs from the world outside, as traits and plain values,
//! with no implementation behind them. `toolgate-app` calls them; each adapter crate implements
//! one and depends on this crate, never on the application:
//!
//! - [`web`]: an HTTP client behind the egress guard (`url`, `http`, client metadata documents);
//!   implemented by `toolgate-fetch`.
//! - [`ai`]: language models ([`ai::Models`]) and web search engines ([`ai::Searches`]);
//!   implemented by `toolgate-providers`.
//! - [`database`]: tenants' own database servers (`sql`); implemented by `toolgate-database`.
//! - [`mail`]: the transport of sign-in links; implemented by `toolgate-mail`.
//! - [`payments`]: wallet top-ups and their signed callbacks; implemented by `toolgate-payments`.
//!
//! Error messages of these seams are safe to show the caller or to log: none carries a key, a
//! password or a token.

pub mod ai;
pub mod database;
pub mod fetch;
pub mod mail;
pub mod payments;
