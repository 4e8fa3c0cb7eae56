//! The service's use cases, free of HTTP and MCP: who is calling ([`auth`]), what a call costs
//! ([`metering`]), what operators do ([`admin`]), and which capabilities the three tools offer
//! ([`registry`], [`capability`], [`capabilities`]).

pub mod admin;
pub mod auth;
pub mod capabilities;
pub mod capability;
pub mod metering;
pub mod registry;
mod schema;

use std::sync::Arc;

use toolgate_domain::{Brand, Pricing};
use toolgate_store::Store;

pub use admin::{Admin, AdminError, IssuedKey};
pub use auth::{AuthError, Authenticator};
pub use capability::{
    CallContext, Capability, ContentItem, Failure, Output, ProgressSink, ToolKind,
};
pub use metering::{Meter, MeterError};
pub use registry::{Hints, Plan, Registry, ToolOutcome, ToolSpec};
pub use toolgate_store::{Decided, Recorded};

/// Everything a front end (HTTP server, CLI) needs, built once from the settings.
#[derive(Clone)]
pub struct App {
    /// Resolves presented keys to accounts.
    pub auth: Arc<Authenticator>,
    /// Admits calls and reports billing status.
    pub meter: Arc<Meter>,
    /// The three tools and their capabilities.
    pub registry: Arc<Registry>,
    /// Operator commands.
    pub admin: Arc<Admin>,
}

impl App {
    /// Wires the use cases over one store with the built-in capabilities (the sandbox's only
    /// with a `sandbox`).
    pub fn new(
        store: Arc<dyn Store>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
        sandbox: Option<capabilities::Sandbox>,
    ) -> Self {
        let meter = Arc::new(Meter::new(store.clone(), pricing.clone()));
        let capabilities = capabilities::builtin(meter.clone(), sandbox);
        Self {
            auth: Arc::new(Authenticator::new(store.clone(), brand.clone())),
            registry: Arc::new(Registry::new(&brand, capabilities)),
            admin: Arc::new(Admin::new(store, brand, pricing, public_url)),
            meter,
        }
    }
}
