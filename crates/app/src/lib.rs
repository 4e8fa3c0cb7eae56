//! The service's use cases, free of HTTP and MCP: who is calling ([`auth`]), one tool call
//! from start to finish ([`calls`]), what a call costs ([`metering`]), what operators do
//! ([`admin`]), the secrets vault ([`secrets`]), and which capabilities the three tools offer ([`registry`], [`capability`],
//! [`capabilities`]).

pub mod admin;
pub mod ai;
pub mod auth;
pub mod calls;
pub mod capabilities;
pub mod capability;
pub mod database;
pub mod metering;
pub mod registry;
mod schema;
mod sealed_cache;
pub mod secrets;
mod upcalls;
pub mod web;

use std::sync::Arc;

use toolgate_domain::{Brand, Pricing};
use toolgate_store::Store;

pub use admin::{Admin, AdminError, IssuedKey};
pub use auth::{AuthError, Authenticator};
pub use calls::{Answer, CallError, CallIo, ToolCalls};
pub use capability::{
    CallContext, Capability, ContentItem, Failure, Output, ProgressSink, ToolKind,
};
pub use metering::{Meter, MeterError};
pub use registry::{Hints, Plan, Registry, ToolOutcome, ToolSpec};
pub use secrets::{Secrets, SecretsError};

/// What the capabilities run on besides the store; each one absent leaves its capabilities out.
#[derive(Default)]
pub struct Services {
    /// The secrets vault (`secret_set`, `list_secrets`, `secrets`, `{{secret:…}}`).
    pub vault: Option<Arc<toolgate_vault::Vault>>,
    /// The HTTP client behind the egress guard (`url`).
    pub web: Option<Arc<dyn web::Web>>,
    /// The sandbox (`code`, `bash`, `files`, `path`, and `sql` on `sqlite:` files).
    pub sandbox: Option<capabilities::Sandbox>,
    /// The client of tenants' database servers (`sql` on `postgres://` and `mysql://`).
    pub databases: Option<Arc<dyn database::Databases>>,
    /// The client of language-model providers (`svc_ai`'s model call).
    pub models: Option<Arc<dyn ai::Models>>,
    /// The web search engines (`svc_ai`'s `search`).
    pub searches: Option<Arc<dyn ai::Searches>>,
}

/// Everything a front end (HTTP server, CLI) needs, built once from the settings.
#[derive(Clone)]
pub struct App {
    auth: Arc<Authenticator>,
    meter: Arc<Meter>,
    registry: Arc<Registry>,
    calls: Arc<ToolCalls>,
    admin: Arc<Admin>,
    secrets: Option<Arc<Secrets>>,
}

impl App {
    /// Wires the use cases over one store with the built-in capabilities; each service absent
    /// from `services` leaves its capabilities out.
    pub fn new(
        store: Arc<dyn Store>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
        mut services: Services,
    ) -> Self {
        let meter = Arc::new(Meter::new(store.clone(), pricing.clone()));
        let secrets = services
            .vault
            .take()
            .map(|vault| Arc::new(Secrets::new(store.clone(), vault)));
        let capabilities = capabilities::builtin(meter.clone(), secrets.clone(), services);
        let mut app = Self::assemble(store, brand, pricing, public_url, meter, capabilities);
        app.secrets = secrets;
        app
    }

    /// Wires the use cases over one store with the given capabilities only (tests, fixtures).
    pub fn with_capabilities(
        store: Arc<dyn Store>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
        capabilities: Vec<Arc<dyn Capability>>,
    ) -> Self {
        let meter = Arc::new(Meter::new(store.clone(), pricing.clone()));
        Self::assemble(store, brand, pricing, public_url, meter, capabilities)
    }

    fn assemble(
        store: Arc<dyn Store>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
        meter: Arc<Meter>,
        capabilities: Vec<Arc<dyn Capability>>,
    ) -> Self {
        let registry = Arc::new(Registry::new(&brand, capabilities));
        Self {
            auth: Arc::new(Authenticator::new(store.clone(), brand.clone())),
            calls: ToolCalls::new(meter.clone(), registry.clone()),
            admin: Arc::new(Admin::new(store, brand, pricing, public_url)),
            registry,
            meter,
            secrets: None,
        }
    }

    /// Resolves presented keys to accounts.
    pub fn auth(&self) -> &Authenticator {
        &self.auth
    }

    /// The three tools, as `tools/list` shows them.
    pub fn tools(&self) -> &[ToolSpec] {
        self.registry.tools()
    }

    /// Makes tool calls.
    pub fn calls(&self) -> &ToolCalls {
        &self.calls
    }

    /// Admits calls and reports billing status.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Operator commands.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// The secrets vault, when the service has one.
    pub fn secrets(&self) -> Option<&Secrets> {
        self.secrets.as_deref()
    }
}
