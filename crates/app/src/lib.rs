//! The service's use cases, free of HTTP and MCP: who is calling ([`auth`]), one tool call
//! from start to finish ([`calls`]), what a call costs ([`metering`]), what operators do
//! ([`admin`]), the secrets vault ([`secrets`]), what an account's owner does ([`owner`]), the
//! OAuth authorization server behind `/mcp` ([`oauth`]), legacy MCP sessions' records
//! ([`mcp_sessions`]), and which capabilities the three tools
//! offer ([`registry`], [`capability`], [`capabilities`]). What they need from outside (HTTP,
//! models, databases, mail, payments) they reach through `toolgate-ports`.

pub mod admin;
pub mod auth;
mod bound_cache;
mod call_secrets;
pub mod calls;
pub mod capabilities;
pub mod capability;
pub mod egress_rules;
pub mod history;
mod limiter;
pub mod links;
pub mod mcp_sessions;
pub mod metering;
pub mod named_keys;
pub mod oauth;
pub mod owner;
mod redaction;
pub mod registry;
mod schema;
mod sealed_cache;
pub mod secrets;
pub mod spend_alerts;
pub mod tasks;
pub mod turns;
mod upcalls;

use std::sync::Arc;

use toolgate_domain::{Brand, Pricing};
use toolgate_store::Store;

pub use admin::{Admin, AdminError, IssuedKey};
pub use auth::{AuthError, Authenticator};
pub use calls::{Answer, CallError, CallIo, ToolCalls};
pub use capability::{
    CallContext, CallSecrets, Capability, ContentItem, Failure, MakeCall, Output, ProgressSink,
    ResourceLink, ToolKind, ToolOutcome, TypedOutput,
};
pub use egress_rules::{EgressRules, EgressRulesError};
pub use history::{CallHistoryPages, CallLog};
pub use mcp_sessions::{McpSessionError, McpSessionRecords};
pub use metering::{Meter, MeterError};
pub use named_keys::{CreatedKey, KeyError, KeyRequest, KeyView, NamedKeyAdmin};
pub use registry::{Hints, Plan, Registry, ToolSpec};
pub use secrets::{Secrets, SecretsError};
/// The request stage clock the server's `Server-Timing` header reads (stamped here and in sessions).
pub use toolgate_sandbox::stages;

/// What the capabilities run on besides the store; each one absent leaves its capabilities out.
#[derive(Default)]
pub struct Services {
    /// The secrets vault (`secret_set`, `list_secrets`, `secrets`, `{{secret:…}}`).
    pub vault: Option<Arc<toolgate_vault::Vault>>,
    /// The HTTP client behind the egress guard (`url`).
    pub fetcher: Option<Arc<dyn toolgate_ports::fetch::Fetcher>>,
    /// The sandbox (`code`, `bash`, `files`, `path`, and `sql` on `sqlite:` files).
    pub sandbox: Option<capabilities::Sandbox>,
    /// The client of tenants' database servers (`sql` on `postgres://` and `mysql://`).
    pub databases: Option<Arc<dyn toolgate_ports::database::Databases>>,
    /// The client of language-model providers (`svc_ai`'s model call).
    pub models: Option<Arc<dyn toolgate_ports::ai::Models>>,
    /// The web search engines (`svc_ai`'s `search`).
    pub searches: Option<Arc<dyn toolgate_ports::ai::Searches>>,
    /// What model calls on the operator's provider keys may use.
    pub operator_keys: capabilities::OperatorKeyLimits,
    /// The mail transport of sign-in links (absent: the dashboard's sign-in is off).
    pub mailer: Option<Arc<dyn toolgate_ports::mail::Mailer>>,
    /// The payment provider of wallet top-ups (absent: top-ups are refused).
    pub payments: Option<Arc<dyn toolgate_ports::payments::Payments>>,
    /// How many sign-in links an address and a client may ask for.
    pub sign_in_limits: owner::SignInLimits,
    /// Signed links to workspace files (long output, uploads): made when the vault and the
    /// sandbox are both there.
    pub links: Option<links::LinkSettings>,
    /// Record every call in the call history (the operator's `history_days` above 0).
    pub history: bool,
}

/// Everything a front end (HTTP server, CLI) needs, built once from the settings.
#[derive(Clone)]
pub struct App {
    auth: Arc<Authenticator>,
    meter: Arc<Meter>,
    registry: Arc<Registry>,
    calls: Arc<ToolCalls>,
    /// Where calls' records go, when history is on.
    call_log: Option<Arc<CallLog>>,
    call_history: Arc<CallHistoryPages>,
    admin: Arc<Admin>,
    keys: Arc<NamedKeyAdmin>,
    secrets: Option<Arc<Secrets>>,
    sign_in: Option<Arc<owner::SignIn>>,
    owner: Arc<owner::Owner>,
    wallets: Arc<owner::Wallets>,
    oauth: Arc<oauth::AuthServer>,
    mcp_sessions: Arc<McpSessionRecords>,
    tasks: Arc<tasks::Tasks>,
    links: Option<Arc<links::Links>>,
    /// The accounts' host lists, when the service runs sessions.
    egress_rules: Option<Arc<EgressRules>>,
    /// Sessions reach the network (through the proxy).
    sessions_have_network: bool,
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
        let vault = services.vault.take();
        let secrets = vault
            .clone()
            .map(|vault| Arc::new(Secrets::new(store.clone(), vault)));
        let budgets = Arc::new(turns::Budgets::default());
        let links = match (&vault, services.links.take(), services.sandbox.take()) {
            (Some(vault), Some(settings), Some(sandbox)) => {
                let links = Arc::new(links::Links::new(
                    vault.clone(),
                    store.clone(),
                    sandbox.sessions(),
                    sandbox.limits().clone(),
                    settings,
                    // a download or an upload holds a file whole, as a read back with `path` does
                    budgets.of(turns::TurnKind::WorkspaceRead).clone(),
                ));
                services.sandbox = Some(sandbox.with_links(links.clone()));
                Some(links)
            }
            (_, _, sandbox) => {
                services.sandbox = sandbox;
                None
            }
        };
        let egress_rules = services
            .sandbox
            .as_ref()
            .map(|_| Arc::new(EgressRules::new(store.clone())));
        let sessions_have_network = services.sandbox.as_ref().is_some_and(|s| s.has_network());
        if let (Some(sandbox), Some(rules)) = (services.sandbox.take(), &egress_rules) {
            services.sandbox = Some(sandbox.with_host_lists(rules.clone()));
        }
        let sandbox_sessions = services.sandbox.as_ref().map(|s| s.sessions());
        // client metadata documents are fetched through the same egress-guarded client as `url`
        let oauth_fetcher = services.fetcher.clone();
        let mailer = services.mailer.take();
        let payments = services.payments.take();
        let limits = services.sign_in_limits;
        let call_log = services
            .history
            .then(|| CallLog::start(store.clone(), pricing.paid_call_cost));
        let brand_for_admin = brand.clone();
        let capabilities =
            capabilities::builtin(meter.clone(), secrets.clone(), store.clone(), services);
        let mut app = Self::assemble(
            store.clone(),
            brand.clone(),
            pricing.clone(),
            public_url,
            meter,
            capabilities,
            (budgets, call_log),
        );
        app.secrets = secrets;
        app.links = links;
        app.egress_rules = egress_rules;
        app.sessions_have_network = sessions_have_network;
        // alerts go by the sign-in links' mail; a runtime is there whenever the app serves
        if let Some(mailer) = &mailer
            && tokio::runtime::Handle::try_current().is_ok()
        {
            let watch = spend_alerts::SpendWatch::start(
                store.clone(),
                mailer.clone(),
                pricing.paid_call_cost,
                public_url,
            );
            app.calls.watch_spend(watch);
        }
        app.sign_in = mailer.map(|mailer| {
            Arc::new(owner::SignIn::new(
                store.clone(),
                mailer,
                vault.clone(),
                brand.clone(),
                public_url,
                limits,
            ))
        });
        app.owner = Arc::new(owner::Owner::new(
            store.clone(),
            vault.clone(),
            sandbox_sessions,
            brand,
            pricing.clone(),
            public_url,
        ));
        app.wallets = Arc::new(owner::Wallets::new(
            store.clone(),
            payments,
            pricing.clone(),
            public_url,
        ));
        app.oauth = Arc::new(oauth::AuthServer::new(
            store.clone(),
            oauth_fetcher,
            public_url,
        ));
        if let Some(vault) = vault {
            app.admin = Arc::new(
                Admin::new(store, brand_for_admin, pricing, public_url).keeping_keys(vault),
            );
        }
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
        let budgets = Arc::new(turns::Budgets::default());
        Self::assemble(
            store,
            brand,
            pricing,
            public_url,
            meter,
            capabilities,
            (budgets, None),
        )
    }

    fn assemble(
        store: Arc<dyn Store>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
        meter: Arc<Meter>,
        capabilities: Vec<Arc<dyn Capability>>,
        (budgets, call_log): (Arc<turns::Budgets>, Option<Arc<CallLog>>),
    ) -> Self {
        let registry = Arc::new(Registry::new(&brand, capabilities));
        let owner = owner::Owner::new(
            store.clone(),
            None,
            None,
            brand.clone(),
            pricing.clone(),
            public_url,
        );
        let wallets = owner::Wallets::new(store.clone(), None, pricing.clone(), public_url);
        Self {
            auth: Arc::new(Authenticator::new(store.clone(), brand.clone())),
            calls: ToolCalls::new(meter.clone(), registry.clone(), budgets, call_log.clone()),
            keys: Arc::new(NamedKeyAdmin::new(store.clone(), brand.clone(), public_url)),
            call_log,
            call_history: Arc::new(CallHistoryPages::new(store.clone())),
            admin: Arc::new(Admin::new(store.clone(), brand, pricing, public_url)),
            registry,
            meter,
            secrets: None,
            sign_in: None,
            owner: Arc::new(owner),
            wallets: Arc::new(wallets),
            oauth: Arc::new(oauth::AuthServer::new(store.clone(), None, public_url)),
            tasks: tasks::Tasks::new(store.clone(), tasks::TaskSettings::default()),
            mcp_sessions: Arc::new(McpSessionRecords::new(store)),
            links: None,
            egress_rules: None,
            sessions_have_network: false,
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
    pub fn calls(&self) -> &Arc<ToolCalls> {
        &self.calls
    }

    /// The call history's queue, when calls are recorded.
    pub fn call_log(&self) -> Option<&CallLog> {
        self.call_log.as_deref()
    }

    /// What the owner reads of the call history, and its purge.
    pub fn call_history(&self) -> &CallHistoryPages {
        &self.call_history
    }

    /// Admits calls and reports billing status.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Operator commands.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// Accounts' named keys.
    pub fn keys(&self) -> &NamedKeyAdmin {
        &self.keys
    }

    /// The secrets vault, when the service has one.
    pub fn secrets(&self) -> Option<&Secrets> {
        self.secrets.as_deref()
    }

    /// Dashboard sign-in, when the service has a mail transport.
    pub fn sign_in(&self) -> Option<&owner::SignIn> {
        self.sign_in.as_deref()
    }

    /// What an account's owner does from the dashboard.
    pub fn owner(&self) -> &owner::Owner {
        &self.owner
    }

    /// Wallet history and top-ups.
    pub fn wallets(&self) -> &owner::Wallets {
        &self.wallets
    }

    /// The OAuth authorization server behind `/mcp`: discovery, client registration, consent,
    /// tokens and the bearer check.
    pub fn oauth(&self) -> &oauth::AuthServer {
        &self.oauth
    }

    /// The accounts' host lists for their sessions' network, when the service runs sessions.
    pub fn egress_rules(&self) -> Option<&EgressRules> {
        self.egress_rules.as_deref()
    }

    /// Whether sessions reach the network (the operator's `sandbox_network`).
    pub fn sessions_have_network(&self) -> bool {
        self.sessions_have_network
    }

    /// Signed links to workspace files, when the service makes them (a vault and a sandbox).
    pub fn links(&self) -> Option<&Arc<links::Links>> {
        self.links.as_ref()
    }

    /// Legacy MCP sessions' records, shared by every front end on the store.
    pub fn mcp_sessions(&self) -> &McpSessionRecords {
        &self.mcp_sessions
    }

    /// MCP tasks: calls that run on after their request was answered.
    pub fn tasks(&self) -> &Arc<tasks::Tasks> {
        &self.tasks
    }

    /// The same app with tasks kept as `settings` say (before it serves anything).
    #[must_use]
    pub fn with_task_settings(mut self, settings: tasks::TaskSettings) -> Self {
        self.tasks = tasks::Tasks::new(self.tasks.store(), settings);
        self
    }
}
